//! Placement of a program over the IPUs of a system: pipeline split points, the execution
//! schedule, the IPU of each stage, and the stage of every node of a step graph.
//!
//! A split point names the node that begins a new stage, as PopTorch's
//! `poptorch.BeginBlock(model.layer3[8], ipu_id=1)` and the CNN README's `--pipeline-splits
//! b3/1/relu` do. It may name a node (`layer3.8.conv1`) or a module path, meaning the first node
//! in program order whose name is that path followed by `.` or `/` (`layer3.8` begins with
//! `layer3.8.conv1`). Every node from there on, in the program's (topological) order, is on the
//! next stage. Sources (variables, constants, infeeds) sit on the stage of their first
//! consumer, so a label infeed read by the loss crosses the host link of the last IPU.
//!
//! A step graph's nodes carry the names the training transform gives them: `bwd/NAME/...` for
//! the gradient of forward node `NAME`, `update/VAR/...` for a variable's update, `NAME/...`
//! for the pieces a composite op or the precision policy adds. A step-graph node takes the
//! stage of the forward node its name derives from (a recomputed `recompute/NAME` too). The few that derive from none (the loss
//! scaling seed, the optimizer's shared step count) take the first stage that reads them.

use crate::error::UnknownValue;
use crate::graph::{Graph, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// How the stages of a pipeline share time (the TF-IPU training guide §6.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Schedule {
    /// One stage at a time: a micro-batch passes through every stage before the next enters.
    /// No overlap, no stash (model sharding).
    #[default]
    Sequential,
    /// Forward and backward stages of different micro-batches run at once, grouped.
    Grouped,
    /// Each IPU alternates between a tick of its forward stage and a tick of its backward
    /// one: a smaller stash than `Grouped`, more cycles.
    Interleaved,
}

impl Schedule {
    /// Every schedule.
    pub const ALL: [Schedule; 3] = [
        Schedule::Sequential,
        Schedule::Grouped,
        Schedule::Interleaved,
    ];

    /// The name as written in programs and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Schedule::Sequential => "Sequential",
            Schedule::Grouped => "Grouped",
            Schedule::Interleaved => "Interleaved",
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Schedule {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Schedule, UnknownValue> {
        Schedule::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownValue {
                what: "schedule",
                value: s.chars().take(40).collect(),
                expected: "Sequential, Grouped or Interleaved",
            })
    }
}

/// A program's pipeline, as written: `pipeline: (splits: ["layer3.8"], schedule: Sequential,
/// ipus: [0, 1])`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// The nodes (or module paths) that begin stages 1, 2, ..., in program order.
    pub splits: Vec<String>,
    /// How the stages share time.
    #[serde(default)]
    pub schedule: Schedule,
    /// The IPU of each stage (PopTorch's `ipu_id`); empty: stage `i` on IPU `i`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipus: Vec<u32>,
}

/// Where the nodes of a step graph run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// IPUs in the system (at least the highest stage IPU + 1).
    pub ipus: u32,
    /// How the stages share time.
    pub schedule: Schedule,
    /// The IPU of each stage (one entry per stage).
    pub stage_ipus: Vec<u32>,
    /// The stage of each node, indexed by node id; empty when there is one stage.
    pub node_stage: Vec<u32>,
    /// Replicas of the whole placement (data parallelism), each on its own `ipus` IPUs.
    pub replicas: u32,
}

impl Default for Placement {
    fn default() -> Placement {
        Placement::single()
    }
}

impl Placement {
    /// Everything on one IPU.
    pub fn single() -> Placement {
        Placement {
            ipus: 1,
            schedule: Schedule::Sequential,
            stage_ipus: vec![0],
            node_stage: Vec::new(),
            replicas: 1,
        }
    }

    /// The number of stages.
    pub fn stages(&self) -> u32 {
        self.stage_ipus.len() as u32
    }

    /// Whether two stages are placed on one IPU (an overlapping schedule gives each stage an
    /// IPU of its own).
    pub fn shares_an_ipu(&self) -> bool {
        let mut ipus = self.stage_ipus.clone();
        ipus.sort_unstable();
        ipus.dedup();
        ipus.len() != self.stage_ipus.len()
    }

    /// The stage of node `id`.
    pub fn stage_of(&self, id: NodeId) -> u32 {
        self.node_stage.get(id.as_usize()).copied().unwrap_or(0)
    }

    /// The IPU node `id` runs on.
    pub fn ipu_of(&self, id: NodeId) -> u32 {
        self.stage_ipus
            .get(self.stage_of(id) as usize)
            .copied()
            .unwrap_or(0)
    }
}

/// Where a placement option came from, for errors: the program's `pipeline` field or a
/// command-line flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The program file's `pipeline` field.
    Program,
    /// `--pipeline-splits` / `--ipus` on the command line.
    CommandLine,
}

