//! What the debugger shows: program steps, tensors (gathered, in their dtype and shape),
//! a tile's memory, the flags, the position in the program tree — as text.

use crate::display;
use crate::engine::{Engine, Leaf, NextStep, Place, RunSummary, StepReport};
use crate::numerics::FpSts;
use crate::tensor::Tensor;
use ipusim_exe::executable::{Executable, StepKind, StreamDirection, TensorKind};
use ipusim_exe::system::TileId;
use std::fmt::Write;

/// Whether `tile` takes part in the program step `leaf`.
pub fn step_touches_tile(exe: &Executable, leaf: Leaf, tile: TileId) -> bool {
    match leaf {
        Leaf::Execute { compute_set } => exe
            .compute_set(compute_set)
            .tiles
            .binary_search_by_key(&tile, |w| w.tile)
            .is_ok(),
        Leaf::Exchange { exchange } => exe
            .exchange(exchange)
            .copies
            .iter()
            .any(|c| c.src_tile == tile || c.dsts.iter().any(|d| d.tile == tile)),
        Leaf::StreamCopy { tensor, .. } | Leaf::RemoteCopy { tensor, .. } => {
            exe.tensor(tensor).slice_on(tile).is_some()
        }
        Leaf::Sync | Leaf::ExternalSync | Leaf::CrossReplica { .. } => false,
    }
}

/// True when program step `leaf` does work on IPU `ipu`: a compute set with tiles there, an
/// exchange or inter-IPU copy that reads or writes there, a stream copy to or from a buffer
/// there.
pub fn step_touches_ipu(exe: &Executable, leaf: Leaf, ipu: u32) -> bool {
    match leaf {
        Leaf::Execute { compute_set } => exe
            .compute_set(compute_set)
            .tiles
            .iter()
            .any(|w| w.tile.ipu() == ipu),
        Leaf::Exchange { exchange } => exe
            .exchange(exchange)
            .copies
            .iter()
            .any(|c| c.src_tile.ipu() == ipu || c.dsts.iter().any(|d| d.tile.ipu() == ipu)),
        Leaf::StreamCopy { tensor, .. } | Leaf::RemoteCopy { tensor, .. } => exe
            .tensor(tensor)
            .slices
            .iter()
            .any(|s| s.tile.ipu() == ipu),
        Leaf::Sync | Leaf::ExternalSync | Leaf::CrossReplica { .. } => false,
    }
}

/// `compute set 'y' (step 3)` and the like.
pub fn describe_step(exe: &Executable, next: &NextStep) -> String {
    let step = next
        .step
        .map_or_else(String::new, |s| format!(" (step {s})"));
    match next.leaf {
        Leaf::Execute { compute_set } => {
            let cs = exe.compute_set(compute_set);
            format!(
                "compute set '{}'{step} on {} tile(s)",
                cs.name,
                cs.tiles.len()
            )
        }
        Leaf::Exchange { exchange } => format!("exchange '{}'{step}", exe.exchange(exchange).name),
        Leaf::StreamCopy {
            stream, direction, ..
        } => {
            let dir = match direction {
                StreamDirection::HostToDevice => "host -> device",
                StreamDirection::DeviceToHost => "device -> host",
            };
            format!(
                "stream copy '{}' ({dir}){step}",
                exe.streams[stream.0 as usize].name
            )
        }
        Leaf::Sync => "sync".to_string(),
        Leaf::ExternalSync => "external sync".to_string(),
        Leaf::CrossReplica { tensor, dst, .. } => match dst {
            None => format!("cross-replica '{}'", exe.tensor(tensor).name),
            Some(d) => format!(
                "cross-replica '{}' -> '{}'",
                exe.tensor(tensor).name,
                exe.tensor(d).name
            ),
        },
        Leaf::RemoteCopy { tensor, store } => format!(
            "remote-buffer {} of '{}'{step}",
            if store { "store" } else { "load" },
            exe.tensor(tensor).name
        ),
    }
}

