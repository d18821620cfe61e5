//! Numerics benchmarks: f32→f16 slice conversion (ipusim round-to-nearest and stochastic
//! vs `half`'s `convert_from_f32_slice`, in the same run) and the AMP matrix-product
//! kernels (throughput in FLOP/s: criterion's "elem/s" here counts floating-point
//! operations, 2 per multiply-accumulate).
//!
//! Run: `cargo bench --bench numerics`. Figures are recorded in README.md ("Performance").

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use half::slice::HalfFloatSliceExt;
use ipusim::sim::numerics::kernels::amp::{
    amp_matmul_f16_partials, amp_matmul_f32_partials, matmul_f32,
};
use ipusim::sim::numerics::kernels::convert::f32_to_f16_slice;
use ipusim::sim::numerics::{MatMulShape, Rounding, SrRng, AMP_CHUNK};
use std::hint::black_box;
use std::time::Duration;

/// Activation-like data: approximately N(0, 1) (a sum of four uniforms), deterministic.
/// Fewer than 1 in 10^4 values fall below the FP16 normal range.
fn inputs(n: usize) -> Vec<f32> {
    let mut rng = SrRng::new(1, 2, 3);
    let mut uniform = move || rng.next_u32() as f32 / 4_294_967_296.0;
    (0..n)
        .map(|_| (uniform() + uniform() + uniform() + uniform() - 2.0) * 1.732)
        .collect()
}

/// Values with exponents spread uniformly over the FP16 range and below it: about a third
/// of them give subnormal or zero results and take the scalar path.
fn wide_inputs(n: usize) -> Vec<f32> {
    let mut rng = SrRng::new(4, 5, 6);
    (0..n)
        .map(|_| {
            let u = rng.next_u32();
            let mag = f32::from_bits(0x3000_0000 + (u >> 4) % (0x4770_0000 - 0x3000_0000));
            if u & 1 == 1 {
                -mag
            } else {
                mag
            }
        })
        .collect()
}

fn convert(c: &mut Criterion) {
    let mut group = c.benchmark_group("f32_to_f16");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let cases = [
        ("normal", inputs(4096)),
        ("normal", inputs(65_536)),
        ("normal", inputs(1 << 20)),
        ("wide", wide_inputs(65_536)),
    ];
    for (data, src) in &cases {
        let n = src.len();
        let id = format!("{data}/{n}");
        let mut dst = vec![f16::ZERO; n];
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(
            BenchmarkId::new("half_convert_from_f32_slice", &id),
            src,
            |b, src| b.iter(|| dst.convert_from_f32_slice(black_box(src))),
        );
        group.bench_with_input(BenchmarkId::new("ipusim_rne", &id), src, |b, src| {
            let mut r = Rounding::nearest(false);
            b.iter(|| f32_to_f16_slice(black_box(src), &mut dst, &mut r))
        });
        group.bench_with_input(BenchmarkId::new("ipusim_sr", &id), src, |b, src| {
            let mut rng = SrRng::new(0, 0, 0);
            let mut r = Rounding::stochastic(&mut rng, false);
            b.iter(|| f32_to_f16_slice(black_box(src), &mut dst, &mut r))
        });
    }
    group.finish();
}

fn amp(c: &mut Criterion) {
    let mut group = c.benchmark_group("amp_matmul");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let shape = MatMulShape {
        m: 64,
        k: 256,
        n: 64,
    };
    let a32 = inputs(shape.m * shape.k);
    let b32 = inputs(shape.k * shape.n);
    let mut a = vec![f16::ZERO; a32.len()];
    let mut b = vec![f16::ZERO; b32.len()];
    a.convert_from_f32_slice(&a32);
    b.convert_from_f32_slice(&b32);
    let id = format!("{}x{}x{}", shape.m, shape.k, shape.n);
    group.throughput(Throughput::Elements(shape.flops()));
    group.bench_function(BenchmarkId::new("f16_in_f32_partials", &id), |bench| {
        let mut out = vec![0f32; shape.m * shape.n];
        bench.iter(|| {
            amp_matmul_f32_partials(shape, black_box(&a), black_box(&b), &mut out, AMP_CHUNK)
        })
    });
    for sr in [false, true] {
        let name = if sr {
            "f16_in_f16_partials_sr"
        } else {
            "f16_in_f16_partials_rne"
        };
        group.bench_function(BenchmarkId::new(name, &id), |bench| {
            let mut out = vec![f16::ZERO; shape.m * shape.n];
            let mut rng = SrRng::new(0, 0, 0);
            let mut r = Rounding::new(sr, false, &mut rng);
            bench.iter(|| {
                amp_matmul_f16_partials(
                    shape,
                    black_box(&a),
                    black_box(&b),
                    &mut out,
                    AMP_CHUNK,
                    &mut r,
                )
            })
        });
    }
    group.bench_function(BenchmarkId::new("f32_in_f32_partials", &id), |bench| {
        let mut out = vec![0f32; shape.m * shape.n];
        bench.iter(|| matmul_f32(shape, black_box(&a32), black_box(&b32), &mut out, AMP_CHUNK))
    });
    group.finish();
}

criterion_group!(benches, convert, amp);
criterion_main!(benches);
