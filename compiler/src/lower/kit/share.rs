//! Sharing a tile's reductions between its worker contexts, as PopLibs shares them when a
//! tile holds at least as many reductions as it has workers (P1
//! lib/popops/reduction/ReductionConnection.cpp, `connectReductions` choosing the
//! single-stage path, `distributeReductionsBetweenWorkers`, `approximateCyclesForReduction`
//! and `opsPerCycle`, read at commit 7eac0f2): every reduction goes whole to one worker; when
//! their rough costs are all within `max(8, 10%)` of their mean, consecutive reductions go
//! to each worker in turn (`n / workers` each, the first `n % workers` workers one more),
//! else the reductions, stably sorted by cost in ascending order, are given each in turn to
//! a new worker while there are workers left, then to the least loaded one.

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
}
