//! Constant folding: the ops exporters use to compute shapes (`Shape` → `Gather` →
//! `Unsqueeze` → `Concat` → `Reshape`, ...) evaluated at import time when every input is a
//! known constant, so that the imported program holds static shapes, as the IR requires.
//!
//! [`fold`] returns `Ok(None)` for an op it does not evaluate; the importer then converts the
//! node into IR ops. Values are `f64` (exact for the integers of shapes).

use crate::attr::Attrs;
use crate::proto::data_type as dt;
use crate::shape;
use crate::tensor::ConstTensor;

/// The ops [`fold`] evaluates.
pub const FOLDED: &[&str] = &[
    "Identity",
    "Constant",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Reshape",
    "Flatten",
    "Slice",
    "Cast",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "ConstantOfShape",
    "Transpose",
];

/// Evaluates `op` on constant inputs (`None` for an absent optional input).
pub fn fold(
    op: &str,
    opset: i64,
    attrs: &Attrs,
    inputs: &[Option<&ConstTensor>],
) -> Result<Option<ConstTensor>, String> {
    let input = |i: usize| -> Result<&ConstTensor, String> {
        inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| format!("input {i} is missing"))
    };
    let opt_ints = |i: usize| inputs.get(i).copied().flatten().map(ConstTensor::as_ints);
    Ok(Some(match op {
        "Identity" => input(0)?.clone(),
        "Gather" => {
            let (data, idx) = (input(0)?, input(1)?);
            let a = shape::axis(attrs.int("axis", 0), data.dims.len())?;
            gather(data, idx, a)?
        }
        "Unsqueeze" | "Squeeze" => {
            let x = input(0)?;
            let list = if opset >= 13 {
                opt_ints(1).unwrap_or_default()
            } else {
                attrs.ints("axes").unwrap_or_default()
            };
            let dims = if op == "Unsqueeze" {
                shape::unsqueeze(&x.dims, &list)?
            } else {
                shape::squeeze(&x.dims, &list)?
            };
            ConstTensor { dims, ..x.clone() }
        }
        "Reshape" => {
            let x = input(0)?;
            let dims = shape::reshape(
                &x.dims,
                &input(1)?.as_ints(),
                attrs.int("allowzero", 0) != 0,
            )?;
            ConstTensor { dims, ..x.clone() }
        }
        "Flatten" => {
            let x = input(0)?;
            let a = attrs.int("axis", 1);
            let a = if a == x.dims.len() as i64 {
                x.dims.len()
            } else {
                shape::axis(a, x.dims.len())?
            };
            let outer: usize = x.dims[..a].iter().product();
            ConstTensor {
                dims: vec![outer, x.dims[a..].iter().product()],
                ..x.clone()
            }
        }
        "Concat" => {
            let parts: Vec<&ConstTensor> =
                (0..inputs.len()).map(input).collect::<Result<_, _>>()?;
            concat(&parts, attrs.int("axis", 0))?
        }
        "Slice" => {
            let x = input(0)?;
            let (starts, ends, axes, steps) = if opset >= 10 {
                (
                    input(1)?.as_ints(),
                    input(2)?.as_ints(),
                    opt_ints(3),
                    opt_ints(4),
                )
            } else {
                (
                    attrs.ints("starts").unwrap_or_default(),
                    attrs.ints("ends").unwrap_or_default(),
                    attrs.ints("axes"),
                    None,
                )
            };
            let (begin, end) =
                shape::slice(&x.dims, &starts, &ends, axes.as_deref(), steps.as_deref())?;
            slice(x, &begin, &end)
        }
        "Cast" => {
            let x = input(0)?;
            let to = attrs.int("to", 0) as i32;
            let values = match to {
                dt::FLOAT | dt::DOUBLE => x.values.iter().map(|&v| v as f32 as f64).collect(),
                dt::FLOAT16 => x
                    .values
                    .iter()
                    .map(|&v| half::f16::from_f64(v).to_f64())
                    .collect(),
                dt::BOOL => x
                    .values
                    .iter()
                    .map(|&v| f64::from(u8::from(v != 0.0)))
                    .collect(),
                dt::INT64 | dt::INT32 | dt::INT16 | dt::INT8 => {
                    x.values.iter().map(|&v| v.trunc()).collect()
                }
                _ => return Ok(None),
            };
            ConstTensor {
                elem: to,
                dims: x.dims.clone(),
                values,
            }
        }
        "Add" | "Sub" | "Mul" | "Div" => {
            let (a, b) = (input(0)?, input(1)?);
            let integer = !matches!(a.elem, dt::FLOAT | dt::DOUBLE | dt::FLOAT16);
            let f = match op {
                "Add" => |x: f64, y: f64| x + y,
                "Sub" => |x: f64, y: f64| x - y,
                "Mul" => |x: f64, y: f64| x * y,
                _ => |x: f64, y: f64| x / y,
            };
            let mut t = binary(a, b, f)?;
            if integer {
                if op == "Div" && b.values.contains(&0.0) {
                    return Err("integer division by zero".into());
                }
                t.values.iter_mut().for_each(|v| *v = v.trunc());
            } else if a.elem == dt::FLOAT {
                t.values.iter_mut().for_each(|v| *v = *v as f32 as f64);
            }
            t
        }
        "Neg" => {
            let x = input(0)?;
            ConstTensor {
                values: x.values.iter().map(|v| -v).collect(),
                ..x.clone()
            }
        }
        "ConstantOfShape" => {
            let dims_spec = input(0)?.as_ints();
            let (dims, n) = crate::tensor::dims_of(&dims_spec)?;
            if n > FOLD_LIMIT {
                return Ok(None);
            }
            let (elem, v) = match attrs.tensor("value") {
                Some(t) => (t.elem, t.values.first().copied().unwrap_or(0.0)),
                None => (dt::FLOAT, 0.0),
            };
            ConstTensor {
                elem,
                dims,
                values: vec![v; n],
            }
        }
        "Transpose" => {
            let x = input(0)?;
            let rank = x.dims.len();
            let perm: Vec<usize> = match attrs.ints("perm") {
                Some(p) => shape::axes(&p, rank)?,
                None => (0..rank).rev().collect(),
            };
            if perm.len() != rank {
                return Err(format!("perm {perm:?} does not fit rank {rank}"));
            }
            transpose(x, &perm)
        }
        _ => return Ok(None),
    }))
}

