//! The codelet registry: what every vertex computes (the contract the simulator implements)
//! and what it costs (its cycle estimator, in [`crate::cycles::vertex`]).
//!
//! This is the PopLibs `CYCLE_ESTIMATOR_ENTRY` idea: one table of codelets, each with its
//! semantics, operand layout and estimator, instead of costs scattered through the lowering.
//! The simulator executes vertices by these contracts and charges cycles with
//! [`crate::cycles::tile_work_cycles`], which reads the same estimators, so a static estimate
//! equals the executed cycles.
//!
//! # Common rules
//!
//! - **Operands** live on the vertex's tile; each is a contiguous run of `len` elements of
//!   its tensor's dtype at a byte offset of the tile's memory. The output operand may be the
//!   same bytes as input operand 0 (in-place update of a variable); element-wise codelets
//!   read element `j` before writing element `j`, so this is safe.
//! - **Rounding.** A result rounded *to f16* uses the worker's rounding mode: RNE, or
//!   stochastic rounding when `$FP_CTL.ESR` is set, with random bits from the stream of
//!   (tile, worker). A result rounded *to f32* is always RNE. Every rounding is a single
//!   rounding of the exact result of the operation named ("exactly rounded"), never a double
//!   rounding through a wider intermediate.
//! - **Order of execution and of random draws**: a tile's vertex groups run in the order
//!   listed; within a group, each worker runs its vertices in the order listed; a vertex
//!   draws from its worker's stream in its computation order (ascending output element for
//!   element-wise and block codelets; row, pass, column for `AmpMatMul`, as the numerics
//!   core's AMP kernels do).
//! - **f16 overflow**: saturates to ±65504 when `$FP_CTL.NANOO` is clear, gives NaN and sets
//!   INV when it is set; OFLO is set either way. f32 overflow gives ±inf and sets OFLO.
//! - **Flags** (`$FP_STS`): INV for invalid operations (inf−inf, 0×inf, 0/0, inf/inf, sqrt
//!   or log of a negative, any NaN operand of an arithmetic op or comparison), DIV0 for
//!   division of a finite non-zero by zero (float) or by zero (integer), OFLO for overflow.
//!   Integer arithmetic wraps (i32 two's complement, u8 modulo 256); integer division by zero
//!   gives 0 and sets DIV0.
//! - **Transcendentals** (`exp`, `ln`, `sqrt`, `sigmoid`, `tanh`, GELU) are the numerics
//!   core's functions of the dtype; codelets that compute them internally in f32 (softmax,
//!   cross-entropy) use the f32 versions.
//!
//! # Element-wise ("map") codelets
//!
//! `Unary`, `Binary`, `ScaledAdd`, `Select`, `Cast`, `ActivationGrad`, `OneHot` take
//! [`MapParams`]: output element `j` (of `len`) is computed from input elements chosen by
//! each input's [`Access`]: `Aligned` reads element `j` of the operand (same length as the
//! output); `Broadcast` reads element `bidx(start + j) − base` of the operand, where
//! `bidx(x) = Σ_d coord_d(x) · strides[d]` and `coord(x)` are the row-major coordinates of
//! `x` in `dims` (see [`BroadcastAccess`]). Usually `dims` are the output's dimensions and
//! `start` the global index of the vertex's first output; when a tile holds a block of equal
//! rows (a matmul output split by columns) `dims` describe that block. A group is one
//! vertex whose workers split the tile's output among them ([`crate::workers`]), or, where
//! a broadcast input forces a split at a tensor-interval boundary (and for `OneHot`), a
//! vertex per worker slice and interval.
//!
//! `Fused` (PopLibs' generated map-expression codelet, `popops::map` with
//! `enableGenerateCodelet`) takes [`MapParams`] too, one access per leaf input: a chain of
//! element-wise steps computed per vertex without storing the intermediate values. Each step
//! is one of the single-op codelets above with its own semantics and rounding, so a fused
//! vertex computes exactly what the unfused compute sets would; the steps run one after the
//! other over the vertex's whole slice (step `s` over all elements, then step `s + 1`), so a
//! step draws its random bits after every element of the previous step did.
//!
//! # Block codelets
//!
//! `Reduce`, `ArgMax`, `Softmax`, `SoftmaxCrossEntropy`, `SoftmaxStage` take [`BlockParams`]: the input
//! operand is a block of `groups × count × width` elements, element `(g, i, w)` at
//! `(g · count + i) · width + w`; the vertex handles columns `w ∈ [col_begin, col_begin +
//! cols)` of every group. Reductions run over `i` **sequentially in ascending `i`**, starting
//! from `(g, 0, w)`; this order, with the cross-tile order of `ipusim_compiler`'s reduction lowering, is
//! what a floating-point error bound is derived from. A `Reduce` may repeat its block
//! `outer` times, `outer_stride` elements apart, summing every repeat into the same outputs
//! (PopLibs' strided reduce with outer strides): its rows are then `j = 0..outer · count`,
//! row `j` at `(j / count) · outer_stride + (g · count + j % count) · width`, in ascending
//! `j`.
//!
//! # The codelets
//!
//! See [`Codelet`] for each codelet's exact semantics and [`CodeletInfo`] for the table.

