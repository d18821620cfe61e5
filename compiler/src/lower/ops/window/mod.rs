//! Lowering of the convolution family (`Conv2d`, `Conv2dInputGrad`, `Conv2dWeightGrad`,
//! `MaxPool2d`, `MaxPool2dGrad`): a plan ([`plan`]) that partitions the output and the
//! reduction over tiles, the exchange of each tile's input rows (with their halo) and
//! weights, one window vertex group per tile (`Codelet::Conv` or `Codelet::MaxPool`), and
//! the cross-tile sum of a split reduction's partials.
//!
//! Feature maps are held with their channels grouped ([`ipusim_exe::layout`], as PopLibs'
//! `createInput` lays out a convolution's activations): a pass writes its output grouped by
//! [`channel_group`] of its channels and reads its inputs in whatever group their producer
//! chose, so that each tile's block of a feature map is one contiguous run per channel
//! group (per batch element too when the block does not hold the whole batch). A value
//! whose group does not fall on the convolution's groups (a grouped convolution of few
//! channels per group) is read row-major. Weights are row-major (OIHW); a forward
//! convolution whose weight blocks are each read by one tile has its weights laid out on
//! those tiles ([`weight_layout`]), one whose weight blocks are broadcast (its batch or
//! field split) in its input-gradient pass's blocks, which it reads chunk by chunk, where
//! the two passes gather them in fewer messages so ([`input_grad_layout`]). A split
//! reduction's partials are summed in PopLibs' stages (`lower::kit::split_sum::sum_split`).
//! The input gradient of a strided convolution one kernel element wide runs on the
//! undilated field and is dilated afterwards ([`dilate`], PopLibs' `dilatePostConv`).
//!
//! When no split fits the op's memory proportion, the planner runs the pass in serial
//! phases over its output channels (PopLibs' `outChanSplit.serial`): each phase a compute
//! set (and its reduction) named `NAME/serialP`, on the same tiles, its staging and partials
//! dead before the next phase's are made.
//!
//! The forward pass weighs the AMP's nx1 vertex against the SLIC and HMAC vertices per
//! split, the input-gradient pass against the HMAC ([`plan::plan`]).
//!
//! Not yet done (the closing note of the CNN issue lists them): PopLibs' transforms
//! (`expandDims` for the 3-channel stem), the VMAC vertex, serial splits of the input
//! channels (`inChanSplit.serial`); more convolution groups than tiles is refused.

mod block;
mod dilate;
mod plan;
mod regions;

use crate::codelets::{
    Codelet, ConvMethod, VertexParams, WindowGeometry, WindowPass, WindowVertex,
};
use crate::error::CompileError;
use crate::executable::{Operand, Operands, TensorId, TensorKind, TileWork, Vertex, VertexGroup};
use crate::lower::core::Lowerer;
use crate::lower::kit::mapping::{self, Mapping};
use crate::lower::kit::permute::{grouped, materialized};
use crate::lower::kit::split_sum::{chunk_of, reduce_grain, sum_split, SplitBlock};
use crate::lower::kit::stage::{ExchangeBuilder, Staging, TileScratch};
use block::{
    block_params, extents, forward_weight_ranges, input_grad_weight_ranges, operand_ranges,
    output_ranges, phase_blocks, span, Block, Groups, Kind, OutputKey,
};
use ipusim_exe::layout::{channel_group, storage_dims};
use ipusim_exe::workers;
use ipusim_ir::conv::{ConvGeometry, Pool, Window};
use ipusim_ir::{DType, NodeId, Op, Shape};
use plan::{pass_channels, Problem};
use std::sync::Arc;

/// The blocks of each output block of a split reduction, keyed by the output block (group,
/// batch, channels, rows), in reduction order.
type Reduction = std::collections::BTreeMap<OutputKey, Vec<usize>>;

