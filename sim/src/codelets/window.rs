//! The window codelets (`ipusim_exe::codelets`): `Conv` (a convolution partial of one pass
//! over the tile's operand blocks), and the dispatch of `MaxPool` (and its gradient, in
//! [`super::pool`]).
//!
//! A `Conv` vertex gathers the two matrices of its pass from the operand blocks into f32
//! scratch ([`super::conv_matrices`]: the weights' matrix once per block, the feature map's
//! per batch element; a padded or unreached position is an exact zero; FP16 values widen
//! exactly) and multiplies them with the AMP product shared with `AmpMatMul`
//! ([`super::amp::product`]), so its accumulation order is the codelet's, and the
//! reference interpreter's (`interp/conv.rs`) reduction order is the one it gathers in.
//! With FP32 partials of finite operands, `Forward` and `InputGrad` read the feature map's
//! rows from a padded copy of the block instead of the gathered matrix ([`Direct`]): an
//! output row at a time where rows are whole vector blocks, else all output rows at once
//! over runs spanning them (the columns between rows computed and dropped); the same
//! operations in the same order for every output element. Blocks of channel-grouped FP16
//! maps with FP32 partials and outputs and no exception enabled (ResNet's 1×1 convolutions,
//! its strided ones' `Forward` and `InputGrad`) go position-major instead
//! ([`super::conv_positions`]), the same sums again.

use super::amp::product;
use super::conv_matrices;
use super::conv_positions;
use super::operands::Operands;
use super::window_layout::BlockLayout;
use super::{Scratch, VertexError, Worker};
use crate::engine::error::EngineError;
use crate::engine::memory::{typed, typed_mut, Buf};
use crate::numerics::kernels::amp::{self, MatMulShape};
use crate::numerics::kernels::convert;
use crate::numerics::FpSts;
use half::f16;
use ipusim_exe::codelets::{Codelet, ConvMethod, WindowParams, WindowPass};
use ipusim_exe::cycles::window::reduction_kernel_width;
use ipusim_exe::executable::{Tensor, Vertex};
use ipusim_ir::DType;