use ipusim_ir::{Activation, BinaryOp, DType, UnaryOp};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use crate::block_params::BlockParams;
pub use crate::window_params::{
    ConvMethod, WindowGeometry, WindowParams, WindowPass, WindowVertex,
};

/// The reduction operator of a [`Codelet::Reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Sum of squares (PopLibs' `SQUARE_ADD`, `ReduceSquareAdd`): every element is squared
    /// in the f32 accumulator type (`x · x` rounded RNE; exact for f16 inputs) before it is
    /// summed as by `Sum`, so the values are those of an f32 `Mul` of the input by itself
    /// summed by `Sum`. Only with an f32 accumulator.
    SquareAdd,
    /// Maximum: `acc = maximum(acc, x)`, IEEE 754-2019 `maximum` (a NaN operand gives NaN
    /// and sets INV; `max(−0, +0) = +0`). It is associative and commutative, so every
    /// reduction order gives the same bits.
    Max,
}

/// A codelet with its type parameters (one entry of the registry).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Codelet {
    /// Operands `[out]`; params `Fill`. Every element of `out` := `value` converted to
    /// `dtype` (RNE for floats, truncation toward zero for integers). No flags.
    Fill { dtype: DType },
    /// Operands `[in, out]`, both `dtype`; params `Map`. `out[j] = op(in[j])`, computed
    /// exactly and rounded once to `dtype` (Relu: `x > 0 ? x : +0`, NaN stays NaN and sets
    /// INV; Neg/Abs exact). Flags: INV (NaN input, sqrt/log of a negative), DIV0 (log 0 →
    /// −inf), OFLO (exp).
    Unary { op: UnaryOp, dtype: DType },
    /// Operands `[a, b, out]`; `a`, `b` of `dtype`, `out` of `dtype` (Bool for comparisons);
    /// params `Map`. `out[j] = a op b` exactly rounded to `dtype`; Max/Min are IEEE 754-2019
    /// `maximum`/`minimum` (a NaN operand gives NaN and INV; `max(−0, +0) = +0`,
    /// `min(−0, +0) = −0`); comparisons give 1/0, are false with a NaN operand and then set
    /// INV. Flags: INV, DIV0 (Div), OFLO.
    Binary { op: BinaryOp, dtype: DType },
    /// Operands `[a, b, out]`, all `dtype` (f16 or f32); params `Map` with `scale`.
    /// `out[j] = round(a + s·b)` with `s` = `scale` rounded RNE to f32 and a single rounding
    /// of the exact value (fused, as PopLibs' `scaledAdd` with a float scale). Flags: INV,
    /// OFLO.
    ScaledAdd { dtype: DType },
    /// Operands `[cond (Bool), a, b, out]`; params `Map`. `out[j] = cond ≠ 0 ? a : b`
    /// (bit copy). No flags.
    Select { dtype: DType },
    /// Operands `[in, out]`; params `Map`. `out[j] = convert(in[j])`: float→float exactly
    /// rounded (f32→f16 with the worker's rounding mode, OFLO on overflow; a NaN gives the
    /// canonical NaN and INV); float→I32 truncates toward zero and saturates to the `i32`
    /// range with INV when out of range, NaN → −2147483648 with INV (Graphcore's hardware
    /// test of an FP16 NaN cast, `reference/numerics.md` §2.3); float→U8 converts to I32 that
    /// way, then saturates to `0..=255` with INV when out of range (so NaN → 0);
    /// integer→float rounds (I32→f16 with the worker's rounding mode, I32→f32 RNE; U8 is
    /// exact); Bool→x gives 0/1; x→Bool gives `x ≠ 0` (NaN → 1); I32→U8 keeps the low byte,
    /// U8→I32 zero-extends.
    Cast { from: DType, to: DType },
    /// Operands `[x, dy, out]`, all `dtype`; params `Map`. `out[j] = dy[j] · f'(x[j])`
    /// evaluated in f64 (the derivative of the forward activation's formula) and rounded
    /// once to `dtype` (Relu: `x > 0 ? dy : +0`, no rounding). Flags: INV (a NaN operand; for
    /// Relu a NaN `x`), OFLO.
    ActivationGrad {
        activation: Activation,
        dtype: DType,
    },
    /// Operands `[indices (I32), out (dtype)]`; params `Map` with `out_begin` and a
    /// `Broadcast` access for the indices. `out[j] = (indices[bidx] == (out_begin + j) mod
    /// depth) ? 1 : 0`; out-of-range indices give an all-zero row. No flags.
    OneHot { dtype: DType, depth: u32 },
    /// Operands `[a, b, out]`; params `Amp`. The AMP matmul partial: for each row `r` in
    /// `[row_begin, row_begin + rows)` and column `c < n`:
    /// `out[(r − row_begin) · n + c] = Σ_{κ<k} A(r, κ) · B(κ, c)` where `A(r, κ)` is
    /// `a[r·k + κ]` (RowMajor, `m × k`) or `a[κ·m + r]` (Transposed, `k × m`) and `B(κ, c)` is
    /// `b[κ·n + c]` (RowMajor, `k × n`) or `b[c·k + κ]` (Transposed, `n × k`).
    /// Accumulation — the order of the numerics core's AMP kernels
    /// (`ipusim_sim::numerics` `amp_matmul_*`, with `chunk = input_channels`): `P = 0`; the
    /// `k` channels are taken in passes of `input_channels` consecutive channels in ascending
    /// order; within a pass `s = rne32(a·b)` for its first channel, then
    /// `s = rne32(a·b + s)` (a fused multiply-add, one rounding) for each next channel in
    /// ascending order; then `P = round_partials(P + s)`: one rounding of the exact sum (RNE
    /// for f32 partials; for f16 partials the worker's rounding mode, i.e. f16 partials are
    /// rounded at every partial write). Products of f16 values are exact, so for f16 inputs
    /// the fused step equals a multiply then an add. Finally `out = round_output(P)` (a no-op
    /// when `output` = `partials`). Flags: INV, OFLO (of the partials or the output
    /// conversion).
    AmpMatMul {
        input: DType,
        partials: DType,
        output: DType,
    },
    /// Operands `[in (input), out (output)]`; params `Block`. For each group `g` and column
    /// `c`: `acc = in(g, 0, col_begin + c)` converted exactly to `acc`; for each further row
    /// `i` (`1..count`, or `1..outer · count` with repeats, see the module docs)
    /// in ascending order `acc = acc ⊕ in(g, i, col_begin + c)` with each sum rounded to
    /// `acc` (f32: RNE, f16: the worker's mode, integers wrap); then
    /// `out[g · cols + c] = round_output(acc · s)` with `s` = `scale` rounded RNE to f32: one
    /// rounding of the exact product (skipped when `scale` = 1). Flags: INV, OFLO.
    Reduce {
        op: ReduceOp,
        input: DType,
        acc: DType,
        output: DType,
    },
    /// PopLibs' `poplin::ReduceAdd`, the sum of a split reduction's partial rows across
    /// tiles: a `MultiVertex` (one per tile). Operands `[partials (partials), out
    /// (output)]`; params `Block`. Its values are [`Codelet::Reduce`]'s `Sum` with an f32
    /// accumulator ([`Codelet::summing`]): PopLibs' `ReduceAdd.cpp` sums `float(partials[j][i])`
    /// into a `float` in ascending `j` and converts once, and its assembly accumulates half
    /// partials in the f32 accumulators (`f16v8acc`). Its cycles are PopLibs' estimate of
    /// the whole vertex ([`crate::cycles::conv_reduce::reduce_add_cycles`]).
    ReduceAdd { partials: DType, output: DType },
    /// Operands `[in (dtype), out (I32)]`; params `Block`. `out[g · cols + c]` = the first
    /// `i` with the maximum of `in(g, i, col_begin + c)` (`best = 0`; for `i ≥ 1`, if
    /// `in(i) > in(best)` then `best = i`). No flags.
    ArgMax { dtype: DType },
    /// Operands `[in, out]`, both `dtype`; params `Block` with `width = cols = 1` (one row of
    /// `count` elements per group). In f32: `m = max_i x_i` (as `Reduce` Max);
    /// `t_i = rne32(x_i − m)`; `e_i = exp32(t_i)`; `s = Σ e_i` sequentially in ascending `i`
    /// with RNE. Softmax: `out_i = round(e_i / s)` (one rounding of the exact quotient).
    /// Log-softmax: `out_i = round(t_i − ln32(s))` (one rounding of the exact difference).
    /// Flags: INV (NaN input), OFLO.
    Softmax { log: bool, dtype: DType },
    /// Operands `[in, weights, out]` (see [`WindowPass`] for each pass's operand blocks);
    /// params `Window`. A convolution partial without a materialised im2col: the vertex's
    /// output units are computed as the AMP matrix product of [`Codelet::AmpMatMul`]
    /// (passes of `input_channels` reduction elements, FP32 or FP16 partials, one conversion
    /// to `output`) of the matrices the pass defines over the tile's operand blocks, with a
    /// padded position read as an exact zero (see `ipusim_sim`'s `interp/conv.rs` for the
    /// reduction order of each pass, which the reference interpreter shares). Flags: INV,
    /// OFLO. `method` is the PopLibs vertex the partial stands for ([`ConvMethod`]): it sets
    /// the cycle estimate, and the compiler sets `input_channels` to the vertex's pass. With
    /// [`ConvMethod::Slic`] (`Forward` only) the reduction's kernel columns are padded with
    /// zero weights to a multiple of 4, so that a pass of `input_channels` (4 × the block's
    /// channels) is one 1×4 sub-kernel; a zero product never changes a partial, so only the
    /// pass boundaries differ from the unpadded order.
    Conv {
        pass: WindowPass,
        input: DType,
        partials: DType,
        output: DType,
        #[serde(default, skip_serializing_if = "ConvMethod::is_amp")]
        method: ConvMethod,
    },
    /// Operands `[in, out]` (`MaxPool`) or `[x, dy, out]` (`MaxPoolGrad`), all `dtype`;
    /// params `Window`. `MaxPool`: each output element is the IEEE 754-2019 `maximum` of its
    /// window's input elements in row-major window order (padded positions skipped).
    /// `MaxPoolGrad`: each input element of the block gets the sum, in f32 from zero in
    /// row-major window order, of `dy` over the windows whose maximum it equals, rounded once
    /// to `dtype`. Flags: INV (NaN), OFLO.
    MaxPool { grad: bool, dtype: DType },
    /// Operands `[leaf_0, …, leaf_{k−1}, out]`; params `Map` (one access per leaf). The
    /// steps in order, each a single-op element-wise codelet (`Unary`, `Binary`, `ScaledAdd`
    /// with its step's scale, `Cast`, `ActivationGrad`) with that codelet's exact semantics,
    /// rounding and flags, applied to the leaves and the earlier steps' values
    /// ([`FusedArg`]); `out` is the last step's value. Only the output is stored. Flags: the
    /// union of the steps' flags.
    ///
    /// The leaves and steps are shared: every tile's vertex group of a fused op holds the
    /// same codelet, which a clone would otherwise copy step by step; one shared pointer
    /// keeps every codelet, and so every vertex group, 16 bytes smaller (the hands-on day's
    /// step 2 has 4.7 million groups). Files hold the fields `leaves` and `steps`.
    Fused {
        /// The leaves and the steps.
        #[serde(flatten)]
        program: Arc<FusedProgram>,
    },
    /// Operands `[logits (dtype), labels (I32), out (F32)]`; params `Block` with
    /// `width = cols = 1`: one row of `count` logits per group, `labels[g]` its class.
    /// In f32, with `m`, `t_i`, `e_i`, `s` as for `Softmax`:
    /// `out[g] = rne32(ln32(s) − t_label)`; a label outside `[0, count)` gives 0.
    /// Flags: INV, OFLO.
    SoftmaxCrossEntropy { dtype: DType },
    /// One stage of a softmax, log-softmax or cross-entropy whose rows are split over tiles
    /// and workers ([`SoftmaxStage`]); params `Block` with `width = cols = 1`: `groups`
    /// pieces of rows, `count` elements each, and one `max` (`dtype`) and one `sum` (f32)
    /// per group. With `m` the row's maximum (a `Reduce` Max of the row) and `s` the
    /// sequential f32 sum of its `e_i` (a `Reduce` Sum of the `Exp` stage's output), the
    /// stages compute exactly what [`Codelet::Softmax`] and [`Codelet::SoftmaxCrossEntropy`]
    /// compute in one vertex: same operations, same roundings, same sum order.
    SoftmaxStage { stage: SoftmaxStage, dtype: DType },
}