/// The channels per group of a pass's partials, the grain its split reduction is summed in
/// ([`reduce_grain`]): the output's channel group (a feature map's); one for the weight
/// gradient, whose output is the row-major weights.
fn partial_chans(kind: Kind, gr: Groups) -> u64 {
    match kind {
        Kind::Conv(WindowPass::WeightGrad) => 1,
        _ => u64::from(gr.out.max(1)),
    }
}

/// The op of the family a node is.
fn kind_of(op: &Op) -> Option<Kind> {
    Some(match op {
        Op::Conv2d { .. } => Kind::Conv(WindowPass::Forward),
        Op::Conv2dInputGrad { .. } => Kind::Conv(WindowPass::InputGrad),
        Op::Conv2dWeightGrad { .. } => Kind::Conv(WindowPass::WeightGrad),
        Op::MaxPool2d { .. } => Kind::Pool { grad: false },
        Op::MaxPool2dGrad { .. } => Kind::Pool { grad: true },
        _ => return None,
    })
}

/// The geometry node `id`'s pass is planned and run on: an input gradient's deferred
/// dilation undone ([`dilate::planned_geometry`]).
fn geometry(lw: &Lowerer, id: NodeId, kind: Kind) -> Result<WindowGeometry, CompileError> {
    Ok(dilate::planned_geometry(kind, full_geometry(lw, id, kind)?))
}

/// Node `id`'s window geometry.
fn full_geometry(lw: &Lowerer, id: NodeId, kind: Kind) -> Result<WindowGeometry, CompileError> {
    let node = lw.graph().node(id);
    let dims = |i: usize| lw.graph().node(node.inputs[i]).ty.shape.dims().to_vec();
    let out_dims = node.ty.shape.dims().to_vec();
    let geometry = match kind {
        Kind::Conv(pass) => {
            let window = match Window::of(&node.op) {
                Some(Ok(w)) => w,
                _ => return Err(lw.unsupported(id, "its window attributes do not check")),
            };
            let (x, w) = match pass {
                WindowPass::Forward => (dims(0), dims(1)),
                WindowPass::InputGrad => (out_dims, dims(1)),
                WindowPass::WeightGrad => (dims(0), out_dims),
            };
            window.geometry(&x, &w)
        }
        Kind::Pool { .. } => match Pool::of(&node.op) {
            Some(Ok(p)) => p.geometry(&dims(0)),
            _ => return Err(lw.unsupported(id, "its pooling window does not check")),
        },
    }
    .map_err(|f| lw.unsupported(id, format!("{f:?}")))?;
    Ok(window_geometry(&geometry))
}

/// The convolution groups of a pass (1 for pools).
fn conv_groups(kind: Kind, g: &WindowGeometry) -> u32 {
    match kind {
        Kind::Pool { .. } => 1,
        Kind::Conv(_) => g.groups.max(1),
    }
}

/// Whether a feature map held in channel group `group` is read in that group by the pass
/// (operand 0 when `aux` is false, else the pass's second feature map): the group must fall
/// on the convolution's groups.
fn accepts(kind: Kind, g: &WindowGeometry, aux: bool, group: u32) -> bool {
    let per_group = match (kind, aux) {
        (Kind::Conv(WindowPass::Forward), _) => g.c_per_group(),
        (Kind::Conv(WindowPass::InputGrad), _) => g.o_per_group(),
        (Kind::Conv(WindowPass::WeightGrad), false) => g.c_per_group(),
        (Kind::Conv(WindowPass::WeightGrad), true) => g.o_per_group(),
        (Kind::Pool { .. }, _) => g.c,
    };
    conv_groups(kind, g) == 1 || per_group.is_multiple_of(group)
}

/// A pass planned: its channel groups, types and split, from its operands' groups.
struct Planned {
    gr: Groups,
    input: DType,
    partials: DType,
    extents: (u32, u32, u32),
    split: block::Split,
}

