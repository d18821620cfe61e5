//! ipusim-sim: the simulator side of ipusim — IPU numerics ([`numerics`]), host tensor
//! values ([`tensor`]), initial values ([`init`]), the reference interpreter of a graph
//! ([`interp`]), the BSP engine that executes a compiled program with exact values, cycle
//! accounting and `$FP_STS` flags ([`engine`], with the codelets' value semantics in
//! `codelets`), execution traces ([`trace`]), the stepping debugger ([`debugger`]), the
//! host side of streams ([`host`]: the engine's interface; [`feeds`]: the generator sources
//! every host shares, and a host for the simulator on its own).
//!
//! It executes the executable contract of `ipusim-exe` and does not link the compiler: a
//! program file is compiled and launched by the runtime (`ipusim_runtime::launch`).

pub mod category;
mod codelets;
pub mod collective;
pub mod debugger;
pub mod display;
pub mod engine;
pub mod feeds;
pub mod host;
pub mod init;
pub mod interp;
pub mod numerics;
pub mod tensor;
pub mod trace;

pub use engine::{Engine, EngineError, EngineOptions, RunSummary};
