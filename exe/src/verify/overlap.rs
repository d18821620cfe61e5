//! The memory plan's overlap check on one tile ([`first_conflict`]): two allocations that
//! share a byte while both are live. An always-live allocation (a variable, a constant, a
//! stream buffer) is live at every step; a transient one from its first step to its last
//! (inclusive; at least its first).
//!
//! A sweep over first steps keeps the live allocations; each new one need only be checked
//! against them, since the live ones never overlap (each was checked when it joined). The
//! live bytes are a bitmap of the tile's data (one bit per byte): joining, checking and
//! retiring an allocation touch its bytes' words, 64 bytes a word, where keeping the live
//! allocations sorted by offset moved a few hundred entries for every one that joined or
//! left (a tile of a large CNN has thousands of temporaries, a few hundred live at once).
//! Transients retire in the order of their last steps, found by one sort. A tile whose data
//! would end beyond [`BITMAP_LIMIT`] is swept with the sorted list instead.

/// One allocation of a tile: (offset, end, first step, last step, always live << 31 |
/// tensor).
pub(super) type Alloc = (u32, u64, u32, u32, u32);

/// The always-live bit of an [`Alloc`]'s tag.
pub(super) const ALWAYS: u32 = 1 << 31;

/// The largest data end (bytes) a tile is checked with a bitmap for: 64 MiB, a bitmap of
/// 1 MiB. Our own choice: a hundred times a Mk2 tile's 624 KiB, so that every plan the
/// compiler makes (far out of memory too) takes the bitmap, while a table naming addresses
/// near 4 GiB does not make the check allocate half a GiB.
const BITMAP_LIMIT: u64 = 1 << 26;

/// The steps `a` is live over.
fn life(a: &Alloc) -> (u32, u32) {
    if a.4 & ALWAYS != 0 {
        (0, u32::MAX)
    } else {
        (a.2, a.3.max(a.2))
    }
}

/// The tags of two allocations of one tile that share bytes while both are live, if any.
pub(super) fn first_conflict(allocs: &[Alloc]) -> Option<(u32, u32)> {
    let order = by_key(allocs, |a| life(a).0);
    let end = allocs.iter().map(|a| a.1).max().unwrap_or(0);
    if end <= BITMAP_LIMIT {
        by_bitmap(allocs, &order, end)
    } else {
        by_sorted_list(allocs, &order)
    }
}

/// The indices of `allocs` in the order of `key`, ties in the
/// order given: as given when the keys ascend already (the plan's check lists them by first
/// step), else one radix sort of 64-bit words (key, index) by their keys, several times
/// faster than sorting the allocations themselves by a tuple.
fn by_key(allocs: &[Alloc], key: impl Fn(&Alloc) -> u32) -> Vec<u32> {
    if allocs.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
        return (0..allocs.len() as u32).collect();
    }
    let mut keyed: Vec<u64> = allocs
        .iter()
        .enumerate()
        .map(|(i, a)| (u64::from(key(a)) << 32) | i as u64)
        .collect();
    crate::radix::sort_words_above(&mut keyed, 32);
    keyed.into_iter().map(|k| k as u32).collect()
}

/// Calls `f(word, mask)` for the words of a bitmap that hold bytes `[lo, hi)`, until it
/// returns true; whether it did.
fn any_word(lo: u64, hi: u64, mut f: impl FnMut(usize, u64) -> bool) -> bool {
    if lo >= hi {
        return false;
    }
    let (w0, w1) = (lo / 64, (hi - 1) / 64);
    (w0..=w1).any(|w| {
        let start = if w == w0 { lo % 64 } else { 0 };
        let end = if w == w1 { (hi - 1) % 64 + 1 } else { 64 };
        let mask = if end - start == 64 {
            u64::MAX
        } else {
            ((1u64 << (end - start)) - 1) << start
        };
        f(w as usize, mask)
    })
}

/// [`first_conflict`] with the live bytes in a bitmap of `end` bits, the allocations joining
/// in `order` (by first step).
fn by_bitmap(allocs: &[Alloc], order: &[u32], end: u64) -> Option<(u32, u32)> {
    let mut bits = vec![0u64; end.div_ceil(64) as usize];
    // The transients by last step: one whose last step is before an allocation's first
    // joined before it (its first is at most its last) and retires then; the always-live
    // never retire (their last step is the largest).
    let by_last = by_key(allocs, |a| life(a).1);
    let mut retired = 0;
    for (k, &i) in order.iter().enumerate() {
        let a = &allocs[i as usize];
        let first = life(a).0;
        while let Some(&r) = by_last.get(retired) {
            let r = &allocs[r as usize];
            if life(r).1 >= first {
                break;
            }
            any_word(u64::from(r.0), r.1, |w, m| {
                bits[w] &= !m;
                false
            });
            retired += 1;
        }
        if any_word(u64::from(a.0), a.1, |w, m| bits[w] & m != 0) {
            // Found: the live allocation it meets, named as the sorted list would name it
            // (the list itself should the search not find it: a conflict is never dropped).
            let live = order[..k]
                .iter()
                .map(|&j| &allocs[j as usize])
                .filter(|r| life(r).1 >= first);
            return neighbour(live, a)
                .map(|t| (a.4, t))
                .or_else(|| by_sorted_list(allocs, order));
        }
        any_word(u64::from(a.0), a.1, |w, m| {
            bits[w] |= m;
            false
        });
    }
    None
}

