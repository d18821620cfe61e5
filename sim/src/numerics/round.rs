//! Rounding an exact value to FP16 (round-to-nearest-even or stochastic) and to FP32
//! (round-to-nearest-even), with the IPU's overflow policy. Every FP16-producing operation
//! in ipusim ends here, so this module is where "rounded once from the exact result" holds.
//!
//! ## The exact value
//!
//! An operation hands over its exact result as an `f64` `x` plus a [`Tail`]: `Exact` when
//! `x` *is* the result (f16 ± f16 and f16 × f16 are exact in `f64`, numerics.md §5.1), or
//! `Above`/`Below` when the result is not representable in `f64` and lies strictly between
//! `x` and its `f64` neighbour in that direction (division and square root get the sign of
//! the residual from an exact FMA; sums of an f16 and an f32 from TwoSum). Because every
//! FP16 midpoint and every stochastic-rounding threshold (a multiple of 2^-32 of an FP16
//! gap) is itself an `f64` number, `x` and the tail decide both exactly.
//!
//! ## Round to nearest, ties to even
//!
//! IEEE 754 roundTiesToEven onto the FP16 grid (subnormals included, spacing 2^-24 below
//! 2^-14). A tie with a non-zero tail is not a tie.
//!
//! ## Stochastic rounding (numerics.md §3.2–3.4)
//!
//! For an exact value `v` with FP16 neighbours `a < v < b`, the result is `b` with
//! probability `(v − a)/(b − a)` and `a` otherwise; representable values never move. The
//! fraction `f = (v − a)/(b − a)` is truncated to [`SR_BITS`] bits, `F = ⌊f·2^32⌋`, and one
//! draw `r` (uniform on `0..2^32`) rounds up iff `r < F`, so `P(up) = F/2^32`. This is
//! exact whenever `f` has at most 32 significant fraction bits, which covers every FP16
//! addition and subtraction (the sum is a multiple of 2^-24 and the gap at most 2^5, so `f`
//! is a multiple of 2^-29), every FP16 multiplication (a multiple of 2^-24), every f32→f16
//! conversion of a value of magnitude ≥ 2^-33, and all vectors of numerics.md §3.2/§3.4
//! (e.g. `1 + 2^-24` rounds up with probability exactly 2^-14). Where `f` needs more bits
//! (quotients, square roots, tiny f32 inputs) the probability is low by less than 2^-32.
//! The hardware's bit count is not public (numerics.md §2.4); 32 bits is one PCG32 draw.
//!
//! Every stochastic rounding consumes exactly one draw, even for NaN, infinite or exact
//! inputs, so stream positions never depend on data.
//!
//! ## Overflow (numerics.md §2.2 \[S13\]\[S18\])
//!
//! Applied after rounding: an FP16 result whose rounded magnitude exceeds 65504 (RNE: the
//! exact magnitude is ≥ 65520; SR: it rounded up past 65504) saturates to ±65504 with OFLO
//! when `nanoo` is off, and becomes NaN with OFLO and INV when `nanoo` is on. Infinite
//! inputs are not overflow: they stay infinite without flags. FP32 is IEEE: a finite value
//! that rounds beyond `f32::MAX` gives ±inf and OFLO.
//!
//! NaN results are the canonical quiet NaNs `0x7e00` (FP16) and `0x7fc00000` (FP32).

use half::f16;

use super::flags::{FpCtl, FpSts};
use super::rng::SrRng;

/// Number of random bits one stochastic rounding uses (one PCG32 draw).
pub const SR_BITS: u32 = 32;

/// The canonical FP16 NaN (`half::f16::NAN`, numerics.md §1.1).
pub const F16_NAN: f16 = f16::from_bits(0x7e00);
/// The canonical FP32 NaN.
pub const F32_NAN: f32 = f32::from_bits(0x7fc0_0000);
/// The largest finite FP16 value, 65504 (`0x7bff`).
pub const F16_MAX_BITS: u16 = 0x7bff;

/// Where the exact value lies relative to the `f64` approximation it comes with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tail {
    /// The `f64` value is the exact value.
    #[default]
    Exact,
    /// The exact value is greater than the `f64` value, and less than its next `f64` up.
    Above,
    /// The exact value is less than the `f64` value, and greater than its next `f64` down.
    Below,
}

