//! Replicated tensor sharding of optimizer state (the TF-IPU training guide §6.9, TF's
//! `replicated_optimizer_state_sharding`): with `R` replicas, each replica stores one shard
//! of every optimizer-state variable and computes the weight update's state arithmetic on
//! that shard only.
//!
//! In a training-step graph, a variable is **optimizer state** when it is float, starts at
//! zero, has at least `R` elements, only Update-phase nodes read it and an Update-phase
//! `Assign` writes it (Momentum's `<w>/momentum`, Adam's `<w>/adam_m` and `<w>/adam_v`). It
//! becomes a variable of the same name and dtype with shape `[k]`, `k = ceil(n / R)`: replica
//! `r` holds elements `[r k, (r + 1) k)` of the row-major tensor (the last shard padded).
//!
//! The Update-phase element-wise nodes (unary and binary ops, `ScaledAdd`, `Select`, `Cast`)
//! that compute from the state, and those whose every reader does (the gradient's square in
//! Adam), run on shards `[k]` when each of their inputs is a scalar, a shard, or a value of the
//! Step phase (the gradient, or its accumulator). Such a Step value is read through one
//! `ReplicatedReduceScatter` (its mean over the replicas, sharded) instead of the all-reduce
//! that replicas otherwise apply to it; any other Update reader of it then reads
//! `ReplicatedAllGather` of that shard, which is the all-reduce's value. A node that is not
//! sharded but reads a shard (the weight's own update, `w - delta`) reads its
//! `ReplicatedAllGather`: "if an operation requires the full tensor, the shards can be
//! broadcast to all replicas" (§6.9). The weight itself stays whole on every replica.
//!
//! Every element is computed by the same operations on the same operands as without
//! sharding (the reduce-scatter's mean is the all-reduce's, element by element), so the
//! weights are the same bit for bit. The padding elements of the last shard compute on zeros.

use crate::dtype::Shape;
use crate::error::IrError;
use crate::graph::{Graph, NodeId, Phase};
use crate::op::{Init, Op};
use crate::rewrite::Rewrite;
pub use crate::training::ShardedVariable;
use std::collections::{HashMap, HashSet};

/// The training-step graph `step` with its optimizer state sharded over `replicas` replicas,
/// and the variables sharded (none, and the graph unchanged, with one replica or no state).
pub fn shard_optimizer_state(
    step: &Graph,
    replicas: u32,
) -> Result<(Graph, Vec<ShardedVariable>), IrError> {
    let plan = Plan::of(step, replicas);
    if replicas <= 1 || plan.state.is_empty() {
        return Ok((step.clone(), Vec::new()));
    }
    let mut rw = Rewrite::new(step);
    let mut scattered: HashMap<NodeId, NodeId> = HashMap::new();
    let mut gathered: HashMap<NodeId, NodeId> = HashMap::new();
    let mut sharded_vars = Vec::new();
    for id in rw.order()? {
        let node = step.node(id);
        if plan.state.contains(&id) {
            let Op::Variable { dtype, .. } = node.op else {
                unreachable!("state is a variable")
            };
            let k = node.ty.num_elements().div_ceil(replicas as usize);
            let op = Op::Variable {
                dtype,
                shape: Shape(vec![k]),
                init: Init::Zeros,
            };
            let v = rw.dst.add_node_in(node.phase, node.name.clone(), op, &[])?;
            rw.set(id, v);
            sharded_vars.push(ShardedVariable {
                name: node.name.clone(),
                shape: node.ty.shape.clone(),
            });
            continue;
        }
        // A state variable's assignment keeps the shard.
        let sharded = plan.sharded.contains(&id)
            || (matches!(node.op, Op::Assign) && plan.state.contains(&node.inputs[0]));
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (which, &i) in node.inputs.iter().enumerate() {
            let is_target = matches!(node.op, Op::Assign) && which == 0;
            let input = if is_target || plan.is_scalar(i) {
                rw.use_of(i)?
            } else if plan.reducible(i)
                && plan.scattered.contains(&i)
                && node.phase == Phase::Update
            {
                let shard = match scattered.get(&i) {
                    Some(&s) => s,
                    None => {
                        let op = Op::ReplicatedReduceScatter { replicas };
                        let base = format!("{}/reduce_scatter", step.node(i).name);
                        let src = rw.use_of(i)?;
                        let s = rw.add_new(Phase::Update, &base, op, &[src])?;
                        scattered.insert(i, s);
                        s
                    }
                };
                if sharded {
                    shard
                } else {
                    gather(&mut rw, &mut gathered, step, i, shard, replicas)?
                }
            } else if (plan.sharded.contains(&i) || plan.state.contains(&i)) && !sharded {
                let shard = rw.use_of(i)?;
                gather(&mut rw, &mut gathered, step, i, shard, replicas)?
            } else {
                rw.use_of(i)?
            };
            inputs.push(input);
        }
        let n = rw
            .dst
            .add_node_in(node.phase, node.name.clone(), node.op.clone(), &inputs)?;
        rw.set(id, n);
    }
    Ok((rw.dst, sharded_vars))
}