/// The stages of a split softmax ([`Codelet::SoftmaxStage`]); `t_i = rne32(x_i − m)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SoftmaxStage {
    /// Operands `[in (dtype), max (dtype), out (F32)]`: `out_i = exp32(t_i)`. Flags: INV,
    /// OFLO.
    Exp,
    /// Operands `[exp (F32), sum (F32), out (dtype)]`: `out_i = round(e_i / s)`, one
    /// rounding of the exact quotient. Flags: INV, OFLO.
    Div,
    /// Operands `[in (dtype), max (dtype), sum (F32), out (dtype)]`:
    /// `out_i = round(t_i − ln32(s))`, one rounding of the exact difference. Flags: INV,
    /// OFLO.
    LogSub,
    /// Operands `[logits (dtype), labels (I32), max (dtype), sum (F32), out (F32)]`, whole
    /// rows (`count` = the row length): `out[g] = rne32(ln32(s) − t_label)`, 0 for a label
    /// outside `[0, count)`. Flags: INV, OFLO.
    Loss,
}

/// The most leaves a [`Codelet::Fused`] reads (ours: bounds a fused vertex's operands).
pub const MAX_FUSED_LEAVES: usize = 6;
/// The most steps a [`Codelet::Fused`] computes (ours: bounds the generated code).
pub const MAX_FUSED_STEPS: usize = 16;