impl Tail {
    /// The tail of a value `hi + lo` whose `lo` is the (exactly representable) error term.
    pub fn of(lo: f64) -> Tail {
        if lo > 0.0 {
            Tail::Above
        } else if lo < 0.0 {
            Tail::Below
        } else {
            Tail::Exact
        }
    }

    fn flip(self) -> Tail {
        match self {
            Tail::Exact => Tail::Exact,
            Tail::Above => Tail::Below,
            Tail::Below => Tail::Above,
        }
    }
}

/// How FP16 results are rounded: to nearest even, or stochastically with bits from an
/// [`SrRng`]; and whether FP16 overflow gives NaN (`nanoo`) or saturates.
///
/// A worker builds one from its `$FP_CTL` and its stream ([`Rounding::from_ctl`]) and
/// passes `&mut` to every FP16-producing operation. FP32 operations take no `Rounding`:
/// FP32 results are always rounded to nearest even (numerics.md §2.4: every documented
/// stochastic-rounding site produces FP16).
#[derive(Debug)]
pub struct Rounding<'r> {
    rng: Option<&'r mut SrRng>,
    nanoo: bool,
}

impl Rounding<'static> {
    /// Round to nearest, ties to even.
    pub fn nearest(nanoo: bool) -> Rounding<'static> {
        Rounding { rng: None, nanoo }
    }
}