/// The most elements a folded tensor built from a shape (not from data already in the
/// file) may have; larger ones stay ops (our choice: 2^24, beyond any shape computation).
pub const FOLD_LIMIT: usize = 1 << 24;

fn gather(data: &ConstTensor, idx: &ConstTensor, a: usize) -> Result<ConstTensor, String> {
    let d = data.dims[a];
    let outer: usize = data.dims[..a].iter().product();
    let inner: usize = data.dims[a + 1..].iter().product();
    let mut values = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &i in &idx.values {
            let i = i as i64;
            let j = if i < 0 { i + d as i64 } else { i };
            if !(0..d as i64).contains(&j) {
                return Err(format!("index {i} is out of range for a dimension of {d}"));
            }
            let base = (o * d + j as usize) * inner;
            values.extend_from_slice(&data.values[base..base + inner]);
        }
    }
    let mut dims = data.dims[..a].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&data.dims[a + 1..]);
    Ok(ConstTensor {
        elem: data.elem,
        dims,
        values,
    })
}

fn concat(parts: &[&ConstTensor], a: i64) -> Result<ConstTensor, String> {
    let first = parts.first().ok_or("Concat needs at least one input")?;
    let a = shape::axis(a, first.dims.len())?;
    for p in parts {
        let same = p.dims.len() == first.dims.len()
            && p.dims
                .iter()
                .zip(&first.dims)
                .enumerate()
                .all(|(i, (x, y))| i == a || x == y);
        if !same {
            return Err(format!(
                "shapes {:?} and {:?} do not concatenate on axis {a}",
                first.dims, p.dims
            ));
        }
    }
    let outer: usize = first.dims[..a].iter().product();
    let mut values = Vec::new();
    for o in 0..outer {
        for p in parts {
            let chunk: usize = p.dims[a..].iter().product();
            values.extend_from_slice(&p.values[o * chunk..(o + 1) * chunk]);
        }
    }
    let mut dims = first.dims.clone();
    dims[a] = parts.iter().map(|p| p.dims[a]).sum();
    Ok(ConstTensor {
        elem: first.elem,
        dims,
        values,
    })
}

