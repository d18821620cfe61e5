//! The micro-batch size from the command line (`--batch N`, as the hands-on day and
//! Graphcore's CNN examples set it): every infeed's leading dimension becomes `N` and the
//! graph's types are inferred again. When every infeed had the same leading dimension `B`, a
//! `Reshape` whose written shape leads with `B` (an image unflattened to `[B, 1, 8, 8]`, a
//! feature map flattened to `[B, C*H*W]`) leads with `N` instead: the batch, as PyTorch's
//! `view(x.size(0), ...)` keeps it. Any other op whose attributes fix the old batch fails
//! inference, and the error names the node.

use crate::dtype::Shape;
use crate::error::IrError;
use crate::op::Op;
use crate::program::Program;
use crate::rewrite::Rewrite;

/// `program` with every `Input`'s leading dimension set to `batch`.
pub fn with_batch(program: &Program, batch: usize) -> Result<Program, IrError> {
    if batch == 0 {
        return Err(IrError::Program(
            "--batch 0: a micro-batch has at least 1 sample".into(),
        ));
    }
    let g = &program.graph;
    if !g
        .nodes()
        .any(|(_, n)| matches!(&n.op, Op::Input { shape, .. } if shape.rank() > 0))
    {
        return Err(IrError::Program(
            "--batch: the program has no infeed with a batch dimension".into(),
        ));
    }
    // The old batch, when the infeeds agree on one.
    let mut leading = g.nodes().filter_map(|(_, n)| match &n.op {
        Op::Input { shape, .. } if shape.rank() > 0 => Some(shape.dims()[0]),
        _ => None,
    });
    let first = leading.next();
    let old = first.filter(|&b| leading.all(|d| d == b));
    let mut rw = Rewrite::new(g);
    for id in g.program_order() {
        let node = g.node(id);
        let inputs = rw.inputs_of(id)?;
        let op = match &node.op {
            Op::Input {
                stream,
                dtype,
                shape,
            } if shape.rank() > 0 => {
                let mut dims = shape.dims().to_vec();
                dims[0] = batch;
                Op::Input {
                    stream: stream.clone(),
                    dtype: *dtype,
                    shape: Shape::new(dims),
                }
            }
            Op::Reshape { shape } if old.is_some() && shape.dims().first() == old.as_ref() => {
                let mut dims = shape.dims().to_vec();
                dims[0] = batch;
                Op::Reshape {
                    shape: Shape::new(dims),
                }
            }
            op => op.clone(),
        };
        let nid = rw
            .dst
            .add_node_in(node.phase, node.name.clone(), op, &inputs)
            .map_err(|e| IrError::Program(format!("--batch {batch}: {e}")))?;
        rw.set(id, nid);
    }
    let mut p = program.clone_without_graph();
    p.graph = rw.dst;
    Ok(p)
}
