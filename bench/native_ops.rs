//! The kernels of the native f32 step (`native_step.rs`): sgemm, convolution and pooling
//! geometry, element-wise loops with NumPy broadcasting planned as contiguous runs,
//! reductions, and the execution of one node, compiled for the host's widest vectors.

use ipusim::ir::conv::{ConvGeometry, Window};
use ipusim::ir::{BinaryOp, Op, UnaryOp};

/// Why a graph cannot run natively.
#[derive(Debug)]
pub struct Unsupported(pub String);

/// `c[m×n] = a[m×k] · b[k×n]` (+ `c` when `acc`), row-major `c`, with strides for `a` and `b`
/// (transposes).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    (rsa, csa): (isize, isize),
    b: &[f32],
    (rsb, csb): (isize, isize),
    c: &mut [f32],
    acc: bool,
) {
    let reach = |rows: usize, cols: usize, rs: isize, cs: isize| {
        if rows == 0 || cols == 0 {
            0
        } else {
            (rows as isize - 1) * rs + (cols as isize - 1) * cs + 1
        }
    };
    assert!(reach(m, k, rsa, csa) <= a.len() as isize);
    assert!(reach(k, n, rsb, csb) <= b.len() as isize);
    assert!(m * n <= c.len());
    // SAFETY: the asserts above keep every strided element inside its slice (non-negative
    // strides), and `c` is a distinct `&mut` borrow, so it aliases neither `a` nor `b`.
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

/// A convolution of one group: the IR's geometry (`ipusim_ir::conv`), with the im2col
/// matrix of one batch element, `[c·kh·kw][oh·ow]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conv(pub ConvGeometry);

impl Conv {
    /// The convolution of `op` (a `Conv2d` or one of its gradients) with input `x` and
    /// weights `w`; grouped ones are refused.
    pub(super) fn new(op: &Op, x: &[usize], w: &[usize]) -> Result<Conv, Unsupported> {
        let g = Window::of(op)
            .ok_or_else(|| Unsupported(format!("{op:?} is not a convolution")))?
            .and_then(|window| window.geometry(x, w))
            .map_err(|e| Unsupported(format!("{op:?}: {e:?}")))?;
        if g.groups != 1 {
            return Err(Unsupported(format!("{} convolution groups", g.groups)));
        }
        Ok(Conv(g))
    }

    /// Rows (`c·kh·kw`) and columns (`oh·ow`) of one batch element's im2col matrix.
    pub(super) fn matrix(&self) -> (usize, usize) {
        let g = &self.0;
        (g.c * g.kh * g.kw, g.oh * g.ow)
    }

    /// Whether the input of one batch element is already the im2col matrix.
    pub(super) fn is_pointwise(&self) -> bool {
        let g = &self.0;
        g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.padding == [0; 4]
    }

    /// Calls `f(i, j)` for every element `i` of the im2col matrix of one batch element, in
    /// order, with `j` the element of the input `[c, h, w]` it holds (`None`: padding).
    #[inline(always)]
    fn for_each_tap(&self, mut f: impl FnMut(usize, Option<usize>)) {
        let g = &self.0;
        // `ConvGeometry::input_row` and `input_col`, here so that they inline (they are
        // called for every element).
        let at = |o: usize, k: usize, axis: usize, size: usize| -> Option<usize> {
            (o * g.stride[axis] + k * g.dilation[axis])
                .checked_sub(g.padding[axis])
                .filter(|&v| v < size)
        };
        let mut i = 0;
        for ci in 0..g.c {
            for p in 0..g.kh {
                for q in 0..g.kw {
                    for r in 0..g.oh {
                        let y = at(r, p, 0, g.h);
                        for s in 0..g.ow {
                            let x = at(s, q, 1, g.w);
                            f(i, y.zip(x).map(|(y, x)| (ci * g.h + y) * g.w + x));
                            i += 1;
                        }
                    }
                }
            }
        }
    }

    /// The im2col matrix of batch element `x` (`[c, h, w]`).
    #[inline(always)]
    fn im2col(&self, x: &[f32], col: &mut [f32]) {
        self.for_each_tap(|i, j| col[i] = j.map_or(0.0, |j| x[j]));
    }

    /// Adds the im2col-shaped gradient `col` onto `dx` (`[c, h, w]`).
    #[inline(always)]
    fn col2im(&self, col: &[f32], dx: &mut [f32]) {
        self.for_each_tap(|i, j| {
            if let Some(j) = j {
                dx[j] += col[i];
            }
        });
    }
}

/// A pooling window's geometry over `[n, c, h, w]`.
#[derive(Clone, Debug)]
pub(super) struct Pool {
    pub(super) x: [usize; 4],
    pub(super) kernel: [usize; 2],
    pub(super) stride: [usize; 2],
    pub(super) padding: [usize; 4],
    pub(super) out: [usize; 2],
}

impl Pool {
    /// Calls `f(plane, out index, input indices of the window)` for every output element.
    #[inline(always)]
    fn windows(&self, mut f: impl FnMut(usize, usize, &mut dyn Iterator<Item = usize>)) {
        let [n, c, h, w] = self.x;
        let [oh, ow] = self.out;
        for plane in 0..n * c {
            for r in 0..oh {
                for s in 0..ow {
                    let y0 = (r * self.stride[0]) as isize - self.padding[0] as isize;
                    let x0 = (s * self.stride[1]) as isize - self.padding[1] as isize;
                    let mut taps = (0..self.kernel[0]).flat_map(move |p| {
                        (0..self.kernel[1]).filter_map(move |q| {
                            let (y, x) = (y0 + p as isize, x0 + q as isize);
                            (y >= 0 && x >= 0 && (y as usize) < h && (x as usize) < w)
                                .then(|| plane * h * w + y as usize * w + x as usize)
                        })
                    });
                    f(plane, (plane * oh + r) * ow + s, &mut taps);
                }
            }
        }
    }
}

/// An element-wise binary op: the IR's arithmetic ones, or `a + s·b`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Binary {
    Arith(BinaryOp),
    ScaledAdd(f32),
}

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Reduce {
    Sum,
    Mean,
    Max,
}