impl Origin {
    fn splits(self) -> &'static str {
        match self {
            Origin::Program => "pipeline.splits",
            Origin::CommandLine => "--pipeline-splits",
        }
    }
}

/// Why a placement cannot be made; each names the option and the value.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlacementError {
    /// A split point names no node and no module path.
    #[error("{option}: split point '{split}' names no node (and no node's name begins with '{split}.' or '{split}/')")]
    UnknownSplit {
        /// `pipeline.splits` or `--pipeline-splits`.
        option: &'static str,
        /// The split as written.
        split: String,
    },
    /// Split points out of program order (the stages would go backwards).
    #[error("{option}: split point '{later}' begins at node '{at}', which comes before split point '{earlier}' in the program: list the split points in program order, each after the one before")]
    OutOfOrder {
        /// The option.
        option: &'static str,
        /// The split listed first.
        earlier: String,
        /// The split listed after it that begins earlier.
        later: String,
        /// The node where `later` begins.
        at: String,
    },
    /// `pipeline.ipus` does not give one IPU per stage.
    #[error("pipeline.ipus: {given} IPUs given for {stages} stages (one per stage: {splits} split points make {stages} stages)")]
    MappingLength {
        /// Entries given.
        given: usize,
        /// Stages.
        stages: usize,
        /// Split points.
        splits: usize,
    },
    /// A stage is placed on an IPU the system does not have.
    #[error("--ipus {ipus}: stage {stage} is placed on IPU {ipu}, but a system of {ipus} IPU(s) has IPUs 0..={last}")]
    TooFewIpus {
        /// The system's IPUs.
        ipus: u32,
        /// The stage.
        stage: u32,
        /// Its IPU.
        ipu: u32,
        /// The last IPU of the system.
        last: u32,
    },
    /// An overlapping schedule with two stages on one IPU (each stage of a `Grouped` or
    /// `Interleaved` pipeline runs on an IPU of its own).
    #[error("pipeline.ipus {ipus:?}: the {schedule} schedule runs each of its {stages} stages on an IPU of its own, and two of them share one")]
    SharedIpu {
        /// The stages' IPUs.
        ipus: Vec<u32>,
        /// The schedule.
        schedule: Schedule,
        /// The stages.
        stages: u32,
    },
    /// Too few micro-batches to fill an overlapping pipeline.
    #[error("{option} {depth}: a {stages}-stage {schedule} pipeline keeps {needed} micro-batches in flight (each stage's forward and backward pass), so it needs a gradient accumulation of at least {needed}")]
    TooShallow {
        /// Where the depth was set: `--gradient-accumulation`, or the training spec's
        /// `training.gradient_accumulation` (also when left at its default, 1).
        option: &'static str,
        /// The gradient accumulation (the pipeline depth).
        depth: u32,
        /// The schedule.
        schedule: Schedule,
        /// The stages.
        stages: u32,
        /// The least depth.
        needed: u32,
    },
    /// A replica count out of range.
    #[error("--replicas {replicas}: {replicas} replicas of {ipus} IPU(s) are not 1 to {max} IPUs")]
    BadReplicas {
        /// The replicas.
        replicas: u32,
        /// IPUs per replica.
        ipus: u32,
        /// The largest system.
        max: u32,
    },
    /// The system size is out of range.
    #[error("--ipus {ipus}: a system has 1 to {max} IPUs")]
    BadIpuCount {
        /// The value.
        ipus: u32,
        /// The largest system.
        max: u32,
    },
}

/// The most IPUs a placement may name (the executable's tile ids hold 4,096).
pub const MAX_IPUS: u32 = 4096;

/// True when node `name` is split point `split` or lies in the module path it names.
pub fn begins_with(name: &str, split: &str) -> bool {
    name == split
        || (name.len() > split.len()
            && name.starts_with(split)
            && matches!(name.as_bytes()[split.len()], b'.' | b'/'))
}

/// The stage of every node of the forward graph `forward`, by name, for split points
/// `splits` (see the module docs).
pub fn forward_stages<'g>(
    forward: &'g Graph,
    splits: &[String],
    origin: Origin,
) -> Result<HashMap<&'g str, u32>, PlacementError> {
    let order = forward.program_order();
    // The position in `order` where each split begins.
    let mut starts: Vec<usize> = Vec::with_capacity(splits.len());
    for (k, split) in splits.iter().enumerate() {
        let at = order
            .iter()
            .position(|&id| {
                let n = forward.node(id);
                !n.op.is_source() && begins_with(&n.name, split)
            })
            .ok_or_else(|| PlacementError::UnknownSplit {
                option: origin.splits(),
                split: split.chars().take(80).collect(),
            })?;
        if let Some(&prev) = starts.last() {
            if at <= prev {
                return Err(PlacementError::OutOfOrder {
                    option: origin.splits(),
                    earlier: splits[k - 1].chars().take(80).collect(),
                    later: split.chars().take(80).collect(),
                    at: forward.node(order[at]).name.clone(),
                });
            }
        }
        starts.push(at);
    }
    let mut stage_of: HashMap<NodeId, u32> = HashMap::with_capacity(order.len());
    let mut stage = 0u32;
    for (pos, &id) in order.iter().enumerate() {
        while (stage as usize) < starts.len() && starts[stage as usize] <= pos {
            stage += 1;
        }
        if !forward.node(id).op.is_source() {
            stage_of.insert(id, stage);
        }
    }
    // Sources sit with their first consumer.
    for &id in &order {
        if forward.node(id).op.is_source() {
            let s = forward
                .consumers(id)
                .into_iter()
                .filter_map(|c| stage_of.get(&c).copied())
                .min()
                .unwrap_or(0);
            stage_of.insert(id, s);
        }
    }
    Ok(stage_of
        .into_iter()
        .map(|(id, s)| (forward.node(id).name.as_str(), s))
        .collect())
}

