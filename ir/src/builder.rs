//! A builder API for constructing graphs in code (tests, benches, model generators).
//!
//! [`GraphBuilder`] wraps a [`Graph`], names nodes automatically inside a scope
//! (`fwd/dense1/matmul`, ...), and returns typed errors exactly like [`Graph::add_node`].
//! Methods take and return [`NodeId`]s so that model code reads like the math.

use crate::dtype::{DType, Shape};
use crate::error::IrError;
use crate::graph::{Graph, NodeId, Phase};
use crate::op::{Activation, Init, Literal, LossReduction, Op};

/// Builds a [`Graph`] with automatic, scoped node names.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    graph: Graph,
    scope: Vec<String>,
    phase: Phase,
    counter: usize,
}

type R = Result<NodeId, IrError>;

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// Continues building on an existing graph.
    pub fn from_graph(graph: Graph) -> GraphBuilder {
        GraphBuilder {
            graph,
            ..GraphBuilder::default()
        }
    }

    /// The graph built so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Finishes building.
    pub fn finish(self) -> Graph {
        self.graph
    }

    /// Enters a name scope: nodes added until [`GraphBuilder::pop_scope`] are named
    /// `scope/.../name`.
    pub fn push_scope(&mut self, scope: impl Into<String>) {
        self.scope.push(scope.into());
    }

    /// Leaves the innermost name scope.
    pub fn pop_scope(&mut self) {
        self.scope.pop();
    }

    /// Sets the phase of nodes added from now on.
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
    }

    /// The phase of nodes added from now on.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The scoped name for `base`, made unique with a numeric suffix if it is taken.
    pub fn scoped_name(&mut self, base: &str) -> String {
        let mut name = self.scope.iter().fold(String::new(), |mut acc, s| {
            acc.push_str(s);
            acc.push('/');
            acc
        });
        name.push_str(base);
        if self.graph.find(&name).is_none() {
            return name;
        }
        loop {
            self.counter += 1;
            let candidate = format!("{name}_{}", self.counter);
            if self.graph.find(&candidate).is_none() {
                return candidate;
            }
        }
    }

    /// Adds `op` on `inputs` under the scoped, unique name derived from `base`.
    pub fn op(&mut self, base: &str, op: Op, inputs: &[NodeId]) -> R {
        let name = self.scoped_name(base);
        self.graph.add_node_in(self.phase, name, op, inputs)
    }

    /// Adds `op` under exactly `name` (no scope, no suffix); fails if the name is taken.
    pub fn named(&mut self, name: &str, op: Op, inputs: &[NodeId]) -> R {
        self.graph.add_node_in(self.phase, name, op, inputs)
    }

    /// An infeed stream named `stream` (the node gets the same name, scoped).
    pub fn input(&mut self, stream: &str, dtype: DType, shape: impl Into<Shape>) -> R {
        let op = Op::Input {
            stream: stream.to_string(),
            dtype,
            shape: shape.into(),
        };
        self.op(stream, op, &[])
    }

    /// A variable.
    pub fn variable(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>, init: Init) -> R {
        let op = Op::Variable {
            dtype,
            shape: shape.into(),
            init,
        };
        self.op(name, op, &[])
    }

    /// A constant with every element equal to `value`.
    pub fn splat(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>, value: f64) -> R {
        let op = Op::Constant {
            dtype,
            shape: shape.into(),
            value: Literal::Splat(value),
        };
        self.op(name, op, &[])
    }

    /// A scalar constant.
    pub fn scalar(&mut self, name: &str, dtype: DType, value: f64) -> R {
        self.splat(name, dtype, Shape::scalar(), value)
    }

    /// A constant with explicit row-major values.
    pub fn constant(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl Into<Shape>,
        values: Vec<f64>,
    ) -> R {
        let op = Op::Constant {
            dtype,
            shape: shape.into(),
            value: Literal::Values(values),
        };
        self.op(name, op, &[])
    }

    /// `a @ b`.
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> R {
        self.op("matmul", Op::MatMul, &[a, b])
    }
    /// `a + b`.
    pub fn add(&mut self, a: NodeId, b: NodeId) -> R {
        self.op("add", Op::Add, &[a, b])
    }
    /// `a - b`.
    pub fn sub(&mut self, a: NodeId, b: NodeId) -> R {
        self.op("sub", Op::Sub, &[a, b])
    }
    /// `a * b`.
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> R {
        self.op("mul", Op::Mul, &[a, b])
    }
    /// `a / b`.
    pub fn div(&mut self, a: NodeId, b: NodeId) -> R {
        self.op("div", Op::Div, &[a, b])
    }
    /// `a + scale * b`.
    pub fn scaled_add(&mut self, a: NodeId, b: NodeId, scale: f64) -> R {
        self.op("scaled_add", Op::ScaledAdd { scale }, &[a, b])
    }
    /// Element-wise unary op (`Op::Relu`, `Op::Exp`, ...), named after the op.
    pub fn unary(&mut self, op: Op, x: NodeId) -> R {
        let base = op.name().to_lowercase();
        self.op(&base, op, &[x])
    }
    /// `max(x, 0)`.
    pub fn relu(&mut self, x: NodeId) -> R {
        self.unary(Op::Relu, x)
    }
    /// Fused activation gradient `dy * f'(x)`.
    pub fn activation_grad(&mut self, activation: Activation, x: NodeId, dy: NodeId) -> R {
        self.op(
            "activation_grad",
            Op::ActivationGrad { activation },
            &[x, dy],
        )
    }
    /// Cast to `dtype`.
    pub fn cast(&mut self, x: NodeId, dtype: DType) -> R {
        self.op("cast", Op::Cast { dtype }, &[x])
    }
    /// Softmax along `axis`.
    pub fn softmax(&mut self, x: NodeId, axis: usize) -> R {
        self.op("softmax", Op::Softmax { axis }, &[x])
    }
    /// Sparse softmax cross-entropy of `logits[n, c]` against `labels: I32[n]`.
    pub fn sparse_softmax_cross_entropy(
        &mut self,
        logits: NodeId,
        labels: NodeId,
        reduction: LossReduction,
    ) -> R {
        self.op(
            "loss",
            Op::SparseSoftmaxCrossEntropy { reduction },
            &[logits, labels],
        )
    }
    /// Sum over `axes`.
    pub fn reduce_sum(&mut self, x: NodeId, axes: &[usize], keep_dims: bool) -> R {
        let op = Op::ReduceSum {
            axes: axes.to_vec(),
            keep_dims,
        };
        self.op("reduce_sum", op, &[x])
    }
    /// Mean over `axes`.
    pub fn reduce_mean(&mut self, x: NodeId, axes: &[usize], keep_dims: bool) -> R {
        let op = Op::ReduceMean {
            axes: axes.to_vec(),
            keep_dims,
        };
        self.op("reduce_mean", op, &[x])
    }
    /// Index of the maximum along `axis`.
    pub fn argmax(&mut self, x: NodeId, axis: usize) -> R {
        self.op("argmax", Op::ArgMax { axis }, &[x])
    }
    /// `a == b` -> Bool.
    pub fn equal(&mut self, a: NodeId, b: NodeId) -> R {
        self.op("equal", Op::Equal, &[a, b])
    }
    /// Reshape.
    pub fn reshape(&mut self, x: NodeId, shape: impl Into<Shape>) -> R {
        let op = Op::Reshape {
            shape: shape.into(),
        };
        self.op("reshape", op, &[x])
    }
    /// Transpose with `perm`.
    pub fn transpose(&mut self, x: NodeId, perm: &[usize]) -> R {
        let op = Op::Transpose {
            perm: perm.to_vec(),
        };
        self.op("transpose", op, &[x])
    }
    /// Outfeed `x` on stream `stream`.
    pub fn outfeed(&mut self, stream: &str, x: NodeId) -> R {
        let op = Op::Outfeed {
            stream: stream.to_string(),
        };
        let base = format!("outfeed_{stream}");
        self.op(&base, op, &[x])
    }
    /// `variable := value` at the end of the current phase.
    pub fn assign(&mut self, variable: NodeId, value: NodeId) -> R {
        self.op("assign", Op::Assign, &[variable, value])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_unique_names() {
        let mut b = GraphBuilder::new();
        b.push_scope("fwd");
        let x = b.input("x", DType::F32, [2, 2]).unwrap();
        let y = b.relu(x).unwrap();
        let z = b.relu(y).unwrap();
        b.pop_scope();
        let g = b.finish();
        assert_eq!(g.node(x).name, "fwd/x");
        assert_eq!(g.node(y).name, "fwd/relu");
        assert_eq!(g.node(z).name, "fwd/relu_1");
    }
}
