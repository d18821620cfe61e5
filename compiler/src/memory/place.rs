//! The placement of one tile's temporaries in its data region: byte offsets such that two
//! temporaries whose live ranges (program steps) meet never share a byte, and as low a top as
//! two heuristics find ([`place_temporaries`]).

/// Alignment of every allocation.
pub(super) const ALIGN: u64 = 8;

pub(super) fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// An allocation request of one tensor slice (tensor and slice indices as 32-bit numbers,
/// as `TensorId` is: a plan holds one per slice, millions for a large CNN).
#[derive(Clone, Copy)]
pub(super) struct Request {
    pub(super) tensor: u32,
    pub(super) slice: u32,
    pub(super) size: u64,
    pub(super) first: u32,
    pub(super) last: u32,
}

/// Temporaries used over fewer steps than this and smaller than [`LARGE`] bytes are left to
/// the linear scan by [`packed_first`]; the others it packs first. Our own choices: a
/// vertex's staging, partials and reduction buffers live a few steps, the values kept for the
/// backward pass and the gradient accumulators hundreds; with 1 KiB the few hundred large
/// buffers of a tile are packed first, and the fullest tiles of ResNet-50 and the hands-on
/// ResNet101 come within 0.3% of packing every temporary so (measured on both, 2026-11-28),
/// at under a third of its planning time (1.0 s of CPU against 3.4 s on ResNet-50).
const SHORT_LIFETIME: u32 = 8;
const LARGE: u64 = 1024;

fn size(r: &Request) -> u64 {
    align(r.size.max(1))
}

/// Places one tile's temporaries at or above `base`, no two whose lifetimes (`first..=last`
/// steps) meet sharing a byte: `reqs` sorted by first step, and each one's offset in that
/// order, the top, and the step of the most live bytes in the lifetime of the temporary
/// that reaches the top (where the report lists what is live).
///
/// Two heuristics, the lower top kept (ties: the scan), as XLA's heap simulator runs
/// several algorithms and keeps the smallest heap (`ChooseBestHeapAlgorithm`,
/// `xla/service/heap_simulator`): a linear scan in order of first use ([`linear_scan`]), and
/// [`packed_first`]. Neither is always the better: the scan leaves holes under long-lived
/// and large buffers on a CNN's tiles (23 KB of 172 KB of temporaries on the hands-on
/// ResNet101's fullest tiles), the packing can do worse where a few small buffers dominate
/// (an MLP's tiles). The packing runs first, and the scan stops as soon as it places a
/// temporary above the packing's top, since it can then no longer be kept: on the CNNs'
/// tiles, where the packing is lower on every tile, that is after about 40–50% of the
/// requests (ResNet-50 and the hands-on ResNet101, 2026-12-03); the choice is the one made
/// by running both to the end.
pub(super) fn place_temporaries(reqs: &mut [Request], base: u64) -> (Vec<u64>, u64, Option<u32>) {
    sort_by_first_use(reqs);
    let packed = packed_first(reqs, base);
    let (top_p, at_p) = top(reqs, &packed, base);
    let mut scanned = vec![0u64; reqs.len()];
    let (offsets, top, at) = if linear_scan(reqs, base, &[], &mut scanned, top_p) {
        let (top_s, at_s) = top(reqs, &scanned, base);
        (scanned, top_s, at_s)
    } else {
        (packed, top_p, at_p)
    };
    let peak = at.map(|i| busiest_step(reqs, (reqs[i].first, reqs[i].last)));
    (offsets, top, peak)
}

/// Sorts `reqs` by (first step, tensor, slice). The plan lists a tile's requests so
/// already; other lists are sorted as 128-bit words holding the key and each request's
/// index, then gathered in that order (sorting the requests themselves by a tuple was a
/// sixth of a CNN tile's placement).
fn sort_by_first_use(reqs: &mut [Request]) {
    let key = |r: &Request| (r.first, r.tensor, r.slice);
    if reqs.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
        return;
    }
    let mut keyed: Vec<u128> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (u128::from(r.first) << 96)
                | (u128::from(r.tensor) << 64)
                | (u128::from(r.slice) << 32)
                | i as u128
        })
        .collect();
    keyed.sort_unstable();
    let sorted: Vec<Request> = keyed.iter().map(|&k| reqs[k as u32 as usize]).collect();
    reqs.copy_from_slice(&sorted);
}

