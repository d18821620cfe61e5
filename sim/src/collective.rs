//! Cross-replica collectives (`Program::CrossReplica`) over the values of simulated
//! replicas, in a documented order so that results are bit-identical across runs and host
//! thread counts.
//!
//! **Order.** The replicas' elements are summed in replica order, `s = x_0`, then
//! `s = rne32(s + x_r)` for `r = 1..R` (f16 elements widen exactly to f32 first); an
//! `AllReduceMean` then multiplies by `1/R` (rounded to f32) with one RNE rounding; the result
//! is rounded to the tensor's dtype (RNE, FP16 overflow per `nanoo`). With two replicas of
//! FP16 values the sum and the halving are exact in f32, so the mean is rounded once. Flags
//! of the arithmetic (INV, OFLO) are returned.
//!
//! A reduce-scatter ([`CollectiveOp::ReduceScatterMean`]) computes each element exactly as
//! the all-reduce does, so a sharded weight update sees the very values an unsharded one
//! would; an all-gather only moves bytes.

use crate::numerics::cast::{f16_to_f32, f32_to_f16};
use crate::numerics::round::Rounding;
use crate::numerics::{fp32, FpSts};
use half::f16;
use ipusim_exe::executable::CollectiveOp;
use ipusim_ir::DType;

/// `op` of the replicas' `values` (each the tensor's bytes of one replica, in replica
/// order), as bytes of `dtype`; `None` for a dtype a collective does not reduce (integers)
/// or values of different lengths.
pub fn all_reduce(
    op: CollectiveOp,
    dtype: DType,
    values: &[Vec<u8>],
    nanoo: bool,
) -> Option<(Vec<u8>, FpSts)> {
    let len = values.first()?.len();
    if values.iter().any(|v| v.len() != len) {
        return None;
    }
    let es = dtype.size_bytes();
    let widen = |bytes: &[u8]| -> Option<f32> {
        match dtype {
            DType::F16 => Some(f16_to_f32(f16::from_le_bytes(bytes.try_into().ok()?)).0),
            DType::F32 => Some(f32::from_le_bytes(bytes.try_into().ok()?)),
            _ => None,
        }
    };
    let scale = (1.0f64 / values.len() as f64) as f32;
    let mut flags = FpSts::empty();
    let mut out = Vec::with_capacity(len);
    let mut rounding = Rounding::nearest(nanoo);
    for at in (0..len).step_by(es.max(1)) {
        let mut s = widen(&values[0][at..at + es])?;
        for v in &values[1..] {
            let (x, f) = fp32::add(s, widen(&v[at..at + es])?);
            s = x;
            flags |= f;
        }
        if op == CollectiveOp::AllReduceMean {
            let (x, f) = fp32::mul(s, scale);
            s = x;
            flags |= f;
        }
        match dtype {
            DType::F16 => {
                let (h, f) = f32_to_f16(s, &mut rounding);
                flags |= f;
                out.extend_from_slice(&h.to_le_bytes());
            }
            _ => out.extend_from_slice(&s.to_le_bytes()),
        }
    }
    Some((out, flags))
}