/// Plans node `id`'s pass of geometry `g` whose feature maps are held in channel groups
/// `(ga, gb)` (operand 0 and the second feature map, 1 when there is none), with activations
/// of type `input`. Reads the lowerer only: the weight layout plans the same way before the
/// node is lowered.
fn planned(
    lw: &Lowerer,
    id: NodeId,
    (kind, g): (Kind, &WindowGeometry),
    (ga, gb): (u32, u32),
    input: DType,
) -> Result<Planned, CompileError> {
    let node = lw.graph().node(id);
    let out_dims = node.ty.shape.dims();
    // The output's group: the AMP's output channels per pass for a convolution, the
    // input's for a pool (which keeps its channels).
    let partials = match kind {
        Kind::Conv(_) => lw.options().partials_type.accumulator_for(input),
        Kind::Pool { .. } => input,
    };
    let units = lw
        .target()
        .amp(input, lw.options().partials_type.accumulator_for(input))
        .output_channels;
    let out_group = match kind {
        Kind::Conv(WindowPass::WeightGrad) => 1,
        Kind::Pool { .. } if ga > 1 => ga,
        _ => {
            let (chans, per_group) = match kind {
                Kind::Conv(WindowPass::InputGrad) => (g.c, g.c_per_group()),
                Kind::Conv(_) => (g.o, g.o_per_group()),
                Kind::Pool { .. } => (g.c, g.c),
            };
            let fits = |gr: u32| conv_groups(kind, g) == 1 || per_group.is_multiple_of(gr);
            Some(channel_group(chans as usize, units))
                .filter(|&gr| fits(gr) && out_dims.len() == 4)
                .unwrap_or(1)
        }
    };
    let gr = Groups {
        x: ga,
        aux: gb,
        out: out_group,
    };
    let extents = extents(kind, g);
    let tiles = lw.target().tiles;
    let conv_groups = conv_groups(kind, g);
    if conv_groups > tiles {
        return Err(lw.unsupported(
            id,
            format!("{conv_groups} convolution groups on {tiles} tiles (more groups than tiles)"),
        ));
    }
    let estimate_codelet = match kind {
        Kind::Conv(pass) => Codelet::Conv {
            pass,
            input,
            partials,
            output: node.ty.dtype,
            method: ConvMethod::Amp,
        },
        Kind::Pool { grad } => Codelet::MaxPool { grad, dtype: input },
    };
    let problem = Problem {
        kind,
        codelet: &estimate_codelet,
        geometry: g,
        groups: gr,
        input,
        partials,
        extents,
    };
    let split = plan::plan(lw, id, &problem, tiles / conv_groups);
    Ok(Planned {
        gr,
        input,
        partials,
        extents,
        split,
    })
}

/// The layout a forward convolution wants for its weights (operand 1) when every weight
/// block of its plan is read by one tile (the batch and the field not split): each block on
/// the tile that reads it, in the order it reads it, so that the pass reads its weights in
/// place (PopLibs' `createWeights` lays a convolution's weights out by its plan). `None`
/// when the input is not lowered yet or the blocks are broadcast.
pub(crate) fn weight_layout(lw: &mut Lowerer, id: NodeId, which: usize) -> Option<Mapping> {
    let node = lw.graph().node(id);
    let kind = Kind::Conv(WindowPass::Forward);
    if which != 1 || kind_of(&node.op) != Some(kind) {
        return None;
    }
    let x = node.inputs[0];
    let input = lw.graph().node(x).ty.dtype;
    let stored = lw.graph().node(node.inputs[1]).ty.num_elements() as u64;
    let group = lw.value_of(x).ok()?.group;
    let g = geometry(lw, id, kind).ok()?;
    let ga = if group > 1 && accepts(kind, &g, false, group) {
        group
    } else {
        1
    };
    let p = planned(lw, id, (kind, &g), (ga, 1), input).ok()?;
    let phases = phase_blocks(conv_groups(kind, &g), (kind, p.gr), &g, p.extents, p.split);
    if p.split.batch > 1 || p.split.rows > 1 || p.split.cols > 1 {
        let forward = (&g, phases.iter().flatten().collect::<Vec<_>>());
        return input_grad_layout(lw, id, (p.gr.out, forward), stored);
    }
    let (start, tiles) = (lw.peek_start(), lw.target().tiles);
    let mut pieces = Vec::new();
    let mut claimed = 0u64;
    // Every serial phase's blocks take the same tiles (a tile holds its blocks' weights of
    // every phase).
    for (i, blk) in phases.iter().flat_map(|p| p.iter().enumerate()) {
        let tile = (start + i as u32) % tiles;
        for (b, l) in forward_weight_ranges(&g, blk, 0) {
            pieces.push((tile, b, b + l));
            claimed += l;
        }
    }
    if claimed != stored {
        return None;
    }
    // The pass's blocks start on that tile when it is lowered, however many ops are lowered
    // in between (the weights' cast, the previous layer's normalisation).
    lw.pin_start(id, start);
    Some(Mapping::from_pieces(pieces))
}

