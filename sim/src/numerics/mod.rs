//! IPU floating-point numerics: FP16/FP32 scalar arithmetic, rounding (nearest even and
//! stochastic), `$FP_CTL`/`$FP_STS`, casts, slice kernels and the `ipusim fp` calculator.
//!
//! Everything that computes a value in ipusim — the reference interpreter, the simulator's
//! codelets, the calculator — goes through this module, so these rules hold everywhere.
//! Sources are tags of `reference/numerics.md` (§8).
//!
//! ## Rules
//!
//! 1. **One rounding from the exact result.** Every FP16 result is rounded once from the
//!    exact value of the operation: sums and products of FP16 values are exact in `f64`;
//!    quotients and square roots carry the sign of an exact FMA residual; sums of FP16 and
//!    FP32 values (AMP partial writes) use TwoSum ([`round`], [`fp16`]). Nothing rounds
//!    through an f32 intermediate where that double-rounds (`1 + 2^-24` stays a non-tie and
//!    rounds up with probability 2^-14, numerics.md §3.2). `half::f16::from_f64`, its
//!    `Sum`/`Product` and `mul_add` are never used: they are not correctly rounded (§0, §1.1).
//! 2. **Elementary functions** (`exp`, `log`, `tanh`, `sigmoid`, `gelu`) are computed in
//!    `f64` and rounded once to the destination type (module `transcendental`).
//! 3. **Stochastic rounding** (ESR) applies to FP16 results only: up with probability
//!    `(x − a)/(b − a)` from the exact value, resolved to [`round::SR_BITS`] = 32 bits (exact
//!    for all FP16 sums and products); representable values never move; one draw per
//!    rounding from the worker's [`SrRng`] (a `rand_pcg` PCG32 stream derived from
//!    (seed, tile, worker)). FP32 results are always round-to-nearest-even: no public source
//!    says the IPU rounds FP32 arithmetic stochastically (§2.4).
//! 4. **FP16 overflow** (after rounding): `nanoo` off → ±65504 with OFLO; `nanoo` on → NaN
//!    with OFLO and INV (§2.2 \[S13\]\[S18\]). **FP32 overflow**: ±inf with OFLO. Infinite
//!    operands propagate without OFLO.
//! 5. **DIV0**: a finite non-zero number divided by zero; FP16 gives NaN (Graphcore's
//!    hardware test: FP16 `10000/0` = NaN, §2.3 \[S18\]), FP32 gives ±inf (IEEE; our choice).
//!    `log(±0) = -inf` also raises DIV0.
//! 6. **INV**: `inf − inf`, `0/0`, `inf/inf`, `0 × inf`, `sqrt`/`log` of a negative number,
//!    any NaN operand, comparisons with NaN, float→int casts of NaN or out-of-range values
//!    (§2.2 \[S13\]).
//! 7. **NaN results** are the canonical `0x7e00` (FP16) and `0x7fc00000` (FP32).
//! 8. **Subnormals** are kept in both formats (gradual underflow).
//!
//! ## Map
//!
//! - [`flags`]: `FpCtl`, `FpSts`, `FpConfig`, `StochasticRounding`.
//! - [`rng`]: `SrRng`, the per-(tile, worker) stream.
//! - [`round`]: `Rounding` (the context every FP16 operation takes), `Tail`, the FP16/FP32
//!   rounding cores and the overflow policy.
//! - [`fp16`], [`fp32`]: scalar operations; [`ops`]: the operation enums.
//! - [`int`]: wrapping integer arithmetic of I32/U8.
//! - [`cast`]: conversions; [`decimal`]: correctly rounded decimal literals.
//! - [`kernels`]: slice kernels (f32→f16 conversion, AMP dot/matmul).
//! - [`expr`]: the calculator behind `ipusim fp`.

pub mod cast;
pub mod decimal;
mod error;
mod exact;
pub mod expr;
pub mod flags;
pub mod fp16;
pub mod fp32;
pub mod int;
pub mod kernels;
pub mod ops;
pub mod rng;
pub mod round;
mod simd;
pub(crate) mod transcendental;

pub use error::NumericsError;
pub use flags::{FpConfig, FpCtl, FpSts, StochasticRounding};
pub use kernels::amp::{MatMulShape, AMP_CHUNK};
pub use ops::{ArithOp, CompareOp, UnaryOp};
pub use rng::SrRng;
pub use round::{Rounding, Tail, SR_BITS};
