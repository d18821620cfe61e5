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
//! - `Conv` `Forward` and `InputGrad` with [`ConvMethod::Hmac`]: PopLibs'
//!   `ConvPartialHorizontalMac` ([`super::conv::hmac_cycles`],
//!   `getConvPartialHorizontalMacSupervisorCycleEstimate`): one input-channel group of the
//!   block's reduction channels (`inChansPerGroup`, the vertex's pass, rounded up to the
//!   grain of 2 for half activations as `getConvVertexHMACCandidates` rounds them), output
//!   channels in groups of 1 (float partials) or 2 (half: PopLibs' `partialChansPerGroup`),
//!   every kernel position an AMP-free dot product, with the same worklists as the nx1
//!   vertex. PopLibs' 1x1 specialisation (`ConvPartialHorizontalMac1x1`, half activations
//!   with float partials) is taken for unpadded 1×1 kernels of unit stride.
//! - `Conv` `Forward` with [`ConvMethod::Slic`]: PopLibs' `ConvPartial1xNSLIC`
//!   ([`super::conv::slic_cycles`], `getConvPartialSlicSupervisorOuterLoopCycleEstimate`
//!   over its inner-loop and weight-load estimates): one conv group per group and 4 channels
//!   per group (the block's at most 4 input channels padded to 4), the kernel in `kh ×
//!   ⌈kw/4⌉` 1×4 sub-kernels, the widest conv-unit chains the target has for the partials
//!   ([`super::conv::slic_conv_chains`]), the output stride of the innermost dimension, and
//!   a worklist entry per worker row segment of the block's output (PopLibs'
//!   `getConvPartialSlicInnerLoopCycles` over `partitionConvPartialByWorker`; SLIC applies
//!   the input padding explicitly, so every output position counts). PopLibs' planner gives
//!   a SLIC tile at most 4 output channels; a block of more is one vertex per 4 of them, run
//!   one after the other (our extension, keeping the AMP's output layout).
//! - `MaxPool` (and its gradient): our own model (PopLibs' `popnn` pooling estimator is not
//!   in the sources we read): per worker `10 + Σ_segments positions·(2 + 2·grad)·⌈len/v⌉`,
//!   a load and a max (plus a compare-select-add for the gradient) per vector of `v` output
//!   elements per kernel position.

use super::conv::{
    conv1x1_out_cycles, convnx1_cycles, hmac_cycles, slic_conv_chains, slic_cycles,
    Conv1x1OutParams, ConvNx1Params, HmacParams, SlicParams, Worklists, SLIC_WINDOW_WIDTH,
};
use crate::codelets::{Codelet, ConvMethod, WindowParams, WindowPass};
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
            method: ConvMethod::Hmac,
            ..
        } => hmac_cycles(target, &hmac_params(target, pass, input, partials, p)),
        Codelet::Conv {
            partials,
            method: ConvMethod::Slic,
            ..
        } => {
            let vertices = p.out_channel_count().div_ceil(u64::from(SLIC_CHANNELS));
            slic_cycles(target, &slic_params(target, partials, p)).saturating_mul(vertices)
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
/// of positions: worker `w`'s are `segments[ends[w - 1]..ends[w]]` (from 0 for the first).
struct WorkerSegments {
    segments: Vec<(u32, u32, u32)>,
    ends: Vec<usize>,
}

impl WorkerSegments {
    fn of(p: &WindowParams, workers: usize) -> WorkerSegments {
        let workers = workers.max(1);
        let rows = p.out_rows.1.saturating_sub(p.out_rows.0) as u64;
        let width = p.out_cols.1.saturating_sub(p.out_cols.0);
        let total = p.batch_count() * rows * u64::from(width);
        let chunk = total.div_ceil(workers as u64).max(1);
        let mut segments = Vec::new();
        let mut ends = Vec::with_capacity(workers);
        let mut pos = 0u64;
        while pos < total {
            let worker = (pos / chunk) as usize;
            while ends.len() < worker {
                ends.push(segments.len());
            }
            let end = ((worker as u64 + 1) * chunk).min(total);
            let line = pos / u64::from(width);
            let col = (pos % u64::from(width)) as u32;
            let take = (u64::from(width - col)).min(end - pos) as u32;
            let row = p.out_rows.0 + (line % rows) as u32;
            let c0 = p.out_cols.0 + col;
            segments.push((row, c0, c0 + take));
            pos += u64::from(take);
        }
        while ends.len() < workers {
            ends.push(segments.len());
        }
        WorkerSegments { segments, ends }
    }

    /// Each worker's segments, in worker order.
    fn per_worker(&self) -> impl Iterator<Item = &[(u32, u32, u32)]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.segments[a..b])
    }
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
    let units = amp.output_channels.max(1);
    let in_chans = amp.input_channels.max(1);
    let segments = WorkerSegments::of(p, target.worker_contexts.max(1) as usize);
    let reached = ReachedColumns::of(pass, p);
    let mut worklists = Worklists::new((g.kh * g.kw) as usize);
    // At most an entry per segment and kernel position: allocated once, not grown.
    worklists.reserve(segments.segments.len() * (g.kh * g.kw) as usize);
    for segs in segments.per_worker() {
        for kh in 0..g.kh {
            let row_ok = |row: u32| match pass {
                WindowPass::InputGrad => g.output_row(row, kh).is_some(),
                _ => g.input_row(row, kh).is_some(),
            };
            for kw in 0..g.kw {
                for &(row, c0, c1) in segs {
                    let n = if row_ok(row) {
                        reached.count(kw, c0, c1)
                    } else {
                        0
                    };
                    if n > 0 {
                        worklists.push(n);
                    }
                }
                worklists.end_list();
            }
        }
    }
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
        zeros_info: block_positions(p).saturating_mul(units),
        worklists,
    }
}

