//! Materialising the values a graph starts from: variable initialisers ([`Init`]) and
//! constant literals ([`Literal`]).
//!
//! The reference interpreter and the BSP engine both call these functions, so a program
//! starts from bit-identical values on both. The rules:
//!
//! - Every value is computed in `f64` and rounded **once, to nearest even**, into the tensor's
//!   dtype by the numerics core (FP16 via `Rounding::nearest`, FP32 via `round_f32`).
//!   A finite value that overflows the dtype is an error, not a silent ±65504 or infinity;
//!   infinities in a literal are kept.
//! - Integer tensors take integral values in range (errors otherwise); Bool takes `v != 0`.
//! - Random initialisers draw from the PCG32 stream `SrRng::new(seed, INIT_TILE, 0)` of the
//!   numerics core (exactly `rand_pcg::Pcg32`'s sequence, with the seed mixed by SplitMix64;
//!   [`INIT_TILE`] is no real tile, so these streams never coincide with a stochastic-rounding
//!   stream). `seed` is the initialiser's own, so a variable's values do not depend on the
//!   rest of the graph. Elements in row-major order:
//!   - a uniform `u = (next_u64 >> 11) · 2^-53` in `[0, 1)` (53 random bits);
//!   - `Uniform { low, high }`: `low + (high - low) · u`; after rounding a value may equal
//!     `high`;
//!   - `Normal { mean, std }`: Box–Muller on two uniforms `u1, u2`:
//!     `r = sqrt(-2 ln(1 - u1))`, elements `mean + std · r cos(2π u2)` then
//!     `mean + std · r sin(2π u2)` (both values of a pair are used, in that order);
//!   - `GlorotUniform`: `Uniform` on `[-l, l)`, `l = sqrt(6 / (fan_in + fan_out))`, with
//!     `fan_in, fan_out` the last two dimensions (rank 1: both the length; rank 0: 1).
//!
//! Random initialisers need a float dtype.

use crate::numerics::{round, Rounding, SrRng, Tail};
use crate::tensor::{Data, Tensor};
use half::f16;
use ipusim_ir::{DType, Init, Literal, TensorType};
use rand_core::RngCore;
use thiserror::Error;

/// The tile index of the initialisers' random streams (`SrRng::new(seed, INIT_TILE, 0)`).
pub const INIT_TILE: u32 = u32::MAX;

/// Why initial values cannot be materialised.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum InitError {
    /// A finite value does not fit the dtype.
    #[error("value {value} overflows {dtype}")]
    Overflow { value: f64, dtype: DType },
    /// An integer or boolean tensor got a value that is not an integer in range.
    #[error("value {value} is not representable in {dtype}")]
    NotIntegral { value: f64, dtype: DType },
    /// A random initialiser on a non-float tensor.
    #[error("random initialiser {init} needs a floating-point variable, got {dtype}")]
    RandomNonFloat { init: &'static str, dtype: DType },
    /// An initialiser parameter is not usable.
    #[error("bad initialiser parameter: {0}")]
    Parameter(String),
    /// A literal with the wrong number of values.
    #[error("literal has {found} values, the shape holds {expected}")]
    Count { expected: usize, found: usize },
}

/// The initial value of a variable of type `ty`.
pub fn variable_tensor(init: &Init, ty: &TensorType) -> Result<Tensor, InitError> {
    let n = ty.num_elements();
    let values = match *init {
        Init::Values(ref v) => {
            if v.len() != n {
                return Err(InitError::Count {
                    expected: n,
                    found: v.len(),
                });
            }
            return tensor_from_f64(ty, v);
        }
        Init::File { ref path, .. } => {
            return Err(InitError::Parameter(format!(
                "the weights file '{path}' was not read (a program holding File initialisers must be loaded from its file)"
            )))
        }
        Init::Zeros => return splat(ty, 0.0),
        Init::Constant(c) => return splat(ty, c),
        Init::Uniform { low, high, seed } => {
            random_float(ty.dtype, "Uniform")?;
            check_finite(&[("low", low), ("high", high)])?;
            if low > high {
                return Err(InitError::Parameter(format!(
                    "Uniform low {low} is greater than high {high}"
                )));
            }
            uniform(seed, n, low, high)
        }
        Init::Normal { mean, std, seed } => {
            random_float(ty.dtype, "Normal")?;
            check_finite(&[("mean", mean), ("std", std)])?;
            if std < 0.0 {
                return Err(InitError::Parameter(format!(
                    "Normal std {std} is negative"
                )));
            }
            normal(seed, n, mean, std)
        }
        Init::GlorotUniform { seed } => {
            random_float(ty.dtype, "GlorotUniform")?;
            let dims = ty.shape.dims();
            let (fan_in, fan_out) = match dims.len() {
                0 => (1, 1),
                1 => (dims[0], dims[0]),
                r => (dims[r - 2], dims[r - 1]),
            };
            let limit = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt();
            uniform(seed, n, -limit, limit)
        }
    };
    tensor_from_f64(ty, &values)
}

