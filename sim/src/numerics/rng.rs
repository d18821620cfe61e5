//! The random bits of stochastic rounding: [`SrRng`], one PCG32 stream per (tile, worker).
//!
//! On the IPU every tile has a hardware PRNG and "each worker has a different seed when
//! applying stochastic rounding" (numerics.md §2.4 \[S24\]\[S28\]). The hardware generator
//! (xoroshiro128aox), its seeding from a 32-bit seed and which of its bits feed the rounder
//! are not public, so ipusim models the *structure* — an independent, reproducible stream
//! per tile and worker derived from one program seed — with the PCG-XSH-RR 64/32 generator
//! of `rand_pcg` (`rand_pcg::Pcg32`).
//!
//! [`SrRng`] produces exactly the output sequence of `rand_pcg::Pcg32::new(state, stream)`
//! (a unit test compares them draw for draw). It is implemented here rather than wrapped
//! because `rand_pcg` keeps the LCG state private, and the slice kernels need it: they
//! generate many consecutive outputs at once by running [`LANES`] copies of the LCG, lane
//! `l` jumped ahead by `l` steps and every lane advancing by `LANES` steps at a time
//! (Brown's arbitrary-stride LCG jump, the same as `rand_pcg`'s `advance`). That is the
//! *same* sequence, computed with 64-bit vector multiplies.
//!
//! ## Seeding
//!
//! `SrRng::new(seed, tile, worker)` mixes the three numbers with SplitMix64 (Steele, Lea &
//! Flood, OOPSLA 2014; constants of Vigna's `splitmix64.c`), a bijection on `u64`:
//!
//! ```text
//! k      = splitmix64(seed) ^ (tile << 32 | worker)
//! stream = splitmix64(k)
//! state  = splitmix64(k ^ 0x6a09e667f3bcc909)
//! SrRng::new(seed, tile, worker) == Pcg32::new(state, stream)
//! ```
//!
//! For one seed, distinct (tile, worker) pairs give distinct `k`, hence distinct PCG stream
//! increments and unrelated start states: independent streams. The same seed always gives
//! the same bits, whatever the host thread count, because each worker owns its stream.
//!
//! ## Consumption
//!
//! Every stochastic rounding consumes exactly one `u32` draw ([`super::round::SR_BITS`]
//! bits), whether or not the value was exact, so the position in the stream depends only on
//! how many FP16 results a worker has produced, never on the data.

use rand_core::{impls, RngCore};
use serde::{Deserialize, Serialize};

use super::simd::simd_dispatch;

/// The LCG multiplier of PCG32 (`rand_pcg` `pcg64.rs` `MULTIPLIER`; O'Neill, PCG paper).
const PCG_MULT: u64 = 6364136223846793005;

/// Number of interleaved LCG lanes the bulk generator runs (one AVX-512 register holds 8;
/// 64 lanes keep eight independent multiplies in flight to hide `vpmullq`'s latency).
pub const LANES: usize = 64;

/// `JUMP_MULT[l]` = `PCG_MULT^l`, `JUMP_SUM[l]` = `sum_{i<l} PCG_MULT^i` (mod 2^64): stepping
/// the LCG `l` times maps `s` to `s * JUMP_MULT[l] + inc * JUMP_SUM[l]`.
const JUMP_MULT: [u64; LANES + 1] = jump_tables().0;
const JUMP_SUM: [u64; LANES + 1] = jump_tables().1;

const fn jump_tables() -> ([u64; LANES + 1], [u64; LANES + 1]) {
    let mut mult = [0u64; LANES + 1];
    let mut sum = [0u64; LANES + 1];
    mult[0] = 1;
    let mut l = 1;
    while l <= LANES {
        mult[l] = mult[l - 1].wrapping_mul(PCG_MULT);
        sum[l] = sum[l - 1].wrapping_mul(PCG_MULT).wrapping_add(1);
        l += 1;
    }
    (mult, sum)
}