/// The top of a placement and the request reaching it (the first to).
fn top(reqs: &[Request], offsets: &[u64], base: u64) -> (u64, Option<usize>) {
    let mut top = base;
    let mut at = None;
    for (i, (r, &off)) in reqs.iter().zip(offsets).enumerate() {
        if off + size(r) > top {
            top = off + size(r);
            at = Some(i);
        }
    }
    (top, at)
}

/// The step in `first..=last` with the most bytes of temporaries live (the earliest of
/// equals).
fn busiest_step(reqs: &[Request], (first, last): (u32, u32)) -> u32 {
    let mut events: Vec<(u32, i64)> = Vec::new();
    for r in reqs.iter().filter(|r| r.first <= last && r.last >= first) {
        events.push((r.first.max(first), size(r) as i64));
        if r.last < last {
            events.push((r.last + 1, -(size(r) as i64)));
        }
    }
    events.sort_unstable();
    let (mut live, mut most, mut step) = (0i64, i64::MIN, first);
    let mut k = 0;
    while k < events.len() {
        let at = events[k].0;
        while k < events.len() && events[k].0 == at {
            live += events[k].1;
            k += 1;
        }
        if live > most {
            (most, step) = (live, at);
        }
    }
    step
}

/// The long-lived and the large temporaries placed first, largest first, each at the lowest
/// offset free over its lifetime (the "greedy by size" of offline tensor allocators, e.g.
/// TensorFlow Lite's `GreedyMemoryPlanner`), then the others by [`linear_scan`] around them:
/// a gradient accumulator no longer lands above a staging buffer that dies a step later,
/// nor a reduction's received partials above the operands whose hole is too small for them.
fn packed_first(reqs: &[Request], base: u64) -> Vec<u64> {
    let mut offsets = vec![0u64; reqs.len()];
    let first: Vec<usize> = (0..reqs.len())
        .filter(|&i| {
            reqs[i].last.saturating_sub(reqs[i].first) >= SHORT_LIFETIME || reqs[i].size >= LARGE
        })
        .collect();
    // Largest first, ties by index (the radix sort is stable and `first` ascends).
    let mut by_size: Vec<(u64, usize)> = first
        .iter()
        .map(|&i| (u64::MAX - size(&reqs[i]), i))
        .collect();
    ipusim_exe::radix::sort_by_key(&mut by_size, |&(key, _)| key);
    let mut placed = Placed::default();
    for &(_, i) in &by_size {
        let r = &reqs[i];
        let off = placed.lowest_fit(base, size(r), (r.first, r.last));
        placed.insert(off, size(r), (r.first, r.last));
        offsets[i] = off;
    }
    linear_scan(reqs, base, &first, &mut offsets, u64::MAX);
    offsets
}

/// The allocations [`packed_first`] placed so far, by offset, in columns (offsets, ends,
/// first and last steps). A request meets about a tenth of a tile's long-lived buffers (the
/// hands-on ResNet101, 2026-11-28), yet the first fit visited nearly all of them in offset
/// order, a quadratic search and the memory plan's costliest step: here their lifetimes are
/// tested [`LANES`] at a time in a form the compiler vectorises ([`meeting`]), and only
/// those meeting the request are visited.
#[derive(Default)]
struct Placed {
    start: Vec<u64>,
    end: Vec<u64>,
    first: Vec<u32>,
    last: Vec<u32>,
}

/// Lifetimes tested at once by [`Placed::lowest_fit`] (one `u64` mask).
const LANES: usize = 64;

impl Placed {
    /// The lowest offset at or above `base` where `n` bytes overlap no allocation whose
    /// lifetime meets `first..=last`: the first gap of `n` bytes among those allocations in
    /// offset order (first fit).
    fn lowest_fit(&self, base: u64, n: u64, (first, last): (u32, u32)) -> u64 {
        let mut off = base;
        for lo in (0..self.start.len()).step_by(LANES) {
            let hi = (lo + LANES).min(self.start.len());
            let mut meets = meeting(&self.first[lo..hi], &self.last[lo..hi], (first, last));
            while meets != 0 {
                let k = lo + meets.trailing_zeros() as usize;
                meets &= meets - 1;
                if self.start[k] >= off + n {
                    return off;
                }
                off = off.max(self.end[k]);
            }
        }
        off
    }

