//! The native f32 baselines the simulator is held against: plain, optimised host code with
//! blocked, vectorisable loops (no BLAS), compiled for the CPU's widest vectors the same way
//! the simulator's kernels are (`simd_dispatch!`).
//!
//! - [`MlpStep`]: the flagship's training step (`programs/mlp_digits.ron`: pixels/16, MLP
//!   64-32-10 with ReLU, softmax cross-entropy with mean reduction, the batch accuracy, loss
//!   scaling 128, backward, momentum SGD lr 0.02 μ 0.9) on batches of 50, in f32.
//! - [`matmul`]: `c = a · b` for square f32 matrices, blocked for the caches.

#![allow(dead_code)]

use ipusim::sim::simd_dispatch;

/// Inputs, hidden units, classes and batch of the flagship.
pub const IN: usize = 64;
pub const HID: usize = 32;
pub const OUT: usize = 10;
pub const BATCH: usize = 50;

const LR: f32 = 0.02;
const MU: f32 = 0.9;
const LOSS_SCALE: f32 = 128.0;

/// The flagship's training data (`programs/data/digits_train.csv`): pixels (0..16) as bytes,
/// `IN` per row, and labels.
pub struct Digits {
    pub pixels: Vec<u8>,
    pub labels: Vec<i32>,
}

impl Digits {
    /// Reads the CSV (a header, then 64 pixel columns and the label per row).
    pub fn load(path: &std::path::Path) -> Digits {
        let text = std::fs::read_to_string(path).expect("digits CSV");
        let (mut pixels, mut labels) = (Vec::new(), Vec::new());
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            assert_eq!(fields.len(), IN + 1, "a digits row has 65 fields");
            pixels.extend(fields[..IN].iter().map(|f| f.parse::<u8>().expect("pixel")));
            labels.push(fields[IN].parse::<i32>().expect("label"));
        }
        Digits { pixels, labels }
    }

    /// Whole batches in the file.
    pub fn batches(&self) -> usize {
        self.labels.len() / BATCH
    }

    /// Batch `i` (wrapping around the file, as the simulator's training infeeds do).
    pub fn batch(&self, i: usize) -> (&[u8], &[i32]) {
        let b = i % self.batches();
        (
            &self.pixels[b * BATCH * IN..(b + 1) * BATCH * IN],
            &self.labels[b * BATCH..(b + 1) * BATCH],
        )
    }
}

/// Classes padded to a whole vector of f32 lanes (the padding columns of `w2`, `b2` stay
/// zero and are never read back).
const OUTP: usize = 16;

/// The flagship's weights, momentum and activations, in f32, as fixed-size arrays (every
/// loop has a compile-time trip count; the 10 classes are padded to 16 lanes).
#[derive(Clone)]
pub struct MlpStep {
    w1: [[f32; HID]; IN],
    b1: [f32; HID],
    w2: [[f32; OUTP]; HID],
    b2: [f32; OUTP],
    v_w1: [[f32; HID]; IN],
    v_b1: [f32; HID],
    v_w2: [[f32; OUTP]; HID],
    v_b2: [f32; OUTP],
    x: [[f32; IN]; BATCH],
    h_pre: [[f32; HID]; BATCH],
    h: [[f32; HID]; BATCH],
    logits: [[f32; OUTP]; BATCH],
    d_logits: [[f32; OUTP]; BATCH],
    w2t: [[f32; HID]; OUTP],
    d_h: [[f32; HID]; BATCH],
    g_w1: [[f32; HID]; IN],
    g_b1: [f32; HID],
    g_w2: [[f32; OUTP]; HID],
    g_b2: [f32; OUTP],
}

/// Glorot-uniform weights from a small deterministic generator (timing does not depend on
/// the values; the loss still falls, which [`MlpStep::step`]'s result lets a caller check).
fn glorot<const R: usize, const C: usize>(fan_out: usize, seed: u64) -> [[f32; C]; R] {
    let limit = (6.0 / (R + fan_out) as f64).sqrt();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut w = [[0f32; C]; R];
    for row in &mut w {
        for v in &mut row[..fan_out] {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            *v = ((2.0 * u - 1.0) * limit) as f32;
        }
    }
    w
}

