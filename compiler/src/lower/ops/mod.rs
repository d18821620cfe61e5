//! The op families, one module each, and the per-op table the driver reaches them through:
//! for each op, how to lower it and which layout it wants for its operands. Op modules never
//! call each other; what they share is in [`super::kit`].
//!
//! | family | ops |
//! |---|---|
//! | [`elementwise`] | unary, binary, `ScaledAdd`, `Select`, `Cast`, `ActivationGrad`, `OneHot` |
//! | [`matmul`] | `MatMul` (PopLibs-style plan, AMP partials, cross-tile reduction) |
//! | [`reduce`] | `ReduceSum`, `ReduceMean`, `ReduceMax`, `ArgMax` |
//! | [`softmax`] | `Softmax`, `LogSoftmax`, `SparseSoftmaxCrossEntropy` |
//! | [`rearrange`] | `Reshape`, `Transpose`, `Broadcast`, `Slice`, `Pad`, `Concat` |
//! | [`window`] | `Conv2d` and its gradients, `MaxPool2d` and its gradient (a window plan, `Conv` and `MaxPool` vertices) |
//! | [`collective`] | `ReplicatedReduceScatter`, `ReplicatedAllGather` (cross-replica collectives) |
//!
//! Sources (`Input`, `Variable`, `Constant`), `Outfeed` and `Assign` are graph structure,
//! lowered by the driver.

pub(crate) mod collective;
pub(crate) mod elementwise;
pub(crate) mod matmul;
pub(crate) mod rearrange;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod window;

use super::core::Lowerer;
use super::kit::mapping::Mapping;
use crate::error::CompileError;
use ipusim_ir::{NodeId, Op};

/// The layout an op family wants for operand `which` of node `id` (see
/// [`OpLowering::operand_layout`]).
pub(crate) type OperandLayout = fn(&mut Lowerer, NodeId, usize) -> Option<Mapping>;

/// How the driver lowers one op family.
pub(crate) struct OpLowering {
    /// Lowers a node of the family.
    pub lower: fn(&mut Lowerer, NodeId) -> Result<(), CompileError>,
    /// The layout the family wants for operand `which` of node `id`, when it has one: a
    /// variable or stream read first by this node is created in that layout.
    pub operand_layout: Option<OperandLayout>,
}

const ELEMENTWISE: OpLowering = OpLowering {
    lower: elementwise::lower,
    operand_layout: None,
};
const MATMUL: OpLowering = OpLowering {
    lower: matmul::lower,
    operand_layout: Some(matmul::operand_mapping),
};
const REDUCE: OpLowering = OpLowering {
    lower: reduce::lower,
    operand_layout: None,
};
const SOFTMAX: OpLowering = OpLowering {
    lower: softmax::lower,
    operand_layout: None,
};
const REARRANGE: OpLowering = OpLowering {
    lower: rearrange::lower,
    operand_layout: None,
};
/// Graph structure the driver lowers itself: nothing to do here.
const STRUCTURE: OpLowering = OpLowering {
    lower: |_, _| Ok(()),
    operand_layout: None,
};

/// Composite ops (`ipusim_ir::decompose`) are rewritten into primitives before a graph reaches
/// the compiler; one that arrives here is an error naming it.
const COMPOSITE: OpLowering = OpLowering {
    lower: |lw, id| {
        Err(lw.unsupported(
            id,
            "a composite op must be decomposed first (ipusim_ir::decompose::decompose)",
        ))
    },
    operand_layout: None,
};

const COLLECTIVE: OpLowering = OpLowering {
    lower: collective::lower,
    operand_layout: None,
};

const CONVOLUTION: OpLowering = OpLowering {
    lower: window::lower,
    operand_layout: Some(window::weight_layout),
};

/// The table: the lowering of `op`'s family.
pub(crate) fn lowering(op: &Op) -> &'static OpLowering {
    match op {
        Op::MatMul => &MATMUL,
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::Max
        | Op::Min
        | Op::Equal
        | Op::Greater
        | Op::Less
        | Op::ScaledAdd { .. }
        | Op::Select
        | Op::Neg
        | Op::Abs
        | Op::Exp
        | Op::Log
        | Op::Sqrt
        | Op::Relu
        | Op::Sigmoid
        | Op::Tanh
        | Op::Gelu
        | Op::ActivationGrad { .. }
        | Op::OneHot { .. }
        | Op::Cast { .. } => &ELEMENTWISE,
        Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::SparseSoftmaxCrossEntropy { .. } => {
            &SOFTMAX
        }
        Op::ReduceSum { .. } | Op::ReduceMean { .. } | Op::ReduceMax { .. } | Op::ArgMax { .. } => {
            &REDUCE
        }
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Broadcast { .. }
        | Op::Slice { .. }
        | Op::Pad { .. }
        | Op::Concat { .. } => &REARRANGE,
        Op::Input { .. }
        | Op::Variable { .. }
        | Op::Constant { .. }
        | Op::Assign
        | Op::Outfeed { .. } => &STRUCTURE,
        Op::Conv2d { .. }
        | Op::Conv2dInputGrad { .. }
        | Op::Conv2dWeightGrad { .. }
        | Op::MaxPool2d { .. }
        | Op::MaxPool2dGrad { .. } => &CONVOLUTION,
        Op::ReplicatedReduceScatter { .. } | Op::ReplicatedAllGather { .. } => &COLLECTIVE,
        Op::Clip { .. }
        | Op::AvgPool2d { .. }
        | Op::GlobalAvgPool
        | Op::Flatten { .. }
        | Op::BatchNorm { .. }
        | Op::GroupNorm { .. } => &COMPOSITE,
    }
}

/// The input of `Broadcast` node `id` when the broadcast is folded into its consumers: all
/// of them are element-wise ops that read an operand through a broadcast pattern anyway
/// (NumPy broadcasting is transitive, so they read the broadcast's input directly, staged
/// once per tile), as Poplar's broadcast is a view its element-wise vertices read. The
/// broadcast then has no tensor of its own; a consumer of any other kind (an outfeed, an
/// assignment, a matmul, a `Cast` to the type it has) materialises it.
pub(crate) fn folded_broadcast(graph: &ipusim_ir::Graph, id: NodeId) -> Option<NodeId> {
    let node = graph.node(id);
    if !matches!(node.op, Op::Broadcast { .. }) {
        return None;
    }
    let reads_in_place = |c: NodeId| {
        let op = &graph.node(c).op;
        let same_cast = matches!(op, Op::Cast { dtype } if *dtype == node.ty.dtype);
        std::ptr::eq(lowering(op), &ELEMENTWISE) && !matches!(op, Op::OneHot { .. }) && !same_cast
    };
    let consumers = graph.consumers(id);
    (!consumers.is_empty() && consumers.into_iter().all(reads_in_place)).then(|| node.inputs[0])
}

/// The layout node `consumer`'s op family wants for its operand `which`, if any (the
/// context's [`super::core::Hooks::operand_layout`]).
pub(crate) fn operand_layout(lw: &mut Lowerer, consumer: NodeId, which: usize) -> Option<Mapping> {
    let f = lowering(&lw.graph().node(consumer).op).operand_layout?;
    f(lw, consumer, which)
}