/// Operand names of a [`Codelet::Fused`] vertex with the most leaves.
const FUSED_OPERANDS: [&str; MAX_FUSED_LEAVES + 1] =
    ["in0", "in1", "in2", "in3", "in4", "in5", "out"];

/// What a [`Codelet::Fused`] computes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FusedProgram {
    /// Each leaf's element type and whether it is one element read for every output (a
    /// scalar, which PopLibs' estimate counts as one element).
    pub leaves: Box<[FusedLeaf]>,
    /// The steps; the last one's value is the output.
    pub steps: Box<[FusedStep]>,
}

impl Codelet {
    /// The fused codelet of `leaves` and `steps`.
    pub fn fused(leaves: impl Into<Box<[FusedLeaf]>>, steps: impl Into<Box<[FusedStep]>>) -> Self {
        Codelet::Fused {
            program: Arc::new(FusedProgram {
                leaves: leaves.into(),
                steps: steps.into(),
            }),
        }
    }
}

/// One leaf input of a [`Codelet::Fused`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FusedLeaf {
    /// Its element type.
    pub dtype: DType,
    /// One element, read for every output.
    pub scalar: bool,
}

/// A value a fused step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FusedArg {
    /// Leaf input `i` (operand `i`).
    Leaf(u8),
    /// The value of an earlier step.
    Step(u8),
}

/// One step of a [`Codelet::Fused`]: a single-op element-wise codelet and its inputs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FusedStep {
    /// `Unary`, `Binary`, `ScaledAdd`, `Cast` or `ActivationGrad`.
    pub codelet: Codelet,
    /// Its inputs, in the codelet's operand order.
    pub args: Vec<FusedArg>,
    /// A `ScaledAdd` step's scale, as the bits of the f32 the unfused vertex rounds its scale
    /// to ([`MapParams::scale`]); the bits of 1.0 for every other step. A constant of the
    /// generated codelet, as PopLibs' map expressions embed their constants.
    #[serde(default = "FusedStep::unit_scale")]
    pub scale_bits: u32,
}

