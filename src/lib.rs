//! ipusim: an open, fast, cycle-accounting simulator of the Graphcore IPU.
//!
//! This facade re-exports the workspace crates so that users depend on one crate:
//! [`ir`] (graph IR), [`exe`] (the executable contract: chip, codelets, cycle estimators,
//! verifier), [`compiler`] (lowering to tiles and the static cycle report), [`sim`] (numerics, reference interpreter, BSP engine, debugger) and [`runtime`]
//! (sessions, feeds, reports). The `ipusim` binary's command-line interface lives in
//! [`cli`], its allocator in [`allocator`].

pub use ipusim_compiler as compiler;
pub use ipusim_exe as exe;
pub use ipusim_ir as ir;
pub use ipusim_onnx as onnx;
pub use ipusim_runtime as runtime;
pub use ipusim_sim as sim;

pub mod allocator;
pub mod cli;
#[doc(hidden)]
pub mod fuzzing;
pub mod prefault;
