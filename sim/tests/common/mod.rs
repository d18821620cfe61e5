//! Helpers shared by the numerics integration tests: a deterministic operand generator that
//! covers every floating-point class, and trial counts scaled for debug builds.

#![allow(dead_code)]

use ipusim_sim::numerics::SrRng;

/// `full` in release builds (where `cargo test --workspace --release` runs the heavy
/// tests); a twentieth of it in debug builds, so `cargo test` stays quick. Statistical
/// bounds are derived from the count actually used, so both are valid tests.
pub fn trials(full: usize) -> usize {
    if cfg!(debug_assertions) {
        full / 20
    } else {
        full
    }
}

/// Deterministic test randomness (not the stochastic-rounding stream under test).
pub struct Gen(SrRng);

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen(SrRng::new(seed, 0xffff_ffff, 0xffff_ffff))
    }

    pub fn u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    pub fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.u32()) * u64::from(n)) >> 32) as u32
    }

    /// A binary16 bit pattern from a random class: normal (60%), subnormal (15%), zero,
    /// infinity, NaN (quiet and signalling; 5% each), random sign.
    pub fn f16_bits(&mut self) -> u16 {
        let sign = (self.u32() & 1) as u16 * 0x8000;
        let mant = (self.u32() & 0x3ff) as u16;
        let body = match self.below(100) {
            0..=59 => ((1 + self.below(30)) as u16) << 10 | mant,
            60..=74 => mant.max(1),
            75..=79 => 0,
            80..=84 => 0x7c00,
            85..=89 => 0x7c00 | mant.max(1),
            _ => self.u32() as u16 & 0x7fff,
        };
        sign | body
    }

    /// A pair of binary16 operands; a fifth of the pairs are close in magnitude (same or
    /// neighbouring exponent, either sign) so that sums cancel and round at every position.
    pub fn f16_pair(&mut self) -> (u16, u16) {
        let a = self.f16_bits();
        if self.below(5) == 0 && a & 0x7c00 != 0x7c00 {
            let exp = i32::from((a >> 10) & 0x1f) + self.below(3) as i32 - 1;
            let exp = exp.clamp(0, 30) as u16;
            let b = (self.u32() as u16 & 0x8000) | (exp << 10) | (self.u32() as u16 & 0x3ff);
            (a, b)
        } else {
            (a, self.f16_bits())
        }
    }

    /// A binary32 bit pattern from a random class, as [`Gen::f16_bits`].
    pub fn f32_bits(&mut self) -> u32 {
        let sign = (self.u32() & 1) << 31;
        let mant = self.u32() & 0x7f_ffff;
        let body = match self.below(100) {
            0..=59 => (1 + self.below(254)) << 23 | mant,
            60..=74 => mant.max(1),
            75..=79 => 0,
            80..=84 => 0x7f80_0000,
            85..=89 => 0x7f80_0000 | mant.max(1),
            _ => self.u32() & 0x7fff_ffff,
        };
        sign | body
    }

    /// A pair of binary32 operands; half the pairs have exponents within ±26 of each other
    /// (where additions round), the rest are independent (overflow, underflow, absorption).
    pub fn f32_pair(&mut self) -> (u32, u32) {
        let a = self.f32_bits();
        if self.below(2) == 0 && a & 0x7f80_0000 != 0x7f80_0000 {
            let exp = ((a >> 23) & 0xff) as i32 + self.below(53) as i32 - 26;
            let exp = exp.clamp(0, 254) as u32;
            (
                a,
                (self.u32() & 0x8000_0000) | (exp << 23) | (self.u32() & 0x7f_ffff),
            )
        } else {
            (a, self.f32_bits())
        }
    }
}

pub mod programs;