/// The placement of step graph `step` built from forward graph `forward` under `spec`, in a
/// system of `ipus` IPUs (default: as many as the stages' IPUs need).
pub fn place(
    step: &Graph,
    forward: &Graph,
    spec: &PipelineSpec,
    ipus: Option<u32>,
    origin: Origin,
) -> Result<Placement, PlacementError> {
    let stages = spec.splits.len() + 1;
    let stage_ipus: Vec<u32> = if spec.ipus.is_empty() {
        (0..stages as u32).collect()
    } else if spec.ipus.len() != stages {
        return Err(PlacementError::MappingLength {
            given: spec.ipus.len(),
            stages,
            splits: spec.splits.len(),
        });
    } else {
        spec.ipus.clone()
    };
    let needed = stage_ipus.iter().max().map_or(1, |&m| m.saturating_add(1));
    let system = ipus.unwrap_or(needed);
    if system == 0 || system > MAX_IPUS {
        return Err(PlacementError::BadIpuCount {
            ipus: system,
            max: MAX_IPUS,
        });
    }
    if let Some((stage, &ipu)) = stage_ipus.iter().enumerate().find(|(_, &i)| i >= system) {
        return Err(PlacementError::TooFewIpus {
            ipus: system,
            stage: stage as u32,
            ipu,
            last: system - 1,
        });
    }
    let node_stage = if stages == 1 {
        Vec::new()
    } else {
        step_stages(step, &forward_stages(forward, &spec.splits, origin)?)
    };
    Ok(Placement {
        ipus: system,
        schedule: spec.schedule,
        stage_ipus,
        node_stage,
        replicas: 1,
    })
}

/// The stage of each step-graph node (indexed by id) from the forward stages by name.
fn step_stages(step: &Graph, forward: &HashMap<&str, u32>) -> Vec<u32> {
    let n = step.ids().map(|i| i.as_usize() + 1).max().unwrap_or(0);
    let mut stage: Vec<Option<u32>> = vec![None; n];
    for (id, node) in step.nodes() {
        stage[id.as_usize()] = derived_stage(&node.name, forward);
    }
    let order = step.program_order();
    // Nodes that derive from no forward node: the first stage that reads them, else the
    // latest stage they read.
    for &id in order.iter().rev() {
        if stage[id.as_usize()].is_none() {
            stage[id.as_usize()] = step
                .consumers(id)
                .into_iter()
                .filter_map(|c| stage[c.as_usize()])
                .min();
        }
    }
    for &id in &order {
        if stage[id.as_usize()].is_none() {
            stage[id.as_usize()] = Some(
                step.node(id)
                    .inputs
                    .iter()
                    .filter_map(|i| stage[i.as_usize()])
                    .max()
                    .unwrap_or(0),
            );
        }
    }
    stage.into_iter().map(|s| s.unwrap_or(0)).collect()
}

/// The stage of the forward node a step-graph name derives from: the name without its
/// `bwd/` or `update/` prefix, then each shorter `/`-separated prefix of it.
fn derived_stage(name: &str, forward: &HashMap<&str, u32>) -> Option<u32> {
    let name = name.strip_prefix("recompute/").unwrap_or(name);
    let mut rest = name
        .strip_prefix("bwd/")
        .or_else(|| name.strip_prefix("update/"))
        .unwrap_or(name);
    loop {
        if let Some(&s) = forward.get(rest) {
            return Some(s);
        }
        rest = &rest[..rest.rfind('/')?];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_graph_names_take_the_stage_of_the_node_they_derive_from() {
        let fwd: HashMap<&str, u32> = [("a", 0), ("b", 1), ("b/w", 1)].into_iter().collect();
        assert_eq!(derived_stage("bwd/b/matmul/grad_a", &fwd), Some(1));
        assert_eq!(derived_stage("update/b/w/new", &fwd), Some(1));
        assert_eq!(derived_stage("a/cast_f16", &fwd), Some(0));
        assert_eq!(derived_stage("bwd/loss_scaling", &fwd), None);
    }
}