/// Checks a window vertex: operand types and lengths against its parameters, ranges inside
/// the geometry.
pub(crate) fn check(
    codelet: &Codelet,
    p: &WindowParams,
    v: &Vertex,
    tensors: &[Tensor],
) -> Result<(), String> {
    let lens = p.operand_lens(codelet).ok_or("is not a window codelet")?;
    if v.operands.len() != lens.len() {
        return Err(format!(
            "has {} operands, expected {}",
            v.operands.len(),
            lens.len()
        ));
    }
    let (input, output) = match *codelet {
        Codelet::Conv {
            input,
            partials,
            output,
            ..
        } => {
            if !input.is_float() || !partials.is_float() || !output.is_float() {
                return Err("convolution types must be float".into());
            }
            if let Codelet::Conv {
                pass,
                method: ConvMethod::Slic,
                ..
            } = *codelet
            {
                if pass != WindowPass::Forward || input != DType::F16 {
                    return Err(format!(
                        "a SLIC vertex computes Forward partials of half activations, not \
                         {pass:?} of {input}"
                    ));
                }
            }
            (input, output)
        }
        Codelet::MaxPool { dtype, .. } => (dtype, dtype),
        _ => return Err("is not a window codelet".into()),
    };
    for (i, (o, len)) in v.operands.iter().zip(&lens).enumerate() {
        let t = &tensors[o.tensor.0 as usize];
        let want = if i + 1 == lens.len() { output } else { input };
        if t.dtype != want || u64::from(o.len) != *len {
            return Err(format!(
                "operand {i} is {} elements of {}, expected {len} of {want}",
                o.len, t.dtype
            ));
        }
    }
    let g = &p.geometry;
    let inside = |r: (u32, u32), n: u32| r.0 <= r.1 && r.1 <= n;
    let pass = match codelet {
        Codelet::Conv { pass, .. } => Some(*pass),
        _ => None,
    };
    let (ch_limit, out_limit) = match pass {
        Some(WindowPass::Forward) | Some(WindowPass::WeightGrad) => (g.o_per_group(), g.oh),
        Some(WindowPass::InputGrad) => (g.c_per_group(), g.h),
        None => (
            g.c,
            if matches!(codelet, Codelet::MaxPool { grad: true, .. }) {
                g.h
            } else {
                g.oh
            },
        ),
    };
    let units = match pass {
        Some(WindowPass::WeightGrad) => p.out_channel_count(),
        _ => p.batch_count() * p.out_channel_count(),
    };
    let ok = g.groups > 0
        && p.group < g.groups.max(1)
        && inside(p.batch, g.n)
        && inside(p.out_channels, ch_limit)
        && inside(
            p.in_channels,
            if pass == Some(WindowPass::InputGrad) {
                g.o_per_group()
            } else {
                g.c_per_group()
            },
        )
        && inside(p.out_rows, out_limit)
        && inside(p.units, units as u32)
        && g.stride.iter().all(|&s| s > 0)
        && g.dilation.iter().all(|&d| d > 0);
    if !ok {
        return Err("window ranges outside the geometry".into());
    }
    // Channel groups divide the channels of the blocks they group.
    let red = u64::from(p.in_channels.1.saturating_sub(p.in_channels.0));
    let ob = p.out_channel_count();
    let divides = |g: u32, n: u64| g >= 1 && n.is_multiple_of(u64::from(g));
    let (in_chans, aux_chans) = match pass {
        Some(_) => (red, ob),
        None => (ob, ob),
    };
    let grouped_ok = divides(p.in_group, in_chans)
        && divides(p.aux_group, aux_chans)
        && divides(p.out_group, ob)
        && (pass != Some(WindowPass::WeightGrad) || p.out_group == 1)
        && (matches!(pass, Some(WindowPass::WeightGrad))
            || matches!(codelet, Codelet::MaxPool { grad: true, .. })
            || p.aux_group == 1);
    if !grouped_ok {
        return Err(format!(
            "channel groups (in {}, aux {}, out {}) do not divide the block's channels",
            p.in_group, p.aux_group, p.out_group
        ));
    }
    // Columns: a convolution's block holds a range of them; a pool's every column.
    let (out_width, in_width) = match pass {
        Some(WindowPass::InputGrad) => (g.w, g.ow),
        Some(_) => (g.ow, g.w),
        None if matches!(codelet, Codelet::MaxPool { grad: true, .. }) => (g.w, g.w),
        None => (g.ow, g.w),
    };
    let cols_ok = match pass {
        Some(_) => inside(p.out_cols, out_width) && inside(p.in_cols, in_width),
        None => p.out_cols == (0, out_width) && p.in_cols == (0, in_width),
    };
    if !cols_ok {
        return Err("window columns outside the geometry".into());
    }
    Ok(())
}

/// Per tile thread: a window group's operand blocks widened to f32 once, and the `b`
/// matrix of the last batch element gathered (the vertices of a group share both).
#[derive(Debug, Default)]
pub(crate) struct WindowScratch {
    x: Vec<f32>,
    y: Vec<f32>,
    /// Scratch of the un-grouping.
    tmp: Vec<f32>,
    /// A run of units' output bytes before they are placed in a grouped block.
    out: Vec<u8>,
    /// The operands widened: their addresses and lengths.
    key: Option<[usize; 4]>,
    /// Whether `x` holds the widened feature map of `key` (an FP16 block laid out straight
    /// into `padded` is not widened unless something else needs it).
    x_ready: bool,
    /// The batch element whose `b` is in the scratch `b` buffer.
    b_for: Option<u32>,
    /// Whether every element of that `b` is finite (checked once, when gathered).
    b_finite: bool,
    /// `Forward` and `InputGrad`: the weights' matrix `a` of every output channel of the
    /// block ([`conv_matrices`]), shared by the block's vertices.
    a: Vec<f32>,
    /// The pass, the reduction's kernel width and the block (its units cleared) `a` is for.
    a_for: Option<(WindowPass, u32, WindowParams)>,
    /// Whether every element of `a` is finite (checked once, when gathered).
    a_finite: bool,
    /// The input rows and columns the kernel taps read, and the pass and block (its units
    /// cleared) they are for.
    taps: conv_matrices::Taps,
    taps_for: Option<(WindowPass, WindowParams)>,
    /// `Forward` and `InputGrad` without `b`: the block's feature map padded, whether it
    /// can stand for `b` (its kernel columns read runs of columns, and it is finite), and
    /// the pass and block it is for (reset when the operands are widened again).
    padded: conv_matrices::Padded,
    padded_ok: bool,
    padded_for: Option<(WindowPass, u32, WindowParams)>,
}