/// SplitMix64's output function (a bijection on `u64`).
const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// PCG's XSH-RR output function for a 64-bit state (`rand_pcg` `Lcg64Xsh32::next_u32`).
#[inline(always)]
fn xsh_rr(state: u64) -> u32 {
    let rot = (state >> 59) as u32;
    let xsh = (((state >> 18) ^ state) >> 27) as u32;
    xsh.rotate_right(rot)
}

/// A stochastic-rounding random stream: the `rand_pcg::Pcg32` sequence of one (tile,
/// worker), see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SrRng {
    state: u64,
    increment: u64,
}

impl SrRng {
    /// The stream of `worker` on `tile` for the program seed `seed`.
    pub fn new(seed: u64, tile: u32, worker: u32) -> SrRng {
        let k = splitmix64(seed) ^ ((u64::from(tile) << 32) | u64::from(worker));
        SrRng::from_pcg(splitmix64(k ^ 0x6a09_e667_f3bc_c909), splitmix64(k))
    }

    /// The generator `rand_pcg::Pcg32::new(state, stream)` (the top bit of `stream` is
    /// discarded, as there).
    pub fn from_pcg(state: u64, stream: u64) -> SrRng {
        let increment = (stream << 1) | 1;
        let mut rng = SrRng {
            state: state.wrapping_add(increment),
            increment,
        };
        rng.step(1);
        rng
    }

    #[inline(always)]
    fn step(&mut self, by: usize) {
        self.state = self
            .state
            .wrapping_mul(JUMP_MULT[by])
            .wrapping_add(self.increment.wrapping_mul(JUMP_SUM[by]));
    }

    /// The next 32 random bits.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        let out = xsh_rr(self.state);
        self.step(1);
        out
    }

    /// Skips `delta` draws (equivalent to `delta` calls of [`SrRng::next_u32`]).
    pub fn advance(&mut self, delta: u64) {
        // Square-and-multiply over the affine map s -> s*m + c (Brown 1994).
        let (mut acc_m, mut acc_c) = (1u64, 0u64);
        let (mut m, mut c) = (PCG_MULT, self.increment);
        let mut d = delta;
        while d > 0 {
            if d & 1 == 1 {
                acc_m = acc_m.wrapping_mul(m);
                acc_c = acc_c.wrapping_mul(m).wrapping_add(c);
            }
            c = m.wrapping_add(1).wrapping_mul(c);
            m = m.wrapping_mul(m);
            d >>= 1;
        }
        self.state = acc_m.wrapping_mul(self.state).wrapping_add(acc_c);
    }

    /// Fills `out` with the next `out.len()` draws: exactly what as many calls of
    /// [`SrRng::next_u32`] return, computed [`LANES`] at a time with vector instructions.
    pub fn fill(&mut self, out: &mut [u32]) {
        fill_dispatch(&mut self.state, self.increment, out);
    }

    /// The bulk generator positioned at this stream's next draw, for kernels that draw
    /// many blocks in a row (see [`Lanes`]); [`SrRng::resume`] hands the position back.
    #[inline(always)]
    pub(crate) fn lanes(&self) -> Lanes {
        let mut lanes = [0u64; LANES];
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = self
                .state
                .wrapping_mul(JUMP_MULT[l])
                .wrapping_add(self.increment.wrapping_mul(JUMP_SUM[l]));
        }
        Lanes {
            lanes,
            mult: JUMP_MULT[LANES],
            add: self.increment.wrapping_mul(JUMP_SUM[LANES]),
        }
    }

    /// Continues this stream after the draws `lanes` produced.
    #[inline(always)]
    pub(crate) fn resume(&mut self, lanes: &Lanes) {
        self.state = lanes.lanes[0];
    }
}

simd_dispatch! {
    fn fill_dispatch(state: &mut u64, increment: u64, out: &mut [u32]) -> () => fill_body
}

#[inline(always)]
fn fill_body(state: &mut u64, increment: u64, out: &mut [u32]) {
    let mut rng = SrRng {
        state: *state,
        increment,
    };
    let bulk = if out.len() >= 2 * LANES {
        out.len() - out.len() % LANES
    } else {
        0
    };
    let (head, rest) = out.split_at_mut(bulk);
    if !head.is_empty() {
        let mut lanes = rng.lanes();
        lanes.fill(head);
        rng.resume(&lanes);
    }
    for o in rest {
        *o = rng.next_u32();
    }
    *state = rng.state;
}

