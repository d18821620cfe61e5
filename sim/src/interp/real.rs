//! The element arithmetic of the reference interpreter, generic over the three float
//! storages: `half::f16` (FP16), `f32` (FP32) and `f64` (exact mode).
//!
//! One [`Real`] trait, three implementations, so every float kernel is written once:
//! - **f16**: the numerics core's FP16 operations, rounded with the run's [`Rounding`]
//!   (nearest even, or stochastic from the interpreter's [`SrRng`] when ESR is on);
//!   accumulations (reductions, softmax, loss, matmul partials) happen in **f32**
//!   ([`Real::Acc`]) and are narrowed once at the end — the IPU's FP32 partials.
//! - **f32**: the numerics core's FP32 operations, always nearest even.
//! - **f64** (exact mode): native `f64` arithmetic, no flags; the elementary functions are
//!   the numerics core's `f64` evaluations before rounding. This is the reference for finite
//!   differences, not a model of the IPU.
//!
//! Every operation ORs the flags it raised into the context ([`Cx`]).

use crate::numerics::kernels::amp::{self, MatMulShape, AMP_CHUNK};
use crate::numerics::{
    cast, fp16, fp32, round, transcendental, ArithOp, CompareOp, FpConfig, FpSts, NumericsError,
    Rounding, SrRng, StochasticRounding, Tail, UnaryOp,
};
use crate::tensor::Data;
use half::f16;
use ipusim_ir::Activation;

/// A scale attribute (ScaledAdd's, a mean's `1/n`) rounded to nearest even to f32, as the
/// compiler's vertices hold it.
pub(crate) fn f32_scale(scale: f64) -> f32 {
    round::round_f32(scale).0
}

/// The numerics context of an evaluation: rounding mode, random stream, raised flags.
#[derive(Debug)]
pub(crate) struct Cx {
    rng: SrRng,
    sr: bool,
    nanoo: bool,
    /// Exact mode: float tensors are `f64`.
    pub exact: bool,
    /// Flags raised since they were last taken.
    pub flags: FpSts,
}

impl Cx {
    /// The context of a run with `config`; stochastic rounding draws from the stream of
    /// (`seed`, tile 0, worker 0). The interpreter is untiled, so `ReplicaIdenticalOnly`
    /// applies SR everywhere (a single replica is replica-identical).
    pub fn new(config: &FpConfig, seed: u64, exact: bool) -> Cx {
        Cx {
            rng: SrRng::new(seed, 0, 0),
            sr: !matches!(config.esr, StochasticRounding::Off),
            nanoo: config.nanoo,
            exact,
            flags: FpSts::empty(),
        }
    }

    /// The rounding FP16 results use.
    pub fn rounding(&mut self) -> Rounding<'_> {
        Rounding::new(self.sr, self.nanoo, &mut self.rng)
    }

    /// Records raised flags.
    pub fn raise(&mut self, flags: FpSts) {
        self.flags |= flags;
    }

    /// Takes (and clears) the flags raised so far.
    pub fn take_flags(&mut self) -> FpSts {
        std::mem::take(&mut self.flags)
    }

    /// Records the flags of a result and returns its value.
    fn keep<T>(&mut self, (v, f): (T, FpSts)) -> T {
        self.flags |= f;
        v
    }
}

/// An element type of tensor storage: how to find and wrap its [`Data`].
pub(crate) trait Elem: Copy + Default + std::fmt::Debug + 'static {
    /// The elements, if `d` stores this type.
    fn get(d: &Data) -> Option<&[Self]>;
    /// Wraps elements as data.
    fn wrap(v: Vec<Self>) -> Data;
}

macro_rules! elem {
    ($t:ty, $variant:ident) => {
        impl Elem for $t {
            fn get(d: &Data) -> Option<&[$t]> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn wrap(v: Vec<$t>) -> Data {
                Data::$variant(v)
            }
        }
    };
}
elem!(f16, F16);
elem!(f32, F32);
elem!(f64, F64);
elem!(i32, I32);
elem!(u8, U8);
elem!(bool, Bool);