impl WindowScratch {
    /// Forgets the cached operands (their bytes may change between vertex groups).
    pub fn forget(&mut self) {
        self.key = None;
        self.b_for = None;
        self.a_for = None;
        self.padded_for = None;
    }

    /// Whether block `p`'s padded feature map stands for `b` in `pass` with kernel width
    /// `kwp` (laid out when the block is new; after [`Self::taps`]): from the widened map
    /// `x`, or with `grouped`, straight from the FP16 block in its channel-grouped layout
    /// (after [`Self::widen`] without `x`). False, with nothing cached, when the block
    /// cannot be laid out straight: the caller widens `x` and asks again without `grouped`.
    fn padded(
        &mut self,
        (pass, kwp): (WindowPass, u32),
        p: &WindowParams,
        grouped: Option<(&[f16], BlockLayout)>,
    ) -> bool {
        let block = block_of(p);
        let same =
            |(q, kq, b): &(WindowPass, u32, WindowParams)| *q == pass && *kq == kwp && *b == block;
        if self.padded_for.as_ref().is_some_and(same) {
            return self.padded_ok;
        }
        let taps = (p, &self.taps);
        self.padded_ok = match grouped {
            Some((x, layout)) => {
                let source = conv_matrices::MapSource::Grouped(x, layout);
                if !(self.padded.fill(taps, kwp, source) && self.padded.readable()) {
                    return false;
                }
                // The map holds the block's values and zeros: finite when the block is.
                amp::finite_f16(x)
            }
            None => {
                let source = conv_matrices::MapSource::Planar(&self.x);
                self.padded.fill(taps, kwp, source)
                    && self.padded.readable()
                    && self.padded.finite()
            }
        };
        self.padded_for = Some((pass, kwp, block));
        self.padded_ok
    }

    /// The taps of block `p` in `pass`, found again when the block is new.
    fn taps(&mut self, pass: WindowPass, p: &WindowParams) {
        let block = block_of(p);
        if !matches!(&self.taps_for, Some((q, b)) if *q == pass && *b == block) {
            self.taps.fill(pass, p);
            self.taps_for = Some((pass, block));
        }
    }

    /// Where the rows of `a` for units `o0 .. o0 + rows` of block `p` (`Forward`,
    /// `InputGrad`) are in `self.a`, gathered from the widened weights for the whole block
    /// when the block is new.
    fn weight_rows(
        &mut self,
        (pass, kwp): (WindowPass, u32),
        p: &WindowParams,
        o0: u32,
        rows: usize,
    ) -> std::ops::Range<usize> {
        let block = block_of(p);
        let k = conv_matrices::reduction(p, kwp);
        let fresh =
            !matches!(&self.a_for, Some((q, kq, b)) if *q == pass && *kq == kwp && *b == block);
        if fresh {
            let a = resized(&mut self.a, p.out_channel_count() as usize * k);
            match pass {
                WindowPass::Forward => conv_matrices::forward_weights(p, kwp, &self.y, a),
                _ => conv_matrices::input_grad_weights(p, &self.y, a),
            }
            self.a_finite = amp::finite(a);
            self.a_for = Some((pass, kwp, block));
        }
        let first = (o0 - p.out_channels.0) as usize * k;
        first..first + rows * k
    }