/// [`LANES`] copies of a stream's LCG, lane `l` at draw `l`, each stepping [`LANES`] draws
/// at a time: consecutive draws, computed with vector multiplies.
pub(crate) struct Lanes {
    lanes: [u64; LANES],
    mult: u64,
    add: u64,
}

impl Lanes {
    /// The next `out.len()` draws; `out.len()` must be a multiple of [`LANES`] (a remainder
    /// is left untouched).
    #[inline(always)]
    pub(crate) fn fill(&mut self, out: &mut [u32]) {
        for block in out.chunks_exact_mut(LANES) {
            for (o, lane) in block.iter_mut().zip(self.lanes.iter_mut()) {
                *o = xsh_rr(*lane);
                *lane = lane.wrapping_mul(self.mult).wrapping_add(self.add);
            }
        }
    }
}

impl RngCore for SrRng {
    fn next_u32(&mut self) -> u32 {
        SrRng::next_u32(self)
    }

    fn next_u64(&mut self) -> u64 {
        impls::next_u64_via_u32(self)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        impls::fill_bytes_via_next(self, dest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg32;

    #[test]
    fn matches_rand_pcg_draw_for_draw() {
        for (state, stream) in [
            (0u64, 0u64),
            (0xcafef00dd15ea5e5, 0xa02bdbf7bb3c0a7),
            (7, u64::MAX),
        ] {
            let mut ours = SrRng::from_pcg(state, stream);
            let mut theirs = Pcg32::new(state, stream);
            for _ in 0..1000 {
                assert_eq!(ours.next_u32(), RngCore::next_u32(&mut theirs));
            }
            assert_eq!(RngCore::next_u64(&mut ours), RngCore::next_u64(&mut theirs));
        }
    }

    #[test]
    fn bulk_fill_is_the_same_sequence() {
        for len in [0, 1, 63, 64, 127, 128, 129, 1000, 4096 + 17] {
            let mut bulk = SrRng::new(42, 3, 5);
            let mut scalar = bulk.clone();
            let mut out = vec![0u32; len];
            bulk.fill(&mut out);
            let expect: Vec<u32> = (0..len).map(|_| scalar.next_u32()).collect();
            assert_eq!(out, expect, "len {len}");
            assert_eq!(bulk, scalar, "state after len {len}");
        }
    }

    #[test]
    fn advance_skips_draws() {
        let mut a = SrRng::new(1, 2, 3);
        let mut b = a.clone();
        for _ in 0..12345 {
            a.next_u32();
        }
        b.advance(12345);
        assert_eq!(a, b);
    }

    #[test]
    fn same_seed_same_bits_and_distinct_streams_differ() {
        let draw = |seed, tile, worker| {
            let mut r = SrRng::new(seed, tile, worker);
            (0..8).map(|_| r.next_u32()).collect::<Vec<_>>()
        };
        assert_eq!(draw(9, 100, 5), draw(9, 100, 5));
        assert_ne!(draw(9, 100, 5), draw(9, 100, 4));
        assert_ne!(draw(9, 100, 5), draw(9, 101, 5));
        assert_ne!(draw(9, 100, 5), draw(10, 100, 5));
        // Streams of neighbouring workers must not be shifted copies of each other.
        let a = draw(0, 0, 0);
        let mut b = SrRng::new(0, 0, 1);
        let b: Vec<u32> = (0..64).map(|_| b.next_u32()).collect();
        assert!(b.windows(8).all(|w| w != a.as_slice()));
    }

    #[test]
    fn jump_tables_step_the_lcg() {
        let mut r = SrRng::from_pcg(5, 6);
        let mut s = r.clone();
        for _ in 0..LANES {
            r.step(1);
        }
        s.step(LANES);
        assert_eq!(r, s);
    }
}