impl FusedStep {
    /// A step of `codelet` reading `args`, with `scale` for a `ScaledAdd` (rounded to f32
    /// as the unfused vertex rounds it; ignored by other codelets).
    pub fn new(codelet: Codelet, args: Vec<FusedArg>, scale: f64) -> FusedStep {
        let scale_bits = if matches!(codelet, Codelet::ScaledAdd { .. }) {
            // `as` rounds to nearest, ties to even: the unfused vertex's rounding of its scale.
            (scale as f32).to_bits()
        } else {
            FusedStep::unit_scale()
        };
        FusedStep {
            codelet,
            args,
            scale_bits,
        }
    }

    /// The bits of 1.0f32: the scale of a step that has none.
    fn unit_scale() -> u32 {
        1.0f32.to_bits()
    }

    /// The step's scale as the vertex parameters carry it ([`MapParams::scale`]).
    pub fn scale(&self) -> f64 {
        f64::from(f32::from_bits(self.scale_bits))
    }

    /// The element type of the step's value.
    pub fn dtype(&self) -> DType {
        match self.codelet {
            Codelet::Fused { .. }
            | Codelet::Select { .. }
            | Codelet::OneHot { .. }
            | Codelet::Fill { .. } => DType::U8,
            // Not a step codelet (the simulator's check refuses it).
            ref c => c.map_output_dtype().unwrap_or(DType::U8),
        }
    }
}

impl Codelet {
    /// The element type of an element-wise codelet's output (`None` for the others).
    pub fn map_output_dtype(&self) -> Option<DType> {
        Some(match self {
            Codelet::Binary { op, .. } if op.is_comparison() => DType::Bool,
            Codelet::Fill { dtype }
            | Codelet::Unary { dtype, .. }
            | Codelet::Binary { dtype, .. }
            | Codelet::ScaledAdd { dtype }
            | Codelet::Select { dtype }
            | Codelet::ActivationGrad { dtype, .. }
            | Codelet::OneHot { dtype, .. } => *dtype,
            Codelet::Cast { to, .. } => *to,
            Codelet::Fused { program } => program.steps.last()?.dtype(),
            _ => return None,
        })
    }

    /// True for the single-op codelets a [`Codelet::Fused`] step may be.
    pub fn is_fusible_step(&self) -> bool {
        matches!(
            self,
            Codelet::Unary { .. }
                | Codelet::Binary { .. }
                | Codelet::ScaledAdd { .. }
                | Codelet::Cast { .. }
                | Codelet::ActivationGrad { .. }
        )
    }

    /// The [`Codelet::Reduce`] whose values a [`Codelet::ReduceAdd`] of `partials` into
    /// `output` computes: `Sum` of its partials in an f32 accumulator, converted to its
    /// output.
    pub fn summing(partials: DType, output: DType) -> Codelet {
        Codelet::Reduce {
            op: ReduceOp::Sum,
            input: partials,
            acc: DType::F32,
            output,
        }
    }

    /// The key the memory plan charges code under, once per tile: the codelet's name, or for
    /// a fused codelet its whole expression (PopLibs generates one codelet per expression).
    pub fn code_key(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Codelet::Fused { .. } => std::borrow::Cow::Owned(self.full_name()),
            _ => std::borrow::Cow::Borrowed(self.info().name),
        }
    }
}

/// Parameters of a vertex; which variant a codelet takes is given on [`Codelet`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum VertexParams {
    /// The value written by `Fill`.
    Fill { value: f64 },
    /// Element-wise codelets.
    Map(MapParams),
    /// `AmpMatMul`.
    Amp(AmpParams),
    /// Block codelets.
    Block(BlockParams),
    /// Window codelets (`Conv`, `MaxPool`).
    Window(WindowVertex),
}

/// Parameters of an element-wise vertex.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MapParams {
    /// Row-major index, in the output tensor, of the vertex's first output element, when its
    /// outputs are consecutive elements of the output tensor (always for `OneHot`, which
    /// needs positions; otherwise when a broadcast input is indexed by output position).
    pub out_begin: Option<u64>,
    /// How each input operand is read, in operand order (the output is not listed).
    pub inputs: Accesses,
    /// `ScaledAdd`'s scale (1 for other codelets).
    pub scale: f64,
}

/// The input accesses of an element-wise vertex, two held inline: a graph has millions of
/// element-wise vertices, which would otherwise each hold a heap allocation.
pub type Accesses = smallvec::SmallVec<[Access; 2]>;

/// How an element-wise vertex reads one input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// Element `j` of the operand for output element `j`.
    Aligned,
    /// A broadcast input (see the module docs); boxed, so that an access is one word.
    Broadcast(Box<BroadcastAccess>),
}

/// A broadcast read: output `j` of the vertex reads operand element
/// `Σ_d coord_d(start + j) · strides[d] − base`, with `coord(x)` the row-major coordinates
/// of `x` in `dims`. The pattern (`dims`, `strides`) is shared: the vertices of a tile, and
/// of a whole op, read an input through the same one, and a large graph has millions of
/// broadcast reads (the hands-on day's step 2: 3.4 million), which would otherwise each hold
/// two heap allocations; one shared pointer keeps a read at 24 bytes (with two, 48). Files
/// hold the fields `dims`, `strides`, `start`, `base`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "BroadcastFields", into = "BroadcastFields")]
pub struct BroadcastAccess {
    /// The dimensions and strides.
    pub pattern: Arc<BroadcastPattern>,
    /// Position in `dims` of the vertex's first output.
    pub start: u64,
    /// The input index held at operand element 0.
    pub base: u64,
}

