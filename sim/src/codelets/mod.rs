//! The value semantics of the compiler's codelets: one vertex at a time, on the bytes of its
//! tile, exactly as `ipusim_exe::codelets` documents each codelet.
//!
//! A vertex reads its input operands and writes its output operand (the last one) in the
//! tile's memory. [`operands`] hands out the operand bytes (an input that *is* the output —
//! an in-place update — is read from a copy taken before the vertex writes); the codelet
//! modules compute with the numerics core over whole slices: [`map`] (element-wise
//! codelets, broadcast inputs gathered first), [`amp`] (`AmpMatMul`), [`block`] (`Reduce`,
//! `ArgMax`, `Softmax`, `SoftmaxCrossEntropy`).
//!
//! Every vertex runs on one worker: FP16 results round with the worker's `$FP_CTL` (ESR,
//! NANOO) and random bits from the worker's stream, and the vertex returns the `$FP_STS`
//! bits it raised. When a raised flag's exception is enabled, the vertex returns a [`Fault`]
//! naming the first faulting element and the values involved.

pub(crate) mod amp;
pub(crate) mod block;
mod conv_matrices;
mod conv_positions;
pub(crate) mod map;
pub(crate) mod operands;
mod pool;
pub(crate) mod window;
pub(crate) mod window_layout;

use crate::engine::error::{DumpValue, EngineError};
use crate::engine::memory::Buf;
use crate::numerics::{FpCtl, FpSts, Rounding, SrRng};
use ipusim_exe::codelets::{Codelet, MatrixLayout, VertexParams};
use ipusim_exe::executable::Vertex;
use ipusim_ir::DType;

/// The worker context a vertex runs on: its control register and its random stream.
pub(crate) struct Worker<'r> {
    /// `$FP_CTL`.
    pub ctl: FpCtl,
    /// The worker's stochastic-rounding stream.
    pub rng: &'r mut SrRng,
}

impl Worker<'_> {
    /// The rounding FP16 results use.
    pub fn rounding(&mut self) -> Rounding<'_> {
        Rounding::from_ctl(self.ctl, self.rng)
    }

    /// The flags whose exceptions are enabled.
    pub fn mask(&self) -> FpSts {
        self.ctl.trapping(FpSts::all())
    }
}

/// The first faulting operation of a vertex whose raised flags trapped.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fault {
    /// The worker's `$FP_STS` at the fault.
    pub sts: FpSts,
    /// The output element being computed.
    pub element: Option<u64>,
    /// The values involved.
    pub operands: Vec<DumpValue>,
}

/// Why a vertex stopped.
#[derive(Debug)]
pub(crate) enum VertexError {
    /// A trapped floating-point exception.
    Fault(Box<Fault>),
    /// An engine error (an executable the validation should have refused).
    Engine(EngineError),
}

impl From<EngineError> for VertexError {
    fn from(e: EngineError) -> VertexError {
        VertexError::Engine(e)
    }
}

impl From<crate::numerics::NumericsError> for VertexError {
    fn from(e: crate::numerics::NumericsError) -> VertexError {
        VertexError::Engine(e.into())
    }
}

/// Buffers a tile thread reuses from vertex to vertex (never per element).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Gathered broadcast inputs and copies of in-place inputs.
    pub ins: [Buf; operands::MAX_INPUTS],
    /// AMP: the widened (and row-major) rows of `a`.
    pub a: Buf,
    /// AMP: the widened, row-major `b`.
    pub b: Buf,
    /// AMP and block codelets: partials / accumulators / a row in f32.
    pub p: Buf,
    /// Block codelets: a second f32 row.
    pub q: Buf,
    /// The `b` operand held in `b` (address, length, layout), reused by the vertices of a
    /// group that share it.
    pub b_key: Option<(usize, usize, MatrixLayout)>,
    /// Whether every element of the `b` held in `b` is finite (checked once, when widened).
    pub b_finite: bool,
    /// One output element, for locating a fault.
    pub one: Buf,
    /// Fused vertices: the value of each step but the last.
    pub steps: Vec<Buf>,
    /// Window codelets: the operand blocks widened to f32, shared by the group's vertices.
    pub win: window::WindowScratch,
}