/// A float storage the interpreter computes in.
pub(crate) trait Real: Elem + PartialOrd {
    /// The type accumulations happen in (f32 for f16; itself otherwise).
    type Acc: Real<Acc = Self::Acc>;
    /// Zero.
    const ZERO: Self;
    /// `x` rounded once to this type with the run's rounding (stochastic for f16 under ESR);
    /// for fused operations computed in `f64`.
    fn round(x: f64, cx: &mut Cx) -> Self;
    /// Exact widening to the accumulation type.
    fn widen(self) -> Self::Acc;
    /// Rounds an accumulated value to this type with the run's rounding.
    fn narrow(x: Self::Acc, cx: &mut Cx) -> Self;
    /// A binary operation.
    fn binary(op: ArithOp, a: Self, b: Self, cx: &mut Cx) -> Self;
    /// A unary operation.
    fn unary(op: UnaryOp, a: Self, cx: &mut Cx) -> Self;
    /// A comparison (INV with NaN operands).
    fn compare(op: CompareOp, a: Self, b: Self, cx: &mut Cx) -> bool;
    /// `a + s·b` with `s` = `scale` rounded to f32, one rounding of the exact value (exact
    /// mode: the unrounded scale).
    fn scaled_add(a: Self, scale: f64, b: Self, cx: &mut Cx) -> Self;
    /// The activation gradient `dy · f'(x)` of the numerics core.
    fn activation_grad(act: Activation, x: Self, dy: Self, cx: &mut Cx) -> Self;
    /// `acc · s` rounded once to this type, `s` = `scale` rounded to f32 (a mean's scale;
    /// exact mode: the unrounded scale).
    fn scale_narrow(acc: Self::Acc, scale: f64, cx: &mut Cx) -> Self;
    /// `x / y` of accumulated values, rounded once to this type.
    fn quotient(x: Self::Acc, y: Self::Acc, cx: &mut Cx) -> Self;
    /// `x − y` of accumulated values, rounded once to this type.
    fn difference(x: Self::Acc, y: Self::Acc, cx: &mut Cx) -> Self;
    /// `a[m×k] · b[k×n]`, row-major, with the AMP conventions of the numerics core.
    fn matmul(
        s: MatMulShape,
        a: &[Self],
        b: &[Self],
        cx: &mut Cx,
    ) -> Result<Vec<Self>, NumericsError>;
}

impl Real for f16 {
    type Acc = f32;
    const ZERO: f16 = f16::ZERO;
    fn round(x: f64, cx: &mut Cx) -> f16 {
        let r = cx.rounding().round_f16(x, Tail::Exact);
        cx.keep(r)
    }
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(x: f32, cx: &mut Cx) -> f16 {
        let r = cast::f32_to_f16(x, &mut cx.rounding());
        cx.keep(r)
    }
    fn binary(op: ArithOp, a: f16, b: f16, cx: &mut Cx) -> f16 {
        let r = fp16::binary(op, a, b, &mut cx.rounding());
        cx.keep(r)
    }
    fn unary(op: UnaryOp, a: f16, cx: &mut Cx) -> f16 {
        let r = fp16::unary(op, a, &mut cx.rounding());
        cx.keep(r)
    }
    fn compare(op: CompareOp, a: f16, b: f16, cx: &mut Cx) -> bool {
        cx.keep(fp16::compare(op, a, b))
    }
    fn scaled_add(a: f16, scale: f64, b: f16, cx: &mut Cx) -> f16 {
        let r = fp16::scaled_add(a, f32_scale(scale), b, &mut cx.rounding());
        cx.keep(r)
    }
    fn activation_grad(act: Activation, x: f16, dy: f16, cx: &mut Cx) -> f16 {
        let r = fp16::activation_grad(act, x, dy, &mut cx.rounding());
        cx.keep(r)
    }
    fn scale_narrow(acc: f32, scale: f64, cx: &mut Cx) -> f16 {
        // f32 × f32 is exact in f64: one rounding of the exact product.
        let exact = f64::from(acc) * f64::from(f32_scale(scale));
        let r = cx.rounding().round_f16(exact, Tail::Exact);
        cx.keep(r)
    }
    fn quotient(x: f32, y: f32, cx: &mut Cx) -> f16 {
        let r = fp16::div_wide(f64::from(x), f64::from(y), &mut cx.rounding());
        cx.keep(r)
    }
    fn difference(x: f32, y: f32, cx: &mut Cx) -> f16 {
        let r = fp16::add_wide(f64::from(x), -f64::from(y), &mut cx.rounding());
        cx.keep(r)
    }
    fn matmul(
        s: MatMulShape,
        a: &[f16],
        b: &[f16],
        cx: &mut Cx,
    ) -> Result<Vec<f16>, NumericsError> {
        // FP16 inputs, FP32 partials (PopLibs' default partialsType float), then one
        // rounding of every result to FP16 (the f32 -> f16 write, an SR site).
        let mut partials = vec![0f32; s.m * s.n];
        let f = amp::amp_matmul_f32_partials(s, a, b, &mut partials, AMP_CHUNK)?;
        cx.raise(f);
        Ok(partials.into_iter().map(|p| f16::narrow(p, cx)).collect())
    }
}