/// The shared part of a [`BroadcastAccess`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BroadcastPattern {
    /// Dimensions the vertex's outputs are indexed in (merged; size-1 dimensions removed).
    pub dims: Box<[u64]>,
    /// Element stride of the input per dimension (0 where broadcast).
    pub strides: Box<[u64]>,
}

impl BroadcastAccess {
    /// A read through a pattern of its own (`dims`, `strides`) from position `start`, `base`
    /// being the input index at operand element 0.
    pub fn new(dims: &[u64], strides: &[u64], start: u64, base: u64) -> BroadcastAccess {
        BroadcastAccess {
            pattern: Arc::new(BroadcastPattern {
                dims: dims.into(),
                strides: strides.into(),
            }),
            start,
            base,
        }
    }

    /// The input index read at position `x` of `dims` (output `j` reads `index(start + j)`).
    pub fn index(&self, x: u64) -> u64 {
        pattern_index(&self.pattern.dims, &self.pattern.strides, x)
    }
}

/// The input index read at position `x` of `dims` through `strides` (a caller walking many
/// positions passes the slices it holds, which stay in registers).
pub fn pattern_index(dims: &[u64], strides: &[u64], x: u64) -> u64 {
    let mut rem = x;
    let mut idx = 0u64;
    for (&dim, &stride) in dims.iter().zip(strides).rev() {
        let dim = dim.max(1);
        idx += (rem % dim) * stride;
        rem /= dim;
    }
    idx
}

/// A [`BroadcastAccess`] as files hold it.
#[derive(Serialize, Deserialize)]
struct BroadcastFields {
    dims: Vec<u64>,
    strides: Vec<u64>,
    start: u64,
    base: u64,
}

impl From<BroadcastFields> for BroadcastAccess {
    fn from(f: BroadcastFields) -> Self {
        BroadcastAccess::new(&f.dims, &f.strides, f.start, f.base)
    }
}

impl From<BroadcastAccess> for BroadcastFields {
    fn from(b: BroadcastAccess) -> Self {
        BroadcastFields {
            dims: b.pattern.dims.to_vec(),
            strides: b.pattern.strides.to_vec(),
            start: b.start,
            base: b.base,
        }
    }
}

/// How a matrix operand of an AMP vertex is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MatrixLayout {
    /// Rows contiguous (`A: m × k`, `B: k × n`).
    RowMajor,
    /// The transpose is stored (`A: k × m`, `B: n × k`).
    Transposed,
}

/// Parameters of an AMP matmul-partial vertex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmpParams {
    /// Layout of operand `a` (the whole `m × k` block of the tile).
    pub a_layout: MatrixLayout,
    /// Layout of operand `b` (the whole `k × n` block of the tile).
    pub b_layout: MatrixLayout,
    /// Rows of the tile's block.
    pub m: u32,
    /// Reduction length of the tile's block.
    pub k: u32,
    /// Columns of the tile's block.
    pub n: u32,
    /// First row this vertex computes.
    pub row_begin: u32,
    /// Rows this vertex computes (its output operand holds `rows × n` elements).
    pub rows: u32,
    /// AMP input channels per pass (the partial-rounding granularity).
    pub input_channels: u32,
    /// AMP output channels (conv units) per pass.
    pub output_channels: u32,
}

impl WindowParams {
    /// The lengths (elements) the operands of a vertex of `codelet` with these parameters
    /// must have, in operand order (the output last); `None` for a codelet that takes other
    /// parameters.
    pub fn operand_lens(&self, codelet: &Codelet) -> Option<Vec<u64>> {
        let g = &self.geometry;
        let len = |r: (u32, u32)| u64::from(r.1.saturating_sub(r.0));
        let (nb, ob) = (self.batch_count(), self.out_channel_count());
        let (rows, in_rows) = (len(self.out_rows), len(self.in_rows));
        let (cols, in_cols) = (len(self.out_cols), len(self.in_cols));
        let kernel = u64::from(g.kh) * u64::from(g.kw);
        let red = len(self.in_channels);
        Some(match codelet {
            Codelet::Conv { pass, .. } => match pass {
                WindowPass::Forward => vec![
                    nb * red * in_rows * in_cols,
                    ob * red * kernel,
                    nb * ob * rows * cols,
                ],
                WindowPass::InputGrad => vec![
                    nb * red * in_rows * in_cols,
                    red * ob * kernel,
                    nb * ob * rows * cols,
                ],
                WindowPass::WeightGrad => vec![
                    nb * red * in_rows * in_cols,
                    nb * ob * rows * cols,
                    ob * red * kernel,
                ],
            },
            Codelet::MaxPool { grad: false, .. } => {
                vec![nb * ob * in_rows * in_cols, nb * ob * rows * cols]
            }
            Codelet::MaxPool { grad: true, .. } => vec![
                nb * ob * in_rows * in_cols,
                nb * ob * len(self.aux_rows) * u64::from(g.ow),
                nb * ob * rows * cols,
            ],
            _ => return None,
        })
    }
}