/// One line about an executed step: its cycles, bytes and the flags it raised per tile.
pub fn describe_report(exe: &Executable, r: &StepReport, tile_flags: &[(TileId, FpSts)]) -> String {
    let mut s = format!(
        "[cycle {} +{}] {}",
        r.cycle,
        r.cycles,
        describe_step(exe, &r.next)
    );
    if r.bytes > 0 {
        let _ = write!(s, ": {} B", r.bytes);
    }
    if !tile_flags.is_empty() {
        let parts: Vec<String> = tile_flags
            .iter()
            .map(|(t, f)| format!("{} on tile {t}", flag_list(*f)))
            .collect();
        let _ = write!(s, "; flags {}", parts.join(", "));
    }
    s
}

/// `OFLO|INV`, or `none`.
pub fn flag_list(f: FpSts) -> String {
    let names: Vec<&str> = f.names().collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join("|")
    }
}

/// `$FP_STS` as Poplar prints it: `OFLO=0x1 DIV0=0x0 INV=0x0`.
pub fn fp_sts(f: FpSts) -> String {
    format!(
        "OFLO=0x{} DIV0=0x{} INV=0x{}",
        u8::from(f.contains(FpSts::OFLO)),
        u8::from(f.contains(FpSts::DIV0)),
        u8::from(f.contains(FpSts::INV))
    )
}

/// A run's summary in one line.
pub fn describe_run(r: &RunSummary) -> String {
    let c = &r.cycles;
    format!(
        "run {} finished: {} cycles (OnTileExecute {}, DoExchange {}, Sync {}, StreamCopy {}); flags {}",
        r.run,
        c.total,
        c.on_tile_execute,
        c.do_exchange,
        c.sync,
        c.stream_copy,
        flag_list(r.flags)
    )
}

/// The first and last program step (indices of `Executable::steps`) touching each tensor.
#[derive(Clone, Debug)]
pub struct Liveness(Vec<Option<(u32, u32)>>);

impl Liveness {
    /// From the executable's steps.
    pub fn new(exe: &Executable) -> Liveness {
        let mut live: Vec<Option<(u32, u32)>> = vec![None; exe.tensors.len()];
        let mut touch = |t: usize, k: u32| {
            if let Some(slot) = live.get_mut(t) {
                let e = slot.get_or_insert((k, k));
                e.0 = e.0.min(k);
                e.1 = e.1.max(k);
            }
        };
        for (k, s) in exe.steps.iter().enumerate() {
            let k = k as u32;
            match s.kind {
                StepKind::Execute(cs) => {
                    for w in &exe.compute_set(cs).tiles {
                        for g in &w.groups {
                            for v in &g.vertices {
                                for o in &v.operands {
                                    touch(o.tensor.0 as usize, k);
                                }
                            }
                        }
                    }
                }
                StepKind::CrossReplica(t) | StepKind::RemoteCopy { tensor: t, .. } => {
                    touch(t.0 as usize, k)
                }
                StepKind::CrossReplicaTo { src, dst } => {
                    touch(src.0 as usize, k);
                    touch(dst.0 as usize, k);
                }
                StepKind::Exchange(ex) | StepKind::IpuCopy(ex) => {
                    for c in &exe.exchange(ex).copies {
                        touch(c.src_tensor.0 as usize, k);
                        touch(c.dst_tensor.0 as usize, k);
                    }
                }
                StepKind::StreamCopy(st) => touch(exe.streams[st.0 as usize].tensor.0 as usize, k),
            }
        }
        Liveness(live)
    }

    /// Whether tensor `t` holds its value after program step `step` ran (always-live
    /// tensors always do; a temporary from its first step to its last).
    pub fn live_at(&self, exe: &Executable, t: usize, step: Option<u32>) -> bool {
        if exe.tensors[t].kind.always_live() {
            return true;
        }
        match (self.0.get(t).copied().flatten(), step) {
            (Some((a, b)), Some(s)) => a <= s && s <= b,
            _ => false,
        }
    }

