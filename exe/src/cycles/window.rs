//! Cycle estimates of the window codelets (`Conv`, `MaxPool`): one vertex group is costed as
//! the one PopLibs vertex that would compute the tile's block.
//!
//! - `Conv` `Forward` and `InputGrad`: PopLibs' `ConvPartialnx1` ([`super::conv::convnx1_cycles`],
//!   `getConvPartialnx1SupervisorCycleEstimate`): one conv group, input channels in groups
//!   of the AMP's input channels, output channels in groups of its conv units, one kernel
//!   position per AMP pass (`amp_kernel_height` 1), and the block's output positions
//!   partitioned over the workers in contiguous chunks as PopLibs' worklists partition them
//!   (`partitionConvPartialByWorker`); each worklist entry is one output row segment, counting
//!   only the positions whose input is not padding (PopLibs' worklists skip padding; for the
//!   input gradient, the positions a stride-dilated input reaches). How the simulator splits
//!   the block into vertices does not change the figure.
//! - `Conv` `WeightGrad`: PopLibs' `ConvPartial1x1Out` ([`super::conv::conv1x1_out_cycles`])
//!   of the product `ob × (nb·rows·OW) × (cb·KH·KW)` (`rows` the block's rows of the output
//!   field): the block's output channels are the output positions (split over the workers),
//!   the reduction `(n, oh, ow)` is the input channels (in groups of the AMP's), and `cb·KH·KW` the output channels (in groups of
//!   the conv units). PopLibs plans the weight-update pass as a convolution whose output
//!   field is the kernel, which its transforms (`expandDims`, `outChanFlattenDims`) turn into
//!   a 1×1-output product; we do not reproduce the transforms exactly (our modelling choice).
//! - `MaxPool` (and its gradient): our own model (PopLibs' `popnn` pooling estimator is not
//!   in the sources we read): per worker `10 + Σ_segments positions·(2 + 2·grad)·⌈len/v⌉`,
//!   a load and a max (plus a compare-select-add for the gradient) per vector of `v` output
//!   elements per kernel position.

use super::conv::{conv1x1_out_cycles, convnx1_cycles, Conv1x1OutParams, ConvNx1Params};
use crate::codelets::{Codelet, WindowParams, WindowPass};
use crate::target::Target;
use ipusim_ir::DType;

/// The cycles of a window vertex group whose block is described by `p`.
pub fn window_group_cycles(target: &Target, codelet: &Codelet, p: &WindowParams) -> u64 {
    match *codelet {
        Codelet::Conv {
            pass: WindowPass::WeightGrad,
            input,
            partials,
            ..
        } => {
            let g = &p.geometry;
            let field_rows = u64::from(p.out_rows.1.saturating_sub(p.out_rows.0));
            let field_cols = u64::from(p.out_cols.1.saturating_sub(p.out_cols.0));
            let k = p.batch_count() * field_rows * field_cols;
            let cols = u64::from(p.in_channels.1.saturating_sub(p.in_channels.0))
                * u64::from(g.kh)
                * u64::from(g.kw);
            let amp = target.amp(input, partials);
            let units = u64::from(amp.output_channels.max(1));
            let nw = target.worker_contexts.max(1) as u64;
            // Output positions are the block's output channels, split over the workers.
            let rows = p.out_channel_count();
            let per = rows.div_ceil(nw);
            let worklists = (0..nw)
                .map(|w| {
                    let n = rows.saturating_sub(w * per).min(per);
                    (n > 0).then_some(n as u32)
                })
                .collect();
            let cast = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            conv1x1_out_cycles(
                target,
                &Conv1x1OutParams {
                    input,
                    partials,
                    conv_groups: 1,
                    in_groups: cast(k.div_ceil(u64::from(amp.input_channels.max(1)))),
                    out_groups: cast(cols.div_ceil(units)),
                    out_chans_per_group: cast(units),
                    worklists,
                },
            )
        }
        Codelet::Conv {
            pass,
            input,
            partials,
            ..
        } => convnx1_cycles(target, &nx1_params(target, pass, input, partials, p)),
        Codelet::MaxPool { grad, dtype } => pool_cycles(target, grad, dtype, p),
        _ => 0,
    }
}

