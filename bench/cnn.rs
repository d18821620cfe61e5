//! A CNN training step simulated with exact values, against native f32 convolutions.
//!
//! The model zoo's CIFAR ResNet-20 (`ipusim_ir::resnet`, batch norm, 32×32×3 images, batch
//! 32) runs one training step per device run in a `Session` on synthetic data (compile
//! outside the measurement), in 16.16 and 32.32, on all cores and on one thread. The zoo's
//! ResNet-50 (224×224×3, batch 1, 16.16) follows, one step on all cores against one native
//! pass printed, on one mk2 (`programs/resnet50.ron` fits it); criterion then measures
//! ResNet-20's 16.16 step and ResNet-50's, each beside its native convolutions.
//!
//! The baseline is the same step's convolutions in plain f32 on one host thread: for every
//! `Conv2d` of the program, the forward pass, the input gradient (not for the stem, whose
//! input is the image) and the weight gradient as im2col/col2im plus `matrixmultiply`'s
//! optimised sgemm. The rest of the native step (batch norm, ReLU, pooling, the loss, the
//! update) is left out, so the baseline is faster than a whole native step and the printed
//! ratio overstates the simulator's overhead (the CNN issue's target is 3×).
//!
//! Run: `cargo bench --bench cnn`.

#[path = "common.rs"]
mod common;

use common::{duration, load_average, median_secs};
use criterion::{criterion_group, criterion_main, Criterion};
use ipusim::compiler::{BuildOptions, Target};
use ipusim::ir::resnet::{resnet, Model};
use ipusim::ir::{Op, Precision, Program};
use ipusim::runtime::{Session, SessionOptions};
use std::path::Path;
use std::time::Duration;

/// The overhead target of the issue (simulated step time / native f32 step time).
const TARGET: f64 = 3.0;
/// Images per step of ResNet-20.
const BATCH: usize = 32;

/// The zoo's `name` at `batch` images per step (its default image size and classes).
fn program(name: &str, batch: usize) -> Program {
    let model = Model::named(name).expect("the model is in the zoo");
    let mut spec = model.default_spec();
    spec.batch = batch;
    resnet(&spec).expect("the zoo's ResNets build")
}

fn session(p: &Program, precision: Precision, threads: Option<usize>, target: Target) -> Session {
    let mut options = SessionOptions {
        build: BuildOptions {
            target,
            precision: Some(precision),
            device_iterations: Some(1),
            ..BuildOptions::default()
        },
        threads,
        ..SessionOptions::default()
    };
    options.streams.synthetic_data = true;
    Session::new(p, Path::new(""), options).expect("the ResNet compiles and fits")
}

/// One convolution of the program: input `[n, c, h, w]`, weights `[o, c, kh, kw]`.
#[derive(Clone, Debug)]
struct Conv {
    x: [usize; 4],
    w: [usize; 4],
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
    /// Whether the input gradient is needed (not for the stem).
    input_grad: bool,
}

impl Conv {
    fn out(&self) -> (usize, usize) {
        let [_, _, h, w] = self.x;
        let [_, _, kh, kw] = self.w;
        let oh = (h + self.padding[0] + self.padding[2] - self.dilation[0] * (kh - 1) - 1)
            / self.stride[0]
            + 1;
        let ow = (w + self.padding[1] + self.padding[3] - self.dilation[1] * (kw - 1) - 1)
            / self.stride[1]
            + 1;
        (oh, ow)
    }
}

fn convs(p: &Program) -> Vec<Conv> {
    let graph = ipusim::ir::training::prepare(p, None, true)
        .expect("the ResNet prepares")
        .graph;
    let mut out = Vec::new();
    for (_, node) in graph.nodes() {
        if let Op::Conv2d {
            stride,
            padding,
            dilation,
            groups,
        } = &node.op
        {
            assert_eq!(*groups, 1, "the zoo's ResNets have no grouped convolutions");
            let dims = |i: usize| graph.node(node.inputs[i]).ty.shape.dims().to_vec();
            let (x, w) = (dims(0), dims(1));
            let two = |v: &[usize], d: usize| [*v.first().unwrap_or(&d), *v.get(1).unwrap_or(&d)];
            let pad = match padding.len() {
                4 => [padding[0], padding[1], padding[2], padding[3]],
                _ => [0; 4],
            };
            // The stem (the first convolution) reads the images: no input gradient.
            let stem = out.is_empty();
            out.push(Conv {
                x: [x[0], x[1], x[2], x[3]],
                w: [w[0], w[1], w[2], w[3]],
                stride: two(stride, 1),
                padding: pad,
                dilation: two(dilation, 1),
                input_grad: !stem,
            });
        }
    }
    out
}

