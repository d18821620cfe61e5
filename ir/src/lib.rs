//! ipusim-ir: the graph IR — element types and shapes, ops, the typed graph, inference,
//! programs and training specs. Structure only: the IR holds no tensor values and knows
//! nothing of tiles.
//!
//! Data flow: a program file is parsed into a [`Program`]; its [`Graph`] is validated; the
//! training transform turns it into one training-step graph that the compiler lowers.

pub mod autodiff;
pub mod batch;
pub mod builder;
pub mod conv;
pub mod decompose;
pub mod dtype;
pub mod effective;
pub mod eight_bit;
pub mod error;
pub mod fault;
pub mod graph;
pub mod infer;
pub mod lint;
pub mod models;
pub mod norm;
pub mod op;
pub mod op_tour;
pub mod pipeline;
pub mod precision;
pub mod program;
pub mod recompute;
pub mod resnet;
mod rewrite;
pub mod sharding;
pub mod summary;
pub mod text;
pub mod training;
pub mod validate;

pub use builder::GraphBuilder;
pub use dtype::{DType, Shape, TensorType};
pub use error::{IrError, Operand, UnknownValue};
pub use graph::{Graph, Node, NodeId, Phase};
pub use op::{Activation, Arity, BinaryOp, Encoding, Init, Literal, LossReduction, Op, UnaryOp};
pub use program::{
    Columns, DataSource, InfeedSpec, Optimizer, OutfeedMode, OutfeedSpec, Precision, Program,
    TrainingSpec,
};
pub use validate::{validate_graph, validate_program};