    /// Adds an allocation of `n` bytes at `off`, after every allocation starting below it.
    fn insert(&mut self, off: u64, n: u64, (first, last): (u32, u32)) {
        let pos = self.start.partition_point(|&s| s < off);
        self.start.insert(pos, off);
        self.end.insert(pos, off + n);
        self.first.insert(pos, first);
        self.last.insert(pos, last);
    }
}

/// Bit `j` set when lifetime `firsts[j]..=lasts[j]` meets `first..=last` (at most [`LANES`]
/// lifetimes): the tests written into a byte array, which the compiler vectorises, then
/// packed eight bytes at a time (a multiply gathers the low bit of each byte into the top
/// byte: the constant's bit `56 - 7i` moves byte `i`'s bit to bit `56 + i`, and no two of
/// the 64 products share a bit, so nothing carries).
fn meeting(firsts: &[u32], lasts: &[u32], (first, last): (u32, u32)) -> u64 {
    let mut bytes = [0u8; LANES];
    for ((b, &f), &l) in bytes.iter_mut().zip(firsts).zip(lasts) {
        *b = u8::from(f <= last) & u8::from(l >= first);
    }
    let mut mask = 0u64;
    for (k, eight) in bytes.chunks_exact(8).enumerate() {
        let mut word = [0u8; 8];
        word.copy_from_slice(eight);
        let packed = (u64::from_le_bytes(word).wrapping_mul(0x0102_0408_1020_4080) >> 56) & 0xff;
        mask |= packed << (8 * k);
    }
    mask
}

