//! Sharing a tile's reductions between its worker contexts, as PopLibs shares them (P1
//! lib/popops/reduction/ReductionIntrospection.cpp `dividePartials` and
//! ReductionConnection.cpp `connectReductions`, read at commit 7eac0f2):
//!
//! 1. the tile's reductions are first divided by columns into at most one piece per worker
//!    ([`divide_columns`]);
//! 2. when that leaves at least as many pieces as workers (the single-stage path,
//!    `distributeReductionsBetweenWorkers`, [`distribute`]), every piece goes whole to one
//!    worker: when their rough costs ([`rough_cycles`]) are all within `max(8, 10%)` of
//!    their mean, consecutive pieces go to each worker in turn (`n / workers` each, the first
//!    `n % workers` workers one more), else the pieces, stably sorted by cost in ascending
//!    order, are given each in turn to a new worker while there are workers left, then to
//!    the least loaded one;
//! 3. when fewer (the two-stage path, `connectTwoStageReductions`), each piece has a worker
//!    of its own, and the free workers go to cutting the costliest pieces by rows
//!    ([`two_stage_splits`], [`split_rows`]): each run of rows is summed by a worker of its
//!    own into partials, and a second compute set sums each cut piece's partials in order.

use ipusim_ir::DType;

/// PopLibs' rough cost of a reduction of `partials` elements into `outputs` outputs of
/// `dtype` (`approximateCyclesForReduction`): `⌈partials / opsPerCycle⌉`, `opsPerCycle` the
/// target's vector width of the output type (`vector_width`), doubled for an add or
/// square-add of half or float data, used whole when the output size divides into it as a
/// power-of-two fraction, else the largest power of two at most that width dividing the
/// output size.
pub(crate) fn rough_cycles(
    partials: u64,
    outputs: u64,
    dtype: DType,
    vector_width: u64,
    add: bool,
) -> u64 {
    let ops = if outputs == 0 {
        1
    } else {
        let width = vector_width.max(1) * if add && dtype.is_float() { 2 } else { 1 };
        // `width`, `width / 2`, …, 1.
        let halvings = || std::iter::successors(Some(width), |w| (*w > 1).then_some(w / 2));
        if halvings().any(|w| w == outputs) {
            width
        } else {
            halvings().find(|&w| outputs.is_multiple_of(w)).unwrap_or(1)
        }
    };
    partials.div_ceil(ops)
}

/// The worker of each reduction of rough `costs` among `workers` worker contexts (PopLibs'
/// `distributeReductionsBetweenWorkers`; the module's description).
pub(crate) fn distribute(costs: &[u64], workers: usize) -> Vec<usize> {
    let n = costs.len();
    if n == 0 || workers == 0 {
        return vec![0; n];
    }
    let mean = costs.iter().map(|&c| c as f64).sum::<f64>() / n as f64;
    let range = 8f64.max(0.1 * mean);
    let min = if mean > range {
        (mean - range) as u64
    } else {
        0
    };
    let max = (mean + range) as u64;
    if costs.iter().all(|&c| (min..=max).contains(&c)) {
        let (each, extra) = (n / workers, n % workers);
        return (0..workers)
            .flat_map(|w| std::iter::repeat_n(w, each + usize::from(w < extra)))
            .collect();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| costs[i]);
    let mut assigned = vec![0; n];
    let mut load: Vec<u64> = Vec::with_capacity(workers);
    for i in order {
        if load.len() < workers {
            assigned[i] = load.len();
            load.push(costs[i]);
        } else {
            // The first of the least loaded, as `std::min_element` finds it.
            let w = (0..load.len()).min_by_key(|&w| (load[w], w)).unwrap_or(0);
            assigned[i] = w;
            load[w] += costs[i];
        }
    }
    assigned
}

