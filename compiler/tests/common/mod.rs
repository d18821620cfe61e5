//! Test support: a hand-built training step of an MLP, shaped like the output of the training
//! transform (forward, softmax cross-entropy backward, gradient accumulation in the Step
//! phase, SGD and accumulator reset in the Update phase), so the compiler's tests do not
//! depend on the transform.

#![allow(dead_code)]

use ipusim_ir::{Activation, DType, Graph, GraphBuilder, Init, LossReduction, NodeId, Op, Phase};

/// A training step of an MLP `widths[0] -> ... -> widths[last]` on `batch` samples.
/// `compute`/`weights` are the precision policy's dtypes (16.16, 16.32, 32.32).
pub fn mlp_training_step(batch: usize, widths: &[usize], compute: DType, weights: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let n = batch;
    let x = b.input("features", compute, [n, widths[0]]).unwrap();
    let labels = b.input("labels", DType::I32, [n]).unwrap();
    let mut h = x;
    let layers = widths.len() - 1;
    let mut saved: Vec<(NodeId, NodeId, NodeId, Option<NodeId>, NodeId, NodeId)> = Vec::new();
    for l in 0..layers {
        b.push_scope(format!("dense{}", l + 1));
        let w = b
            .variable(
                "weights",
                weights,
                [widths[l], widths[l + 1]],
                Init::GlorotUniform { seed: l as u64 },
            )
            .unwrap();
        let bias = b
            .variable("bias", weights, [widths[l + 1]], Init::Zeros)
            .unwrap();
        let (wc, bc) = if weights != compute {
            (b.cast(w, compute).unwrap(), b.cast(bias, compute).unwrap())
        } else {
            (w, bias)
        };
        let mm = b.matmul(h, wc).unwrap();
        let pre = b.add(mm, bc).unwrap();
        let input = h;
        let act = if l + 1 < layers {
            Some(b.relu(pre).unwrap())
        } else {
            None
        };
        h = act.unwrap_or(pre);
        b.pop_scope();
        saved.push((w, bias, wc, act.map(|_| pre), input, pre));
    }
    let logits = h;
    let loss = b
        .sparse_softmax_cross_entropy(logits, labels, LossReduction::Mean)
        .unwrap();
    b.outfeed("loss", loss).unwrap();
    // Backward.
    b.push_scope("grad");
    let sm = b.softmax(logits, 1).unwrap();
    let onehot = b
        .op(
            "onehot",
            Op::OneHot {
                depth: widths[layers],
                dtype: compute,
            },
            &[labels],
        )
        .unwrap();
    let diff = b.sub(sm, onehot).unwrap();
    let inv_n = b.scalar("inv_batch", compute, 1.0 / n as f64).unwrap();
    let mut dy = b.mul(diff, inv_n).unwrap();
    let mut accs = Vec::new();
    for l in (0..layers).rev() {
        let (w, bias, wc, pre_act, input, _pre) = saved[l];
        b.push_scope(format!("dense{}", l + 1));
        if let Some(pre) = pre_act {
            dy = b.activation_grad(Activation::Relu, pre, dy).unwrap();
        }
        let xt = b.transpose(input, &[1, 0]).unwrap();
        let dw = b.matmul(xt, dy).unwrap();
        let db = b.reduce_sum(dy, &[0], false).unwrap();
        if l > 0 {
            let wt = b.transpose(wc, &[1, 0]).unwrap();
            dy = b.matmul(dy, wt).unwrap();
        }
        for (var, g, name) in [(w, dw, "weights"), (bias, db, "bias")] {
            let g = if weights != compute {
                b.cast(g, weights).unwrap()
            } else {
                g
            };
            let acc = b
                .variable(
                    &format!("{name}_accum"),
                    weights,
                    b.graph().node(var).ty.shape.clone(),
                    Init::Zeros,
                )
                .unwrap();
            let sum = b.add(acc, g).unwrap();
            b.assign(acc, sum).unwrap();
            accs.push((var, acc));
        }
        b.pop_scope();
    }
    b.pop_scope();
    // Update: SGD from the accumulated gradient, then reset the accumulator.
    b.set_phase(Phase::Update);
    b.push_scope("update");
    for (var, acc) in accs {
        let name = b.graph().node(var).name.clone();
        b.push_scope(name);
        let new = b.scaled_add(var, acc, -0.01).unwrap();
        b.assign(var, new).unwrap();
        let shape = b.graph().node(acc).ty.shape.clone();
        let zero = b.splat("zeros", weights, shape, 0.0).unwrap();
        b.assign(acc, zero).unwrap();
        b.pop_scope();
    }
    b.pop_scope();
    b.finish()
}