/// One row of the registry table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeletInfo {
    /// Name as reported (`AmpMatMul`, `Binary`, ...).
    pub name: &'static str,
    /// Operand names in order.
    pub operands: &'static [&'static str],
    /// Estimated code bytes on a tile that uses it (not found for PopLibs codelets; chosen
    /// from the size of comparable assembly codelets).
    pub code_bytes: u32,
}

impl Codelet {
    /// The same codelet with the convolution vertex `method` (other codelets unchanged).
    pub fn with_conv_method(&self, method: ConvMethod) -> Codelet {
        let mut c = self.clone();
        if let Codelet::Conv { method: m, .. } = &mut c {
            *m = method;
        }
        c
    }

    /// The registry entry.
    pub fn info(&self) -> CodeletInfo {
        let (name, operands, code_bytes): (&str, &[&str], u32) = match self {
            Codelet::Fill { .. } => ("Fill", &["out"], 160),
            Codelet::Unary { .. } => ("Unary", &["in", "out"], 320),
            Codelet::Binary { .. } => ("Binary", &["a", "b", "out"], 384),
            Codelet::ScaledAdd { .. } => ("ScaledAdd", &["a", "b", "out"], 416),
            Codelet::Select { .. } => ("Select", &["cond", "a", "b", "out"], 256),
            Codelet::Cast { .. } => ("Cast", &["in", "out"], 320),
            Codelet::ActivationGrad { .. } => ("ActivationGrad", &["x", "dy", "out"], 384),
            Codelet::OneHot { .. } => ("OneHot", &["indices", "out"], 224),
            Codelet::AmpMatMul { .. } => ("AmpMatMul", &["a", "b", "out"], 1536),
            Codelet::Reduce { .. } => ("Reduce", &["in", "out"], 640),
            // Our choice, as for `Reduce`: PopLibs' ReduceAdd.S is not measured.
            Codelet::ReduceAdd { .. } => ("ReduceAdd", &["partials", "out"], 640),
            Codelet::ArgMax { .. } => ("ArgMax", &["in", "out"], 320),
            Codelet::Softmax { .. } => ("Softmax", &["in", "out"], 768),
            Codelet::SoftmaxCrossEntropy { .. } => {
                ("SoftmaxCrossEntropy", &["logits", "labels", "out"], 768)
            }
            // Our choice: about a third of the one-vertex softmax's code each.
            Codelet::SoftmaxStage { stage, .. } => match stage {
                SoftmaxStage::Exp => ("SoftmaxExp", &["in", "max", "out"], 256),
                SoftmaxStage::Div => ("SoftmaxDiv", &["exp", "sum", "out"], 256),
                SoftmaxStage::LogSub => ("LogSoftmaxSub", &["in", "max", "sum", "out"], 256),
                SoftmaxStage::Loss => (
                    "CrossEntropyLoss",
                    &["logits", "labels", "max", "sum", "out"],
                    256,
                ),
            },
            Codelet::Conv {
                method: ConvMethod::Amp,
                ..
            } => ("ConvPartial", &["in", "weights", "out"], 2048),
            // Our choice, as for the AMP vertex: a vertex of comparable assembly.
            Codelet::Conv {
                method: ConvMethod::Hmac,
                ..
            } => ("ConvPartialHorizontalMac", &["in", "weights", "out"], 2048),
            Codelet::Conv {
                method: ConvMethod::Slic,
                ..
            } => ("ConvPartial1xNSLIC", &["in", "weights", "out"], 2048),
            Codelet::MaxPool { grad: false, .. } => ("MaxPool", &["in", "out"], 512),
            // Our choice: a generated loop of a few instructions per step, with its
            // vectorised and remainder paths.
            // The operand names of the most leaves; a vertex has as many as its leaves.
            Codelet::Fused { program } => (
                "Fused",
                &FUSED_OPERANDS,
                96 + 32 * program.steps.len() as u32,
            ),
            Codelet::MaxPool { grad: true, .. } => ("MaxPoolGrad", &["x", "dy", "out"], 640),
        };
        CodeletInfo {
            name,
            operands,
            code_bytes,
        }
    }