    /// The step range of tensor `t`.
    pub fn range(&self, t: usize) -> Option<(u32, u32)> {
        self.0.get(t).copied().flatten()
    }
}

/// The last program step executed in the current run that has a step index (syncs have
/// none; then the step before the sync counts).
pub fn current_step(engine: &Engine) -> Option<u32> {
    if !engine.in_run() {
        return None;
    }
    engine.last_step().and_then(|s| s.step).or_else(|| {
        // A sync ran last: the indexed step before the next one.
        engine.places().iter().rev().find_map(|p| match p {
            Place::Step { step: Some(s), .. } => s.checked_sub(1),
            _ => None,
        })
    })
}

/// Elements printed per dimension at the start and the end when a tensor is large.
const EDGE: usize = 3;
/// Tensors with more elements than this are summarised.
const FULL: usize = 256;

/// The elements of `t`, nested by its shape (`[[1, 2], [3, 4]]`), large dimensions
/// summarised with `...` as numpy does.
pub fn format_values(t: &Tensor) -> String {
    let dims = t.shape().dims().to_vec();
    let bytes = t.to_bytes();
    let es = t.dtype().size_bytes();
    let elem = |i: usize| display::element(t.dtype(), &bytes[i * es..(i + 1) * es]);
    if dims.is_empty() {
        return if bytes.is_empty() {
            "[]".into()
        } else {
            elem(0)
        };
    }
    let summarise = t.len() > FULL;
    let mut out = String::new();
    fn rec(
        out: &mut String,
        dims: &[usize],
        base: usize,
        depth: usize,
        summarise: bool,
        elem: &dyn Fn(usize) -> String,
    ) {
        let n = dims[0];
        let inner: usize = dims[1..].iter().product();
        let shown: Vec<Option<usize>> = if summarise && n > 2 * EDGE {
            (0..EDGE)
                .map(Some)
                .chain(std::iter::once(None))
                .chain((n - EDGE..n).map(Some))
                .collect()
        } else {
            (0..n).map(Some).collect()
        };
        out.push('[');
        for (k, i) in shown.iter().enumerate() {
            if k > 0 {
                if dims.len() > 1 {
                    out.push_str(",\n");
                    out.push_str(&" ".repeat(depth + 1));
                } else {
                    out.push_str(", ");
                }
            }
            match i {
                None => out.push_str("..."),
                Some(i) if dims.len() == 1 => out.push_str(&elem(base + i)),
                Some(i) => rec(
                    out,
                    &dims[1..],
                    base + i * inner,
                    depth + 1,
                    summarise,
                    elem,
                ),
            }
        }
        out.push(']');
    }
    rec(&mut out, &dims, 0, 0, summarise, &elem);
    out
}

/// Why a tensor or tile cannot be shown.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    /// The name is a transpose folded into its consumers.
    #[error("'{0}' is a transpose folded into its consumers (never materialised); print its input instead")]
    Folded(String),
    /// The name is an element-wise node computed inside another node's fused vertices.
    #[error(
        "'{name}' is computed inside the fused vertices of '{into}' and never stored; print \
         '{into}', or compile with --no-elementwise-fusion to keep every intermediate value"
    )]
    Fused {
        /// The node asked for.
        name: String,
        /// The fused root that computes it.
        into: String,
    },
    /// No tensor or IR node has the name.
    #[error("no tensor or IR node named '{0}'")]
    UnknownName(String),
    /// The tensor cannot be gathered from tile memory.
    #[error("'{0}' cannot be read")]
    Unreadable(String),
    /// The tile is not in the system.
    #[error("tile {tile} does not exist (the target has {tiles} tiles)")]
    NoSuchTile {
        /// The tile asked for.
        tile: TileId,
        /// Tiles per IPU.
        tiles: u32,
    },
}