/// The value of a constant of type `ty`.
pub fn constant_tensor(value: &Literal, ty: &TensorType) -> Result<Tensor, InitError> {
    match value {
        Literal::Splat(v) => splat(ty, *v),
        Literal::Values(v) => {
            if v.len() != ty.num_elements() {
                return Err(InitError::Count {
                    expected: ty.num_elements(),
                    found: v.len(),
                });
            }
            tensor_from_f64(ty, v)
        }
    }
}

/// A tensor of `ty` whose every element is `v`, rounded once as [`tensor_from_f64`] rounds
/// it (the value converted once and repeated: no `f64` buffer of the tensor's size).
fn splat(ty: &TensorType, v: f64) -> Result<Tensor, InitError> {
    let n = ty.num_elements();
    if n == 0 {
        return tensor_from_f64(ty, &[]);
    }
    let one = tensor_from_f64(&TensorType::new(ty.dtype, [1]), &[v])?;
    let data = match one.into_data() {
        Data::F16(x) => Data::F16(vec![x[0]; n]),
        Data::F32(x) => Data::F32(vec![x[0]; n]),
        Data::F64(x) => Data::F64(vec![x[0]; n]),
        Data::I32(x) => Data::I32(vec![x[0]; n]),
        Data::U8(x) => Data::U8(vec![x[0]; n]),
        Data::Bool(x) => Data::Bool(vec![x[0]; n]),
    };
    Tensor::new(ty.dtype, ty.shape.clone(), data).map_err(|_| InitError::Count {
        expected: n,
        found: n,
    })
}

/// A tensor of `ty` holding `values`, each rounded once to nearest even into the dtype.
pub fn tensor_from_f64(ty: &TensorType, values: &[f64]) -> Result<Tensor, InitError> {
    let count = InitError::Count {
        expected: ty.num_elements(),
        found: values.len(),
    };
    if values.len() != ty.num_elements() {
        return Err(count);
    }
    let data = match ty.dtype {
        DType::F16 => Data::F16(
            values
                .iter()
                .map(|&v| to_f16(v))
                .collect::<Result<_, _>>()?,
        ),
        DType::F32 => Data::F32(
            values
                .iter()
                .map(|&v| to_f32(v))
                .collect::<Result<_, _>>()?,
        ),
        DType::I32 => Data::I32(
            values
                .iter()
                .map(|&v| {
                    integral(v, DType::I32, f64::from(i32::MIN), f64::from(i32::MAX))
                        .map(|x| x as i32)
                })
                .collect::<Result<_, _>>()?,
        ),
        DType::U8 => Data::U8(
            values
                .iter()
                .map(|&v| integral(v, DType::U8, 0.0, 255.0).map(|x| x as u8))
                .collect::<Result<_, _>>()?,
        ),
        DType::Bool => Data::Bool(values.iter().map(|&v| v != 0.0).collect()),
    };
    Tensor::new(ty.dtype, ty.shape.clone(), data).map_err(|_| count)
}

fn to_f16(v: f64) -> Result<f16, InitError> {
    let (h, flags) = Rounding::nearest(false).round_f16(v, Tail::Exact);
    if v.is_finite() && !flags.is_empty() {
        return Err(InitError::Overflow {
            value: v,
            dtype: DType::F16,
        });
    }
    Ok(h)
}

fn to_f32(v: f64) -> Result<f32, InitError> {
    let (x, flags) = round::round_f32(v);
    if v.is_finite() && !flags.is_empty() {
        return Err(InitError::Overflow {
            value: v,
            dtype: DType::F32,
        });
    }
    Ok(x)
}

fn integral(v: f64, dtype: DType, lo: f64, hi: f64) -> Result<f64, InitError> {
    if v.fract() != 0.0 || !(lo..=hi).contains(&v) {
        return Err(InitError::NotIntegral { value: v, dtype });
    }
    Ok(v)
}

fn random_float(dtype: DType, init: &'static str) -> Result<(), InitError> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(InitError::RandomNonFloat { init, dtype })
    }
}

fn check_finite(params: &[(&str, f64)]) -> Result<(), InitError> {
    match params.iter().find(|(_, v)| !v.is_finite()) {
        Some((name, v)) => Err(InitError::Parameter(format!("{name} = {v} is not finite"))),
        None => Ok(()),
    }
}

