//! ONNX import: `ipusim compile model.onnx` and `ipusim import model.onnx -o model.ron`.
//!
//! - [`proto`]: the file format's messages (`prost`), written from the ONNX specification;
//! - [`tensor`]: initializer and constant data, inline or in external files;
//! - [`attr`]: node attributes; [`shape`]: ONNX's shape arithmetic;
//! - [`fold`]: constant folding of the shape computations exporters emit;
//! - [`import`]: the model to an [`ipusim_ir::Program`]; [`values`]: its state; `ops`: the
//!   op converters;
//! - [`write`]: building and writing models in code (the tests' models, `ipusim export`).
//!
//! See `docs/onnx.md` for the supported ops and opsets and how a user exports a model.

pub mod attr;
pub mod error;
pub mod fold;
pub mod import;
mod ops;
pub mod proto;
pub mod shape;
pub mod tensor;
pub mod values;
pub mod write;

pub use error::ImportError;
pub use import::{
    coverage, import, load, read_model, OpCount, Options, Training, Weights, OPSETS, SUPPORTED,
};