/// `ReplicatedAllGather` of `shard` (the sharded value of source node `whole`), once per node.
fn gather(
    rw: &mut Rewrite,
    gathered: &mut HashMap<NodeId, NodeId>,
    step: &Graph,
    whole: NodeId,
    shard: NodeId,
    replicas: u32,
) -> Result<NodeId, IrError> {
    if let Some(&g) = gathered.get(&whole) {
        return Ok(g);
    }
    let node = step.node(whole);
    let op = Op::ReplicatedAllGather {
        replicas,
        shape: node.ty.shape.clone(),
    };
    let base = format!("{}/all_gather", node.name);
    let g = rw.add_new(Phase::Update, &base, op, &[shard])?;
    gathered.insert(whole, g);
    Ok(g)
}

/// What the rewrite shards, decided on the source graph.
struct Plan<'g> {
    g: &'g Graph,
    /// The optimizer-state variables sharded.
    state: HashSet<NodeId>,
    /// The Update-phase nodes computed on shards.
    sharded: HashSet<NodeId>,
    /// The Step-phase values a sharded node reads (through a reduce-scatter).
    scattered: HashSet<NodeId>,
}

impl<'g> Plan<'g> {
    fn of(g: &'g Graph, replicas: u32) -> Plan<'g> {
        let mut plan = Plan {
            g,
            state: HashSet::new(),
            sharded: HashSet::new(),
            scattered: HashSet::new(),
        };
        if replicas <= 1 {
            return plan;
        }
        let Ok(order) = g.topo_order() else {
            return plan;
        };
        plan.state = g
            .ids()
            .filter(|&v| plan.is_state_candidate(v, replicas))
            .collect();
        // Drop state whose reads or assigned value cannot be sharded, until none changes.
        loop {
            plan.sharded = plan.shardable(&order);
            let keep: HashSet<NodeId> = plan
                .state
                .iter()
                .copied()
                .filter(|&v| {
                    g.consumers(v).iter().all(|&c| match g.node(c).op {
                        Op::Assign => plan.sharded.contains(&g.node(c).inputs[1]),
                        _ => plan.sharded.contains(&c),
                    })
                })
                .collect();
            if keep.len() == plan.state.len() {
                break;
            }
            plan.state = keep;
        }
        plan.scattered = plan
            .sharded
            .iter()
            .flat_map(|&n| g.node(n).inputs.iter().copied())
            .filter(|&i| plan.reducible(i) && !plan.is_scalar(i))
            .collect();
        plan
    }

    /// A float, zero-initialised variable of at least `replicas` elements that only the
    /// weight update reads and writes.
    fn is_state_candidate(&self, v: NodeId, replicas: u32) -> bool {
        let node = self.g.node(v);
        let Op::Variable {
            dtype,
            init: Init::Zeros,
            ..
        } = node.op
        else {
            return false;
        };
        let consumers = self.g.consumers(v);
        let assigns = consumers
            .iter()
            .filter(|&&c| matches!(self.g.node(c).op, Op::Assign))
            .count();
        dtype.is_float()
            && node.ty.num_elements() >= replicas as usize
            && assigns == 1
            && consumers.len() > 1
            && consumers
                .iter()
                .all(|&c| self.g.node(c).phase == Phase::Update)
    }

    /// The Update-phase element-wise nodes that compute from the state (and, pulled back,
    /// those only they read), given the current state set.
    fn shardable(&self, order: &[NodeId]) -> HashSet<NodeId> {
        let g = self.g;
        // Forward: element-wise on whole-shaped operands that are scalars, state, Step
        // values or shardable nodes.
        let mut shardable: HashSet<NodeId> = HashSet::new();
        let mut from_state: HashSet<NodeId> = HashSet::new();
        for &id in order {
            let node = g.node(id);
            if node.phase != Phase::Update || !is_elementwise(&node.op) || self.is_scalar(id) {
                continue;
            }
            let fits = node.inputs.iter().all(|&i| {
                self.is_scalar(i)
                    || (g.node(i).ty.shape == node.ty.shape
                        && (self.state.contains(&i) || self.reducible(i) || shardable.contains(&i)))
            });
            if fits {
                shardable.insert(id);
                if node
                    .inputs
                    .iter()
                    .any(|i| self.state.contains(i) || from_state.contains(i))
                {
                    from_state.insert(id);
                }
            }
        }
        // Backward: a shardable node not computed from the state is sharded when every
        // reader of it is.
        let mut sharded = from_state;
        for &id in order.iter().rev() {
            if sharded.contains(&id) || !shardable.contains(&id) {
                continue;
            }
            let readers = g.consumers(id);
            if !readers.is_empty() && readers.iter().all(|r| sharded.contains(r)) {
                sharded.insert(id);
            }
        }
        sharded
    }

    /// A value of the Step phase the weight update reads (replicas reduce it): a Step-phase
    /// computation, or a float variable a Step-phase `Assign` writes (a gradient
    /// accumulator). As `compiler::lower`'s all-reduce of gradients selects them.
    fn reducible(&self, id: NodeId) -> bool {
        let n = self.g.node(id);
        match n.op {
            Op::Variable { .. } => {
                n.ty.dtype.is_float()
                    && self.g.consumers(id).iter().any(|&c| {
                        let a = self.g.node(c);
                        matches!(a.op, Op::Assign) && a.phase == Phase::Step && a.inputs[0] == id
                    })
            }
            ref op => n.phase == Phase::Step && !op.is_source() && !matches!(op, Op::Assign),
        }
    }

    fn is_scalar(&self, id: NodeId) -> bool {
        self.g.node(id).ty.num_elements() == 1
    }
}

/// The ops a shard computes like the whole tensor.
fn is_elementwise(op: &Op) -> bool {
    op.unary().is_some()
        || op.binary().is_some()
        || matches!(
            op,
            Op::ScaledAdd { .. } | Op::Select | Op::Cast { .. } | Op::Clip { .. }
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{mlp, MlpSpec};
    use crate::program::{Optimizer, Precision, TrainingSpec};
    use crate::training::prepare;

    fn step(optimizer: Optimizer, gradient_accumulation: u32) -> Graph {
        let mut p = mlp(&MlpSpec::new(4, &[6, 5, 3])).unwrap();
        p.training = Some(TrainingSpec {
            loss: "loss".into(),
            optimizer,
            loss_scaling: 1.0,
            precision: Precision::P16_32,
            gradient_accumulation,
            accumulation_dtype: None,
            stable_norm: false,
        });
        prepare(&p, None, false).unwrap().graph
    }

    fn count(g: &Graph, f: impl Fn(&Op) -> bool) -> usize {
        g.nodes().filter(|(_, n)| f(&n.op)).count()
    }

    fn adam() -> Optimizer {
        Optimizer::Adam {
            learning_rate: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-7,
        }
    }

    #[test]
    fn adam_state_is_sharded_and_the_gradients_reduce_scattered() {
        let g = step(adam(), 1);
        let (s, vars) = shard_optimizer_state(&g, 4).unwrap();
        // Two weights and two biases, each with m and v; dense2's bias has 3 elements, fewer
        // than the replicas, and stays whole.
        let weights = 3;
        assert_eq!(vars.len(), 2 * weights);
        assert!(vars.iter().all(|v| !v.name.starts_with("dense2/bias/")));
        let m = s.find("dense2/bias/adam_m").unwrap();
        assert_eq!(s.node(m).ty.shape.dims(), [3]);
        for v in &vars {
            let id = s.find(&v.name).unwrap();
            let n = v.shape.num_elements();
            assert_eq!(s.node(id).ty.shape.dims(), [n.div_ceil(4)], "{}", v.name);
            assert_eq!(g.node(g.find(&v.name).unwrap()).ty.shape, v.shape);
        }
        // One reduce-scatter of each gradient, one all-gather of each weight's step.
        let rs = count(&s, |op| matches!(op, Op::ReplicatedReduceScatter { .. }));
        let ag = count(&s, |op| matches!(op, Op::ReplicatedAllGather { .. }));
        assert_eq!((rs, ag), (weights, weights));
        // Every reduce-scatter runs in the update, on a Step value.
        for (_, n) in s.nodes() {
            if let Op::ReplicatedReduceScatter { replicas } = n.op {
                assert_eq!((replicas, n.phase), (4, Phase::Update));
                assert_eq!(s.node(n.inputs[0]).phase, Phase::Step, "{}", n.name);
            }
        }
        // The Adam powers (scalars) stay as they were.
        let power = s.find("adam/beta1_power").unwrap();
        assert_eq!(s.node(power).ty.num_elements(), 1);
        // Nothing to shard on one replica.
        let (same, none) = shard_optimizer_state(&g, 1).unwrap();
        assert!(none.is_empty());
        assert_eq!(same.len(), g.len());
    }

    #[test]
    fn sgd_has_no_state_and_momentum_shards_its_velocity_with_accumulation() {
        let g = step(Optimizer::Sgd { learning_rate: 0.1 }, 1);
        let (s, vars) = shard_optimizer_state(&g, 2).unwrap();
        assert!(vars.is_empty());
        assert_eq!(s.len(), g.len());
        let g = step(
            Optimizer::Momentum {
                learning_rate: 0.1,
                momentum: 0.9,
            },
            3,
        );
        let (s, vars) = shard_optimizer_state(&g, 2).unwrap();
        assert_eq!(vars.len(), 4);
        assert!(vars.iter().all(|v| v.name.ends_with("/momentum")));
        // The accumulators are read through reduce-scatters, never whole in the update.
        for (_, n) in s.nodes() {
            if n.phase != Phase::Update || n.op.is_collective() {
                continue;
            }
            for &i in &n.inputs {
                let name = &s.node(i).name;
                assert!(
                    !name.ends_with("/grad_accum") || matches!(n.op, Op::Assign),
                    "{}",
                    n.name
                );
            }
        }
    }
}