impl Scratch {
    /// Forgets cached operands (their bytes may change between vertex groups).
    pub fn new_group(&mut self) {
        self.b_key = None;
        self.win.forget();
    }
}

/// Runs vertex `v` of `codelet` on the tile memory `mem` (`dtypes`: every tensor's element
/// type, [`operands::dtypes`]); returns the flags it raised.
pub(crate) fn execute(
    codelet: &Codelet,
    v: &Vertex,
    dtypes: &[DType],
    mem: &mut [u8],
    scratch: &mut Scratch,
    worker: Worker,
) -> Result<FpSts, VertexError> {
    let ops = operands::split(mem, v, dtypes)?;
    match (codelet, &v.params) {
        (Codelet::AmpMatMul { .. }, VertexParams::Amp(p)) => {
            amp::run(codelet, p, ops, scratch, worker)
        }
        (Codelet::ReduceAdd { partials, output }, VertexParams::Block(p)) => {
            let sum = Codelet::summing(*partials, *output);
            block::run(&sum, p, ops, scratch, worker)
        }
        (
            Codelet::Reduce { .. }
            | Codelet::ArgMax { .. }
            | Codelet::Softmax { .. }
            | Codelet::SoftmaxCrossEntropy { .. }
            | Codelet::SoftmaxStage { .. },
            VertexParams::Block(p),
        ) => block::run(codelet, p, ops, scratch, worker),
        (_, VertexParams::Map(_) | VertexParams::Fill { .. }) => {
            map::run(codelet, &v.params, ops, scratch, worker)
        }
        (Codelet::Conv { .. } | Codelet::MaxPool { .. }, VertexParams::Window(p)) => {
            window::run(codelet, &p.params(), ops, scratch, worker)
        }
        _ => Err(EngineError::invalid(format!(
            "{} vertex with {} parameters",
            codelet.full_name(),
            params_name(&v.params)
        ))
        .into()),
    }
}

/// Runs vertex `v` of `codelet`, split among the worker contexts
/// ([`ipusim_exe::workers::is_split`]): the slice of each worker (an element-wise vertex's
/// outputs in multiples of `grain`; a window vertex's units; a block vertex's groups, or its
/// columns in multiples of `grain`) with that worker's stream of
/// `rngs`, in worker order.
/// Stops at the first slice that traps: the worker it ran on, the flags of the slices
/// before it, and the fault. With rounding to nearest and no exception enabled the vertex
/// runs as one pass instead ([`one_pass`]).
pub(crate) fn execute_split(
    codelet: &Codelet,
    v: &Vertex,
    dtypes: &[DType],
    mem: &mut [u8],
    scratch: &mut Scratch,
    (ctl, rngs): (FpCtl, &mut [SrRng]),
    grain: u64,
) -> Result<FpSts, (usize, FpSts, VertexError)> {
    // The plan checked that the codelet may be split (`workers::may_run_on`): the window
    // codelets by their units, the block ones by their groups or columns, the element-wise
    // ones and `Fill` by their outputs.
    if one_pass(ctl) {
        if let Some(rng) = rngs.first_mut() {
            return execute(codelet, v, dtypes, mem, scratch, Worker { ctl, rng })
                .map_err(|e| (0, FpSts::empty(), e));
        }
    }
    let workers = rngs.len() as u32;
    let mut ops = operands::split(mem, v, dtypes).map_err(|e| (0, FpSts::empty(), e.into()))?;
    if let VertexParams::Window(wv) = &v.params {
        // The block's units, a slice per worker, each a window vertex of its own.
        let (u0, u1) = wv.units;
        let slices =
            ipusim_exe::workers::worker_slices(u64::from(u1.saturating_sub(u0)), 1, workers);
        let mut flags = FpSts::empty();
        for ((w, (a, b)), rng) in slices.into_iter().enumerate().zip(rngs.iter_mut()) {
            let mut p = wv.params();
            p.units = (u0 + a as u32, u0 + b as u32);
            match window::run(codelet, &p, ops.reborrow(), scratch, Worker { ctl, rng }) {
                Ok(f) => flags |= f,
                Err(e) => return Err((w, flags, e)),
            }
        }
        return Ok(flags);
    }
    if let VertexParams::Block(p) = &v.params {
        // The block's parts, whole groups or whole vectors of columns, a part per worker.
        return match *codelet {
            Codelet::ReduceAdd { partials, output } => {
                let sum = Codelet::summing(partials, output);
                block::run_parts(&sum, p, ops, scratch, grain, (ctl, rngs))
            }
            _ => block::run_parts(codelet, p, ops, scratch, grain, (ctl, rngs)),
        };
    }
    let n = ops.out_len() as u64;
    let slices = ipusim_exe::workers::worker_slices(n, grain, workers);
    map::run_slices(codelet, &v.params, ops, scratch, &slices, (ctl, rngs))
}