/// The tag of the allocation of `live` (which do not overlap) that `a` meets: the one
/// starting at or before it, else the lowest starting after it.
fn neighbour<'a>(live: impl Iterator<Item = &'a Alloc>, a: &Alloc) -> Option<u32> {
    let meets = |r: &&Alloc| u64::from(r.0) < a.1 && u64::from(a.0) < r.1;
    let overlapping: Vec<&Alloc> = live.filter(meets).collect();
    let below = overlapping
        .iter()
        .filter(|r| r.0 <= a.0)
        .max_by_key(|r| r.0);
    let above = overlapping.iter().filter(|r| r.0 > a.0).min_by_key(|r| r.0);
    below.or(above).map(|r| r.4)
}

/// [`first_conflict`] keeping the live allocations sorted by offset (distinct: they do not
/// overlap and none is empty) and their last steps in a heap, the allocations joining in
/// `order` (by first step).
fn by_sorted_list(allocs: &[Alloc], order: &[u32]) -> Option<(u32, u32)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut live: Vec<(u32, u64, u32)> = Vec::new();
    let mut retire: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::new();
    for &i in order {
        let a = &allocs[i as usize];
        let (first, last) = life(a);
        while let Some(&Reverse((l, off))) = retire.peek() {
            if l >= first {
                break;
            }
            retire.pop();
            if let Ok(k) = live.binary_search_by_key(&off, |x| x.0) {
                live.remove(k);
            }
        }
        let pos = live.partition_point(|x| x.0 <= a.0);
        if let Some(&(_, end, tag)) = pos.checked_sub(1).map(|k| &live[k]) {
            if end > u64::from(a.0) {
                return Some((a.4, tag));
            }
        }
        if let Some(&(off, _, tag)) = live.get(pos) {
            if u64::from(off) < a.1 {
                return Some((a.4, tag));
            }
        }
        live.insert(pos, (a.0, a.1, a.4));
        retire.push(Reverse((last, a.0)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairwise definition: two allocations conflict when their bytes overlap and
    /// neither is a transient whose steps end before the other's begin.
    fn conflicts(a: &Alloc, b: &Alloc) -> bool {
        let bytes = u64::from(a.0) < b.1 && u64::from(b.0) < a.1;
        let transient = |x: &Alloc| x.4 & ALWAYS == 0;
        let disjoint_life = transient(a) && transient(b) && (a.3 < b.2 || b.3 < a.2);
        bytes && !disjoint_life
    }

    /// Both sweeps find a conflict exactly when a pair conflicts, report a conflicting
    /// pair, and the same one; offsets and sizes aligned or not (a bitmap word holds 64
    /// bytes), allocations near the bitmap's words' edges and across several words.
    #[test]
    fn the_sweeps_find_a_conflict_exactly_when_a_pair_conflicts() {
        // A small linear congruential generator: the cases are the same on every run.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % m
        };
        let (mut with, mut without) = (0, 0);
        for case in 0..6_000 {
            let n = 1 + next(12) as usize;
            let unaligned = case % 3 == 0;
            let allocs: Vec<Alloc> = (0..n)
                .map(|i| {
                    let (off, size) = if unaligned {
                        (next(512) as u32, 1 + next(160))
                    } else {
                        (next(64) as u32 * 8, 8 * (1 + next(6)))
                    };
                    let first = next(20) as u32;
                    let last = first + next(6) as u32;
                    let always = if next(8) == 0 { ALWAYS } else { 0 };
                    (off, u64::from(off) + size, first, last, always | i as u32)
                })
                .collect();
            let want = allocs
                .iter()
                .enumerate()
                .any(|(i, a)| allocs[i + 1..].iter().any(|b| conflicts(a, b)));
            let found = first_conflict(&allocs);
            assert_eq!(found.is_some(), want, "case {case}: {allocs:?}");
            let order = by_key(&allocs, |a| life(a).0);
            assert_eq!(
                by_sorted_list(&allocs, &order),
                found,
                "case {case}: {allocs:?}"
            );
            if let Some((a, b)) = found {
                let by_tag = |t: u32| allocs.iter().find(|x| x.4 == t).unwrap();
                assert!(
                    conflicts(by_tag(a), by_tag(b)),
                    "case {case}: reported a non-conflict"
                );
                with += 1;
            } else {
                without += 1;
            }
        }
        // Both outcomes are exercised.
        assert!(
            with > 800 && without > 800,
            "{with} with, {without} without"
        );
    }

    /// A tile whose data ends beyond the bitmap's limit is checked all the same.
    #[test]
    fn addresses_beyond_the_bitmap_limit_are_swept_with_the_list() {
        let far = (BITMAP_LIMIT + 64) as u32;
        let apart = vec![(0, 64, 0, 1, 0), (far, u64::from(far) + 64, 0, 1, 1)];
        assert_eq!(first_conflict(&apart), None);
        let meeting = vec![
            (far, u64::from(far) + 64, 0, 1, 0),
            (far + 32, u64::from(far) + 96, 1, 2, 1),
        ];
        assert_eq!(first_conflict(&meeting), Some((1, 0)));
    }

    /// Bytes on either side of a word's edge are told apart.
    #[test]
    fn bytes_either_side_of_a_word_edge_do_not_meet() {
        let touching = vec![(0, 64, 0, 3, 0), (64, 130, 0, 3, 1), (130, 131, 1, 1, 2)];
        assert_eq!(first_conflict(&touching), None);
        let one_byte = vec![(0, 65, 0, 3, 0), (64, 130, 2, 3, 1)];
        assert_eq!(first_conflict(&one_byte), Some((1, 0)));
    }
}