/// The layout of the weights of forward convolution `id` (`stored` elements) whose weight
/// blocks are broadcast (its batch or field split), from its input-gradient pass's plan:
/// each weight block of that pass spread in whole rows over the tiles of the blocks reading
/// it, in the order they read it, so that each of them gathers its block in one message per
/// tile holding a part (none when it is read by one tile); the forward pass then reads its
/// weights chunk by chunk of that pass's input channels
/// ([`WindowParams::weight_chunk`](crate::codelets::WindowParams)), one message per part it
/// meets. Without this, the input-gradient pass gathered the row-major weights one output
/// channel's run of its input channels at a time. (PopLibs lays weights out by the forward
/// plan in its grouped layout and transposes their channel groups on their tiles for the
/// input gradient, `weightsTransposeChansFlipXY` in `lib/poplin/Convolution.cpp`; we have
/// no transposition pass.) `None` when no input-gradient pass reads the weights, it runs in
/// serial phases, its blocks do not split the input channels in equal chunks, or the two
/// passes would gather their weights in no fewer messages ([`mapping::messages`]) than from the
/// default linear layout (a small convolution's weights on a few tiles, which its forward
/// tiles read in a few long runs).
fn input_grad_layout(
    lw: &mut Lowerer,
    id: NodeId,
    (out_group, (fg, forward)): (u32, (&WindowGeometry, Vec<&Block>)),
    stored: u64,
) -> Option<Mapping> {
    let w = lw.graph().node(id).inputs[1];
    let ig = lw.graph().consumers(w).into_iter().find(|&c| {
        let n = lw.graph().node(c);
        matches!(n.op, Op::Conv2dInputGrad { .. }) && n.inputs.get(1) == Some(&w)
    })?;
    let kind = Kind::Conv(WindowPass::InputGrad);
    let g = geometry(lw, ig, kind).ok()?;
    // Its `dy` is the gradient of the forward's output, held in that output's group.
    let ga = if out_group > 1 && accepts(kind, &g, false, out_group) {
        out_group
    } else {
        1
    };
    let dy = lw.graph().node(ig).inputs[0];
    let input = lw.graph().node(dy).ty.dtype;
    let p = planned(lw, ig, (kind, &g), (ga, 1), input).ok()?;
    if p.split.serial > 1 {
        return None;
    }
    let phases = phase_blocks(conv_groups(kind, &g), (kind, p.gr), &g, p.extents, p.split);
    let blocks = phases.first()?;
    let chunk = span(blocks.first()?.channels);
    let whole = |b: &Block| {
        b.channels.0.is_multiple_of(chunk)
            && (span(b.channels) == chunk || b.channels.1 == g.c_per_group())
    };
    if chunk == 0 || !blocks.iter().all(whole) {
        return None;
    }
    // The blocks reading each weight block, in block order.
    let mut readers: std::collections::BTreeMap<_, Vec<usize>> = Default::default();
    for (i, blk) in blocks.iter().enumerate() {
        readers
            .entry((blk.group, blk.red, blk.channels))
            .or_default()
            .push(i);
    }
    let (start, tiles) = (lw.peek_start(), lw.target().tiles);
    let row = u64::from(chunk) * u64::from(g.kh) * u64::from(g.kw);
    let mut pieces = Vec::new();
    let mut claimed = 0u64;
    // Each distinct weight block's ranges (they follow from its group, output and input
    // channels alone), with the number of blocks reading it.
    let mut back_blocks = Vec::with_capacity(readers.len());
    for members in readers.values() {
        // Spread over the tiles reading it, in whole rows (an output channel's weights
        // over the chunk): each reader gathers the block in as many messages.
        let ranges = input_grad_weight_ranges(&g, &blocks[members[0]]);
        let e: u64 = ranges.iter().map(|r| r.1).sum();
        let n = members.len() as u64;
        for (j, &i) in members.iter().enumerate() {
            let (c0, c1) = chunk_of(j as u64, n, e, row);
            let tile = (start + i as u32) % tiles;
            for (b, l) in sub_ranges(&ranges, c0, c1) {
                pieces.push((tile, b, b + l));
                claimed += l;
            }
        }
        back_blocks.push((ranges, n));
    }
    if claimed != stored {
        return None;
    }
    let blocked = Mapping::from_pieces(pieces);
    let dtype = lw.graph().node(w).ty.dtype;
    let linear = mapping::linear(
        lw.target(),
        stored,
        dtype,
        mapping::choose_tiles(lw.target(), stored, dtype),
        0,
    );
    // The forward's distinct weight blocks, each with the number of its blocks reading it.
    let first = **forward.first()?;
    let mut distinct: std::collections::BTreeMap<_, u64> = Default::default();
    for b in &forward {
        *distinct.entry((b.group, b.channels, b.red)).or_default() += 1;
    }
    let count = |m: &Mapping, chunk: u32| {
        let index = mapping::build_index(m);
        let fwd: u64 = distinct
            .iter()
            .map(|(&(group, channels, red), &n)| {
                let b = Block {
                    group,
                    channels,
                    red,
                    ..first
                };
                n * mapping::messages(&index, &forward_weight_ranges(fg, &b, chunk))
            })
            .sum();
        let back: u64 = back_blocks
            .iter()
            .map(|(ranges, n)| n * mapping::messages(&index, ranges))
            .sum();
        fwd + back
    };
    if count(&blocked, chunk) >= count(&linear, 0) {
        return None;
    }
    lw.pin_start(ig, start);
    lw.set_weight_chunk(id, chunk);
    Some(blocked)
}