    /// Widens operands `a` (unless `with_a` is false: it is then widened by a later call
    /// that asks for it) and `b` to f32, each taken from its channel-grouped block layout
    /// (`(group, batch, channels, plane)`; group 1: as stored) into NCHW block order.
    fn widen(
        &mut self,
        input: DType,
        (a, a_layout): (&[u8], BlockLayout),
        (b, b_layout): (&[u8], BlockLayout),
        with_a: bool,
    ) -> Result<(), EngineError> {
        let key = [a.as_ptr() as usize, a.len(), b.as_ptr() as usize, b.len()];
        let (mut both, only_a) = (
            [(&mut self.x, a, a_layout), (&mut self.y, b, b_layout)],
            self.key == Some(key),
        );
        let todo: &mut [(&mut Vec<f32>, &[u8], BlockLayout)] = match (only_a, with_a) {
            (true, true) if self.x_ready => return Ok(()),
            (true, false) => return Ok(()),
            (true, true) => &mut both[..1],
            (false, true) => &mut both[..],
            (false, false) => &mut both[1..],
        };
        for (dst, src, layout) in todo.iter_mut() {
            let (dst, src, layout) = (&mut **dst, *src, *layout);
            let grouped = layout.group() > 1;
            match input {
                DType::F16 => {
                    let src = typed::<f16>(src)?;
                    let n = src.len();
                    if grouped && layout.ungroup_widen(src, resized(dst, n)) {
                        continue;
                    }
                    let wide = resized(if grouped { &mut self.tmp } else { &mut *dst }, n);
                    convert::widen(src, wide);
                }
                _ => {
                    let wide = if grouped { &mut self.tmp } else { &mut *dst };
                    wide.clear();
                    wide.extend_from_slice(typed::<f32>(src)?);
                }
            }
            if grouped {
                // A partial block: the positions it does not hold are zero.
                let out = resized(dst, self.tmp.len());
                out.fill(0.0);
                layout.ungroup(&self.tmp, out);
            }
        }
        self.x_ready = with_a;
        if !only_a {
            self.key = Some(key);
            self.b_for = None;
            self.a_for = None;
            self.padded_for = None;
        }
        Ok(())
    }
}

/// The block of vertex parameters `p`: its units cleared, what the scratch's caches of a
/// block are keyed by.
fn block_of(p: &WindowParams) -> WindowParams {
    WindowParams {
        units: (0, 0),
        ..p.clone()
    }
}

fn len(r: (u32, u32)) -> usize {
    r.1.saturating_sub(r.0) as usize
}

/// Runs a window vertex.
pub(crate) fn run(
    codelet: &Codelet,
    p: &WindowParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: Worker,
) -> Result<FpSts, VertexError> {
    match *codelet {
        // Every method computes the same products; its pass (`input_channels`, the chunk of
        // the reduction summed before each partial write) is the vertex's, and the SLIC's
        // kernel width is padded to whole 1×4 sub-kernels.
        Codelet::Conv {
            pass,
            input,
            partials,
            output,
            method,
        } => {
            let kw = reduction_kernel_width(method, p.geometry.kw);
            conv(
                (pass, kw),
                (input, partials, output),
                p,
                ops,
                scratch,
                worker,
            )
        }
        Codelet::MaxPool { grad, dtype } => super::pool::run(grad, dtype, p, ops, worker),
        _ => Err(EngineError::internal("not a window codelet").into()),
    }
}