/// One inner run of an element-wise loop: `len` output elements from `out`, reading the
/// operands from `a` and `b` with strides `sa` and `sb` (0: one element broadcast).
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    out: usize,
    a: usize,
    b: usize,
    len: usize,
    sa: usize,
    sb: usize,
}

/// The runs of an element-wise loop over an output of two operands, in output order:
/// dimensions merged where both operands are contiguous (or both broadcast) across a
/// boundary, the innermost merged dimension a run. Planned once with the node.
#[derive(Clone, Debug)]
pub(super) struct Loop {
    runs: Vec<Run>,
}

impl Loop {
    /// The loop over `out` of operands shaped `a` and `b` (NumPy broadcasting), each read
    /// with stride 0 where it broadcasts.
    pub(super) fn new(out: &[usize], a: &[usize], b: &[usize]) -> Loop {
        let strides = |s: &[usize]| -> Vec<usize> {
            let lead = out.len() - s.len();
            let mut st = vec![0; out.len()];
            let mut acc = 1;
            for i in (0..s.len()).rev() {
                st[lead + i] = if s[i] == 1 && out[lead + i] != 1 {
                    0
                } else {
                    acc
                };
                acc *= s[i];
            }
            st
        };
        let (sa, sb) = (strides(a), strides(b));
        // (size, a stride, b stride), outermost first.
        let mut dims: Vec<(usize, usize, usize)> = Vec::new();
        for i in 0..out.len() {
            if out[i] == 1 {
                continue;
            }
            match dims.last_mut() {
                Some(last) if last.1 == sa[i] * out[i] && last.2 == sb[i] * out[i] => {
                    *last = (last.0 * out[i], sa[i], sb[i]);
                }
                _ => dims.push((out[i], sa[i], sb[i])),
            }
        }
        let (inner, outer) = dims
            .split_last()
            .map_or(((1, 1, 1), &[][..]), |(i, o)| (*i, o));
        let mut runs = Vec::new();
        let mut idx = vec![0usize; outer.len()];
        let (mut o, mut ia, mut ib) = (0, 0, 0);
        loop {
            runs.push(Run {
                out: o,
                a: ia,
                b: ib,
                len: inner.0,
                sa: inner.1,
                sb: inner.2,
            });
            o += inner.0;
            let mut d = outer.len();
            loop {
                if d == 0 {
                    return Loop { runs };
                }
                d -= 1;
                idx[d] += 1;
                ia += outer[d].1;
                ib += outer[d].2;
                if idx[d] < outer[d].0 {
                    break;
                }
                ia -= outer[d].1 * outer[d].0;
                ib -= outer[d].2 * outer[d].0;
                idx[d] = 0;
            }
        }
    }
}

