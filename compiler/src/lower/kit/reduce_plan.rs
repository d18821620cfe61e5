//! How many stages a split reduction's sum takes, as PopLibs plans a convolution's
//! reduction (poplin/ConvReducePlan.cpp): the planners cost it and
//! [`crate::lower::kit::reduction::sum_split`] builds it.

/// The depths of the intermediate partials of a multi-stage sum of `depth` partial blocks
/// (empty: one stage), as PopLibs' `getMultiStageReducePlan` (poplin/ConvReducePlan.cpp,
/// `enableMultiStageReduce` on, its default) plans a convolution's reduction: two stages
/// from 16 partials, three from 125, each intermediate depth the one, rounded down or up,
/// that gives the fewest messages per tile (`Σ depth_i / depth_{i+1}`, in `f32` as there).
/// PopLibs stages the sum to cut exchange code: a single stage has every reducing tile
/// receive a message from each of the `depth` partials.
pub(crate) fn reduce_stages(depth: u32) -> Vec<u32> {
    let stages = match depth {
        125.. => 3,
        16.. => 2,
        _ => 1,
    };
    stage_plan(depth, stages).0
}

/// [`reduce_stages`]' plan of `stages` stages and its messages per tile.
fn stage_plan(depth: u32, stages: u32) -> (Vec<u32>, f32) {
    if stages <= 1 {
        return (Vec::new(), depth as f32);
    }
    let down = (f64::from(depth).powf((f64::from(stages) - 1.0) / f64::from(stages)) as u32).max(1);
    let (mut plan_down, cost_down) = stage_plan(down, stages - 1);
    let cost_down = cost_down + depth as f32 / down as f32;
    let (mut plan_up, cost_up) = stage_plan(down + 1, stages - 1);
    let cost_up = cost_up + depth as f32 / (down + 1) as f32;
    if cost_down < cost_up {
        plan_down.insert(0, down);
        (plan_down, cost_down)
    } else {
        plan_up.insert(0, down + 1);
        (plan_up, cost_up)
    }
}

#[cfg(test)]
mod tests {
    use super::reduce_stages;

    /// The stage depths PopLibs' `getMultiStageReducePlan` gives (ConvReducePlan.cpp,
    /// worked by hand from its code): one stage below 16 partials; `√16 = 4`; for 56, 7 and
    /// 8 both cost 15 messages and the tie goes to the rounded-up depth; for 448 (three
    /// stages), 58 then 8 costs 22.974 messages and 59 then 8 costs 22.968.
    #[test]
    fn the_sum_is_staged_as_poplibs_plans_a_convolution_reduction() {
        assert_eq!(reduce_stages(1), Vec::<u32>::new());
        assert_eq!(reduce_stages(15), Vec::<u32>::new());
        assert_eq!(reduce_stages(16), vec![4]);
        assert_eq!(reduce_stages(56), vec![8]);
        assert_eq!(reduce_stages(448), vec![59, 8]);
    }
}
