//! ipusim-exe: the executable contract between the compiler and the simulator.
//!
//! An [`Executable`] is pure data — tensors and their tile intervals, vertices of registered
//! codelets in compute sets, exchanges, the program tree, host streams, the memory plan and
//! the static cycle estimate — for a [`Target`] chip. The compiler (`ipusim-compiler`)
//! produces it; the simulator (`ipusim-sim`) executes it and links only this crate, never the
//! lowering.
//!
//! Modules, and which may use which (the arrows run one way; no module uses one listed after
//! it in this table):
//!
//! | module | owns | uses |
//! |---|---|---|
//! | [`radix`] | a stable radix sort by 64-bit keys and a counting order of indices by small keys (the large sorts of the compiler and the verifier) | — |
//! | [`packed_vec`] | [`packed_vec::PackedVec`], a short vector in few bytes (a copy's destinations, a vertex's operands); the crate's one `unsafe` module | — |
//! | [`ids`] | the ids of tensors, compute sets, exchanges, streams, and [`TileId`] | — |
//! | [`error`] | [`CompileError`], the verifier's typed [`error::VerifierError`] | `ids` |
//! | [`target`] | [`Target`]: one chip's figures, presets, target files | `error` |
//! | [`system`] | [`System`] of IPUs and their links, [`SyncScope`] | `ids`, `error`, `target` |
//! | [`options`] | [`CompileOptions`], [`PartialsType`] | `error` |
//! | [`layout`] | channel-grouped layouts of feature maps (storage shapes, the index map) | — |
//! | [`block_params`] | a block vertex's parameters and the addressing of its rows (repeats included) | — |
//! | [`window_params`] | a window vertex's parameters: the convolution pass and vertex, the window's geometry, the operand blocks' ranges | `layout` |
//! | [`codelets`] | the codelet registry: each codelet's semantics and parameters | `block_params`, `window_params` |
//! | [`vertex_state`] | the bytes of a vertex's state (PopLibs' Mk2 layouts) | `codelets` |
//! | [`memory`] | the memory plan's data types, tensor usage over steps | `ids`, `system` |
//! | [`estimate`] | the static cycle estimate's data types | — |
//! | [`program`] | the control program: its tree, the pipeline's schedule, the program steps | `ids`, `system` |
//! | [`executable`] | the executable's data types (re-exporting [`program`]'s) | `ids`, `packed_vec`, `codelets`, `target`, `system`, `options`, `memory`, `estimate`, `program` |
//! | [`cycles`] | the cycle estimators (per codelet in [`cycles::vertex`]; PopLibs' convolution vertices in [`cycles::conv`], applied to window groups by [`cycles::window`]), cycle accounting, the static estimate | `codelets`, `executable`, `estimate`, `target` |
//! | [`timeline`] | the execution trace of one run (PopVision's Execution Trace): its data types, the builder, the static walk | `system`, `executable`, `cycles` |
//! | [`verify`] | the executable's invariants, checked by one verifier | everything above |
//!
//! To check that no module uses one below it: `grep -rn '^use crate::' exe/src`.

pub mod block_params;
pub mod codelets;
pub mod cycles;
pub mod error;
pub mod estimate;
pub mod executable;
pub mod ids;
pub mod layout;
pub mod memory;
pub mod options;
pub mod packed_vec;
pub mod program;
pub mod radix;
pub mod slices;
pub mod system;
pub mod target;
pub mod timeline;
pub mod verify;
pub mod vertex_state;
pub mod window_params;
pub mod workers;

pub use codelets::{Codelet, VertexParams};
pub use error::CompileError;
pub use estimate::CycleEstimate;
pub use executable::Executable;
pub use memory::MemoryPlan;
pub use options::{CompileOptions, PartialsType};
pub use system::{SyncScope, System, TileId};
pub use target::Target;