/// A conv vertex's partial; `kwp` is the kernel width of its reduction order (the
/// geometry's, or padded with zero weights).
fn conv(
    (pass, kwp): (WindowPass, u32),
    types: (DType, DType, DType),
    p: &WindowParams,
    ops: Operands,
    scratch: &mut Scratch,
    worker: Worker,
) -> Result<FpSts, VertexError> {
    let g = p.geometry;
    let chunk = p.input_channels.max(1) as usize;
    let (kh, kw) = (g.kh as usize, kwp as usize);
    let Scratch {
        a: abuf,
        b: bbuf,
        p: pbuf,
        q: qbuf,
        win,
        ..
    } = scratch;
    win.taps(pass, p);
    // Blocks of channel-grouped FP16 maps, nothing to raise: position-major where they can.
    if worker.mask().is_empty() {
        let operands = (ops.inputs[0], ops.inputs[1]);
        let bufs = (&mut *abuf, &mut *qbuf, &mut *bbuf, &mut *pbuf);
        let (out, taps) = (&mut *ops.output, &win.taps);
        let run = conv_positions::run((pass, kwp), types, p, taps, operands, out, chunk, bufs)?;
        if let Some(flags) = run {
            return Ok(flags);
        }
    }
    let (a_layout, b_layout) = operand_layouts(pass, p);
    // FP32 partials of finite operands, no exception to explain: the product may read the
    // padded feature map's rows in place of `b` (the same operations in the same order).
    // It runs an output row at a time where a row is whole vector blocks (multiples of 8
    // columns), else over the spans of all output rows, when the kernel rows read runs of
    // input rows: an output row at a time, a tail of single columns costs the kernel more
    // than gathering `b` saves (measured on ResNet-50 at batch 1, with rows of 7, 14 and
    // 28: the step 18–20% slower, and 3% with those tails computed 8 wide; our choice).
    let may_pad =
        pass != WindowPass::WeightGrad && types.1 == DType::F32 && worker.mask().is_empty();
    // An FP16 map in channel groups (group 1 is stored NCHW) is laid out from its bytes
    // without widening it first, where it can be, where the block's weights are finite (the
    // products then read the map, not a matrix gathered from the widened block) and where
    // no product can overflow (so nothing reads the widened block after all).
    let k_full = kh * kw * len(p.in_channels);
    let straight = may_pad
        && types.0 == DType::F16
        && a_layout.group() > 1
        && amp::fp16_sums_stay_finite(k_full);
    // A 1×1 weight gradient's `b` is its FP16 feature map position-major, not widened.
    let wg_positions = pass == WindowPass::WeightGrad
        && conv_positions::weight_grad_eligible(types.0, p, ops.inputs[0].len() / 2);
    let x_bytes = (ops.inputs[0], a_layout);
    let with_x = !(straight || wg_positions);
    win.widen(types.0, x_bytes, (ops.inputs[1], b_layout), with_x)?;
    let laid = straight
        && {
            // The block's weight matrix, gathered once for all its units.
            win.weight_rows((pass, kwp), p, p.out_channels.0, 0);
            win.a_finite
        }
        && win.padded((pass, kwp), p, Some((typed::<f16>(x_bytes.0)?, a_layout)));
    if straight && !laid {
        win.widen(types.0, x_bytes, (ops.inputs[1], b_layout), true)?;
    }
    let padded = may_pad && (laid || win.padded((pass, kwp), p, None));
    let es = types.2.size_bytes();
    let mut flags = FpSts::empty();
    // Runs of units with one batch element (all units for the weight gradient).
    let mut u = p.units.0;
    while u < p.units.1 {
        let (n, ch0) = p.unit(u);
        let mut end = u + 1;
        while pass != WindowPass::WeightGrad && end < p.units.1 && p.unit(end).0 == n {
            end += 1;
        }
        if pass == WindowPass::WeightGrad {
            end = p.units.1;
        }
        let rows = (end - u) as usize;
        let (k, cols) = match pass {
            WindowPass::Forward | WindowPass::InputGrad => (
                kh * kw * len(p.in_channels),
                len(p.out_rows) * len(p.out_cols),
            ),
            WindowPass::WeightGrad => (
                len(p.batch) * len(p.out_rows) * len(p.out_cols),
                len(p.in_channels) * kh * kw,
            ),
        };
        let b_key = if pass == WindowPass::WeightGrad {
            u32::MAX
        } else {
            n
        };
        let a: &[f32] = match pass {
            WindowPass::Forward | WindowPass::InputGrad => {
                let rows_of = win.weight_rows((pass, kwp), p, ch0, rows);
                &win.a[rows_of]
            }
            WindowPass::WeightGrad => {
                let a = abuf.take::<f32>(rows * k);
                let b = bbuf.take::<f32>(k * cols);
                let fresh_b = win.b_for != Some(b_key);
                let gather_b = fresh_b && !wg_positions;
                conv_matrices::weight_grad(
                    (p, &win.taps),
                    u,
                    rows,
                    (&win.x, &win.y),
                    a,
                    gather_b.then_some(&mut *b),
                );
                if fresh_b && wg_positions {
                    let x = typed::<f16>(ops.inputs[0])?;
                    if !conv_positions::weight_grad_inputs(p, x, b) {
                        return Err(EngineError::internal(
                            "a weight gradient's feature map is not its whole block",
                        )
                        .into());
                    }
                }
                if fresh_b {
                    win.b_finite = amp::finite(b);
                    win.b_for = Some(b_key);
                }
                a
            }
        };
        // The block's weights finite (`padded` is for `Forward` and `InputGrad` only).
        let direct = padded && win.a_finite;
        // What is known of `a`: checked once for the block's weights, not for the weight
        // gradient's per-unit matrix.
        let a_finite = (pass != WindowPass::WeightGrad).then_some(win.a_finite);
        if !direct && win.b_for != Some(b_key) {
            // `Forward` and `InputGrad`: `b` gathered for this batch element.
            let b = bbuf.take::<f32>(k * cols);
            conv_matrices::feature_map_inputs((p, &win.taps), kwp, n, &win.x, b);
            win.b_finite = amp::finite(b);
            win.b_for = Some(b_key);
        }
        let out_len = rows * cols * es;
        let shape = MatMulShape {
            m: rows,
            k,
            n: cols,
        };
        let reborrow = Worker {
            ctl: worker.ctl,
            rng: &mut *worker.rng,
        };
        let b = match direct {
            true => BSource::Padded(Direct {
                block: (p, &win.taps, kwp),
                padded: &win.padded,
                x: win.x_ready.then_some(&win.x[..]),
                n,
            }),
            false => BSource::Gathered(bbuf.take::<f32>(k * cols), win.b_finite),
        };
        // The units' elements: consecutive in the block unless its channels are grouped.
        let first = match pass {
            WindowPass::WeightGrad => u as usize * cols,
            _ => p.out_position(u, 0, 0) as usize,
        };
        if p.out_group <= 1 || pass == WindowPass::WeightGrad {
            let out = ops
                .output
                .get_mut(first * es..first * es + out_len)
                .ok_or_else(|| EngineError::invalid("window units outside the output block"))?;
            flags |= b.product(
                types,
                shape,
                (a, a_finite),
                chunk,
                out,
                (pbuf, qbuf),
                reborrow,
            )?;
        } else {
            let staged = &mut win.out;
            staged.clear();
            staged.resize(out_len, 0);
            flags |= b.product(
                types,
                shape,
                (a, a_finite),
                chunk,
                staged,
                (pbuf, qbuf),
                reborrow,
            )?;
            // A unit's plane is `cols` elements `out_group` apart from its first
            // (`layout::Grouped::index` is linear in the plane position).
            let step = p.out_group as usize * es;
            for r in 0..rows {
                let at = p.out_position(u + r as u32, 0, 0) as usize * es;
                let end = match cols {
                    0 => at,
                    _ => at + (cols - 1) * step + es,
                };
                let dst = ops
                    .output
                    .get_mut(at..end)
                    .ok_or_else(|| EngineError::invalid("window units outside the output block"))?;
                let src = &staged[r * cols * es..(r + 1) * cols * es];
                // `check` holds a convolution's output to FP16 or FP32.
                match es {
                    2 => scatter_strided::<2>(dst, src, step),
                    4 => scatter_strided::<4>(dst, src, step),
                    _ => {
                        return Err(EngineError::invalid(format!(
                            "a convolution output of {es}-byte elements"
                        ))
                        .into())
                    }
                }
            }
        }
        u = end;
    }
    Ok(flags)
}