/// `out[i] = op(a[i], b[i])` over one run with strides 0 or 1 (else general).
#[inline(always)]
fn run_binary(
    f: impl Fn(f32, f32) -> f32 + Copy,
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    (sa, sb): (usize, usize),
) {
    let len = out.len();
    match (sa, sb) {
        (1, 1) => {
            for ((o, &x), &y) in out.iter_mut().zip(&a[..len]).zip(&b[..len]) {
                *o = f(x, y);
            }
        }
        (1, 0) => {
            let y = b[0];
            for (o, &x) in out.iter_mut().zip(&a[..len]) {
                *o = f(x, y);
            }
        }
        (0, 1) => {
            let x = a[0];
            for (o, &y) in out.iter_mut().zip(&b[..len]) {
                *o = f(x, y);
            }
        }
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(a[i * sa], b[i * sb]);
            }
        }
    }
}

#[inline(always)]
fn binary(op: Binary, lp: &Loop, a: &[f32], b: &[f32], out: &mut [f32]) {
    for &Run {
        out: o,
        a: ia,
        b: ib,
        len,
        sa,
        sb,
    } in &lp.runs
    {
        let (out, a, b) = (&mut out[o..o + len], &a[ia..], &b[ib..]);
        match op {
            Binary::Arith(BinaryOp::Add) => run_binary(|x, y| x + y, out, a, b, (sa, sb)),
            Binary::Arith(BinaryOp::Sub) => run_binary(|x, y| x - y, out, a, b, (sa, sb)),
            Binary::Arith(BinaryOp::Mul) => run_binary(|x, y| x * y, out, a, b, (sa, sb)),
            Binary::Arith(BinaryOp::Div) => run_binary(|x, y| x / y, out, a, b, (sa, sb)),
            Binary::Arith(BinaryOp::Max) => run_binary(f32::max, out, a, b, (sa, sb)),
            Binary::Arith(BinaryOp::Min) => run_binary(f32::min, out, a, b, (sa, sb)),
            // Comparisons are refused when the step is planned.
            Binary::Arith(_) => unreachable!("a comparison in a native step"),
            Binary::ScaledAdd(s) => run_binary(|x, y| x + s * y, out, a, b, (sa, sb)),
        }
    }
}

#[inline(always)]
fn unary(op: UnaryOp, a: &[f32], out: &mut [f32]) {
    let each = |f: fn(f32) -> f32, out: &mut [f32]| {
        for (o, &x) in out.iter_mut().zip(a) {
            *o = f(x);
        }
    };
    match op {
        UnaryOp::Neg => each(|x| -x, out),
        UnaryOp::Abs => each(f32::abs, out),
        UnaryOp::Exp => each(f32::exp, out),
        UnaryOp::Log => each(f32::ln, out),
        UnaryOp::Sqrt => each(f32::sqrt, out),
        UnaryOp::Relu => each(|x| x.max(0.0), out),
        UnaryOp::Sigmoid => each(|x| 1.0 / (1.0 + (-x).exp()), out),
        UnaryOp::Tanh => each(f32::tanh, out),
        // The tanh approximation, as the IR's GELU.
        UnaryOp::Gelu => each(
            |x| 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh()),
            out,
        ),
    }
}

/// `out` (zeroed or filled with the identity first) reduced from `a` along the loop's
/// broadcast (stride-0) output dimensions: the loop is over `a`, with `out` as its second
/// operand.
#[inline(always)]
fn reduce(op: Reduce, lp: &Loop, a: &[f32], out: &mut [f32], count: usize) {
    out.fill(if op == Reduce::Max {
        f32::NEG_INFINITY
    } else {
        0.0
    });
    for &Run {
        a: ia,
        b: io,
        len,
        sb: so,
        ..
    } in &lp.runs
    {
        let a = &a[ia..ia + len];
        match (op, so) {
            (Reduce::Max, 0) => out[io] = max(a, out[io]),
            (_, 0) => out[io] += sum(a),
            (Reduce::Max, _) => {
                for (i, &x) in a.iter().enumerate() {
                    out[io + i * so] = out[io + i * so].max(x);
                }
            }
            (_, 1) => {
                for (o, &x) in out[io..io + len].iter_mut().zip(a) {
                    *o += x;
                }
            }
            _ => {
                for (i, &x) in a.iter().enumerate() {
                    out[io + i * so] += x;
                }
            }
        }
    }
    if op == Reduce::Mean {
        let s = 1.0 / count as f32;
        for o in out {
            *o *= s;
        }
    }
}