/// PopLibs' division of a tile's reductions by columns between its workers before it
/// shares or splits them (P1 lib/popops/reduction/ReductionIntrospection.cpp
/// `dividePartials` through `splitOutputRegionsForWorkers` and poputil's `splitRegions`, at
/// 7eac0f2): the tile's regions of `widths` columns, laid end to end, cut into at most
/// `partitions` runs of whole grains of `grain` columns (`⌈grains / partitions⌉` grains at
/// most a run, the grains dealt out as evenly as that allows), each run cut again where a
/// region ends. Returns the pieces in order as `(region, first column, end column)`.
pub(crate) fn divide_columns(
    widths: &[u64],
    grain: u64,
    partitions: usize,
) -> Vec<(usize, u64, u64)> {
    let total: u64 = widths.iter().sum();
    let grain = grain.max(1);
    let grains = total.div_ceil(grain);
    if grains == 0 {
        return Vec::new();
    }
    let per = grains.div_ceil(partitions.max(1) as u64);
    let runs = grains.div_ceil(per);
    let mut pieces = Vec::new();
    let (mut region, mut offset) = (0usize, 0u64);
    for run in 0..runs {
        let begin = (run * grains / runs) * grain;
        let end = (((run + 1) * grains / runs) * grain).min(total);
        let mut left = end - begin;
        while left > 0 {
            if offset == widths[region] {
                region += 1;
                offset = 0;
                continue;
            }
            let take = left.min(widths[region] - offset);
            pieces.push((region, offset, offset + take));
            offset += take;
            left -= take;
        }
    }
    pieces
}

/// PopLibs' split of a reduction's `rows` into at most `n` contiguous runs of at least two
/// rows, in multiples of `grain` rows but for the last run's remainder, using no more runs
/// than the longest run needs (`splitRowsToWorkers`, P1
/// lib/popops/reduction/ReductionConnection.cpp, at 7eac0f2: rows 9 in 4 runs are 3, 3, 3).
/// Runs PopLibs' arithmetic would leave empty (a grain longer than the rows a run gets) are
/// dropped.
pub(crate) fn split_rows(rows: u64, n: u64, grain: u64) -> Vec<u64> {
    if rows <= 3 || n <= 1 {
        return vec![rows];
    }
    let grain = grain.max(1);
    let longest = rows.div_ceil(n);
    let runs = (rows / 2).min(rows.div_ceil(longest));
    let mut split = vec![grain * (rows / (runs * grain)); runs as usize];
    let extra = rows % (runs * grain);
    for s in split.iter_mut().take((extra / grain) as usize) {
        *s += grain;
    }
    if let Some(last) = split.last_mut() {
        *last += extra % grain;
    }
    split.retain(|&r| r > 0);
    split
}