/// The block's output row segments `(row, first column, end column)` in position order
/// (columns absolute, within the block's `out_cols`), split into `workers` contiguous chunks
/// of positions.
fn worker_segments(p: &WindowParams, workers: usize) -> Vec<Vec<(u32, u32, u32)>> {
    let rows = p.out_rows.1.saturating_sub(p.out_rows.0) as u64;
    let width = p.out_cols.1.saturating_sub(p.out_cols.0);
    let total = p.batch_count() * rows * u64::from(width);
    let chunk = total.div_ceil(workers.max(1) as u64).max(1);
    let mut out = vec![Vec::new(); workers.max(1)];
    let mut pos = 0u64;
    while pos < total {
        let worker = (pos / chunk) as usize;
        let end = ((worker as u64 + 1) * chunk).min(total);
        let line = pos / u64::from(width);
        let col = (pos % u64::from(width)) as u32;
        let take = (u64::from(width - col)).min(end - pos) as u32;
        let row = p.out_rows.0 + (line % rows) as u32;
        let c0 = p.out_cols.0 + col;
        out[worker].push((row, c0, c0 + take));
        pos += u64::from(take);
    }
    out
}

fn nx1_params(
    target: &Target,
    pass: WindowPass,
    input: DType,
    partials: DType,
    p: &WindowParams,
) -> ConvNx1Params {
    let g = &p.geometry;
    let amp = target.amp(input, partials);
    let reduction = p.in_channels.1.saturating_sub(p.in_channels.0);
    let width = p.out_cols.1.saturating_sub(p.out_cols.0);
    let units = amp.output_channels.max(1);
    let in_chans = amp.input_channels.max(1);
    let segments = worker_segments(p, target.worker_contexts.max(1) as usize);
    let worklists = segments
        .iter()
        .map(|segs| {
            let mut per_position = Vec::with_capacity((g.kh * g.kw) as usize);
            for kh in 0..g.kh {
                for kw in 0..g.kw {
                    let list: Vec<u32> = segs
                        .iter()
                        .map(|&(row, c0, c1)| {
                            let row_ok = match pass {
                                WindowPass::InputGrad => g.output_row(row, kh).is_some(),
                                _ => g.input_row(row, kh).is_some(),
                            };
                            if !row_ok {
                                return 0;
                            }
                            (c0..c1)
                                .filter(|&c| match pass {
                                    WindowPass::InputGrad => g.output_col(c, kw).is_some(),
                                    _ => g.input_col(c, kw).is_some(),
                                })
                                .count() as u32
                        })
                        .filter(|&n| n > 0)
                        .collect();
                    per_position.push(list);
                }
            }
            per_position
        })
        .collect();
    let rows = p.out_rows.1.saturating_sub(p.out_rows.0);
    let positions = (p.batch_count() as u32)
        .saturating_mul(rows)
        .saturating_mul(width);
    ConvNx1Params {
        input,
        partials,
        conv_groups: 1,
        in_groups: reduction.div_ceil(in_chans),
        out_groups: (p.out_channel_count() as u32).div_ceil(units),
        in_chans_per_group: in_chans,
        out_chans_per_group: units,
        kernel_outer: g.kh,
        kernel_inner: g.kw,
        amp_kernel_height: 1,
        zeros_info: positions.saturating_mul(units),
        worklists,
    }
}

fn pool_cycles(target: &Target, grad: bool, dtype: DType, p: &WindowParams) -> u64 {
    let g = &p.geometry;
    let nw = target.worker_contexts.max(1) as usize;
    let vw = target.vector_width(dtype).max(1);
    let per_vector = if grad { 4 } else { 2 };
    let kernel = u64::from(g.kh) * u64::from(g.kw);
    let planes = p.out_channel_count();
    let max_worker = worker_segments(p, nw)
        .iter()
        .map(|segs| {
            10u64.saturating_add(segs.iter().fold(0u64, |acc, &(_, c0, c1)| {
                acc.saturating_add(
                    kernel
                        .saturating_mul(per_vector)
                        .saturating_mul(u64::from(c1 - c0).div_ceil(vw)),
                )
            }))
        })
        .max()
        .unwrap_or(0);
    // Every channel plane of the block runs the same worklists.
    10u64.saturating_add((nw as u64).saturating_mul(max_worker.saturating_mul(planes)))
}