/// Lowers a node of the family.
pub(crate) fn lower(lw: &mut Lowerer, id: NodeId) -> Result<(), CompileError> {
    let node = lw.graph().node(id);
    let Some(kind) = kind_of(&node.op) else {
        return Err(lw.unsupported(id, "not an op of the convolution family"));
    };
    let inputs = node.inputs.clone();
    let out_dims = node.ty.shape.dims().to_vec();
    let output = node.ty.dtype;
    let full = full_geometry(lw, id, kind)?;
    let g = dilate::planned_geometry(kind, full);
    // The strides whose dilation the pass defers (1 where it defers none).
    let deferred = [
        if g.h == full.h { 1 } else { full.stride[0] },
        if g.w == full.w { 1 } else { full.stride[1] },
    ];
    // The pass's output: its undilated field when it defers a dilation.
    let defers = deferred != [1, 1];
    let field_dims = if !defers {
        out_dims.clone()
    } else {
        vec![g.n as usize, g.c as usize, g.h as usize, g.w as usize]
    };
    let conv_groups = conv_groups(kind, &g);
    // The operands: feature maps in their producers' channel groups when those fall on the
    // convolution's groups, weights row-major.
    let (a, ga) = feature_map(lw, inputs[0], |gr| accepts(kind, &g, false, gr))?;
    let (b, gb) = match kind {
        Kind::Conv(WindowPass::WeightGrad) | Kind::Pool { grad: true } => {
            feature_map(lw, inputs[1], |gr| accepts(kind, &g, true, gr))?
        }
        _ if inputs.len() > 1 => (materialized(lw, inputs[1])?, 1),
        _ => (a, 1),
    };
    let Planned {
        gr,
        input,
        partials,
        extents,
        split,
    } = planned(lw, id, (kind, &g), (ga, gb), lw.tensor(a).dtype)?;
    let tiles = lw.target().tiles;
    let reduce = split.reduces(kind);
    let codelet = match kind {
        Kind::Conv(pass) => Codelet::Conv {
            pass,
            input,
            partials,
            output: if reduce { partials } else { output },
            method: split.method,
        },
        Kind::Pool { grad } => Codelet::MaxPool { grad, dtype: input },
    };
    let name = node.name.clone();
    let total: u64 = field_dims.iter().map(|&d| d as u64).product();
    // Every serial phase's blocks take the same tiles, from `start`.
    let phases = phase_blocks(conv_groups, (kind, gr), &g, extents, split);
    let per_phase = phases.iter().map(Vec::len).max().unwrap_or(0);
    let start = lw.start_for(id, per_phase as u32);
    let tile_of = |i: usize| (start + i as u32) % tiles;
    // A split reduction (input channels, output channels for the input gradient, the batch
    // and the field's rows for the weight gradient): each tile's partial block is summed on
    // the output block's tiles, each summing one chunk of the block's elements.
    let reductions: Vec<Reduction> = phases
        .iter()
        .map(|blocks| {
            let mut reduction = Reduction::default();
            if reduce {
                for (i, blk) in blocks.iter().enumerate() {
                    reduction.entry(blk.output_key(kind)).or_default().push(i);
                }
            }
            reduction
        })
        .collect();
    // The output, each block on its tile (split reductions: in chunks over the block's tiles).
    let mut pieces = Vec::new();
    let grain = reduce_grain(lw.target(), output, partial_chans(kind, gr));
    for (blocks, reduction) in phases.iter().zip(&reductions) {
        if reduce {
            for members in reduction.values() {
                let ranges = output_ranges(kind, &g, &blocks[members[0]], gr);
                let e: u64 = ranges.iter().map(|r| r.1).sum();
                let n = members.len() as u64;
                for (j, &i) in members.iter().enumerate() {
                    let (c0, c1) = chunk_of(j as u64, n, e, grain);
                    for (b, l) in sub_ranges(&ranges, c0, c1) {
                        pieces.push((tile_of(i), b, b + l));
                    }
                }
            }
        } else {
            for (i, blk) in blocks.iter().enumerate() {
                for (begin, len) in output_ranges(kind, &g, blk, gr) {
                    pieces.push((tile_of(i), begin, begin + len));
                }
            }
        }
    }
    let mapping = if total == 0 {
        Mapping::default()
    } else {
        Mapping::from_pieces(pieces)
    };
    let out = lw.new_tensor(
        if defers {
            format!("{name}/undilated")
        } else {
            name.clone()
        },
        Some(id),
        TensorKind::Activation,
        output,
        Shape::new(storage_dims(&field_dims, gr.out)),
        mapping,
    );
    let pass = Pass {
        id,
        kind,
        g: &g,
        gr,
        codelet: &codelet,
        method: split.method,
        reduce,
        operands: (a, b, inputs.len() > 1),
        out: (out, partials, output),
        tile_of: &tile_of,
        weight_chunk: match kind {
            Kind::Conv(WindowPass::Forward) => lw.weight_chunk(id),
            _ => 0,
        },
    };
    let serial = phases.len() > 1;
    for (p, (blocks, reduction)) in phases.iter().zip(&reductions).enumerate() {
        let phase = if serial {
            format!("{name}/serial{p}")
        } else {
            name.clone()
        };
        lower_phase(lw, &pass, &phase, blocks, reduction);
    }
    let out = if defers {
        dilate::dilated(lw, id, &name, out, (gr.out, &out_dims), deferred)
    } else {
        out
    };
    lw.set_grouped(id, out, gr.out);
    Ok(())
}