impl MlpStep {
    /// Fresh weights (Glorot uniform, zero biases) and zero momentum.
    pub fn new() -> Box<MlpStep> {
        Box::new(MlpStep {
            w1: glorot(HID, 1),
            b1: [0.0; HID],
            w2: glorot(OUT, 2),
            b2: [0.0; OUTP],
            v_w1: [[0.0; HID]; IN],
            v_b1: [0.0; HID],
            v_w2: [[0.0; OUTP]; HID],
            v_b2: [0.0; OUTP],
            x: [[0.0; IN]; BATCH],
            h_pre: [[0.0; HID]; BATCH],
            h: [[0.0; HID]; BATCH],
            logits: [[0.0; OUTP]; BATCH],
            d_logits: [[0.0; OUTP]; BATCH],
            w2t: [[0.0; HID]; OUTP],
            d_h: [[0.0; HID]; BATCH],
            g_w1: [[0.0; HID]; IN],
            g_b1: [0.0; HID],
            g_w2: [[0.0; OUTP]; HID],
            g_b2: [0.0; OUTP],
        })
    }

    /// One training step on a batch; returns the (unscaled) mean loss and the batch accuracy.
    pub fn step(&mut self, pixels: &[u8], labels: &[i32]) -> (f32, f32) {
        mlp_step(self, pixels, labels)
    }
}

simd_dispatch! {
    fn mlp_step(m: &mut MlpStep, pixels: &[u8], labels: &[i32]) -> (f32, f32) => mlp_step_body
}

/// Rows of `a` (and `c`) that [`affine`] computes together: independent FMA chains hide the
/// FMA latency (the flagship's batch of 50 is a multiple).
const RB: usize = 5;
/// Rows of `g` that [`weight_grad`] accumulates together in registers.
const KB: usize = 4;

/// `c = bias + a · b` for `a[B×K]`, `b[K×N]`: `RB` rows at a time, their accumulators in
/// registers, the inner loop an FMA over `N` lanes.
#[inline(always)]
fn affine<const B: usize, const K: usize, const N: usize>(
    a: &[[f32; K]; B],
    b: &[[f32; N]; K],
    bias: &[f32; N],
    c: &mut [[f32; N]; B],
) {
    for (a_rows, c_rows) in a.chunks(RB).zip(c.chunks_mut(RB)) {
        let mut acc = [*bias; RB];
        for (kk, b_row) in b.iter().enumerate() {
            for (acc_row, a_row) in acc.iter_mut().zip(a_rows) {
                let av = a_row[kk];
                for (cv, &bv) in acc_row.iter_mut().zip(b_row) {
                    *cv = av.mul_add(bv, *cv);
                }
            }
        }
        c_rows.copy_from_slice(&acc[..c_rows.len()]);
    }
}

/// `g = aᵀ · d` for `a[B×K]`, `d[B×N]` (`KB` rows of `g` at a time, accumulated in
/// registers over the batch), and `gb` = the column sums of `d`.
#[inline(always)]
fn weight_grad<const B: usize, const K: usize, const N: usize>(
    a: &[[f32; K]; B],
    d: &[[f32; N]; B],
    g: &mut [[f32; N]; K],
    gb: &mut [f32; N],
) {
    for (k0, g_rows) in g.chunks_mut(KB).enumerate() {
        let mut acc = [[0.0f32; N]; KB];
        for (a_row, d_row) in a.iter().zip(d) {
            for (r, acc_row) in acc.iter_mut().enumerate().take(g_rows.len()) {
                let av = a_row[k0 * KB + r];
                for (gv, &dv) in acc_row.iter_mut().zip(d_row) {
                    *gv = av.mul_add(dv, *gv);
                }
            }
        }
        g_rows.copy_from_slice(&acc[..g_rows.len()]);
    }
    *gb = [0.0; N];
    for d_row in d {
        for (s, &dv) in gb.iter_mut().zip(d_row) {
            *s += dv;
        }
    }
}

/// `v = μ·v + g/scale`, then `w -= lr · v`.
#[inline(always)]
fn momentum(w: &mut [f32], v: &mut [f32], g: &[f32]) {
    for ((w, v), &g) in w.iter_mut().zip(v.iter_mut()).zip(g) {
        *v = MU.mul_add(*v, g * (1.0 / LOSS_SCALE));
        *w = (-LR).mul_add(*v, *w);
    }
}