/// What one node does.
#[derive(Clone, Debug)]
pub(super) enum Kernel {
    Binary(Binary, Loop),
    Unary(UnaryOp),
    ReluGrad,
    Reduce(Reduce, Loop, usize),
    Broadcast(Loop),
    Transpose(Vec<usize>, Vec<usize>),
    /// A 2-D matmul `[m, k] × [k, n]`.
    MatMul {
        m: usize,
        k: usize,
        n: usize,
    },
    Softmax {
        rows: usize,
        cols: usize,
    },
    CrossEntropy {
        rows: usize,
        cols: usize,
        mean: bool,
    },
    OneHot {
        depth: usize,
    },
    Conv {
        conv: Conv,
        cols: Option<usize>,
    },
    ConvInputGrad {
        conv: Conv,
        scratch: usize,
    },
    /// `cols`: the im2col matrices, the forward pass's (`own` false) or computed here.
    ConvWeightGrad {
        conv: Conv,
        cols: Option<usize>,
        own: bool,
    },
    MaxPool(Pool),
    MaxPoolGrad(Pool),
}

/// One node's execution: its kernel, input buffers and output buffer.
#[derive(Clone, Debug)]
pub(super) struct Exec {
    pub(super) kernel: Kernel,
    pub(super) inputs: Vec<usize>,
    pub(super) out: usize,
    /// A convolution pass or a matmul (timed apart by [`super::NativeStep::step`]).
    pub(super) is_product: bool,
}

ipusim::sim::simd_dispatch! {
    /// [`run_body`] compiled for the host's widest vectors (as the simulator's kernels are).
    pub(super) fn run(exec: &Exec, bufs: &mut [Vec<f32>], out: &mut [f32]) -> () => run_body
}