/// Where a conv vertex's product reads `b`: the gathered matrix (with whether it is all
/// finite), or the block's padded feature map.
enum BSource<'a> {
    Gathered(&'a [f32], bool),
    Padded(Direct<'a>),
}

impl BSource<'_> {
    /// The units' product into `out` ([`product`], or [`Direct::product`]).
    #[allow(clippy::too_many_arguments)]
    fn product(
        &self,
        types: (DType, DType, DType),
        shape: MatMulShape,
        a: (&[f32], Option<bool>),
        chunk: usize,
        out: &mut [u8],
        bufs: (&mut Buf, &mut Buf),
        worker: Worker,
    ) -> Result<FpSts, VertexError> {
        match self {
            BSource::Gathered(b, finite) => {
                product(types, shape, a, (b, *finite), chunk, out, bufs, worker)
            }
            BSource::Padded(d) => d.product(types, shape, a.0, chunk, out, bufs, worker),
        }
    }
}

/// A `Forward` or `InputGrad` product that reads `b`'s rows from the block's padded feature
/// map ([`conv_matrices::Padded`]) for batch element `n`, where [`product`] reads the gathered
/// `b`: FP32 partials of finite operands, no exception enabled (the caller checks).
struct Direct<'a> {
    block: (&'a WindowParams, &'a conv_matrices::Taps, u32),
    padded: &'a conv_matrices::Padded,
    /// The feature map, to gather `b` from after all when an FP32 partial overflows (`None`
    /// when it was not widened: FP16 operands, whose partials cannot overflow).
    x: Option<&'a [f32]>,
    n: u32,
}