impl Real for f32 {
    type Acc = f32;
    const ZERO: f32 = 0.0;
    fn round(x: f64, cx: &mut Cx) -> f32 {
        cx.keep(round::round_f32(x))
    }
    fn widen(self) -> f32 {
        self
    }
    fn narrow(x: f32, _: &mut Cx) -> f32 {
        x
    }
    fn binary(op: ArithOp, a: f32, b: f32, cx: &mut Cx) -> f32 {
        cx.keep(fp32::binary(op, a, b))
    }
    fn unary(op: UnaryOp, a: f32, cx: &mut Cx) -> f32 {
        cx.keep(fp32::unary(op, a))
    }
    fn compare(op: CompareOp, a: f32, b: f32, cx: &mut Cx) -> bool {
        cx.keep(fp32::compare(op, a, b))
    }
    fn scaled_add(a: f32, scale: f64, b: f32, cx: &mut Cx) -> f32 {
        cx.keep(fp32::scaled_add(a, f32_scale(scale), b))
    }
    fn activation_grad(act: Activation, x: f32, dy: f32, cx: &mut Cx) -> f32 {
        cx.keep(fp32::activation_grad(act, x, dy))
    }
    fn scale_narrow(acc: f32, scale: f64, cx: &mut Cx) -> f32 {
        cx.keep(round::round_f32(
            f64::from(acc) * f64::from(f32_scale(scale)),
        ))
    }
    fn quotient(x: f32, y: f32, cx: &mut Cx) -> f32 {
        cx.keep(fp32::div(x, y))
    }
    fn difference(x: f32, y: f32, cx: &mut Cx) -> f32 {
        cx.keep(fp32::sub(x, y))
    }
    fn matmul(
        s: MatMulShape,
        a: &[f32],
        b: &[f32],
        cx: &mut Cx,
    ) -> Result<Vec<f32>, NumericsError> {
        let mut out = vec![0f32; s.m * s.n];
        let f = amp::matmul_f32(s, a, b, &mut out, AMP_CHUNK)?;
        cx.raise(f);
        Ok(out)
    }
}

impl Real for f64 {
    type Acc = f64;
    const ZERO: f64 = 0.0;
    fn round(x: f64, _: &mut Cx) -> f64 {
        x
    }
    fn widen(self) -> f64 {
        self
    }
    fn narrow(x: f64, _: &mut Cx) -> f64 {
        x
    }
    fn binary(op: ArithOp, a: f64, b: f64, _: &mut Cx) -> f64 {
        match op {
            ArithOp::Add => a + b,
            ArithOp::Sub => a - b,
            ArithOp::Mul => a * b,
            ArithOp::Div => a / b,
            ArithOp::Min => a.min(b),
            ArithOp::Max => a.max(b),
        }
    }
    fn unary(op: UnaryOp, a: f64, _: &mut Cx) -> f64 {
        transcendental::eval(op, a).0
    }
    fn compare(op: CompareOp, a: f64, b: f64, _: &mut Cx) -> bool {
        op.holds(a, b)
    }
    fn scaled_add(a: f64, scale: f64, b: f64, _: &mut Cx) -> f64 {
        a + scale * b
    }
    fn activation_grad(act: Activation, x: f64, dy: f64, _: &mut Cx) -> f64 {
        if act == Activation::Relu {
            return if x > 0.0 { dy } else { 0.0 };
        }
        dy * transcendental::activation_derivative(act, x)
    }
    fn scale_narrow(acc: f64, scale: f64, _: &mut Cx) -> f64 {
        acc * scale
    }
    fn quotient(x: f64, y: f64, _: &mut Cx) -> f64 {
        x / y
    }
    fn difference(x: f64, y: f64, _: &mut Cx) -> f64 {
        x - y
    }
    fn matmul(s: MatMulShape, a: &[f64], b: &[f64], _: &mut Cx) -> Result<Vec<f64>, NumericsError> {
        let mut out = vec![0f64; s.m * s.n];
        for i in 0..s.m {
            for j in 0..s.n {
                out[i * s.n + j] = (0..s.k).map(|kk| a[i * s.k + kk] * b[kk * s.n + j]).sum();
            }
        }
        Ok(out)
    }
}