/// A pass being lowered: what every serial phase of it shares.
struct Pass<'a> {
    id: NodeId,
    kind: Kind,
    g: &'a WindowGeometry,
    gr: Groups,
    codelet: &'a Codelet,
    /// The vertex of every block.
    method: ConvMethod,
    /// Whether the reduction is split (its partials summed across tiles).
    reduce: bool,
    /// The feature map, the second operand, and whether the pass reads the second.
    operands: (TensorId, TensorId, bool),
    /// The output, the partials' type and the output's.
    out: (TensorId, DType, DType),
    /// The tile of a phase's `i`-th block.
    tile_of: &'a dyn Fn(usize) -> u32,
    /// The order a forward pass reads its weights in ([`input_grad_layout`]; 0 row-major).
    weight_chunk: u32,
}

/// Lowers one serial phase of a pass (the whole pass when it has one), named `name`: the
/// exchange of its blocks' operands and their vertices, then the summation of a split
/// reduction's partials.
fn lower_phase(lw: &mut Lowerer, pass: &Pass, name: &str, blocks: &[Block], reduction: &Reduction) {
    let (kind, g, gr, codelet) = (pass.kind, pass.g, pass.gr, pass.codelet);
    let (a, b, second) = pass.operands;
    let (out, partials, output) = pass.out;
    let (id, tile_of, method, reduce) = (pass.id, pass.tile_of, pass.method, pass.reduce);
    let input = lw.tensor(a).dtype;
    let amp = lw.target().amp(input, partials).input_channels;
    let mut eb = ExchangeBuilder::default();
    let mut sa = Staging::new(a, format!("{name}/in"), Some(id));
    let mut sb = Staging::new(b, format!("{name}/{}", second_name(kind)), Some(id));
    let mut work = Vec::with_capacity(blocks.len());
    let mut scratch =
        reduce.then(|| TileScratch::new(lw, format!("{name}/partials"), Some(id), partials));
    let mut partial_at = vec![0u64; blocks.len()];
    for (i, blk) in blocks.iter().enumerate() {
        let tile = tile_of(i);
        let mut params = block_params(kind, g, blk, pass_channels(method, amp, blk.red), gr);
        params.weight_chunk = pass.weight_chunk;
        let (ra, rb) = operand_ranges(kind, g, blk, &params, gr);
        let op_a = sa.operand(lw, &mut eb, tile, &ra);
        let op_b = second.then(|| sb.operand(lw, &mut eb, tile, &rb));
        let units = match kind {
            Kind::Conv(WindowPass::WeightGrad) => span(blk.channels),
            _ => span(blk.batch) * span(blk.channels),
        };
        let block_len = params
            .operand_lens(codelet)
            .and_then(|l| l.last().copied())
            .unwrap_or(0);
        let (dst, out_pos, es) = match scratch.as_mut() {
            Some(sc) => {
                let p = sc.alloc(tile, block_len);
                partial_at[i] = p;
                (sc.tensor, p, partials.size_bytes() as u64)
            }
            None => {
                let first = output_ranges(kind, g, blk, gr).first().map_or(0, |r| r.0);
                (out, lw.position(out, first), output.size_bytes() as u64)
            }
        };
        // One vertex, its workers splitting the block's units among them
        // ([`ipusim_exe::workers`]); each reads the block and writes its units of the whole
        // output block (the units of one worker are not contiguous when the channels are
        // grouped).
        let whole = Operand {
            tensor: dst,
            offset: (out_pos * es) as u32,
            len: block_len as u32,
        };
        let mut operands = Operands::from_iter([op_a]);
        operands.extend(op_b);
        operands.push(whole);
        let vertices = if units > 0 {
            vec![Vertex {
                worker: workers::ALL_WORKERS,
                operands,
                params: VertexParams::Window(WindowVertex {
                    block: Arc::new(params.clone()),
                    units: (0, units),
                }),
            }]
        } else {
            Vec::new()
        };
        work.push(TileWork {
            tile: lw.tile_id(tile),
            groups: vec![VertexGroup {
                codelet: codelet.clone(),
                vertices,
            }],
            cycles: 0,
        });
    }
    sa.finish(lw);
    sb.finish(lw);
    let ptensor = scratch.as_ref().map(|sc| sc.tensor);
    if let Some(sc) = scratch {
        sc.finish(lw);
    }
    let step = if reduce {
        format!("{name}/partials")
    } else {
        name.to_string()
    };
    lw.superstep(&step, Some(id), eb.finish(), work);
    if let Some(ptensor) = ptensor {
        let sources = Sources {
            tensor: ptensor,
            at: &partial_at,
            tile_of,
        };
        reduce_partials(
            lw,
            (id, kind),
            name,
            (g, gr, blocks, reduction),
            sources,
            (out, partials, output),
        );
    }
}

