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
pub(crate) mod map;
pub(crate) mod operands;
pub(crate) mod window;

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
