//! A stable least-significant-digit radix sort by 64-bit keys, for the compiler's and the
//! verifier's large sorts of packed words (an interval index's segments by first element, a
//! tile's allocations by first step): a pass per byte of the key that is not the same in
//! every element, where a comparison sort takes `log₂ n` compare-and-swap levels (hundreds of
//! thousands of segments for a feature map of the hands-on ResNet101); and a counting sort of
//! indices by a small key (tensors by the step they are first used at).

/// Below this many elements a comparison sort is as fast (the histograms' set-up and the
/// scratch buffer are not repaid). Our own choice.
const SMALL: usize = 256;

/// Sorts `v` by `key` ascending, stably: elements of equal keys keep their order. With an
/// element's index packed below its key (a word `key << b | index`) and `key` taking the
/// bits from `b` up, the words end sorted as a whole, as `sort_unstable` would leave them.
///
/// Below [`SMALL`] elements, a stable comparison sort; otherwise one pass to find the key
/// bytes whose values are not all equal, one to count their values, then one stable scatter
/// through a scratch buffer per such byte.
pub fn sort_by_key<T: Copy>(v: &mut [T], key: impl Fn(&T) -> u64) {
    let n = v.len();
    if n < SMALL {
        v.sort_by_key(|x| key(x));
        return;
    }
    let (mut all_or, mut all_and) = (0u64, u64::MAX);
    for x in v.iter() {
        let k = key(x);
        all_or |= k;
        all_and &= k;
    }
    // A byte that is the same in every key leaves the order as it is: only the others are
    // counted and passed over.
    let varying = all_or ^ all_and;
    let digits: Vec<u32> = (0..8)
        .filter(|&d| (varying >> (8 * d)) & 0xff != 0)
        .collect();
    if digits.is_empty() {
        return;
    }
    let mut counts = vec![[0usize; 256]; digits.len()];
    for x in v.iter() {
        let k = key(x);
        for (&d, c) in digits.iter().zip(counts.iter_mut()) {
            c[((k >> (8 * d)) & 0xff) as usize] += 1;
        }
    }
    let mut scratch: Vec<T> = v.to_vec();
    // Each pass moves the elements from `src` into `dst`; they start in `v`.
    let mut in_v = true;
    for (&d, count) in digits.iter().zip(&counts) {
        let mut starts = [0usize; 256];
        let mut at = 0;
        for (s, &c) in starts.iter_mut().zip(count.iter()) {
            *s = at;
            at += c;
        }
        let (src, dst): (&[T], &mut [T]) = if in_v {
            (&*v, &mut scratch)
        } else {
            (&scratch, &mut *v)
        };
        for x in src {
            let b = ((key(x) >> (8 * d)) & 0xff) as usize;
            dst[starts[b]] = *x;
            starts[b] += 1;
        }
        in_v = !in_v;
    }
    if !in_v {
        v.copy_from_slice(&scratch);
    }
}

/// Sorts 64-bit words ascending by their bits from `low` up, stably (see [`sort_by_key`]):
/// the whole words end sorted when the bits below `low` ascend in the given order among
/// words equal above them (an index packed there).
pub fn sort_words_above(v: &mut [u64], low: u32) {
    if low >= u64::BITS {
        return;
    }
    sort_by_key(v, |&w| w >> low);
}

/// The indices `0..n` in order of `key`, ties by index: a counting sort over the keys (a
/// program's steps), or a comparison sort when the largest key is far beyond `n` (a table
/// per key would then be most of the work).
pub fn order_by_small_key(n: usize, key: impl Fn(usize) -> usize) -> Vec<usize> {
    let largest = (0..n).map(&key).max().unwrap_or(0);
    if largest > 4 * n + 1024 {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| key(i));
        return order;
    }
    let mut starts = vec![0usize; largest + 2];
    for i in 0..n {
        starts[key(i) + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut order = vec![0usize; n];
    for i in 0..n {
        let at = &mut starts[key(i)];
        order[*at] = i;
        *at += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64 (Steele, Lea and Flood 2014): test keys without a dependency.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The sort equals the standard library's stable sort on every size around the small
    /// cut-off and on keys of every width, ties included (stability: the index rides along).
    #[test]
    fn radix_order_is_the_stable_sort_order() {
        let mut rng = 7u64;
        for &n in &[0usize, 1, 2, 255, 256, 257, 1000, 5000] {
            for &bits in &[1u32, 7, 8, 9, 23, 40, 64] {
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                let v: Vec<(u64, u32)> = (0..n as u32)
                    .map(|i| (splitmix(&mut rng) & mask, i))
                    .collect();
                let mut want = v.clone();
                want.sort_by_key(|x| x.0);
                let mut got = v.clone();
                sort_by_key(&mut got, |x| x.0);
                assert_eq!(got, want, "n {n} bits {bits}");
            }
        }
    }

    /// Indices come in order of their keys, ties by index, on the counting path and on the
    /// comparison path (keys far beyond the count).
    #[test]
    fn indices_order_by_their_keys_then_index() {
        let keys = [3usize, 0, 0, 3, 9, 1, 0, 2];
        let mut want: Vec<usize> = (0..keys.len()).collect();
        want.sort_by_key(|&i| keys[i]);
        assert_eq!(order_by_small_key(keys.len(), |i| keys[i]), want);
        assert_eq!(want, [1, 2, 6, 5, 7, 0, 3, 4]);
        let far = |i: usize| keys[i] * 1_000_000;
        assert_eq!(order_by_small_key(keys.len(), far), want);
        assert!(order_by_small_key(0, |i| i).is_empty());
    }

    /// Packed words (key above, index below) sorted by their keys come out as a full sort.
    #[test]
    fn packed_words_sort_as_a_whole() {
        let mut rng = 11u64;
        for &n in &[10usize, 300, 4000] {
            let v: Vec<u64> = (0..n as u64)
                .map(|i| ((splitmix(&mut rng) % (n as u64 / 3 + 1)) << 24) | i)
                .collect();
            let mut want = v.clone();
            want.sort_unstable();
            let mut got = v;
            sort_words_above(&mut got, 24);
            assert_eq!(got, want, "n {n}");
        }
    }
}