/// Node `id`'s feature map and its channel group when `accept` takes the group, else its
/// row-major copy (group 1).
fn feature_map(
    lw: &mut Lowerer,
    id: NodeId,
    accept: impl Fn(u32) -> bool,
) -> Result<(TensorId, u32), CompileError> {
    let (t, group) = grouped(lw, id)?;
    if group <= 1 || accept(group) {
        return Ok((t, group));
    }
    Ok((materialized(lw, id)?, 1))
}

/// Where the partial blocks of a split reduction are.
struct Sources<'a> {
    tensor: TensorId,
    /// Each block's partials position on its tile.
    at: &'a [u64],
    tile_of: &'a dyn Fn(usize) -> u32,
}

/// The element ranges `[c0, c1)` of a block whose elements are `ranges` (in order).
fn sub_ranges(ranges: &[(u64, u64)], c0: u64, c1: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for &(b, l) in ranges {
        let (lo, hi) = (c0.max(at), c1.min(at + l));
        if lo < hi {
            out.push((b + lo - at, hi - lo));
        }
        at += l;
    }
    out
}

/// Sums the partial blocks of a split reduction: chunk `j` of every output block's elements
/// is summed on its `j`-th tile (the output's mapping), in the stages PopLibs plans for a
/// convolution's reduction, on its `ReduceAdd` vertex ([`sum_split`]; the matmul's split
/// reductions sum the same way).
fn reduce_partials(
    lw: &mut Lowerer,
    (id, kind): (NodeId, Kind),
    name: &str,
    (g, gr, blocks, reduction): (&WindowGeometry, Groups, &[Block], &Reduction),
    src: Sources,
    (out, partials, output): (TensorId, DType, DType),
) {
    let mut split = Vec::with_capacity(reduction.len());
    let grain = reduce_grain(lw.target(), output, partial_chans(kind, gr));
    for members in reduction.values() {
        let ranges = output_ranges(kind, g, &blocks[members[0]], gr);
        let e: u64 = ranges.iter().map(|r| r.1).sum();
        let n = members.len() as u64;
        let out_pos = (0..n)
            .map(|j| {
                let (c0, c1) = chunk_of(j, n, e, grain);
                // An empty chunk writes nothing.
                sub_ranges(&ranges, c0, c1)
                    .first()
                    .map_or(0, |r| lw.position(out, r.0))
            })
            .collect();
        split.push(SplitBlock {
            grain,
            sources: members
                .iter()
                .map(|&i| ((src.tile_of)(i), src.at[i]))
                .collect(),
            elems: e,
            tiles: members.iter().map(|&i| (src.tile_of)(i)).collect(),
            out_pos,
        });
    }
    sum_split(lw, (id, name), src.tensor, (partials, output), out, &split);
}

fn second_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Conv(WindowPass::WeightGrad) | Kind::Pool { grad: true } => "dy",
        _ => "weights",
    }
}

fn window_geometry(c: &ConvGeometry) -> WindowGeometry {
    let u = |v: usize| v as u32;
    WindowGeometry {
        n: u(c.n),
        c: u(c.c),
        h: u(c.h),
        w: u(c.w),
        o: u(c.o),
        kh: u(c.kh),
        kw: u(c.kw),
        stride: c.stride.map(u),
        padding: c.padding.map(u),
        dilation: c.dilation.map(u),
        groups: u(c.groups),
        oh: u(c.oh),
        ow: u(c.ow),
    }
}