impl<'r> Rounding<'r> {
    /// Stochastic rounding with bits drawn from `rng`.
    pub fn stochastic(rng: &'r mut SrRng, nanoo: bool) -> Rounding<'r> {
        Rounding {
            rng: Some(rng),
            nanoo,
        }
    }

    /// Stochastic rounding from `rng` if `sr`, else round to nearest even.
    pub fn new(sr: bool, nanoo: bool, rng: &'r mut SrRng) -> Rounding<'r> {
        Rounding {
            rng: sr.then_some(rng),
            nanoo,
        }
    }

    /// The rounding a worker with control bits `ctl` uses (ESR and NANOO).
    pub fn from_ctl(ctl: FpCtl, rng: &'r mut SrRng) -> Rounding<'r> {
        Rounding::new(ctl.contains(FpCtl::ESR), ctl.contains(FpCtl::NANOO), rng)
    }

    /// Whether FP16 results are rounded stochastically.
    pub fn is_stochastic(&self) -> bool {
        self.rng.is_some()
    }

    /// Whether FP16 overflow gives NaN (with INV) instead of ±65504.
    pub fn nanoo(&self) -> bool {
        self.nanoo
    }

    /// The random stream, when rounding stochastically.
    pub fn rng(&mut self) -> Option<&mut SrRng> {
        self.rng.as_deref_mut()
    }

    /// The draw for one rounding (stochastic mode), consumed whatever the value.
    #[inline]
    pub(crate) fn draw(&mut self) -> Option<u32> {
        self.rng.as_deref_mut().map(SrRng::next_u32)
    }

    /// Rounds the exact value `x` (+ `tail`) once to FP16, applying the overflow policy.
    ///
    /// NaN gives the canonical NaN with INV; ±inf stays ±inf without flags.
    #[inline]
    pub fn round_f16(&mut self, x: f64, tail: Tail) -> (f16, FpSts) {
        let draw = self.draw();
        self.round_f16_with(x, tail, draw)
    }

    /// [`Rounding::round_f16`] with the draw already taken (`None`: nearest even).
    #[inline]
    pub(crate) fn round_f16_with(&self, x: f64, tail: Tail, draw: Option<u32>) -> (f16, FpSts) {
        if x.is_nan() {
            return (F16_NAN, FpSts::INV);
        }
        let sign = if x.is_sign_negative() { 0x8000u16 } else { 0 };
        if x.is_infinite() {
            return (f16::from_bits(sign | 0x7c00), FpSts::empty());
        }
        let tail = if sign != 0 { tail.flip() } else { tail };
        let bits = round_magnitude(x.abs(), tail, draw);
        if bits >= 0x7c00 {
            return self.overflow_f16(sign != 0);
        }
        (f16::from_bits(sign | bits as u16), FpSts::empty())
    }

    /// The result of an FP16 overflow: ±65504 with OFLO, or NaN with OFLO and INV (`nanoo`).
    #[inline]
    pub fn overflow_f16(&self, negative: bool) -> (f16, FpSts) {
        if self.nanoo {
            (F16_NAN, FpSts::OFLO | FpSts::INV)
        } else {
            let sign = if negative { 0x8000 } else { 0 };
            (f16::from_bits(sign | F16_MAX_BITS), FpSts::OFLO)
        }
    }
}

/// `2^k` for `-1022 <= k <= 1023`.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    f64::from_bits(((1023 + k) as u64) << 52)
}

/// Rounds a finite magnitude `mag >= 0` (plus `tail`, in the magnitude's direction) onto
/// the FP16 grid: nearest even when `draw` is `None`, else stochastically with `draw`.
/// Returns the FP16 magnitude bits; `>= 0x7c00` means the result overflowed.
#[inline]
pub(crate) fn round_magnitude(mag: f64, tail: Tail, draw: Option<u32>) -> u32 {
    // Stochastic rounding of a value just below `mag`: the next f64 down lies in the same
    // cell and below the same thresholds as the exact value (see the module docs).
    let m = match (draw, tail) {
        (Some(_), Tail::Below) if mag > 0.0 => f64::from_bits(mag.to_bits() - 1),
        _ => mag,
    };
    if m >= 65536.0 {
        return 0x7c00;
    }
    if m == 0.0 {
        return 0;
    }
    let e = ((m.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let e = e.max(-14);
    let t = m * pow2(10 - e); // exact: a power-of-two scaling, 0 <= t < 2048
    let i = t as u32; // floor
    let frac = t - f64::from(i); // exact
    let up = match draw {
        None => {
            frac > 0.5
                || (frac == 0.5
                    && match tail {
                        Tail::Above => true,
                        Tail::Below => false,
                        Tail::Exact => i & 1 == 1,
                    })
        }
        Some(r) => u64::from(r) < (frac * 4_294_967_296.0) as u64,
    };
    (((e + 14) as u32) << 10) + i + u32::from(up)
}

/// The exact value `x + y` of two `f64` numbers as `hi` plus the error term `lo` (TwoSum,
/// Knuth: `hi + lo == x + y` exactly for finite values); `Tail::of(lo)` is its tail.
#[inline(always)]
pub(crate) fn two_sum(x: f64, y: f64) -> (f64, f64) {
    let hi = x + y;
    let yy = hi - x;
    (hi, (x - (hi - yy)) + (y - yy))
}

/// Rounds the value `x` (exact, or the `f64` result of a transcendental function) once to
/// FP32, nearest even: a finite `x` that overflows gives ±inf with OFLO; NaN gives the
/// canonical NaN with INV.
#[inline]
pub fn round_f32(x: f64) -> (f32, FpSts) {
    if x.is_nan() {
        return (F32_NAN, FpSts::INV);
    }
    let y = x as f32; // IEEE roundTiesToEven from f64, one rounding
    if y.is_infinite() && x.is_finite() {
        (y, FpSts::OFLO)
    } else {
        (y, FpSts::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rne(x: f64) -> u16 {
        Rounding::nearest(false)
            .round_f16(x, Tail::Exact)
            .0
            .to_bits()
    }

    #[test]
    fn nearest_even_on_the_grid() {
        assert_eq!(rne(1.0), 0x3c00);
        assert_eq!(rne(1.0 + 2f64.powi(-11)), 0x3c00); // tie to even
        assert_eq!(rne(1.0 + 3.0 * 2f64.powi(-11)), 0x3c02); // tie to even
        assert_eq!(rne(1.0 + 2f64.powi(-11) + 2f64.powi(-40)), 0x3c01); // sticky
        assert_eq!(rne(2f64.powi(-25)), 0x0000);
        assert_eq!(rne(2f64.powi(-25) * (1.0 + f64::EPSILON)), 0x0001);
        assert_eq!(rne(3.0 * 2f64.powi(-26)), 0x0001);
        assert_eq!(rne(2f64.powi(-14) - 2f64.powi(-25)), 0x0400); // into the normals
        assert_eq!(rne(-0.0), 0x8000);
        assert_eq!(rne(-2f64.powi(-26)), 0x8000);
        assert_eq!(rne(65519.0), 0x7bff);
        assert_eq!(rne(1e-300), 0);
    }

    #[test]
    fn tails_break_ties() {
        let tie = 1.0 + 2f64.powi(-11);
        let r = Rounding::nearest(false);
        assert_eq!(r.round_f16_with(tie, Tail::Above, None).0.to_bits(), 0x3c01);
        assert_eq!(r.round_f16_with(tie, Tail::Below, None).0.to_bits(), 0x3c00);
        assert_eq!(
            r.round_f16_with(-tie, Tail::Below, None).0.to_bits(),
            0xbc01
        );
        // A grid point with a tail stays put under nearest rounding.
        assert_eq!(r.round_f16_with(1.0, Tail::Below, None).0.to_bits(), 0x3c00);
    }

    #[test]
    fn stochastic_thresholds_respect_tails() {
        let r = Rounding::nearest(false);
        // f = 1/4 exactly: up iff draw < 2^30.
        let x = 1.0 + 2f64.powi(-12);
        let sr = |tail, draw| r.round_f16_with(x, tail, Some(draw)).0.to_bits();
        assert_eq!(sr(Tail::Exact, (1 << 30) - 1), 0x3c01);
        assert_eq!(sr(Tail::Exact, 1 << 30), 0x3c00);
        assert_eq!(sr(Tail::Above, (1 << 30) - 1), 0x3c01);
        assert_eq!(sr(Tail::Below, (1 << 30) - 1), 0x3c00);
        assert_eq!(sr(Tail::Below, (1 << 30) - 2), 0x3c01);
        // Just below a grid point: up with probability 1 - 2^-32, across a binade.
        let g = |tail, draw| r.round_f16_with(2.0, tail, Some(draw)).0.to_bits();
        assert_eq!(g(Tail::Below, u32::MAX - 1), 0x4000);
        assert_eq!(g(Tail::Below, u32::MAX), 0x3fff);
        assert_eq!(g(Tail::Exact, u32::MAX), 0x4000);
        assert_eq!(g(Tail::Above, u32::MAX), 0x4000);
    }

    #[test]
    fn overflow_policy() {
        let sat = Rounding::nearest(false);
        let nan = Rounding::nearest(true);
        assert_eq!(
            sat.round_f16_with(65520.0, Tail::Exact, None),
            (f16::from_bits(0x7bff), FpSts::OFLO)
        );
        assert_eq!(
            sat.round_f16_with(-1e10, Tail::Exact, None),
            (f16::from_bits(0xfbff), FpSts::OFLO)
        );
        let (v, f) = nan.round_f16_with(1e5, Tail::Exact, None);
        assert_eq!((v.to_bits(), f), (0x7e00, FpSts::OFLO | FpSts::INV));
        assert_eq!(
            nan.round_f16_with(f64::NEG_INFINITY, Tail::Exact, None),
            (f16::NEG_INFINITY, FpSts::empty())
        );
        // SR may round 65519.996 up into overflow, or down to 65504.
        let x = f64::from(f32::from_bits(0x477f_efff));
        assert_eq!(sat.round_f16_with(x, Tail::Exact, Some(0)).1, FpSts::OFLO);
        assert_eq!(
            sat.round_f16_with(x, Tail::Exact, Some(u32::MAX)),
            (f16::from_bits(0x7bff), FpSts::empty())
        );
        assert_eq!(
            sat.round_f16_with(65504.0, Tail::Exact, Some(0)),
            (f16::from_bits(0x7bff), FpSts::empty())
        );
    }

    #[test]
    fn f32_rounding_flags() {
        assert_eq!(round_f32(1e39), (f32::INFINITY, FpSts::OFLO));
        assert_eq!(round_f32(f64::INFINITY), (f32::INFINITY, FpSts::empty()));
        assert_eq!(round_f32(f64::NAN).0.to_bits(), 0x7fc0_0000);
        assert_eq!(round_f32(1.0 + 2f64.powi(-24)), (1.0, FpSts::empty()));
    }

    #[test]
    fn every_stochastic_rounding_draws_once() {
        let mut rng = SrRng::new(1, 0, 0);
        let mut reference = rng.clone();
        let mut r = Rounding::stochastic(&mut rng, false);
        for x in [f64::NAN, f64::INFINITY, 1.0, 1.5e-5, 1e9] {
            r.round_f16(x, Tail::Exact);
        }
        reference.advance(5);
        assert_eq!(r.rng().cloned(), Some(reference));
    }
}