/// Whether a split vertex may run as one pass, as an unsplit vertex: without stochastic
/// rounding no worker draws from its stream, and with no exception enabled no worker's part
/// traps (a trap stops at its worker's part, leaving the later ones unwritten). Each output
/// is then what its worker's part computes — an element-wise kernel computes every element
/// alone (`numerics::kernels::map`), a window codelet every unit, a block codelet every
/// group and column, the AMP kernels every element in the same order whatever rows they
/// block together — and the flags are their OR. A vertex split over six workers is then one
/// call, not six.
pub(crate) fn one_pass(ctl: FpCtl) -> bool {
    !ctl.contains(FpCtl::ESR) && ctl.trapping(FpSts::all()).is_empty()
}

/// The name of a parameter variant, for messages.
pub(crate) fn params_name(p: &VertexParams) -> &'static str {
    match p {
        VertexParams::Fill { .. } => "Fill",
        VertexParams::Map(_) => "Map",
        VertexParams::Amp(_) => "Amp",
        VertexParams::Block(_) => "Block",
        VertexParams::Window(_) => "Window",
    }
}

/// A named value for a fault dump.
pub(crate) fn dump_value(name: impl Into<String>, value: String) -> DumpValue {
    DumpValue {
        name: name.into(),
        value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use ipusim_exe::codelets::{Access, MapParams};
    use ipusim_exe::executable::{Operand, Operands as VertexOperands};
    use ipusim_exe::ids::TensorId;
    use ipusim_exe::target::Target;
    use ipusim_exe::workers::{split_grain, worker_slices, ALL_WORKERS};
    use ipusim_ir::BinaryOp;

    /// A split vertex runs as one pass only with rounding to nearest and no exception
    /// enabled (NaN-on-overflow changes values, not the partition's effect).
    #[test]
    fn one_pass_needs_nearest_rounding_and_no_traps() {
        assert!(one_pass(FpCtl::empty()));
        assert!(one_pass(FpCtl::NANOO));
        assert!(!one_pass(FpCtl::ESR));
        assert!(!one_pass(FpCtl::OFLO));
        assert!(!one_pass(FpCtl::INV | FpCtl::DIV0));
    }

    /// A vertex of `Binary<Add,f16>` over elements `[a, b)` of `n`-element tensors 0, 1 and
    /// 2 laid out one after the other.
    fn add_vertex(worker: u8, n: u64, (a, b): (u64, u64)) -> Vertex {
        let operand = |t: u32| Operand {
            tensor: TensorId(t),
            offset: ((u64::from(t) * n + a) * 2) as u32,
            len: (b - a) as u32,
        };
        Vertex {
            worker,
            operands: VertexOperands::from_iter([operand(0), operand(1), operand(2)]),
            params: VertexParams::Map(MapParams {
                out_begin: None,
                inputs: [Access::Aligned, Access::Aligned].into_iter().collect(),
                scale: 1.0,
            }),
        }
    }

    /// A vertex split among the workers computes what its workers' slices compute as a
    /// vertex each, in worker order: the same bytes, flags and random draws (stochastic
    /// rounding), and the same first trapping worker and element (counted from the split
    /// vertex's first).
    #[test]
    fn a_split_vertex_runs_as_its_worker_slices() {
        let target = Target::mk2();
        let codelet = Codelet::Binary {
            op: BinaryOp::Add,
            dtype: DType::F16,
        };
        let grain = split_grain(&target, &codelet);
        let nw = target.worker_contexts as usize;
        let dtypes = [DType::F16; 3];
        for (n, overflow_at) in [(1000u64, None), (1000, Some(611)), (37, Some(36))] {
            // Inputs with fractions the sum cannot hold (so stochastic rounding draws), and
            // an overflowing sum at `overflow_at`.
            let mut mem = vec![0u8; (3 * n * 2) as usize];
            for i in 0..n as usize {
                let (x, y) = match overflow_at {
                    Some(j) if j as usize == i => (60000.0, 60000.0),
                    _ => (1.0 + i as f32 / 1024.0, 0.0009765625 * (i % 7) as f32),
                };
                mem[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(x).to_le_bytes());
                let at = (2 * n as usize) + 2 * i;
                mem[at..at + 2].copy_from_slice(&f16::from_f32(y).to_le_bytes());
            }
            let ctl = FpCtl::ESR | FpCtl::OFLO;
            let rngs: Vec<SrRng> = (0..nw).map(|w| SrRng::new(5, 0, w as u32)).collect();
            let mut scratch = Scratch::default();
            // Split.
            let (mut split_mem, mut split_rngs) = (mem.clone(), rngs.clone());
            let split = execute_split(
                &codelet,
                &add_vertex(ALL_WORKERS, n, (0, n)),
                &dtypes,
                &mut split_mem,
                &mut scratch,
                (ctl, &mut split_rngs),
                grain,
            );
            // A vertex per worker slice.
            let (mut each_mem, mut each_rngs) = (mem.clone(), rngs.clone());
            let mut flags = FpSts::empty();
            let mut each = Ok(());
            for (w, slice) in worker_slices(n, grain, nw as u32).into_iter().enumerate() {
                let worker = Worker {
                    ctl,
                    rng: &mut each_rngs[w],
                };
                let v = add_vertex(w as u8, n, slice);
                match execute(&codelet, &v, &dtypes, &mut each_mem, &mut scratch, worker) {
                    Ok(f) => flags |= f,
                    Err(VertexError::Fault(f)) => {
                        each = Err((w, f.sts, f.element.map(|e| e + slice.0)));
                        break;
                    }
                    Err(VertexError::Engine(e)) => panic!("{e}"),
                }
            }
            match (split, each) {
                (Ok(f), Ok(())) => assert_eq!(f, flags),
                (Err((w, before, VertexError::Fault(f))), Err((ew, sts, element))) => {
                    assert_eq!((w, before, f.sts, f.element), (ew, flags, sts, element));
                    assert!(overflow_at.is_some());
                }
                _ => panic!("n {n}: the split vertex and its slices ended differently"),
            }
            assert_eq!(split_mem, each_mem, "n {n}");
            assert_eq!(split_rngs, each_rngs, "n {n}");
        }
    }

    /// A `groups × count × width` f16 block (repeated `outer` times `stride` apart) reduced
    /// by `Reduce<Sum, f16, f32 acc, f16>`: tensor 0 the input at byte 0, tensor 1 the
    /// `groups × width` outputs after it; worker `worker` handles groups `[g0, g1)` and
    /// columns `[a, b)`, as the compiler cut a reduction's vertices per worker.
    fn reduce_vertex(
        worker: u8,
        (groups, count, width): (u64, u64, u64),
        (outer, stride): (u64, u64),
        (g0, g1): (u64, u64),
        (a, b): (u64, u64),
    ) -> Vertex {
        let repeats = (outer - 1) * stride;
        let out_base = 2 * (repeats + groups * count * width);
        Vertex {
            worker,
            operands: VertexOperands::from_iter([
                Operand {
                    tensor: TensorId(0),
                    offset: (2 * g0 * count * width) as u32,
                    len: (repeats + (g1 - g0) * count * width) as u32,
                },
                Operand {
                    tensor: TensorId(1),
                    offset: (out_base + 2 * (g0 * width + a)) as u32,
                    len: ((g1 - g0) * (b - a)) as u32,
                },
            ]),
            params: VertexParams::Block(ipusim_exe::codelets::BlockParams {
                outer: outer as u32,
                outer_stride: if outer > 1 { stride as u32 } else { 0 },
                ..ipusim_exe::codelets::BlockParams::new(
                    (g1 - g0) as u32,
                    count as u32,
                    width as u32,
                    (a as u32, (b - a) as u32),
                )
            }),
        }
    }

    /// A block vertex split among the workers computes what a vertex per worker's part
    /// computes, in worker order: by whole groups, or with one group by whole vectors of
    /// columns, each part reading the whole (repeated) block. The same bytes, flags and
    /// draws (stochastic rounding of the f16 outputs), and the same first trapping worker
    /// and element, counted from the split vertex's first output.
    #[test]
    fn a_split_block_vertex_runs_as_a_vertex_per_worker_part() {
        let target = Target::mk2();
        let codelet = Codelet::Reduce {
            op: ipusim_exe::codelets::ReduceOp::Sum,
            input: DType::F16,
            acc: DType::F32,
            output: DType::F16,
        };
        let grain = split_grain(&target, &codelet);
        assert_eq!(grain, 4);
        let nw = target.worker_contexts;
        let dtypes = [DType::F16; 2];
        let cases = [
            ((7u64, 5u64, 6u64), (1u64, 0u64), None),
            ((1, 9, 50), (2, 500), None),
            ((1, 9, 50), (2, 500), Some(37u64)),
            ((13, 3, 2), (3, 80), Some(21)),
        ];
        for ((groups, count, width), (outer, stride), overflow_col) in cases {
            let repeats = (outer - 1) * stride;
            let span = repeats + groups * count * width;
            let mut mem = vec![0u8; (2 * (span + groups * width)) as usize];
            for i in 0..span as usize {
                let col = (i as u64 % (count * width)) % width
                    + width * (i as u64 / (count * width) % groups);
                let x = match overflow_col {
                    Some(c) if c == col => 60000.0,
                    _ => 1.0 + (i % 97) as f32 / 1024.0 + 0.0001,
                };
                mem[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(x).to_le_bytes());
            }
            let ctl = FpCtl::ESR | FpCtl::OFLO;
            let rngs: Vec<SrRng> = (0..nw).map(|w| SrRng::new(9, 1, w)).collect();
            let mut scratch = Scratch::default();
            let shape = (groups, count, width);
            let whole = reduce_vertex(ALL_WORKERS, shape, (outer, stride), (0, groups), (0, width));
            let (mut split_mem, mut split_rngs) = (mem.clone(), rngs.clone());
            let split = execute_split(
                &codelet,
                &whole,
                &dtypes,
                &mut split_mem,
                &mut scratch,
                (ctl, &mut split_rngs),
                grain,
            );
            // A vertex per worker's part.
            let parts: Vec<((u64, u64), (u64, u64))> = if groups > 1 {
                let g = worker_slices(groups, 1, nw);
                g.into_iter().map(|gs| (gs, (0, width))).collect()
            } else {
                let c = worker_slices(width, grain, nw);
                c.into_iter().map(|cs| ((0, 1), cs)).collect()
            };
            assert!(parts.len() > 1);
            let (mut each_mem, mut each_rngs) = (mem.clone(), rngs.clone());
            let mut flags = FpSts::empty();
            let mut each = Ok(());
            for (w, (gs, cs)) in parts.into_iter().enumerate() {
                let worker = Worker {
                    ctl,
                    rng: &mut each_rngs[w],
                };
                let v = reduce_vertex(w as u8, shape, (outer, stride), gs, cs);
                match execute(&codelet, &v, &dtypes, &mut each_mem, &mut scratch, worker) {
                    Ok(f) => flags |= f,
                    Err(VertexError::Fault(f)) => {
                        let first = gs.0 * width + cs.0;
                        each = Err((w, f.sts, f.element.map(|e| e + first)));
                        break;
                    }
                    Err(VertexError::Engine(e)) => panic!("{e}"),
                }
            }
            match (split, each) {
                (Ok(f), Ok(())) => {
                    assert_eq!(f, flags);
                    assert!(overflow_col.is_none());
                }
                (Err((w, before, VertexError::Fault(f))), Err((ew, sts, element))) => {
                    assert_eq!((w, before, f.sts, f.element), (ew, flags, sts, element));
                    assert!(overflow_col.is_some());
                }
                _ => panic!("{shape:?}: the split vertex and its parts ended differently"),
            }
            assert_eq!(split_mem, each_mem, "{shape:?}");
            assert_eq!(split_rngs, each_rngs, "{shape:?}");
            assert_ne!(split_rngs, rngs, "{shape:?}: stochastic rounding drew");
        }
    }
}