impl Direct<'_> {
    /// [`product`]'s result for the same operands: the same FP32 partials, computed in the
    /// same order, and the same conversion to the output type. An overflowed partial (FP32
    /// inputs) sends the units through [`product`] with `b` gathered, for its exact flags.
    #[allow(clippy::too_many_arguments)]
    fn product(
        &self,
        types: (DType, DType, DType),
        shape: MatMulShape,
        a: &[f32],
        chunk: usize,
        out: &mut [u8],
        (pbuf, qbuf): (&mut Buf, &mut Buf),
        mut worker: Worker,
    ) -> Result<FpSts, VertexError> {
        let (p, taps, kwp) = self.block;
        let (m, cols) = (shape.m, shape.n);
        let ow = len(p.out_cols);
        // FP16 inputs widened, the partials from +0 (zeroed by the kernel, or here for FP32
        // inputs): no output overflows (`amp::fp16_sums_stay_finite`), and none needs
        // checking.
        let half = types.0 == DType::F16;
        let finite = {
            let pp: &mut [f32] = match types.2 {
                DType::F32 => typed_mut::<f32>(out)?,
                _ => pbuf.take::<f32>(m * cols),
            };
            let base = self.padded.base(p, self.n);
            match self.padded.span() {
                // Rows of whole vector blocks: an output row at a time.
                None => {
                    if !half {
                        pp.fill(0.0);
                    }
                    let mut finite = true;
                    for ohl in 0..len(p.out_rows) {
                        let b = (base, self.padded.rows(ohl));
                        let out = (&mut pp[ohl * ow..], cols);
                        finite &= amp::matmul_f32_rows(a, b, out, ow, (chunk, half))?;
                    }
                    finite
                }
                // Otherwise all output rows in one product over the spans, whose columns
                // between and after the rows are computed and dropped.
                Some((span, span_len, width)) => {
                    let wide = qbuf.take::<f32>(m * span_len);
                    if !half {
                        wide.fill(0.0);
                    }
                    let b = (base, span);
                    amp::matmul_f32_rows(a, b, (wide, span_len), span_len, (chunk, half))?;
                    for (row, wide) in pp.chunks_exact_mut(cols).zip(wide.chunks_exact(span_len)) {
                        for (o, dst) in row.chunks_exact_mut(ow).enumerate() {
                            dst.copy_from_slice(&wide[o * width..o * width + ow]);
                        }
                    }
                    half && amp::fp16_sums_stay_finite(shape.k) || amp::finite(pp)
                }
            }
        };
        if !finite {
            let x = self.x.ok_or_else(|| {
                EngineError::internal("a convolution's FP16 partials overflowed unwidened")
            })?;
            let mut b = vec![0f32; shape.k * cols];
            conv_matrices::feature_map_inputs((p, taps), kwp, self.n, x, &mut b);
            let b_finite = amp::finite(&b);
            return product(
                types,
                shape,
                (a, Some(true)),
                (&b, b_finite),
                chunk,
                out,
                (pbuf, qbuf),
                worker,
            );
        }
        match types.2 {
            DType::F32 => Ok(FpSts::empty()),
            _ => {
                let pp = pbuf.take::<f32>(m * cols);
                Ok(convert::f32_to_f16_slice(
                    pp,
                    typed_mut(out)?,
                    &mut worker.rounding(),
                )?)
            }
        }
    }
}