/// `print NAME`: the tensor's type, where it lives, whether its bytes are valid now, and
/// its values.
pub fn print_tensor(
    engine: &Engine,
    liveness: &Liveness,
    name: &str,
) -> Result<String, InspectError> {
    let exe = engine.executable();
    let (id, node_shape) = match exe.value(name) {
        Some(v) => match v.tensor {
            Some(id) => (id, v.shape.clone()),
            None => {
                return Err(match &v.fused_into {
                    Some(into) => InspectError::Fused {
                        name: name.to_string(),
                        into: into.clone(),
                    },
                    None => InspectError::Folded(name.to_string()),
                })
            }
        },
        None => match exe.tensor_by_name(name) {
            Some((id, t)) => (id, t.shape.clone()),
            None => return Err(InspectError::UnknownName(name.to_string())),
        },
    };
    let t = engine
        .read_tensor(name)
        .ok_or_else(|| InspectError::Unreadable(name.to_string()))?;
    let tensor = exe.tensor(id);
    let mut s = format!(
        "{name}: {} {} (tensor '{}', {}, on {} tile(s))\n",
        t.dtype(),
        node_shape,
        tensor.name,
        kind_name(&tensor.kind),
        tensor.slices.len()
    );
    let step = current_step(engine);
    if !liveness.live_at(exe, id.0 as usize, step) {
        let range = liveness.range(id.0 as usize).map_or_else(
            || "never used".to_string(),
            |(a, b)| format!("live in program steps {a}-{b}"),
        );
        let now = step.map_or_else(
            || "before the run's first step".to_string(),
            |s| format!("after step {s}"),
        );
        let _ = writeln!(
            s,
            "note: a temporary {range}; {now} its bytes may hold another tensor"
        );
    }
    s.push_str(&format_values(&t));
    Ok(s)
}

fn kind_name(k: &TensorKind) -> &'static str {
    match k {
        TensorKind::Variable => "variable",
        TensorKind::RemoteVariable => "variable in a remote buffer",
        TensorKind::Constant => "constant",
        TensorKind::StreamBuffer { .. } => "stream buffer",
        TensorKind::Activation => "activation",
        TensorKind::Staging { .. } => "staging",
        TensorKind::Partials => "partials",
    }
}

/// `tile N`: the memory plan's bytes by category, the tensors on the tile (and which hold
/// live values now), the tile's flags.
pub fn tile_memory(
    engine: &Engine,
    liveness: &Liveness,
    tile: TileId,
) -> Result<String, InspectError> {
    let exe = engine.executable();
    let m = exe
        .memory
        .tiles
        .get(exe.tile_index(tile))
        .filter(|_| tile.tile() < exe.target.tiles)
        .ok_or(InspectError::NoSuchTile {
            tile,
            tiles: exe.target.tiles,
        })?;
    let cap = exe.memory.bytes_per_tile_capacity;
    let mut s = format!(
        "tile {tile}: {} of {cap} bytes ({:.1}%)\n",
        m.total,
        100.0 * m.total as f64 / cap.max(1) as f64
    );
    for (name, v) in [
        ("variables", m.variables),
        ("constants", m.constants),
        ("stream buffers", m.exchange_buffers),
        ("temporaries (peak)", m.temporaries),
        ("vertex state", m.vertex_state),
        ("code", m.code),
        ("  control code", m.control_code),
        ("  vertex code", m.vertex_code),
        ("  internal exchange", m.internal_exchange_code),
        ("  global exchange", m.global_exchange_code),
    ] {
        let _ = writeln!(s, "  {name:<20}{v:>10} B");
    }
    let step = current_step(engine);
    let mut rows = Vec::new();
    let mut live_bytes = 0u64;
    for (i, t) in exe.tensors.iter().enumerate() {
        let Some(slice) = t.slice_on(tile) else {
            continue;
        };
        let bytes = slice.num_elements() * t.dtype.size_bytes() as u64;
        let live = liveness.live_at(exe, i, step);
        if live {
            live_bytes += bytes;
        }
        rows.push((
            slice.offset,
            t.name.clone(),
            kind_name(&t.kind),
            bytes,
            live,
        ));
    }
    rows.sort();
    let held = engine.tile_bytes(tile).unwrap_or(0);
    let _ = writeln!(
        s,
        "tensors ({} live now: {live_bytes} B; the simulator holds {held} B of data for this tile):",
        rows.iter().filter(|r| r.4).count()
    );
    for (offset, name, kind, bytes, live) in rows {
        let _ = writeln!(
            s,
            "  @{offset:<8} {name:<32} {kind:<14} {bytes:>8} B{}",
            if live { "  live" } else { "" }
        );
    }
    let flags = engine
        .tile_flags()
        .into_iter()
        .find(|(t, _)| *t == tile)
        .map_or(FpSts::empty(), |(_, f)| f);
    let _ = write!(s, "$FP_STS: {}", fp_sts(flags));
    Ok(s)
}