/// A linear scan over the requests in order of first use, each at the lowest offset free
/// among the allocations live with it (first fit), except those listed in `fixed` (indices
/// in order, lifetimes of [`SHORT_LIFETIME`] steps or more unless large), already placed at
/// their `offsets`: each joins the scan's live list [`SHORT_LIFETIME`] steps before it
/// begins, so that every shorter-lived request meeting it fits around it. It gives up, with
/// `false`, when a request would end above `limit` (`u64::MAX`: never).
fn linear_scan(
    reqs: &[Request],
    base: u64,
    fixed: &[usize],
    offsets: &mut [u64],
    limit: u64,
) -> bool {
    // Live allocations (offset, end, last step), by offset, and the earliest last step
    // among them (the list is swept of those ended only when one has: requests come by
    // first step, and many share one).
    let mut active: Vec<(u64, u64, u32)> = Vec::new();
    let mut ends = u32::MAX;
    let mut next_fixed = 0;
    let mut is_fixed = fixed.iter().copied().peekable();
    for (i, r) in reqs.iter().enumerate() {
        if is_fixed.next_if_eq(&i).is_some() {
            continue;
        }
        if ends < r.first {
            active.retain(|a| a.2 >= r.first);
            ends = active.iter().map(|a| a.2).min().unwrap_or(u32::MAX);
        }
        while let Some(&j) = fixed.get(next_fixed) {
            if reqs[j].first > r.first.saturating_add(SHORT_LIFETIME) {
                break;
            }
            let at = (offsets[j], offsets[j] + size(&reqs[j]), reqs[j].last);
            let pos = active.partition_point(|a| a.0 < at.0);
            active.insert(pos, at);
            ends = ends.min(at.2);
            next_fixed += 1;
        }
        let n = size(r);
        let (mut off, mut pos) = (base, 0);
        for (k, a) in active.iter().enumerate() {
            if a.0 >= off + n {
                break;
            }
            off = off.max(a.1);
            pos = k + 1;
        }
        if off + n > limit {
            return false;
        }
        active.insert(pos, (off, off + n, r.last));
        ends = ends.min(r.last);
        offsets[i] = off;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_numbers::numbers;

    fn request(tensor: u32, size: u64, (first, last): (u32, u32)) -> Request {
        Request {
            tensor,
            slice: 0,
            size,
            first,
            last,
        }
    }

    /// The most bytes live at once: no placement has a lower top.
    fn live_bound(reqs: &[Request]) -> u64 {
        let steps = reqs.iter().map(|r| r.last).max().unwrap_or(0) as usize + 2;
        let mut delta = vec![0i64; steps];
        for r in reqs {
            delta[r.first as usize] += align(r.size.max(1)) as i64;
            delta[r.last as usize + 1] -= align(r.size.max(1)) as i64;
        }
        let mut run = 0;
        delta
            .iter()
            .map(|d| {
                run += d;
                run
            })
            .max()
            .unwrap_or(0) as u64
    }

    /// The vectorised first fit finds the offset the plain one finds (every placed
    /// allocation visited in offset order, those whose lifetimes do not meet skipped), over
    /// random lifetimes and sizes, with more allocations than one mask holds.
    #[test]
    fn the_masked_first_fit_finds_what_visiting_every_allocation_finds() {
        let mut next = numbers(0x2545_f491_4f6c_dd1d);
        let mut placed = Placed::default();
        let mut plain: Vec<(u64, u64, u32, u32)> = Vec::new();
        for _ in 0..600 {
            let first = next(500) as u32;
            let life = (first, first + next(120) as u32);
            let n = align(1 + next(4000));
            let mut want = 64;
            for a in &plain {
                if a.2 > life.1 || a.3 < life.0 {
                    continue;
                }
                if a.0 >= want + n {
                    break;
                }
                want = want.max(a.1);
            }
            assert_eq!(placed.lowest_fit(64, n, life), want);
            placed.insert(want, n, life);
            let pos = plain.partition_point(|a| a.0 < want);
            plain.insert(pos, (want, want + n, life.0, life.1));
        }
        // The mask of 0..=64 lifetimes, bit by bit.
        let firsts: Vec<u32> = (0..64).map(|_| next(50) as u32).collect();
        let lasts: Vec<u32> = firsts.iter().map(|&f| f + next(20) as u32).collect();
        for len in [0, 1, 7, 8, 9, 63, 64] {
            let mask = meeting(&firsts[..len], &lasts[..len], (20, 30));
            for j in 0..64 {
                let meets = j < len && firsts[j] <= 30 && lasts[j] >= 20;
                assert_eq!(mask >> j & 1 == 1, meets, "{len} lifetimes, bit {j}");
            }
        }
    }

    /// The scan that gives up above the packing's top chooses what running both heuristics
    /// to the end and keeping the lower (ties: the scan) chooses, offsets and peak step
    /// alike, over random tiles on which each heuristic wins some of the time.
    #[test]
    fn the_scan_gives_up_only_where_the_packing_would_be_kept() {
        let mut next = numbers(0x5851_f42d_4c95_7f2d);
        let (mut scan_kept, mut packed_kept) = (0, 0);
        for case in 0..300 {
            let n = 1 + next(200);
            let mut reqs: Vec<Request> = (0..n)
                .map(|i| {
                    let first = next(100) as u32;
                    let life = if next(4) == 0 { next(40) } else { next(4) } as u32;
                    let size = if next(5) == 0 {
                        900 + next(3000)
                    } else {
                        1 + next(600)
                    };
                    request(i as u32, size, (first, first + life))
                })
                .collect();
            let base = 8 * next(64);
            let (offsets, top_got, peak) = place_temporaries(&mut reqs, base);
            // Both to the end, on the requests as place_temporaries sorted them.
            let mut scanned = vec![0u64; reqs.len()];
            assert!(linear_scan(&reqs, base, &[], &mut scanned, u64::MAX));
            let packed = packed_first(&reqs, base);
            let (top_s, at_s) = top(&reqs, &scanned, base);
            let (top_p, at_p) = top(&reqs, &packed, base);
            let (want, top_want, at) = if top_p < top_s {
                packed_kept += 1;
                (packed, top_p, at_p)
            } else {
                scan_kept += 1;
                (scanned, top_s, at_s)
            };
            let peak_want = at.map(|i| busiest_step(&reqs, (reqs[i].first, reqs[i].last)));
            assert_eq!(
                (offsets, top_got, peak),
                (want, top_want, peak_want),
                "case {case}"
            );
        }
        assert!(
            scan_kept > 20 && packed_kept > 20,
            "{scan_kept} scans, {packed_kept} packings"
        );
    }

    /// Requests listed by tensor and slice and shuffled (the packed words' path) both end in
    /// (first step, tensor, slice) order, and a list in that order stays.
    #[test]
    fn requests_sort_by_first_use_then_tensor_and_slice() {
        let mut next = numbers(0x1405_7b7e_f767_814f);
        let listed: Vec<Request> = (0..2000u32)
            .map(|i| Request {
                tensor: i / 3,
                slice: i % 3,
                size: 8,
                first: next(700) as u32,
                last: 800,
            })
            .collect();
        let key = |r: &Request| (r.first, r.tensor, r.slice);
        let mut want = listed.clone();
        want.sort_by_key(key);
        let mut shuffled = listed.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, next(i as u64 + 1) as usize);
        }
        for mut reqs in [listed, shuffled, want.clone()] {
            sort_by_first_use(&mut reqs);
            let got: Vec<_> = reqs.iter().map(key).collect();
            assert_eq!(got, want.iter().map(key).collect::<Vec<_>>());
        }
    }

    #[test]
    fn temporaries_whose_lifetimes_meet_never_share_a_byte() {
        // A deterministic mix of short and long lifetimes, small and large buffers.
        let mut next = numbers(0x9e37_79b9_7f4a_7c15);
        let mut reqs: Vec<Request> = (0..1500)
            .map(|i| {
                let first = next(400) as u32;
                let life = if next(10) < 7 {
                    next(SHORT_LIFETIME as u64)
                } else {
                    8 + next(300)
                };
                let size = if next(10) < 6 {
                    1 + next(LARGE)
                } else {
                    LARGE + next(40_000)
                };
                request(i, size, (first, first + life as u32))
            })
            .collect();
        let base = 4096;
        let (offsets, top, peak) = place_temporaries(&mut reqs, base);
        assert!(reqs.windows(2).all(|w| w[0].first <= w[1].first));
        let mut highest = base;
        for (i, (a, &oa)) in reqs.iter().zip(&offsets).enumerate() {
            assert!(oa >= base && oa % ALIGN == 0, "request {i} at {oa}");
            let ea = oa + align(a.size.max(1));
            highest = highest.max(ea);
            for (b, &ob) in reqs.iter().zip(&offsets).skip(i + 1) {
                let meet = a.first <= b.last && b.first <= a.last;
                let overlap = oa < ob + align(b.size.max(1)) && ob < ea;
                assert!(
                    !(meet && overlap),
                    "tensors {} and {} share bytes",
                    a.tensor,
                    b.tensor
                );
            }
        }
        assert_eq!(top, highest);
        assert!(top - base >= live_bound(&reqs));
        assert!(peak.is_some());
    }

    #[test]
    fn a_reductions_buffers_reuse_the_space_of_the_operands_that_died() {
        // A weight gradient's two operands (steps 0-1), its partials (1-2) and the partials
        // it receives to sum (2-3): placed in order of first use, the received partials find
        // the operands' 25 KB hole too small and go above everything (85 KB); the most live
        // at once is 60 KB.
        let kb = 1024;
        let mut reqs = vec![
            request(0, 12 * kb, (0, 1)),
            request(1, 13 * kb, (0, 1)),
            request(2, 30 * kb, (1, 2)),
            request(3, 30 * kb, (2, 3)),
        ];
        let (_, top, _) = place_temporaries(&mut reqs, 0);
        assert_eq!(top, 60 * kb);
        assert_eq!(top, live_bound(&reqs));
    }

    #[test]
    fn a_long_lived_accumulator_leaves_no_hole_under_it() {
        // Small buffers, placed by the scan around an accumulator made while a staging
        // buffer is live: the scan alone put the accumulator above the staging buffer and
        // the next staging buffer, too large for the hole, above both (1,904 bytes).
        let mut reqs = vec![
            request(0, 800, (0, 1)),
            request(1, 200, (1, 100)),
            request(2, 900, (2, 3)),
        ];
        let (offsets, top, _) = place_temporaries(&mut reqs, 0);
        assert_eq!(top, live_bound(&reqs), "offsets {offsets:?}");
    }
}