/// `c[m×n] = a[m×k] · b[k×n]` (+ `c` when `acc`), row-major, with strides for transposes.
#[allow(clippy::too_many_arguments)]
fn gemm(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    (rsa, csa): (isize, isize),
    b: &[f32],
    (rsb, csb): (isize, isize),
    c: &mut [f32],
    acc: bool,
) {
    // SAFETY: the slices hold every element the strides address (checked by the callers'
    // shapes), and `c` does not alias `a` or `b`.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            if acc { 1.0 } else { 0.0 },
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Calls `f(i, j)` for every element `i` of the im2col matrix `[c·kh·kw][oh·ow]` of one
/// batch element, in order, with `j` the element of the input `[c, h, w]` it holds (`None`:
/// padding).
fn for_each_tap(cv: &Conv, mut f: impl FnMut(usize, Option<usize>)) {
    let [_, c, h, w] = cv.x;
    let [_, _, kh, kw] = cv.w;
    let (oh, ow) = cv.out();
    let at = |o: usize, k: usize, axis: usize, size: usize| -> Option<usize> {
        let v = (o * cv.stride[axis] + k * cv.dilation[axis]) as isize - cv.padding[axis] as isize;
        (v >= 0 && (v as usize) < size).then_some(v as usize)
    };
    let mut i = 0;
    for ci in 0..c {
        for p in 0..kh {
            for q in 0..kw {
                for r in 0..oh {
                    let y = at(r, p, 0, h);
                    for s in 0..ow {
                        let x = at(s, q, 1, w);
                        f(i, y.zip(x).map(|(y, x)| (ci * h + y) * w + x));
                        i += 1;
                    }
                }
            }
        }
    }
}

/// The im2col matrix of batch element `x` (`[c, h, w]`).
fn im2col(cv: &Conv, x: &[f32], col: &mut [f32]) {
    for_each_tap(cv, |i, j| col[i] = j.map_or(0.0, |j| x[j]));
}

/// Adds the im2col-shaped gradient `col` back onto `dx` (`[c, h, w]`).
fn col2im(cv: &Conv, col: &[f32], dx: &mut [f32]) {
    for_each_tap(cv, |i, j| {
        if let Some(j) = j {
            dx[j] += col[i];
        }
    });
}

/// Buffers of one convolution's native passes.
struct NativeConv {
    conv: Conv,
    x: Vec<f32>,
    w: Vec<f32>,
    y: Vec<f32>,
    dy: Vec<f32>,
    dx: Vec<f32>,
    dw: Vec<f32>,
    cols: Vec<f32>,
    dcol: Vec<f32>,
}

impl NativeConv {
    fn new(conv: Conv) -> NativeConv {
        let [n, c, h, w] = conv.x;
        let [o, _, kh, kw] = conv.w;
        let (oh, ow) = conv.out();
        let fill = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7919 + seed) % 97) as f32 / 97.0 - 0.5)
                .collect()
        };
        let ck = c * kh * kw;
        let p = oh * ow;
        NativeConv {
            x: fill(n * c * h * w, 1),
            w: fill(o * ck, 2),
            y: vec![0.0; n * o * p],
            dy: fill(n * o * p, 3),
            dx: vec![0.0; n * c * h * w],
            dw: vec![0.0; o * ck],
            cols: vec![0.0; n * ck * p],
            dcol: vec![0.0; ck * p],
            conv,
        }
    }

    /// Forward, input gradient and weight gradient over the batch.
    fn step(&mut self) -> f32 {
        let cv = &self.conv;
        let [n, c, h, w] = cv.x;
        let [o, _, kh, kw] = cv.w;
        let (oh, ow) = cv.out();
        let (ck, p) = (c * kh * kw, oh * ow);
        for b in 0..n {
            let col = &mut self.cols[b * ck * p..(b + 1) * ck * p];
            im2col(cv, &self.x[b * c * h * w..(b + 1) * c * h * w], col);
            let y = &mut self.y[b * o * p..(b + 1) * o * p];
            gemm(
                (o, ck, p),
                &self.w,
                (ck as isize, 1),
                col,
                (p as isize, 1),
                y,
                false,
            );
        }
        if cv.input_grad {
            self.dx.fill(0.0);
            for b in 0..n {
                let dy = &self.dy[b * o * p..(b + 1) * o * p];
                // dcol[ck×p] = wᵀ[ck×o] · dy[o×p]
                gemm(
                    (ck, o, p),
                    &self.w,
                    (1, ck as isize),
                    dy,
                    (p as isize, 1),
                    &mut self.dcol,
                    false,
                );
                col2im(
                    cv,
                    &self.dcol,
                    &mut self.dx[b * c * h * w..(b + 1) * c * h * w],
                );
            }
        }
        for b in 0..n {
            let dy = &self.dy[b * o * p..(b + 1) * o * p];
            let col = &self.cols[b * ck * p..(b + 1) * ck * p];
            // dw[o×ck] += dy[o×p] · colᵀ[p×ck]
            gemm(
                (o, p, ck),
                dy,
                (p as isize, 1),
                col,
                (1, p as isize),
                &mut self.dw,
                b > 0,
            );
        }
        self.y[0] + self.dw[0] + self.dx.first().copied().unwrap_or(0.0)
    }

    /// Multiply-accumulates of the passes run.
    fn macs(&self) -> u64 {
        let [n, c, _, _] = self.conv.x;
        let [o, _, kh, kw] = self.conv.w;
        let (oh, ow) = self.conv.out();
        let one = (n * o * c * kh * kw * oh * ow) as u64;
        one * if self.conv.input_grad { 3 } else { 2 }
    }
}