/// Which of a block's output columns each kernel column reaches (an input column for the
/// forward and weight-gradient passes, an output column for the input gradient), as prefix
/// counts: the columns of a worklist entry that kernel column `kw` reaches are counted in
/// constant time, where testing them one by one made the estimate of a wide block's
/// worklists the planner's costliest step.
struct ReachedColumns {
    /// The block's first output column.
    first: u32,
    /// Prefix counts per kernel column (`out_cols` + 1 of them), one kernel column after
    /// the other.
    prefix: Vec<u32>,
    /// Counts per kernel column.
    stride: usize,
}

impl ReachedColumns {
    fn of(pass: WindowPass, p: &WindowParams) -> ReachedColumns {
        let g = &p.geometry;
        let (first, end) = (p.out_cols.0, p.out_cols.1.max(p.out_cols.0));
        let stride = (end - first) as usize + 1;
        let mut prefix = Vec::with_capacity(stride * g.kw as usize);
        for kw in 0..g.kw {
            let mut n = 0u32;
            prefix.push(n);
            for c in first..end {
                let reached = match pass {
                    WindowPass::InputGrad => g.output_col(c, kw).is_some(),
                    _ => g.input_col(c, kw).is_some(),
                };
                n += u32::from(reached);
                prefix.push(n);
            }
        }
        ReachedColumns {
            first,
            prefix,
            stride,
        }
    }

    /// The columns of `[c0, c1)` (within the block's) kernel column `kw` reaches.
    fn count(&self, kw: u32, c0: u32, c1: u32) -> u32 {
        let counts = &self.prefix[kw as usize * self.stride..][..self.stride];
        let at = |c: u32| counts[(c - self.first) as usize];
        at(c1) - at(c0)
    }
}

/// The block's output positions (batch × rows × columns), the partial elements a vertex
/// zeroes per output channel.
fn block_positions(p: &WindowParams) -> u32 {
    let rows = p.out_rows.1.saturating_sub(p.out_rows.0);
    let width = p.out_cols.1.saturating_sub(p.out_cols.0);
    (p.batch_count() as u32)
        .saturating_mul(rows)
        .saturating_mul(width)
}

/// The HMAC vertex of a block: the nx1 vertex's worklists and geometry, one input-channel
/// group of `p.input_channels` (the block's reduction, as the compiler sets it for this
/// method), output channels in groups of 1 (float partials) or 2 (half partials).
fn hmac_params(
    target: &Target,
    pass: WindowPass,
    input: DType,
    partials: DType,
    p: &WindowParams,
) -> HmacParams {
    let nx1 = nx1_params(target, pass, input, partials, p);
    let reduction = p.in_channels.1.saturating_sub(p.in_channels.0);
    let grain = if input == DType::F32 { 1 } else { 2 };
    let in_chans = p.input_channels.max(1).next_multiple_of(grain);
    let outs = if partials == DType::F32 { 1 } else { 2 };
    let kernel = nx1.kernel_outer.saturating_mul(nx1.kernel_inner);
    HmacParams {
        input,
        partials,
        conv_groups: 1,
        in_groups: reduction.div_ceil(in_chans),
        out_groups: (p.out_channel_count() as u32).div_ceil(outs),
        in_chans_per_group: in_chans,
        out_chans_per_group: outs,
        kernel_size: kernel,
        zeros_info: block_positions(p).saturating_mul(outs),
        // PopLibs `canUseHorizontalMac1x1Vertex` (ConvModel.cpp): a 1x1 kernel, unit output
        // stride, no padding; the vertex exists for half activations with float partials.
        one_by_one: kernel == 1
            && p.geometry.stride == [1, 1]
            && p.geometry.padding == [0; 4]
            && input == DType::F16
            && partials == DType::F32,
        worklists: nx1.worklists,
    }
}