    /// A name with the type parameters, e.g. `Binary<Add,f16>`, used in summaries.
    pub fn full_name(&self) -> String {
        match self {
            Codelet::Fill { dtype } => format!("Fill<{dtype}>"),
            Codelet::Unary { op, dtype } => format!("Unary<{op:?},{dtype}>"),
            Codelet::Binary { op, dtype } => format!("Binary<{op:?},{dtype}>"),
            Codelet::ScaledAdd { dtype } => format!("ScaledAdd<{dtype}>"),
            Codelet::Select { dtype } => format!("Select<{dtype}>"),
            Codelet::Cast { from, to } => format!("Cast<{from},{to}>"),
            Codelet::ActivationGrad { activation, dtype } => {
                format!("ActivationGrad<{activation:?},{dtype}>")
            }
            Codelet::OneHot { dtype, .. } => format!("OneHot<{dtype}>"),
            Codelet::AmpMatMul {
                input,
                partials,
                output,
            } => format!("AmpMatMul<{input},{partials},{output}>"),
            Codelet::Reduce {
                op,
                input,
                acc,
                output,
            } => format!("Reduce<{op:?},{input},{acc},{output}>"),
            Codelet::ReduceAdd { partials, output } => format!("ReduceAdd<{output},{partials}>"),
            Codelet::ArgMax { dtype } => format!("ArgMax<{dtype}>"),
            Codelet::Softmax { log, dtype } => {
                format!("{}<{dtype}>", if *log { "LogSoftmax" } else { "Softmax" })
            }
            Codelet::SoftmaxCrossEntropy { dtype } => format!("SoftmaxCrossEntropy<{dtype}>"),
            Codelet::SoftmaxStage { dtype, .. } => format!("{}<{dtype}>", self.info().name),
            Codelet::Conv {
                pass,
                input,
                partials,
                output,
                method: ConvMethod::Amp,
            } => format!("ConvPartial<{pass:?},{input},{partials},{output}>"),
            Codelet::Conv {
                pass,
                input,
                partials,
                output,
                method: ConvMethod::Hmac,
            } => format!("ConvPartialHorizontalMac<{pass:?},{input},{partials},{output}>"),
            Codelet::Conv {
                pass,
                input,
                partials,
                output,
                method: ConvMethod::Slic,
            } => format!("ConvPartial1xNSLIC<{pass:?},{input},{partials},{output}>"),
            Codelet::MaxPool { grad, dtype } => {
                format!("{}<{dtype}>", if *grad { "MaxPoolGrad" } else { "MaxPool" })
            }
            Codelet::Fused { program } => {
                let parts: Vec<String> = program
                    .steps
                    .iter()
                    .map(|s| {
                        let args: Vec<String> = s
                            .args
                            .iter()
                            .map(|a| match a {
                                FusedArg::Leaf(i) => format!("in{i}"),
                                FusedArg::Step(i) => format!("t{i}"),
                            })
                            .collect();
                        let scale = match s.codelet {
                            Codelet::ScaledAdd { .. } => {
                                format!(",{}", f32::from_bits(s.scale_bits))
                            }
                            _ => String::new(),
                        };
                        format!("{}({}{scale})", s.codelet.full_name(), args.join(","))
                    })
                    .collect();
                format!("Fused<{}>", parts.join(";"))
            }
        }
    }
}

impl Codelet {
    /// True when PopLibs' vertex for this work is one vertex per tile whose workers split
    /// the work among themselves — a `MultiVertex` (the element-wise `UnaryOp`/`BinaryOp`/
    /// `ScaledAdd`/`Cast`/`Select`/`Fill` 1D and 2D vertices, `MaxPooling`) or a
    /// `SupervisorVertex` (the convolution and matmul partials, `ConvPartialnx1`,
    /// `ConvPartial1x1Out`) — rather than one vertex per worker (the reductions, arg-max and
    /// softmax vertices). Our executable holds a window group, a reduction's block, a
    /// `Fill`'s slice and an element-wise group whose output is one run of positions as one
    /// [`crate::executable::Vertex`] split among the workers ([`crate::workers`]), the
    /// other codelets as a vertex per worker; the memory plan charges vertex state as
    /// PopLibs' vertices hold it either way.
    pub fn is_multi_vertex(&self) -> bool {
        !matches!(
            self,
            Codelet::Reduce { .. }
                | Codelet::ArgMax { .. }
                | Codelet::Softmax { .. }
                | Codelet::SoftmaxCrossEntropy { .. }
                | Codelet::SoftmaxStage { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{BroadcastAccess, Codelet, FusedArg, FusedLeaf, FusedStep};
    use ipusim_ir::{DType, UnaryOp};

    #[test]
    fn a_fused_codelet_keeps_its_json_fields_and_takes_16_bytes() {
        let leaf = FusedLeaf {
            dtype: DType::F32,
            scalar: false,
        };
        let neg = Codelet::Unary {
            op: UnaryOp::Neg,
            dtype: DType::F32,
        };
        let step = FusedStep::new(neg, vec![FusedArg::Leaf(0)], 1.0);
        let c = Codelet::fused(vec![leaf], vec![step]);
        // Executables are written as JSON: the variant's fields as before they were shared.
        let text = serde_json::to_string(&c).unwrap();
        let fields = r#"{"Fused":{"leaves":[{"dtype":"F32","scalar":false}],"steps":[{"#;
        assert!(text.starts_with(fields), "{text}");
        assert_eq!(serde_json::from_str::<Codelet>(&text).unwrap(), c);
        assert_eq!(std::mem::size_of::<Codelet>(), 16);
    }

    #[test]
    fn a_broadcast_read_keeps_its_file_fields_and_shares_its_pattern_when_cloned() {
        let b = BroadcastAccess::new(&[3, 4], &[0, 1], 5, 2);
        let text = ron::to_string(&b).unwrap();
        assert_eq!(text, "(dims:[3,4],strides:[0,1],start:5,base:2)");
        assert_eq!(ron::from_str::<BroadcastAccess>(&text).unwrap(), b);
        let c = b.clone();
        assert!(std::sync::Arc::ptr_eq(&b.pattern, &c.pattern));
        assert_eq!(std::mem::size_of::<BroadcastAccess>(), 24);
        // Position 6 of [3, 4] is (1, 2): index 1·0 + 2·1.
        assert_eq!(b.index(6), 2);
    }
}