/// `flags`: the OR of all tiles, then every tile that raised something.
pub fn flags(engine: &Engine) -> String {
    let mut s = format!("$FP_STS (all tiles): {}", fp_sts(engine.flags()));
    let tiles = engine.tile_flags();
    if tiles.is_empty() {
        s.push_str("\nno tile has raised a flag");
    }
    for (t, f) in tiles {
        let _ = write!(s, "\n  tile {t:<5} {}  ({})", fp_sts(f), flag_list(f));
    }
    s
}

/// `where`: the run, the cycle, and the enclosing program nodes down to the step.
pub fn where_am_i(engine: &Engine) -> String {
    let exe = engine.executable();
    let places = engine.places();
    if places.is_empty() {
        return format!(
            "not in a run ({} run(s) done), cycle {}",
            engine.runs(),
            engine.cycle()
        );
    }
    let stopped = !engine.in_run();
    let mut s = format!(
        "run {}{}, cycle {}",
        engine.runs(),
        if stopped {
            " (stopped by an error; the next step starts a new run)"
        } else {
            ""
        },
        engine.cycle()
    );
    for (depth, p) in places.iter().enumerate() {
        let line = match p {
            Place::Sequence {
                node,
                child,
                children,
            } => format!("sequence (node {node}): child {child} of {children}"),
            Place::Repeat {
                node,
                iteration,
                count,
            } => format!("repeat (node {node}): iteration {iteration} of {count}"),
            Place::Pipeline { node, tick, ticks } => {
                format!("pipeline (node {node}): tick {tick} of {ticks}")
            }
            Place::If { node, then } => format!(
                "if (node {node}): {} branch",
                if *then { "then" } else { "else" }
            ),
            Place::Step { node, step, leaf } => format!(
                "{}: {}  (node {node})",
                if stopped { "stopped in" } else { "next" },
                describe_step(
                    exe,
                    &NextStep {
                        node: *node,
                        step: *step,
                        leaf: *leaf
                    }
                )
            ),
        };
        let _ = write!(s, "\n#{depth:<2} {}{line}", "  ".repeat(depth));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_nest_and_summarise() {
        let t = Tensor::f32([2, 3], vec![1.0, 2.5, -3.0, 0.1, 0.0, 7.0]).unwrap();
        assert_eq!(format_values(&t), "[[1, 2.5, -3],\n [0.1, 0, 7]]");
        let big = Tensor::i32([1000], (0..1000).collect()).unwrap();
        assert_eq!(format_values(&big), "[0, 1, 2, ..., 997, 998, 999]");
        let b = Tensor::bool([], vec![true]).unwrap();
        assert_eq!(format_values(&b), "true");
    }
}