/// Element `j` of `src` (`E` bytes each) to bytes `j · step ..` of `dst`: with the element
/// size a constant, each copy is one move rather than a call to copy `E` bytes.
fn scatter_strided<const E: usize>(dst: &mut [u8], src: &[u8], step: usize) {
    for (d, v) in dst.chunks_mut(step).zip(src.chunks_exact(E)) {
        d[..E].copy_from_slice(v);
    }
}

/// `v` holding `n` elements, its kept elements as they were (only an extension is zeroed):
/// for scratch that is overwritten whole.
fn resized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.truncate(n);
    v.resize(n, 0.0);
    v
}

/// The channel-grouped layouts of a conv vertex's two operand blocks.
fn operand_layouts(pass: WindowPass, p: &WindowParams) -> (BlockLayout, BlockLayout) {
    let plane = |r: (u32, u32), c: (u32, u32)| (len(r) * len(c)) as u64;
    let red = len(p.in_channels) as u64;
    let x = BlockLayout::new(
        p.in_group,
        p.batch_count(),
        red,
        plane(p.in_rows, p.in_cols),
    );
    match pass {
        WindowPass::Forward | WindowPass::InputGrad => (x, BlockLayout::PLAIN),
        WindowPass::WeightGrad => (
            x,
            BlockLayout::new(
                p.aux_group,
                p.batch_count(),
                p.out_channel_count(),
                plane(p.out_rows, p.out_cols),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_exe::codelets::WindowGeometry;

    /// A 1×1 convolution block of `c` input and 2 output channels over one 2×2 image.
    fn block(c: u32) -> WindowParams {
        WindowParams {
            geometry: WindowGeometry {
                n: 1,
                c,
                h: 2,
                w: 2,
                o: 2,
                kh: 1,
                kw: 1,
                stride: [1, 1],
                padding: [0; 4],
                dilation: [1, 1],
                groups: 1,
                oh: 2,
                ow: 2,
            },
            group: 0,
            batch: (0, 1),
            out_channels: (0, 2),
            in_channels: (0, c),
            out_rows: (0, 2),
            in_rows: (0, 2),
            aux_rows: (0, 0),
            out_cols: (0, 2),
            in_cols: (0, 2),
            units: (0, 2),
            input_channels: c,
            in_group: 1,
            aux_group: 1,
            out_group: 1,
            weight_chunk: 0,
        }
    }

    /// The weights' matrix is the block's and the pass's: over the same widened weights, a
    /// block with another reduction or the other pass gathers its own, and each vertex's
    /// units read their rows of it.
    #[test]
    fn the_weight_matrix_follows_the_block_and_the_pass() {
        let mut win = WindowScratch {
            y: (1..=6).map(|v| v as f32).collect(),
            ..WindowScratch::default()
        };
        let rows = |win: &mut WindowScratch, pass, p: &WindowParams, o0, n| {
            let at = win.weight_rows((pass, 1), p, o0, n);
            win.a[at].to_vec()
        };
        let (three, two) = (block(3), block(2));
        assert_eq!(
            rows(&mut win, WindowPass::Forward, &three, 0, 2),
            [1., 2., 3., 4., 5., 6.]
        );
        assert_eq!(
            rows(&mut win, WindowPass::Forward, &three, 1, 1),
            [4., 5., 6.]
        );
        // `InputGrad`: a[c][o] = w[o][c] (`c` the block's 2 channels, `o` its reduction).
        let grad = WindowPass::InputGrad;
        assert_eq!(rows(&mut win, grad, &three, 0, 2), [1., 3., 5., 2., 4., 6.]);
        assert_eq!(rows(&mut win, grad, &two, 0, 2), [1., 3., 2., 4.]);
        assert_eq!(rows(&mut win, grad, &two, 1, 1), [2., 4.]);
        win.forget();
        assert_eq!(rows(&mut win, WindowPass::Forward, &two, 0, 1), [1., 2.]);
    }
}