fn slice(x: &ConstTensor, begin: &[usize], end: &[usize]) -> ConstTensor {
    let dims: Vec<usize> = begin.iter().zip(end).map(|(b, e)| e - b).collect();
    let src = shape::strides(&x.dims);
    remap(x, dims, |i, c| (c + begin[i]) * src[i])
}

/// `perm[i]` is the input dimension of output dimension `i`.
pub fn transpose(x: &ConstTensor, perm: &[usize]) -> ConstTensor {
    let dims: Vec<usize> = perm.iter().map(|&p| x.dims[p]).collect();
    let src = shape::strides(&x.dims);
    remap(x, dims, |i, c| c * src[perm[i]])
}

/// A tensor of shape `dims` whose element at coordinates `c` is `x`'s element at offset
/// `sum_i offset(i, c[i])`.
fn remap(x: &ConstTensor, dims: Vec<usize>, offset: impl Fn(usize, usize) -> usize) -> ConstTensor {
    let n: usize = dims.iter().product();
    let out = shape::strides(&dims);
    let values = (0..n)
        .map(|k| {
            let at: usize = (0..dims.len())
                .map(|i| offset(i, k / out[i] % dims[i]))
                .sum();
            x.values[at]
        })
        .collect();
    ConstTensor {
        elem: x.elem,
        dims,
        values,
    }
}

fn binary(
    a: &ConstTensor,
    b: &ConstTensor,
    f: impl Fn(f64, f64) -> f64,
) -> Result<ConstTensor, String> {
    let dims = shape::broadcast(&a.dims, &b.dims)?;
    let n: usize = dims.iter().product();
    let out = shape::strides(&dims);
    let (sa, sb) = (shape::strides(&a.dims), shape::strides(&b.dims));
    let index = |t: &ConstTensor, s: &[usize], k: usize| {
        let skip = dims.len() - t.dims.len();
        (0..t.dims.len())
            .map(|i| {
                let c = k / out[i + skip] % dims[i + skip];
                if t.dims[i] == 1 {
                    0
                } else {
                    c * s[i]
                }
            })
            .sum::<usize>()
    };
    let values = (0..n)
        .map(|k| f(a.values[index(a, &sa, k)], b.values[index(b, &sb, k)]))
        .collect();
    Ok(ConstTensor {
        elem: a.elem,
        dims,
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[usize], values: &[f64]) -> ConstTensor {
        ConstTensor {
            elem: dt::INT64,
            dims: dims.to_vec(),
            values: values.to_vec(),
        }
    }

    #[test]
    fn shape_arithmetic_folds() {
        let shape = t(&[4], &[2.0, 3.0, 4.0, 5.0]);
        let idx = t(&[], &[0.0]);
        let none = Attrs::default();
        let g = fold("Gather", 13, &none, &[Some(&shape), Some(&idx)])
            .unwrap()
            .unwrap();
        assert_eq!((g.dims.clone(), g.values.clone()), (vec![], vec![2.0]));
        let axes = t(&[1], &[0.0]);
        let u = fold("Unsqueeze", 13, &none, &[Some(&g), Some(&axes)])
            .unwrap()
            .unwrap();
        assert_eq!(u.dims, vec![1]);
        let minus = t(&[1], &[-1.0]);
        let c = fold("Concat", 13, &none, &[Some(&u), Some(&minus)])
            .unwrap()
            .unwrap();
        assert_eq!(c.values, vec![2.0, -1.0]);
        let m = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let tr = transpose(&m, &[1, 0]);
        assert_eq!(tr.values, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let s = slice(&m, &[0, 1], &[2, 3]);
        assert_eq!(s.values, vec![2.0, 3.0, 5.0, 6.0]);
        let row = t(&[3], &[10.0, 20.0, 30.0]);
        let sum = fold("Add", 13, &none, &[Some(&m), Some(&row)])
            .unwrap()
            .unwrap();
        assert_eq!(sum.values, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    }
}