/// `a`'s sum over 16 lanes (vectorised), then the lanes and the tail.
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let chunks = a.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (x, &y) in acc.iter_mut().zip(c) {
            *x += y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `a`'s maximum (at least `init`) over 16 lanes.
#[inline(always)]
fn max(a: &[f32], init: f32) -> f32 {
    let mut acc = [init; 16];
    let chunks = a.chunks_exact(16);
    let tail = chunks.remainder().iter().fold(init, |m, &x| m.max(x));
    for c in chunks {
        for (x, &y) in acc.iter_mut().zip(c) {
            *x = x.max(y);
        }
    }
    acc.iter().fold(tail, |m, &x| m.max(x))
}

/// Runs one execution into `out` (taken out of `bufs`).
#[inline(always)]
fn run_body(exec: &Exec, bufs: &mut [Vec<f32>], out: &mut [f32]) {
    let input = |i: usize| -> &[f32] { &bufs[exec.inputs[i]] };
    match &exec.kernel {
        Kernel::Binary(op, lp) => binary(*op, lp, input(0), input(1), out),
        Kernel::Unary(op) => unary(*op, input(0), out),
        Kernel::ReluGrad => {
            for ((o, &x), &dy) in out.iter_mut().zip(input(0)).zip(input(1)) {
                *o = if x > 0.0 { dy } else { 0.0 };
            }
        }
        Kernel::Reduce(op, lp, count) => reduce(*op, lp, input(0), out, *count),
        Kernel::Broadcast(lp) => {
            let a = input(0);
            for &Run {
                out: o,
                a: ia,
                len,
                sa,
                ..
            } in &lp.runs
            {
                let out = &mut out[o..o + len];
                if sa == 0 {
                    out.fill(a[ia]);
                } else {
                    for (i, x) in out.iter_mut().enumerate() {
                        *x = a[ia + i * sa];
                    }
                }
            }
        }
        Kernel::Transpose(dims, perm) => {
            let a = input(0);
            let mut st = vec![1usize; dims.len()];
            for i in (0..dims.len().saturating_sub(1)).rev() {
                st[i] = st[i + 1] * dims[i + 1];
            }
            let od: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
            let os: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
            let mut idx = vec![0usize; od.len()];
            for o in out.iter_mut() {
                *o = a[idx.iter().zip(&os).map(|(i, s)| i * s).sum::<usize>()];
                for d in (0..od.len()).rev() {
                    idx[d] += 1;
                    if idx[d] < od[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
        Kernel::MatMul { m, k, n } => gemm(
            (*m, *k, *n),
            input(0),
            (*k as isize, 1),
            input(1),
            (*n as isize, 1),
            out,
            false,
        ),
        Kernel::Softmax { rows, cols } => {
            let a = input(0);
            for r in 0..*rows {
                let (x, y) = (
                    &a[r * cols..(r + 1) * cols],
                    &mut out[r * cols..(r + 1) * cols],
                );
                let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let mut s = 0.0;
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = (v - m).exp();
                    s += *o;
                }
                for o in y.iter_mut() {
                    *o /= s;
                }
            }
        }
        Kernel::CrossEntropy { rows, cols, mean } => {
            let (a, labels) = (input(0), input(1));
            let mut total = 0.0f32;
            for r in 0..*rows {
                let x = &a[r * cols..(r + 1) * cols];
                let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let s: f32 = x.iter().map(|&v| (v - m).exp()).sum();
                let label = labels[r] as usize;
                total += m + s.ln() - x.get(label).copied().unwrap_or(0.0);
            }
            out[0] = if *mean { total / *rows as f32 } else { total };
        }
        Kernel::OneHot { depth } => {
            out.fill(0.0);
            for (r, &l) in input(0).iter().enumerate() {
                if l >= 0.0 && (l as usize) < *depth {
                    out[r * depth + l as usize] = 1.0;
                }
            }
        }
        Kernel::Conv { conv, cols } => {
            let ConvGeometry { n, c, h, w, o, .. } = conv.0;
            let (ck, p) = conv.matrix();
            let mut m = cols.map(|cb| std::mem::take(&mut bufs[cb]));
            let (x, wt) = (&bufs[exec.inputs[0]], &bufs[exec.inputs[1]]);
            for b in 0..n {
                let xb = &x[b * c * h * w..(b + 1) * c * h * w];
                let col: &[f32] = match &mut m {
                    Some(m) => {
                        let col = &mut m[b * ck * p..(b + 1) * ck * p];
                        conv.im2col(xb, col);
                        col
                    }
                    None => xb,
                };
                gemm(
                    (o, ck, p),
                    wt,
                    (ck as isize, 1),
                    col,
                    (p as isize, 1),
                    &mut out[b * o * p..(b + 1) * o * p],
                    false,
                );
            }
            if let (Some(cb), Some(m)) = (cols, m) {
                bufs[*cb] = m;
            }
        }
        Kernel::ConvInputGrad { conv, scratch } => {
            let ConvGeometry { n, c, h, w, o, .. } = conv.0;
            let (ck, p) = conv.matrix();
            let mut dcol = std::mem::take(&mut bufs[*scratch]);
            let (dy, wt) = (&bufs[exec.inputs[0]], &bufs[exec.inputs[1]]);
            for b in 0..n {
                let dyb = &dy[b * o * p..(b + 1) * o * p];
                let dx = &mut out[b * c * h * w..(b + 1) * c * h * w];
                // dcol[ck×p] = wᵀ[ck×o] · dy[o×p], straight into dx for a pointwise one.
                let product = |dst: &mut [f32]| {
                    gemm(
                        (ck, o, p),
                        wt,
                        (1, ck as isize),
                        dyb,
                        (p as isize, 1),
                        dst,
                        false,
                    )
                };
                if conv.is_pointwise() {
                    product(dx);
                } else {
                    let dcol = &mut dcol[..ck * p];
                    product(dcol);
                    dx.fill(0.0);
                    conv.col2im(dcol, dx);
                }
            }
            bufs[*scratch] = dcol;
        }
        Kernel::ConvWeightGrad { conv, cols, own } => {
            let ConvGeometry { n, c, h, w, o, .. } = conv.0;
            let (ck, p) = conv.matrix();
            if let (Some(cb), true) = (cols, own) {
                let mut m = std::mem::take(&mut bufs[*cb]);
                let x = &bufs[exec.inputs[0]];
                for b in 0..n {
                    conv.im2col(
                        &x[b * c * h * w..(b + 1) * c * h * w],
                        &mut m[b * ck * p..(b + 1) * ck * p],
                    );
                }
                bufs[*cb] = m;
            }
            for b in 0..n {
                let dyb = &bufs[exec.inputs[1]][b * o * p..(b + 1) * o * p];
                let col: &[f32] = match cols {
                    Some(cb) => &bufs[*cb][b * ck * p..(b + 1) * ck * p],
                    None => &bufs[exec.inputs[0]][b * c * h * w..(b + 1) * c * h * w],
                };
                // dw[o×ck] += dy[o×p] · colᵀ[p×ck]
                gemm(
                    (o, p, ck),
                    dyb,
                    (p as isize, 1),
                    col,
                    (1, p as isize),
                    out,
                    b > 0,
                );
            }
        }
        Kernel::MaxPool(pool) => {
            let a = input(0);
            pool.windows(|_, o, taps| {
                out[o] = taps.fold(f32::NEG_INFINITY, |m, i| m.max(a[i]));
            });
        }
        Kernel::MaxPoolGrad(pool) => {
            let (x, dy) = (input(0), input(1));
            out.fill(0.0);
            let mut window = Vec::new();
            pool.windows(|_, o, taps| {
                window.clear();
                window.extend(taps);
                let m = window.iter().fold(f32::NEG_INFINITY, |m, &i| m.max(x[i]));
                for &i in &window {
                    if x[i] == m {
                        out[i] += dy[o];
                    }
                }
            });
        }
    }
}
