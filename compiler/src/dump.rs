//! Human-readable dumps of each stage (`ipusim compile --dump ir|tiles|program`): the IR
//! graph as compiled, the tile mapping of every tensor, and the program tree with its compute
//! sets and exchanges.

use crate::executable::{Executable, Program, SyncScope, TensorKind};
use crate::report::group;
use ipusim_ir::Graph;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The graph, one node per line in id order: `%id name [phase] = Op(inputs) : type`.
pub fn ir(g: &Graph) -> String {
    let mut s = String::from("== ir ==\n");
    for (id, n) in g.nodes() {
        let inputs: Vec<String> = n.inputs.iter().map(|&i| g.node(i).name.clone()).collect();
        let _ = writeln!(
            s,
            "{id} {} [{:?}] = {}({}) : {}",
            n.name,
            n.phase,
            n.op.name(),
            inputs.join(", "),
            n.ty
        );
    }
    s
}

/// Every tensor's mapping: kind, type, tiles, intervals, bytes per tile (min/max).
pub fn tiles(exe: &Executable) -> String {
    let mut s = String::from("== tiles ==\n");
    let _ = writeln!(
        s,
        "{:<48} {:<14} {:<16} {:>6} {:>9} {:>12} {:>12}",
        "tensor", "kind", "type", "tiles", "intervals", "min B/tile", "max B/tile"
    );
    for t in &exe.tensors {
        let es = t.dtype.size_bytes() as u64;
        let bytes: Vec<u64> = t.slices.iter().map(|x| x.num_elements() * es).collect();
        let kind = match &t.kind {
            TensorKind::Variable => "variable",
            TensorKind::RemoteVariable => "remote var",
            TensorKind::Constant => "constant",
            TensorKind::StreamBuffer { .. } => "stream",
            TensorKind::Activation => "activation",
            TensorKind::Staging { .. } => "staging",
            TensorKind::Partials => "partials",
        };
        let _ = writeln!(
            s,
            "{:<48} {:<14} {:<16} {:>6} {:>9} {:>12} {:>12}",
            t.name,
            kind,
            format!("{}{}", t.dtype, t.shape),
            t.slices.len(),
            t.slices.iter().map(|x| x.intervals.len()).sum::<usize>(),
            group(bytes.iter().copied().min().unwrap_or(0)),
            group(bytes.iter().copied().max().unwrap_or(0)),
        );
    }
    let _ = writeln!(
        s,
        "\n{:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "tile", "total B", "variables", "constants", "streams", "temporaries", "vertex st.", "code"
    );
    for m in exe.memory.tiles.iter().filter(|m| m.total > 0) {
        let _ = writeln!(
            s,
            "{:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            m.tile,
            group(m.total),
            group(m.variables),
            group(m.constants),
            group(m.exchange_buffers),
            group(m.temporaries),
            group(m.vertex_state),
            group(m.code)
        );
    }
    s
}

/// The program tree; each compute set with its cycles, tiles and vertices per codelet, each
/// exchange with its copies and bytes.
pub fn program(exe: &Executable) -> String {
    let mut s = String::from("== program ==\n");
    walk(exe, &exe.program, 0, &mut s);
    s
}

fn walk(exe: &Executable, p: &Program, depth: usize, s: &mut String) {
    let pad = "  ".repeat(depth);
    match p {
        Program::Sequence(c) => {
            let _ = writeln!(s, "{pad}Sequence");
            for x in c {
                walk(exe, x, depth + 1, s);
            }
        }
        Program::Repeat { count, body } => {
            let _ = writeln!(s, "{pad}Repeat x{count}");
            walk(exe, body, depth + 1, s);
        }
        Program::Pipeline(pl) => {
            let _ = writeln!(
                s,
                "{pad}Pipeline: {} micro-batches, {} ticks",
                pl.micro_batches,
                pl.ticks()
            );
            for seg in &pl.segments {
                let _ = writeln!(
                    s,
                    "{pad}  Segment '{}' on IPU {} from tick {} ({} stash slots)",
                    seg.name,
                    seg.ipu,
                    seg.offset,
                    seg.save.len()
                );
                for x in seg.restore.iter().chain([&seg.body]).chain(&seg.save) {
                    walk(exe, x, depth + 2, s);
                }
                walk(exe, &seg.send, depth + 2, s);
            }
        }
        Program::Execute(id) => {
            let cs = exe.compute_set(*id);
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for g in cs.tiles.iter().flat_map(|t| &t.groups) {
                *per.entry(g.codelet.full_name()).or_default() += g.vertices.len();
            }
            let v: Vec<String> = per.iter().map(|(k, n)| format!("{k} x{n}")).collect();
            let _ = writeln!(
                s,
                "{pad}Execute '{}': {} cycles on {} tiles [{}]",
                cs.name,
                group(cs.cycles),
                cs.tiles.len(),
                v.join(", ")
            );
        }
        Program::Exchange(id) => {
            let ex = exe.exchange(*id);
            let _ = writeln!(
                s,
                "{pad}Exchange '{}': {} copies, {} bytes, {} cycles",
                ex.name,
                ex.copies.len(),
                group(ex.total_bytes()),
                group(ex.cycles)
            );
        }
        Program::StreamCopy {
            stream, direction, ..
        } => {
            let st = &exe.streams[stream.0 as usize];
            let _ = writeln!(
                s,
                "{pad}StreamCopy '{}' {:?}: {} bytes",
                st.name,
                direction,
                group(st.bytes_per_micro_batch)
            );
        }
        Program::Sync(SyncScope::Internal) => {
            let _ = writeln!(s, "{pad}Sync");
        }
        Program::RemoteCopy { tensor, store } => {
            let t = exe.tensor(*tensor);
            let _ = writeln!(
                s,
                "{pad}RemoteCopy '{}' {}: {} bytes",
                t.name,
                if *store { "store" } else { "load" },
                group(t.size_bytes())
            );
        }
        Program::Sync(SyncScope::External) => {
            let _ = writeln!(s, "{pad}Sync external");
        }
        Program::IpuCopy(id) => {
            let ex = exe.exchange(*id);
            let _ = writeln!(
                s,
                "{pad}IpuCopy '{}': {} bytes, {} cycles",
                ex.name,
                group(ex.total_bytes()),
                group(ex.cycles)
            );
        }
        Program::CrossReplica { op, tensor, dst } => {
            let _ = write!(s, "{pad}CrossReplica {op:?} '{}'", exe.tensor(*tensor).name);
            if let Some(d) = dst {
                let _ = write!(s, " -> '{}'", exe.tensor(*d).name);
            }
            let _ = writeln!(s);
        }
        Program::If {
            condition,
            then,
            otherwise,
        } => {
            let _ = writeln!(s, "{pad}If '{}'", exe.tensor(*condition).name);
            walk(exe, then, depth + 1, s);
            let _ = writeln!(s, "{pad}Else");
            walk(exe, otherwise, depth + 1, s);
        }
    }
}