#[inline(always)]
fn mlp_step_body(m: &mut MlpStep, pixels: &[u8], labels: &[i32]) -> (f32, f32) {
    // Forward.
    for (x_row, p_row) in m.x.iter_mut().zip(pixels.chunks_exact(IN)) {
        for (x, &p) in x_row.iter_mut().zip(p_row) {
            *x = f32::from(p) * 0.0625;
        }
    }
    affine(&m.x, &m.w1, &m.b1, &mut m.h_pre);
    for (h_row, p_row) in m.h.iter_mut().zip(&m.h_pre) {
        for (h, &p) in h_row.iter_mut().zip(p_row) {
            *h = p.max(0.0);
        }
    }
    affine(&m.h, &m.w2, &m.b2, &mut m.logits);
    // Softmax cross-entropy (mean over the batch), accuracy, and d loss / d logits (scaled).
    let (mut loss, mut correct) = (0.0f32, 0usize);
    let g = LOSS_SCALE / BATCH as f32;
    for ((row, d), &label) in m.logits.iter().zip(m.d_logits.iter_mut()).zip(labels) {
        let row = &row[..OUT];
        let (mut max, mut arg) = (row[0], 0usize);
        for (j, &v) in row.iter().enumerate().skip(1) {
            if v > max {
                (max, arg) = (v, j);
            }
        }
        correct += usize::from(arg as i32 == label);
        let mut sum = 0.0f32;
        for (dv, &v) in d.iter_mut().zip(row) {
            *dv = (v - max).exp();
            sum += *dv;
        }
        let label = label as usize;
        loss += sum.ln() - (row[label] - max);
        let scale = g / sum;
        for dv in &mut d[..OUT] {
            *dv *= scale;
        }
        d[label] -= g;
    }
    // Backward.
    weight_grad(&m.h, &m.d_logits, &mut m.g_w2, &mut m.g_b2);
    for (k, w_row) in m.w2.iter().enumerate() {
        for (j, &w) in w_row.iter().enumerate() {
            m.w2t[j][k] = w;
        }
    }
    affine(&m.d_logits, &m.w2t, &[0.0; HID], &mut m.d_h);
    for (dh_row, pre_row) in m.d_h.iter_mut().zip(&m.h_pre) {
        for (s, &pre) in dh_row.iter_mut().zip(pre_row) {
            if pre <= 0.0 {
                *s = 0.0;
            }
        }
    }
    weight_grad(&m.x, &m.d_h, &mut m.g_w1, &mut m.g_b1);
    // Momentum update.
    momentum(
        m.w1.as_flattened_mut(),
        m.v_w1.as_flattened_mut(),
        m.g_w1.as_flattened(),
    );
    momentum(&mut m.b1, &mut m.v_b1, &m.g_b1);
    momentum(
        m.w2.as_flattened_mut(),
        m.v_w2.as_flattened_mut(),
        m.g_w2.as_flattened(),
    );
    momentum(&mut m.b2, &mut m.v_b2, &m.g_b2);
    (loss / BATCH as f32, correct as f32 / BATCH as f32)
}

/// `c = a · b` for `n × n` row-major f32 matrices (`c` overwritten).
pub fn matmul(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    matmul_dispatch(n, a, b, c)
}

simd_dispatch! {
    fn matmul_dispatch(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) -> () => matmul_body
}

/// Blocks of `b` (`KB` rows × `JB` columns, 256 KiB) stay in L2 while every row of `a`
/// streams past them; four rows of `c` at a time share each loaded row of `b`.
#[inline(always)]
fn matmul_body(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    const KB: usize = 256;
    const JB: usize = 256;
    c.fill(0.0);
    for j0 in (0..n).step_by(JB) {
        let j1 = (j0 + JB).min(n);
        for k0 in (0..n).step_by(KB) {
            let k1 = (k0 + KB).min(n);
            for (a4, c4) in a.chunks(4 * n).zip(c.chunks_mut(4 * n)) {
                let rows = a4.len() / n;
                if rows == 4 {
                    let (c0, rest) = c4.split_at_mut(n);
                    let (c1, rest) = rest.split_at_mut(n);
                    let (c2, c3) = rest.split_at_mut(n);
                    let (c0, c1, c2, c3) = (
                        &mut c0[j0..j1],
                        &mut c1[j0..j1],
                        &mut c2[j0..j1],
                        &mut c3[j0..j1],
                    );
                    for kk in k0..k1 {
                        let (x0, x1, x2, x3) = (a4[kk], a4[n + kk], a4[2 * n + kk], a4[3 * n + kk]);
                        let b_row = &b[kk * n + j0..kk * n + j1];
                        let rows = c0.iter_mut().zip(c1.iter_mut()).zip(c2.iter_mut());
                        for (((y0, y1), y2), (y3, &bv)) in rows.zip(c3.iter_mut().zip(b_row)) {
                            *y0 += x0 * bv;
                            *y1 += x1 * bv;
                            *y2 += x2 * bv;
                            *y3 += x3 * bv;
                        }
                    }
                } else {
                    for r in 0..rows {
                        let c_row = &mut c4[r * n + j0..r * n + j1];
                        for kk in k0..k1 {
                            let x = a4[r * n + kk];
                            for (cv, &bv) in c_row.iter_mut().zip(&b[kk * n + j0..kk * n + j1]) {
                                *cv += x * bv;
                            }
                        }
                    }
                }
            }
        }
    }
}
