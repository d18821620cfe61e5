//! The program tree of the compile report (PopVision's Program Tree): the executable's
//! steps as nested sequences and repeats, with each compute set's and exchange's cycles.

use crate::executable::Executable;
use serde::{Deserialize, Serialize};

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One node of the program tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramNode {
    /// `Sequence`, `Repeat`, `Execute`, `Exchange`, `StreamCopy`, `Sync`, `IpuCopy`,
    /// `CrossReplica`, `RemoteCopy`, `If`, `Pipeline` (its micro-batches in `count`, its segments as
    /// children) or `Segment` (its stash pops, body, stash pushes and sends as children;
    /// its IPU in `name`).
    pub kind: String,
    /// The compute set, exchange or stream run; the sync's scope; the collective.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Iterations of a `Repeat`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub count: u64,
    /// Cycles of one execution of a compute set or an exchange (the executable's figures).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cycles: u64,
    /// The children of a `Sequence`, `Repeat` (its body) or `If` (then, otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ProgramNode>,
}

impl ProgramNode {
    /// The tree of `p` in `exe`.
    pub fn of(exe: &Executable, p: &ipusim_exe::executable::Program) -> ProgramNode {
        use ipusim_exe::executable::Program as P;
        let node = |kind: &str, name: String, cycles: u64| ProgramNode {
            kind: kind.into(),
            name,
            count: 0,
            cycles,
            children: Vec::new(),
        };
        match p {
            P::Sequence(c) => ProgramNode {
                children: c.iter().map(|x| ProgramNode::of(exe, x)).collect(),
                ..node("Sequence", String::new(), 0)
            },
            P::Repeat { count, body } => ProgramNode {
                count: u64::from(*count),
                children: vec![ProgramNode::of(exe, body)],
                ..node("Repeat", String::new(), 0)
            },
            P::Execute(id) => {
                let cs = exe.compute_set(*id);
                node("Execute", cs.name.clone(), cs.cycles)
            }
            P::Exchange(id) | P::IpuCopy(id) => {
                let x = exe.exchange(*id);
                let kind = if matches!(p, P::Exchange(_)) {
                    "Exchange"
                } else {
                    "IpuCopy"
                };
                node(kind, x.name.clone(), x.cycles)
            }
            P::StreamCopy {
                stream, direction, ..
            } => {
                let name = exe
                    .streams
                    .get(stream.0 as usize)
                    .map_or_else(String::new, |s| format!("{} ({direction:?})", s.name));
                node("StreamCopy", name, 0)
            }
            P::Sync(scope) => node("Sync", format!("{scope:?}"), 0),
            P::CrossReplica { op, .. } => node("CrossReplica", format!("{op:?}"), 0),
            P::RemoteCopy { tensor, store } => node(
                "RemoteCopy",
                format!(
                    "{} ({})",
                    exe.tensor(*tensor).name,
                    if *store { "store" } else { "load" }
                ),
                0,
            ),
            P::If {
                then, otherwise, ..
            } => ProgramNode {
                children: vec![ProgramNode::of(exe, then), ProgramNode::of(exe, otherwise)],
                ..node("If", String::new(), 0)
            },
            P::Pipeline(pl) => ProgramNode {
                count: u64::from(pl.micro_batches),
                children: pl
                    .segments
                    .iter()
                    .map(|s| ProgramNode {
                        children: s
                            .restore
                            .iter()
                            .chain([&s.body])
                            .chain(&s.save)
                            .chain([&s.send])
                            .map(|x| ProgramNode::of(exe, x))
                            .collect(),
                        ..node("Segment", format!("{} (IPU {})", s.name, s.ipu), 0)
                    })
                    .collect(),
                ..node("Pipeline", String::new(), 0)
            },
        }
    }
}