/// Host seconds of the native convolutions of one step.
fn native_step(nets: &mut [NativeConv]) -> f32 {
    nets.iter_mut().map(NativeConv::step).sum()
}

fn compare(p: &Program, nets: &mut [NativeConv]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let native = median_secs(5, 0.5, || native_step(nets));
    let macs: u64 = nets.iter().map(NativeConv::macs).sum();
    println!(
        "cnn step: ResNet-20, batch {BATCH}, 32x32x3, {} convolutions (load average {})",
        nets.len(),
        load_average()
    );
    println!(
        "  native f32 convolutions (1 thread, im2col + matrixmultiply sgemm): {} ({:.1} GFLOP/s)",
        duration(native),
        2.0 * macs as f64 / native / 1e9
    );
    for precision in [Precision::P16_16, Precision::P32_32] {
        let mut times = Vec::new();
        for (threads, label) in [
            (None, format!("{cores} threads")),
            (Some(1), "1 thread".to_string()),
        ] {
            let mut s = session(p, precision, threads, Target::mk2());
            let step = median_secs(3, 0.0, || s.run().unwrap().summary.cycles.total);
            let ratio = step / native;
            times.push(step);
            println!(
                "  simulated step {precision} ({label}): {}, {ratio:.1}x the native convolutions (target {TARGET}x): {}",
                duration(step),
                if ratio <= TARGET { "met" } else { "not met" }
            );
        }
        println!(
            "  {precision}: 1 -> {cores} host threads: {:.2}x (target 1.7x)",
            times[1] / times[0]
        );
    }
}

/// ResNet-50 at batch 1 in 16.16 on all cores against its native convolutions: one
/// sample each (after a warm-up run), printed.
fn compare_resnet50() {
    let p = program("resnet50", 1);
    let mut nets: Vec<NativeConv> = convs(&p).into_iter().map(NativeConv::new).collect();
    let native = median_secs(1, 0.0, || native_step(&mut nets));
    let macs: u64 = nets.iter().map(NativeConv::macs).sum();
    let mut s = session(&p, Precision::P16_16, None, Target::mk2());
    let step = median_secs(1, 0.0, || s.run().unwrap().summary.cycles.total);
    let ratio = step / native;
    println!(
        "cnn step: ResNet-50, batch 1, 224x224x3, {} convolutions, 16.16 on mk2 (load average {})",
        nets.len(),
        load_average()
    );
    println!(
        "  native f32 convolutions (1 thread): {} ({:.1} GFLOP/s); simulated step (all cores): {}, {ratio:.1}x (target {TARGET}x): {}",
        duration(native),
        2.0 * macs as f64 / native / 1e9,
        duration(step),
        if ratio <= TARGET { "met" } else { "not met" }
    );
}

fn cnn(c: &mut Criterion) {
    let p = program("resnet20", BATCH);
    let mut nets: Vec<NativeConv> = convs(&p).into_iter().map(NativeConv::new).collect();
    compare(&p, &mut nets);
    compare_resnet50();
    let mut group = c.benchmark_group("cnn");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    let mut s = session(&p, Precision::P16_16, None, Target::mk2());
    group.bench_function("resnet20_b32_step/16.16", |b| {
        b.iter(|| s.run().unwrap().summary.cycles.total)
    });
    group.bench_function("native_f32_convolutions", |b| {
        b.iter(|| native_step(&mut nets))
    });
    // ResNet-50 at batch 1 (16.16, all cores) and its native convolutions (one thread).
    let p50 = program("resnet50", 1);
    let mut nets50: Vec<NativeConv> = convs(&p50).into_iter().map(NativeConv::new).collect();
    let mut s50 = session(&p50, Precision::P16_16, None, Target::mk2());
    group.bench_function("resnet50_b1_step/16.16", |b| {
        b.iter(|| s50.run().unwrap().summary.cycles.total)
    });
    group.bench_function("resnet50_native_f32_convolutions", |b| {
        b.iter(|| native_step(&mut nets50))
    });
    group.finish();
}

criterion_group!(benches, cnn);
criterion_main!(benches);
