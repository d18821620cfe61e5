//! Shape arithmetic shared by the constant folder and the op converters: ONNX's negative
//! axes, `Reshape`'s `0` and `-1`, `Squeeze`/`Unsqueeze` axes, `Slice` bounds and NumPy
//! broadcasting.

/// An ONNX axis (negative counts from the end) as an index into `rank` dimensions.
pub fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let b = if a < 0 { a + r } else { a };
    if (0..r).contains(&b) {
        Ok(b as usize)
    } else {
        Err(format!("axis {a} is out of range for rank {rank}"))
    }
}

/// Several axes, each normalised, without repeats.
pub fn axes(list: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(list.len());
    for &a in list {
        let b = axis(a, rank)?;
        if out.contains(&b) {
            return Err(format!("axis {a} is repeated"));
        }
        out.push(b);
    }
    Ok(out)
}

/// `Reshape`'s target: `0` copies the input's dimension (unless `allowzero`), one `-1` is
/// inferred from the element count.
pub fn reshape(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, String> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer.is_some() => return Err("the shape has more than one -1".into()),
            -1 => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or_else(|| {
                format!(
                    "shape entry {i} is 0 but the input has rank {}",
                    input.len()
                )
            })?),
            d if d < 0 => return Err(format!("shape entry {i} is {d}")),
            d => out.push(d as usize),
        }
    }
    let known = out
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("the shape's element count overflows")?;
    if let Some(i) = infer {
        if known == 0 || !total.is_multiple_of(known) {
            return Err(format!(
                "cannot infer the -1 of shape {spec:?} from {total} elements"
            ));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(format!(
            "shape {spec:?} holds {known} elements; the input {input:?} has {total}"
        ));
    }
    Ok(out)
}

/// `Unsqueeze`: insert size-1 dimensions at `list` (axes of the output).
pub fn unsqueeze(input: &[usize], list: &[i64]) -> Result<Vec<usize>, String> {
    let rank = input.len() + list.len();
    let at = axes(list, rank)?;
    let mut rest = input.iter();
    Ok((0..rank)
        .map(|i| {
            if at.contains(&i) {
                1
            } else {
                *rest.next().expect("rank counts the input's dimensions")
            }
        })
        .collect())
}

/// `Squeeze`: drop the size-1 dimensions at `list`, or all of them when `list` is empty.
pub fn squeeze(input: &[usize], list: &[i64]) -> Result<Vec<usize>, String> {
    let at = axes(list, input.len())?;
    if let Some(&a) = at.iter().find(|&&a| input[a] != 1) {
        return Err(format!("axis {a} has size {}, not 1", input[a]));
    }
    Ok(input
        .iter()
        .enumerate()
        .filter(|&(i, &d)| {
            if at.is_empty() {
                d != 1
            } else {
                !at.contains(&i)
            }
        })
        .map(|(_, &d)| d)
        .collect())
}

/// `Slice` with unit steps: `[begin, end)` per dimension after clamping ONNX's bounds (which
/// may be negative or beyond the dimension, as exporters write `INT64_MAX` for "to the end").
pub fn slice(
    input: &[usize],
    starts: &[i64],
    ends: &[i64],
    list: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<(Vec<usize>, Vec<usize>), String> {
    if starts.len() != ends.len() {
        return Err(format!("{} starts but {} ends", starts.len(), ends.len()));
    }
    let default: Vec<i64> = (0..starts.len() as i64).collect();
    let at = axes(list.unwrap_or(&default), input.len())?;
    if at.len() != starts.len() {
        return Err(format!("{} axes for {} starts", at.len(), starts.len()));
    }
    if let Some(s) = steps {
        if s.len() != starts.len() || s.iter().any(|&s| s != 1) {
            return Err(format!("only unit steps are supported, got {s:?}"));
        }
    }
    let mut begin = vec![0; input.len()];
    let mut end = input.to_vec();
    for (k, &a) in at.iter().enumerate() {
        let d = input[a] as i64;
        let clamp = |v: i64| {
            let v = if v < 0 { v.saturating_add(d) } else { v };
            v.clamp(0, d) as usize
        };
        begin[a] = clamp(starts[k]);
        end[a] = clamp(ends[k]).max(begin[a]);
    }
    Ok((begin, end))
}

/// NumPy broadcasting of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err(format!(
                "shapes {a:?} and {b:?} do not broadcast ({x} vs {y})"
            )),
        })
        .collect()
}

/// Row-major strides.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_copies_zeros_and_infers_minus_one() {
        assert_eq!(reshape(&[2, 3, 4], &[0, -1], false).unwrap(), vec![2, 12]);
        assert!(reshape(&[2, 3], &[-1, -1], false).is_err());
        assert!(reshape(&[2, 3], &[4, -1], false).is_err());
        assert!(reshape(&[2, 3], &[5], false).is_err());
    }

    #[test]
    fn squeeze_unsqueeze_and_slice() {
        assert_eq!(unsqueeze(&[3, 4], &[0, -1]).unwrap(), vec![1, 3, 4, 1]);
        assert_eq!(squeeze(&[1, 3, 1], &[]).unwrap(), vec![3]);
        assert!(squeeze(&[2, 3], &[0]).is_err());
        let (b, e) = slice(&[5, 6], &[1, -2], &[i64::MAX, 100], None, None).unwrap();
        assert_eq!((b, e), (vec![1, 4], vec![5, 6]));
        assert_eq!(broadcast(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
        assert!(broadcast(&[2], &[3]).is_err());
    }
}