/// The kernel width of a `Conv` vertex's reduction order: the SLIC's padded with zero
/// weights to whole 1×4 sub-kernels (see [`ConvMethod::Slic`]), every other method's `kw`.
/// The simulator gathers its operands over this width; the estimate counts its sub-kernels.
pub fn reduction_kernel_width(method: ConvMethod, kw: u32) -> u32 {
    match method {
        ConvMethod::Slic => kw.next_multiple_of(SLIC_WINDOW_WIDTH),
        _ => kw,
    }
}

/// Input (= output) channels of a SLIC vertex with one conv group per group (PopLibs'
/// grouping `{1, 4}`, ConvVertexType.cpp `getConvVertexSLICCandidates`).
pub const SLIC_CHANNELS: u32 = 4;

/// The SLIC vertex of (each 4 output channels of) a `Forward` block: one conv group per
/// group of 4 channels, `kh × ⌈kw/4⌉` sub-kernels, the widest conv chains for `partials`,
/// the innermost output stride, and the block's worker row segments as worklists.
fn slic_params(target: &Target, partials: DType, p: &WindowParams) -> SlicParams {
    let g = &p.geometry;
    let worklists = WorkerSegments::of(p, target.worker_contexts.max(1) as usize)
        .per_worker()
        .map(|segs| segs.iter().map(|&(_, c0, c1)| c1 - c0).collect())
        .collect();
    SlicParams {
        partials,
        conv_chains: slic_conv_chains(target, partials),
        conv_groups_per_group: 1,
        chans_per_group: SLIC_CHANNELS,
        conv_group_groups: 1,
        sub_kernels: g
            .kh
            .saturating_mul(reduction_kernel_width(ConvMethod::Slic, g.kw) / SLIC_WINDOW_WIDTH)
            .max(1),
        out_stride: g.stride[1],
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
    let max_worker = WorkerSegments::of(p, nw)
        .per_worker()
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

#[cfg(test)]
mod tests {
    use super::{hmac_params, nx1_params, slic_params, window_group_cycles, ReachedColumns};
    use crate::codelets::{Codelet, ConvMethod, WindowGeometry, WindowParams, WindowPass};
    use crate::cycles::conv::{hmac_cycles, slic_cycles, HmacParams, SlicParams};
    use crate::target::Target;
    use ipusim_ir::DType;

    /// A whole-layer block of a `k`x`k` convolution (padding `pad`) of 3 input and 2
    /// output channels over a 4x4 field, its pass the block's 3 channels.
    fn block(k: u32, pad: u32) -> WindowParams {
        let f = 4 + 2 * pad + 1 - k;
        WindowParams {
            geometry: WindowGeometry {
                n: 1,
                c: 3,
                h: 4,
                w: 4,
                o: 2,
                kh: k,
                kw: k,
                stride: [1, 1],
                padding: [pad; 4],
                dilation: [1, 1],
                groups: 1,
                oh: f,
                ow: f,
            },
            group: 0,
            batch: (0, 1),
            out_channels: (0, 2),
            in_channels: (0, 3),
            out_rows: (0, f),
            in_rows: (0, 4),
            aux_rows: (0, 0),
            out_cols: (0, f),
            in_cols: (0, 4),
            units: (0, 2),
            input_channels: 3,
            in_group: 1,
            aux_group: 1,
            out_group: 1,
            weight_chunk: 0,
        }
    }

    /// The prefix counts of the columns a kernel column reaches give the count of testing
    /// each column, for every pass, span of a block's columns, stride, padding and dilation
    /// (padded and strided fields leave columns unreached on both sides and between).
    #[test]
    fn reached_columns_are_counted_as_testing_each_column() {
        let mut checked = 0;
        for (k, stride, pad, dilation) in [(3, 1, 1, 1), (7, 2, 3, 1), (3, 2, 0, 2), (1, 3, 0, 1)] {
            let mut p = block(k, pad);
            let g = &mut p.geometry;
            (g.w, g.stride, g.dilation) = (13, [1, stride], [1, dilation]);
            g.ow = (13 + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
            for pass in [
                WindowPass::Forward,
                WindowPass::InputGrad,
                WindowPass::WeightGrad,
            ] {
                let width = if pass == WindowPass::InputGrad {
                    13
                } else {
                    p.geometry.ow
                };
                for (b0, b1) in [(0, width), (1, width - 1), (2, 2)] {
                    p.out_cols = (b0, b1);
                    let reached = ReachedColumns::of(pass, &p);
                    let g = &p.geometry;
                    for kw in 0..g.kw {
                        for c0 in b0..=b1 {
                            for c1 in c0..=b1 {
                                let want = (c0..c1)
                                    .filter(|&c| match pass {
                                        WindowPass::InputGrad => g.output_col(c, kw).is_some(),
                                        _ => g.input_col(c, kw).is_some(),
                                    })
                                    .count() as u32;
                                assert_eq!(reached.count(kw, c0, c1), want, "{pass:?} {g:?}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    fn hmac(partials: DType) -> Codelet {
        Codelet::Conv {
            pass: WindowPass::Forward,
            input: DType::F16,
            partials,
            output: DType::F16,
            method: ConvMethod::Hmac,
        }
    }

    #[test]
    fn an_hmac_block_is_costed_as_poplibs_horizontal_mac_vertex_of_its_channels() {
        let t = Target::mk2();
        let p = block(3, 1);
        let nx1 = nx1_params(&t, WindowPass::Forward, DType::F16, DType::F32, &p);
        // FP32 partials: one output channel per group; 3 half channels round up to the
        // grain of 2 (getConvVertexHMACCandidates); 16 positions zeroed per output group.
        let want = HmacParams {
            input: DType::F16,
            partials: DType::F32,
            conv_groups: 1,
            in_groups: 1,
            out_groups: 2,
            in_chans_per_group: 4,
            out_chans_per_group: 1,
            kernel_size: 9,
            zeros_info: 16,
            one_by_one: false,
            worklists: nx1.worklists.clone(),
        };
        let got = hmac_params(&t, WindowPass::Forward, DType::F16, DType::F32, &p);
        assert_eq!(got, want);
        assert_eq!(
            window_group_cycles(&t, &hmac(DType::F32), &p),
            hmac_cycles(&t, &want)
        );
        // Half partials pair the output channels (PopLibs' partialChansPerGroup 2).
        let half = hmac_params(&t, WindowPass::Forward, DType::F16, DType::F16, &p);
        assert_eq!((half.out_chans_per_group, half.out_groups), (2, 1));
        assert_eq!(half.zeros_info, 32);
        assert_eq!(
            window_group_cycles(&t, &hmac(DType::F16), &p),
            hmac_cycles(&t, &half)
        );
        // An unpadded 1x1 kernel of unit stride takes the 1x1 vertex with float partials.
        let one = block(1, 0);
        assert!(hmac_params(&t, WindowPass::Forward, DType::F16, DType::F32, &one).one_by_one);
        assert!(!hmac_params(&t, WindowPass::Forward, DType::F16, DType::F16, &one).one_by_one);
        assert!(
            !hmac_params(
                &t,
                WindowPass::Forward,
                DType::F16,
                DType::F32,
                &block(1, 1)
            )
            .one_by_one
        );
    }

    #[test]
    fn a_slic_block_is_costed_as_poplibs_1xn_slic_vertex_per_four_output_channels() {
        // The ResNet stem's shape on a 16x16 field: 3 input channels, 8 output channels, a
        // 7x7 kernel of stride 2 and padding 3: an 8x8 output.
        let mut p = block(7, 3);
        p.geometry.stride = [2, 2];
        p.geometry.o = 8;
        p.geometry.h = 16;
        p.geometry.w = 16;
        (p.geometry.oh, p.geometry.ow) = (8, 8);
        (p.out_rows, p.out_cols, p.in_rows, p.in_cols) = ((0, 8), (0, 8), (0, 16), (0, 16));
        p.out_channels = (0, 8);
        p.units = (0, 8);
        p.input_channels = 12;
        let t = Target::mk2();
        // 64 positions over 6 workers in chunks of 11: worker 0 takes row 0 and 3 columns
        // of row 1, worker 5 the last 9 positions.
        let want = SlicParams {
            partials: DType::F32,
            conv_chains: 2,
            conv_groups_per_group: 1,
            chans_per_group: 4,
            conv_group_groups: 1,
            sub_kernels: 14,
            out_stride: 2,
            worklists: vec![
                vec![8, 3],
                vec![5, 6],
                vec![2, 8, 1],
                vec![7, 4],
                vec![4, 7],
                vec![1, 8],
            ],
        };
        assert_eq!(slic_params(&t, DType::F32, &p), want);
        let slic = |partials| Codelet::Conv {
            pass: WindowPass::Forward,
            input: DType::F16,
            partials,
            output: DType::F16,
            method: ConvMethod::Slic,
        };
        // Two vertices of 4 output channels.
        assert_eq!(
            window_group_cycles(&t, &slic(DType::F32), &p),
            2 * slic_cycles(&t, &want)
        );
        // Half partials on Mk2's 16 conv units: 4 chains.
        let half = slic_params(&t, DType::F16, &p);
        assert_eq!(half.conv_chains, 4);
        p.out_channels = (0, 3);
        assert_eq!(
            window_group_cycles(&t, &slic(DType::F16), &p),
            slic_cycles(&t, &half)
        );
    }
}