/// How many pieces by rows each of a tile's reductions is cut into when the tile holds fewer
/// reductions than `workers` (PopLibs' `splitTwoStageReductionsBetweenWorkers`, P1
/// lib/popops/reduction/ReductionConnection.cpp, at 7eac0f2), from each reduction's rough
/// cost `rough` ([`rough_cycles`]) and `rows` (its reduction factor). A reduction's estimate
/// is 30 cycles of vertex overhead plus its rough cost (`approximateOverheadCyclesForReduction`:
/// 30 for one piece, 60 once split, then the rough cost divided among the pieces); while
/// workers are free, the costliest reduction takes one more piece if that keeps its pieces
/// under its most, `min(rows / 2, estimate / 4)` (`getMaxSplit`: at least two rows and four
/// cycles a piece), and lowers its estimate; else the splitting stops. When the costliest
/// estimate did not fall, nothing is split.
pub(crate) fn two_stage_splits(rough: &[u64], rows: &[u64], workers: usize) -> Vec<u64> {
    let n = rough.len();
    let mut estimate: Vec<u64> = rough.iter().map(|&c| 30 + c).collect();
    let most: Vec<u64> = estimate
        .iter()
        .zip(rows)
        .map(|(&e, &r)| (r / 2).min(e / 4))
        .collect();
    let mut splits = vec![1u64; n];
    let Some(&before) = estimate.iter().max() else {
        return splits;
    };
    let mut free = workers.saturating_sub(n);
    while free > 0 {
        // The first of the costliest, as `std::max_element` finds it.
        let i = (0..n).fold(0, |m, j| if estimate[j] > estimate[m] { j } else { m });
        if splits[i] + 1 >= most[i] {
            break;
        }
        let after = 60 + rough[i] / (splits[i] + 1);
        if after >= estimate[i] {
            break;
        }
        estimate[i] = after;
        splits[i] += 1;
        free -= 1;
    }
    if estimate.iter().max() == Some(&before) {
        splits.fill(1);
    }
    splits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_reductions_go_to_workers_in_consecutive_runs() {
        // PopLibs' own example: 14 reductions over 6 workers.
        assert_eq!(
            distribute(&[100; 14], 6),
            [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
        );
        // Within 8 cycles of the mean (10% of 40 is less) counts as equal.
        assert_eq!(distribute(&[36, 44, 40, 40, 40, 40], 6), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn unequal_reductions_go_ascending_to_the_least_loaded_worker() {
        // Sorted ascending: 10 (#1), 20 (#3), 30 (#0), 500 (#2); two workers take the first
        // two, then 30 goes to worker 0 (load 10), 500 to worker 1 (load 20 < 40).
        assert_eq!(distribute(&[30, 10, 500, 20], 2), [0, 0, 1, 1]);
        // Ties keep the reductions' order (a stable sort) and the first least-loaded worker.
        assert_eq!(distribute(&[5, 100, 5, 5], 2), [0, 1, 1, 0]);
    }

    #[test]
    fn rough_cycles_follow_ops_per_cycle() {
        // Float add, vector width 2: 4 elements a cycle; an output of 1, 2 or 4 uses the
        // whole width, an output of 6 two, an odd one one.
        assert_eq!(rough_cycles(400, 1, DType::F32, 2, true), 100);
        assert_eq!(rough_cycles(400, 4, DType::F32, 2, true), 100);
        assert_eq!(rough_cycles(400, 6, DType::F32, 2, true), 200);
        assert_eq!(rough_cycles(401, 3, DType::F32, 2, true), 401);
        // Half max, vector width 4, output 16: 4 a cycle.
        assert_eq!(rough_cycles(64, 16, DType::F16, 4, false), 16);
        // Half add: 8 a cycle.
        assert_eq!(rough_cycles(64, 16, DType::F16, 4, true), 8);
    }

    #[test]
    fn columns_divide_into_whole_grains_cut_where_regions_end() {
        // Four regions of 8 columns, grain 8, six workers: one region each.
        assert_eq!(
            divide_columns(&[8, 8, 8, 8], 8, 6),
            [(0, 0, 8), (1, 0, 8), (2, 0, 8), (3, 0, 8)]
        );
        // One region of 64: 8 grains, at most ⌈8 / 6⌉ = 2 a run, so 4 runs of 2.
        assert_eq!(
            divide_columns(&[64], 8, 6),
            [(0, 0, 16), (0, 16, 32), (0, 32, 48), (0, 48, 64)]
        );
        // 13 grains: at most 3 a run, 5 runs from grains ⌊k · 13 / 5⌋ = 0, 2, 5, 7, 10.
        assert_eq!(
            divide_columns(&[104], 8, 6),
            [
                (0, 0, 16),
                (0, 16, 40),
                (0, 40, 56),
                (0, 56, 80),
                (0, 80, 104)
            ]
        );
        // A run of one grain across two regions is two pieces; the last grain is short.
        assert_eq!(
            divide_columns(&[4, 6], 8, 6),
            [(0, 0, 4), (1, 0, 4), (1, 4, 6)]
        );
    }

    #[test]
    fn rows_split_into_runs_of_at_least_two() {
        // PopLibs' own example: 9 rows for 4 workers are 3, 3, 3.
        assert_eq!(split_rows(9, 4, 1), [3, 3, 3]);
        assert_eq!(split_rows(100, 6, 1), [17, 17, 17, 17, 16, 16]);
        assert_eq!(split_rows(3, 6, 1), [3]);
        assert_eq!(split_rows(5, 6, 1), [3, 2]);
        // In grains of 4 rows, the remainder on the last run.
        assert_eq!(split_rows(18, 3, 4), [8, 4, 6]);
    }

    #[test]
    fn the_costliest_reduction_takes_the_free_workers_while_that_pays() {
        // 430 cycles one piece, then 60 + 400/k: 260, 193, 160, 140, 126.
        assert_eq!(two_stage_splits(&[400], &[100], 6), [6]);
        assert_eq!(two_stage_splits(&[400, 8], &[100, 8], 6), [5, 1]);
        // A small reduction gains nothing from a second stage (60 + 4 > 38).
        assert_eq!(two_stage_splits(&[8; 4], &[8; 4], 6), [1; 4]);
        // Rows cap the pieces: 10 rows make at most 5 - 1 = 4.
        assert_eq!(two_stage_splits(&[1000], &[10], 6), [4]);
        // The first costliest cannot split (4 rows: at most 2 pieces), so the maximum does
        // not fall and nothing is split.
        assert_eq!(two_stage_splits(&[100, 100], &[4, 100], 3), [1, 1]);
    }
}