/// A uniform `f64` in `[0, 1)` from 53 random bits.
pub(crate) fn unit(rng: &mut SrRng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn uniform(seed: u64, n: usize, low: f64, high: f64) -> Vec<f64> {
    let mut rng = SrRng::new(seed, INIT_TILE, 0);
    (0..n)
        .map(|_| low + (high - low) * unit(&mut rng))
        .collect()
}

fn normal(seed: u64, n: usize, mean: f64, std: f64) -> Vec<f64> {
    let mut rng = SrRng::new(seed, INIT_TILE, 0);
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (u1, u2) = (unit(&mut rng), unit(&mut rng));
        let r = (-2.0 * (1.0 - u1).ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        out.push(mean + std * r * theta.cos());
        out.push(mean + std * r * theta.sin());
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(d: DType, s: &[usize]) -> TensorType {
        TensorType::new(d, s.to_vec())
    }

    #[test]
    fn deterministic_and_rounded_once() {
        let init = Init::GlorotUniform { seed: 3 };
        let a = variable_tensor(&init, &ty(DType::F32, &[64, 32])).unwrap();
        let b = variable_tensor(&init, &ty(DType::F32, &[64, 32])).unwrap();
        assert_eq!(a, b);
        let limit = (6.0f64 / 96.0).sqrt();
        let v = a.to_f64_vec();
        assert!(v.iter().all(|x| x.abs() <= limit));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        // Uniform on [-l, l): sd l/sqrt(3), mean of 2048 within 5 sigma.
        assert!(
            mean.abs() < 5.0 * limit / 3f64.sqrt() / (v.len() as f64).sqrt(),
            "{mean}"
        );
        // FP16 values are the RNE roundings of the FP32 draws' exact values.
        let h = variable_tensor(&init, &ty(DType::F16, &[64, 32])).unwrap();
        let h = h.as_f16().unwrap();
        for (x, h) in uniform(3, 8, -limit, limit).into_iter().zip(h) {
            // Nearest: within half an FP16 ulp (2^-11 relative for normal values).
            let hv = h.to_f64();
            assert!(
                (x - hv).abs() <= (hv.abs() * 2f64.powi(-11)).max(2f64.powi(-25)),
                "{x} -> {hv}"
            );
        }
        let c = variable_tensor(
            &Init::Uniform {
                low: 0.0,
                high: 1.0,
                seed: 4,
            },
            &ty(DType::F32, &[4]),
        )
        .unwrap();
        assert_ne!(c.to_f64_vec()[..2], v[..2]);
    }

    #[test]
    fn normal_moments() {
        let t = variable_tensor(
            &Init::Normal {
                mean: 1.0,
                std: 2.0,
                seed: 9,
            },
            &ty(DType::F32, &[4001]),
        )
        .unwrap();
        let v = t.to_f64_vec();
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        // 5-sigma bounds: sd(mean) = 2/sqrt(n); sd(var) ~ var*sqrt(2/n).
        assert!((mean - 1.0).abs() < 5.0 * 2.0 / n.sqrt(), "{mean}");
        assert!((var - 4.0).abs() < 5.0 * 4.0 * (2.0 / n).sqrt(), "{var}");
    }

    #[test]
    fn literals_and_errors() {
        let t = constant_tensor(
            &Literal::Values(vec![1.0, -2.0, 3.0]),
            &ty(DType::I32, &[3]),
        )
        .unwrap();
        assert_eq!(t.as_i32().unwrap(), &[1, -2, 3]);
        let t = constant_tensor(&Literal::Splat(0.1), &ty(DType::F16, &[2])).unwrap();
        assert_eq!(t.as_f16().unwrap()[0].to_bits(), 0x2e66, "0.1 RNE to f16");
        assert_eq!(
            constant_tensor(&Literal::Splat(1e5), &ty(DType::F16, &[])).unwrap_err(),
            InitError::Overflow {
                value: 1e5,
                dtype: DType::F16
            }
        );
        assert!(constant_tensor(&Literal::Splat(f64::NEG_INFINITY), &ty(DType::F16, &[])).is_ok());
        assert!(matches!(
            constant_tensor(&Literal::Splat(0.5), &ty(DType::I32, &[])),
            Err(InitError::NotIntegral { .. })
        ));
        assert!(matches!(
            variable_tensor(&Init::GlorotUniform { seed: 0 }, &ty(DType::I32, &[2, 2])),
            Err(InitError::RandomNonFloat { .. })
        ));
        assert!(matches!(
            constant_tensor(&Literal::Values(vec![1.0]), &ty(DType::F32, &[2])),
            Err(InitError::Count {
                expected: 2,
                found: 1
            })
        ));
    }

    #[test]
    fn splats_equal_the_element_by_element_rounding() {
        // Constants and constant initialisers convert one value and repeat it: the same
        // tensor as rounding a buffer of that value element by element, every dtype.
        for dtype in [DType::F16, DType::F32, DType::I32, DType::U8, DType::Bool] {
            for v in [0.0, -0.0, 1.0, 0.1, 3.0, 65504.0, 1e-8, 255.0] {
                let t = ty(dtype, &[3, 5]);
                let by_element = tensor_from_f64(&t, &[v; 15]);
                assert_eq!(splat(&t, v), by_element, "{dtype} {v}");
                assert_eq!(constant_tensor(&Literal::Splat(v), &t), by_element);
                assert_eq!(variable_tensor(&Init::Constant(v), &t), by_element);
            }
            let t = ty(dtype, &[4]);
            assert_eq!(
                variable_tensor(&Init::Zeros, &t),
                tensor_from_f64(&t, &[0.0; 4])
            );
        }
        // An empty tensor takes no value, so a value its dtype cannot hold is no error.
        let empty = ty(DType::F16, &[0, 3]);
        assert_eq!(splat(&empty, 1e5).unwrap().len(), 0);
        assert!(matches!(
            splat(&ty(DType::F16, &[2]), 1e5),
            Err(InitError::Overflow { .. })
        ));
    }
}