/// Every replica's result of collective `op` over the replicas' `values` of `tensor` (each
/// the tensor's bytes of one replica, in replica order): for an in-place all-reduce, the
/// reduced tensor; with a destination of `dst_bytes` bytes per replica, replica `r`'s
/// shard `r` of the mean, zero-padded to `R × dst_bytes` (a reduce-scatter), or the
/// replicas' values concatenated and truncated to `dst_bytes` (an all-gather). `None` as
/// for [`all_reduce`], or for a destination the op does not have.
pub fn run(
    op: CollectiveOp,
    dtype: DType,
    values: &[Vec<u8>],
    dst_bytes: Option<usize>,
    nanoo: bool,
) -> Option<(Vec<Vec<u8>>, FpSts)> {
    let r = values.len();
    match (op, dst_bytes) {
        (CollectiveOp::AllReduceSum | CollectiveOp::AllReduceMean, None) => {
            let (out, flags) = all_reduce(op, dtype, values, nanoo)?;
            Some((vec![out; r], flags))
        }
        (CollectiveOp::ReduceScatterMean, Some(shard)) => {
            let (mut mean, flags) = all_reduce(CollectiveOp::AllReduceMean, dtype, values, nanoo)?;
            if shard == 0 {
                return Some((vec![Vec::new(); r], flags));
            }
            mean.resize(shard * r, 0);
            Some((mean.chunks(shard).map(<[u8]>::to_vec).collect(), flags))
        }
        (CollectiveOp::AllGather, Some(whole)) => {
            let mut out: Vec<u8> = values.concat();
            out.resize(whole, 0);
            Some((vec![out; r], FpSts::empty()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16s(v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect()
    }

    #[test]
    fn the_mean_of_two_half_replicas_is_rounded_once() {
        // 1 and 1 + 2^-10 (adjacent halves): the exact mean 1 + 2^-11 is a tie, rounded to
        // even (1).
        let a = f16s(&[1.0, 3.0]);
        let b = f16s(&[1.0 + 2f32.powi(-10), 5.0]);
        let (out, flags) =
            all_reduce(CollectiveOp::AllReduceMean, DType::F16, &[a, b], true).unwrap();
        assert_eq!(out, f16s(&[1.0, 4.0]));
        assert!(flags.is_empty());
    }

    #[test]
    fn sums_run_in_replica_order_in_f32() {
        let v = |x: f32| x.to_le_bytes().to_vec();
        // (2^24 + 1) + 1: each addition rounds to even in f32, in replica order.
        let values = [v(16_777_216.0), v(1.0), v(1.0)];
        let (out, _) = all_reduce(CollectiveOp::AllReduceSum, DType::F32, &values, true).unwrap();
        assert_eq!(out, v(16_777_216.0));
        assert!(all_reduce(CollectiveOp::AllReduceSum, DType::I32, &values, true).is_none());
    }

    #[test]
    fn a_reduce_scatter_shards_the_all_reduce_and_an_all_gather_undoes_it() {
        let v = |x: &[f32]| x.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // 5 elements over 2 replicas: shards of 3, the last padded with a zero.
        let a = v(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let b = v(&[3.0, 2.0, 1.0, 0.0, 16_777_216.0]);
        let values = [a, b];
        let (whole, _) =
            all_reduce(CollectiveOp::AllReduceMean, DType::F32, &values, true).unwrap();
        let (shards, flags) = run(
            CollectiveOp::ReduceScatterMean,
            DType::F32,
            &values,
            Some(12),
            true,
        )
        .unwrap();
        assert!(flags.is_empty());
        assert_eq!(shards[0], v(&[2.0, 2.0, 2.0]));
        // (5 + 2^24) / 2 rounds the sum to even first: 2^24 + 4, halved exactly.
        assert_eq!(shards[1], v(&[2.0, 8_388_610.0, 0.0]));
        assert_eq!(&shards.concat()[..20], &whole[..]);
        let (gathered, _) =
            run(CollectiveOp::AllGather, DType::F32, &shards, Some(20), true).unwrap();
        assert_eq!(gathered, vec![whole.clone(), whole]);
        // An op without its destination (or with one it has not) is no collective.
        assert!(run(CollectiveOp::AllGather, DType::F32, &shards, None, true).is_none());
        assert!(run(
            CollectiveOp::AllReduceMean,
            DType::F32,
            &shards,
            Some(4),
            true
        )
        .is_none());
        let (empty, _) = run(
            CollectiveOp::ReduceScatterMean,
            DType::F32,
            &[vec![], vec![]],
            Some(0),
            true,
        )
        .unwrap();
        assert_eq!(empty, vec![Vec::<u8>::new(), Vec::new()]);
    }
}
