//! Deterministic test inputs shared by the crate's unit tests: the same cases on every run.

/// A deterministic sequence of numbers below `n` (xorshift from `state`).
pub(crate) fn numbers(mut state: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}
