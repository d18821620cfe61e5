//! Index arithmetic of the reference interpreter: every data-movement op (broadcast,
//! transpose, slice, pad, concat) and every reduction is a *strided view* of a row-major
//! buffer, enumerated in row-major order of the view.
//!
//! [`view_offsets`] is the one primitive: the buffer offsets `base + sum_i idx_i *
//! stride_i` of every index of a view with dimensions `dims`, in row-major order. A stride of
//! 0 repeats an element (broadcast); permuted strides transpose; a base plus the source
//! strides selects a slice; the output strides of a slice place a pad or a concat operand.
//! Reductions split the input's dimensions into kept and reduced ones: the offset of (output
//! element `o`, reduced element `r`) is `outer[o] + inner[r]` ([`ReducePlan`]).

use ipusim_ir::Shape;

/// Buffer offsets of every index of a view of `dims` with `strides` from `base`, row-major.
pub fn view_offsets(base: usize, dims: &[usize], strides: &[usize]) -> Vec<usize> {
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let rank = dims.len();
    let mut idx = vec![0usize; rank];
    let mut offset = base;
    for _ in 0..n {
        out.push(offset);
        // Odometer increment, innermost dimension fastest.
        for d in (0..rank).rev() {
            idx[d] += 1;
            offset += strides[d];
            if idx[d] < dims[d] {
                break;
            }
            offset -= strides[d] * dims[d];
            idx[d] = 0;
        }
    }
    out
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    Shape::new(dims.to_vec()).strides()
}

/// The strides with which an operand of shape `from` is read when broadcast to `to`
/// (NumPy alignment from the right; stretched dimensions get stride 0).
pub fn broadcast_strides(from: &[usize], to: &[usize]) -> Vec<usize> {
    let own = strides(from);
    let lead = to.len() - from.len();
    (0..to.len())
        .map(|i| {
            if i < lead || from[i - lead] == 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Offsets into an operand of shape `from` for every element of its broadcast to `to`.
pub fn broadcast_offsets(from: &[usize], to: &[usize]) -> Vec<usize> {
    view_offsets(0, to, &broadcast_strides(from, to))
}

/// `x` (shape `from`) broadcast to `to`.
pub fn broadcast<T: Copy>(x: &[T], from: &[usize], to: &[usize]) -> Vec<T> {
    if from == to {
        return x.to_vec();
    }
    gather(x, &broadcast_offsets(from, to))
}

/// The elements of `x` at `offsets`.
pub fn gather<T: Copy>(x: &[T], offsets: &[usize]) -> Vec<T> {
    offsets.iter().map(|&o| x[o]).collect()
}

/// `x` (shape `dims`) with its dimensions permuted: output dim `i` is input dim `perm[i]`.
pub fn transpose<T: Copy>(x: &[T], dims: &[usize], perm: &[usize]) -> Vec<T> {
    let own = strides(dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let out_strides: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
    gather(x, &view_offsets(0, &out_dims, &out_strides))
}

/// The offsets of the box `[begin, end)` of a buffer of shape `dims`.
fn box_offsets(dims: &[usize], begin: &[usize], end: &[usize]) -> Vec<usize> {
    let own = strides(dims);
    let base = begin.iter().zip(&own).map(|(b, s)| b * s).sum();
    let sizes: Vec<usize> = begin.iter().zip(end).map(|(b, e)| e - b).collect();
    view_offsets(base, &sizes, &own)
}

/// The box `[begin, end)` of `x` (shape `dims`).
pub fn slice<T: Copy>(x: &[T], dims: &[usize], begin: &[usize], end: &[usize]) -> Vec<T> {
    gather(x, &box_offsets(dims, begin, end))
}

/// `x` (shape `dims`) padded with `zero`.
pub fn pad<T: Copy>(x: &[T], dims: &[usize], before: &[usize], after: &[usize], zero: T) -> Vec<T> {
    let out_dims: Vec<usize> = (0..dims.len())
        .map(|i| before[i] + dims[i] + after[i])
        .collect();
    let end: Vec<usize> = (0..dims.len()).map(|i| before[i] + dims[i]).collect();
    let mut out = vec![zero; out_dims.iter().product()];
    for (&o, &v) in box_offsets(&out_dims, before, &end).iter().zip(x) {
        out[o] = v;
    }
    out
}

/// The concatenation along `axis` of `parts` (each with its shape).
pub fn concat<T: Copy>(parts: &[(&[T], &[usize])], axis: usize, zero: T) -> Vec<T> {
    let Some(&(_, first)) = parts.first() else {
        return Vec::new();
    };
    let mut out_dims = first.to_vec();
    out_dims[axis] = parts.iter().map(|(_, d)| d[axis]).sum();
    let mut out = vec![zero; out_dims.iter().product()];
    let mut offset = 0;
    for &(x, dims) in parts {
        let mut begin = vec![0; dims.len()];
        begin[axis] = offset;
        let mut end = out_dims.clone();
        end[axis] = offset + dims[axis];
        for (&o, &v) in box_offsets(&out_dims, &begin, &end).iter().zip(x) {
            out[o] = v;
        }
        offset += dims[axis];
    }
    out
}

/// How a reduction over some axes reads its input.
pub struct ReducePlan {
    /// Offset of the first reduced element of each output element (row-major over the kept
    /// dimensions).
    pub outer: Vec<usize>,
    /// Offsets of the reduced elements relative to `outer` (row-major over the reduced
    /// dimensions: this is the summation order).
    pub inner: Vec<usize>,
}

impl ReducePlan {
    /// The plan for reducing a buffer of shape `dims` over `axes`.
    pub fn new(dims: &[usize], axes: &[usize]) -> ReducePlan {
        let own = strides(dims);
        let (mut kd, mut ks, mut rd, mut rs) = (vec![], vec![], vec![], vec![]);
        for i in 0..dims.len() {
            if axes.contains(&i) {
                rd.push(dims[i]);
                rs.push(own[i]);
            } else {
                kd.push(dims[i]);
                ks.push(own[i]);
            }
        }
        ReducePlan {
            outer: view_offsets(0, &kd, &ks),
            inner: view_offsets(0, &rd, &rs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views() {
        let x: Vec<u32> = (0..6).collect();
        assert_eq!(broadcast(&[7, 8, 9], &[3], &[2, 3]), vec![7, 8, 9, 7, 8, 9]);
        assert_eq!(broadcast(&[1, 2], &[2, 1], &[2, 3]), vec![1, 1, 1, 2, 2, 2]);
        assert_eq!(transpose(&x, &[2, 3], &[1, 0]), vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(slice(&x, &[2, 3], &[0, 1], &[2, 3]), vec![1, 2, 4, 5]);
        assert_eq!(
            pad(&[1, 2], &[1, 2], &[1, 0], &[0, 1], 0),
            vec![0, 0, 0, 1, 2, 0]
        );
        let a = [1, 2, 3, 4];
        let b = [5, 6];
        assert_eq!(
            concat(&[(&a[..], &[2, 2][..]), (&b[..], &[2, 1][..])], 1, 0),
            vec![1, 2, 5, 3, 4, 6]
        );
        let plan = ReducePlan::new(&[2, 3, 4], &[0, 2]);
        assert_eq!(plan.outer, vec![0, 4, 8]);
        assert_eq!(plan.inner, vec![0, 1, 2, 3, 12, 13, 14, 15]);
        assert!(view_offsets(0, &[0, 3], &[3, 1]).is_empty());
        assert_eq!(view_offsets(5, &[], &[]), vec![5], "a scalar view");
    }
}
