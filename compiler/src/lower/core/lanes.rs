//! Lanes: the supersteps of independent lowerings held back and emitted interleaved, the
//! `i`-th of every lane as one superstep (PopLibs' `reduceMany`, which reduces several
//! tensors in the same compute sets).
//!
//! As `reduceMany` does, each lane's reduction plans its tiles' work for a quota of the
//! worker contexts (P1 lib/popops/reduction/ReductionConnection.hpp,
//! `ReduceManyInfo::assignWorkers`, at 7eac0f2: `⌈workers / lanes⌉`, or 2 when there are
//! more lanes than workers), and the lanes' vertices share a tile's workers: lane `k`'s
//! worker `w` runs on worker `(k · quota + w) mod workers`, its reduction vertices side by
//! side with the other lanes' (`ipusim_exe::cycles::groups_cycles`).

use super::Lowerer;
use crate::executable::TileWork;
use crate::lower::core::copies::Copies;
use ipusim_exe::workers::is_split;
use ipusim_ir::NodeId;

/// A superstep held back while lanes are open.
struct Pending {
    name: String,
    node: Option<NodeId>,
    copies: Copies,
    tiles: Vec<TileWork>,
}

/// The supersteps of each open lane, the lane being lowered, and how many lanes there are.
pub(super) struct Lanes {
    current: usize,
    steps: Vec<Vec<Pending>>,
    count: usize,
}

impl Lanes {
    /// Holds back a superstep of the lane being lowered.
    pub(super) fn hold(
        &mut self,
        name: &str,
        node: Option<NodeId>,
        copies: Copies,
        tiles: Vec<TileWork>,
    ) {
        self.steps[self.current].push(Pending {
            name: name.to_string(),
            node,
            copies,
            tiles,
        });
    }
}

impl Lowerer<'_> {
    /// Opens lanes: the supersteps of the lowerings that follow are held back, one lane per
    /// lowering ([`Lowerer::next_lane`]), and [`Lowerer::end_lanes`] emits the `i`-th
    /// superstep of every lane as one (PopLibs' `reduceMany`, which reduces several tensors
    /// in the same compute sets). The lowerings must be independent of each other and emit
    /// nothing but supersteps. `count` is the number of lanes that will be opened.
    pub fn begin_lanes(&mut self, count: usize) {
        self.lanes = Some(Lanes {
            current: 0,
            steps: vec![Vec::new()],
            count: count.max(1),
        });
    }

    /// The worker contexts a reduction plans a tile's work for: all of them, or a lane's
    /// quota while lanes are open (the module's description).
    pub fn reduction_workers(&self) -> usize {
        let nw = self.target().worker_contexts.max(1) as usize;
        match &self.lanes {
            Some(lanes) => quota(nw, lanes.count),
            None => nw,
        }
    }

    /// While lanes are open, holds an empty superstep in the lane being lowered, so that the
    /// lanes' later supersteps stay aligned when this lane skips a stage another may have (a
    /// reduction's second stage on its tiles); else nothing.
    pub fn lane_gap(&mut self) {
        if let Some(lanes) = &mut self.lanes {
            lanes.hold("", None, Copies::default(), Vec::new());
        }
    }

    /// Starts the next lane.
    pub fn next_lane(&mut self) {
        if let Some(lanes) = &mut self.lanes {
            lanes.steps.push(Vec::new());
            lanes.current = lanes.steps.len() - 1;
        }
    }

    /// Closes the lanes, emitting their supersteps interleaved: the `i`-th of every lane as
    /// one superstep, named by the lanes' names (their common `/`-separated prefix, then the
    /// rest of each joined by `+`).
    pub fn end_lanes(&mut self) {
        let Some(lanes) = self.lanes.take() else {
            return;
        };
        let n = lanes.steps.iter().map(Vec::len).max().unwrap_or(0);
        let nw = self.target().worker_contexts.max(1) as usize;
        let quota = quota(nw, lanes.count);
        let mut lanes: Vec<_> = lanes.steps.into_iter().map(Vec::into_iter).collect();
        for _ in 0..n {
            let parts: Vec<(usize, Pending)> = lanes
                .iter_mut()
                .enumerate()
                .filter_map(|(k, lane)| lane.next().map(|p| (k, p)))
                .filter(|(_, p)| !p.tiles.is_empty() || !p.copies.is_empty())
                .collect();
            let names: Vec<&str> = parts.iter().map(|(_, p)| p.name.as_str()).collect();
            let name = joined_name(&names);
            let node = parts.first().and_then(|(_, p)| p.node);
            let mut copies = Copies::default();
            let mut tiles = Vec::new();
            for (k, p) in parts {
                copies.append(p.copies);
                for mut t in p.tiles {
                    shift_workers(&mut t, k * quota, nw);
                    tiles.push(t);
                }
            }
            self.superstep(&name, node, copies, tiles);
        }
    }
}

/// `reduceMany`'s quota of `workers` for one of `lanes` reductions.
fn quota(workers: usize, lanes: usize) -> usize {
    if lanes > workers {
        2.min(workers)
    } else {
        workers.div_ceil(lanes.max(1))
    }
}

/// Moves the vertices of `t` that have a worker of their own `base` workers on (modulo
/// `workers`).
fn shift_workers(t: &mut TileWork, base: usize, workers: usize) {
    if base == 0 {
        return;
    }
    for v in t.groups.iter_mut().flat_map(|g| g.vertices.iter_mut()) {
        if !is_split(v) {
            v.worker = ((v.worker as usize + base) % workers) as u8;
        }
    }
}

/// `a/b/x` and `a/b/y` as `a/b/x+y`: the names' common prefix up to a `/`, then the rest
/// of each joined by `+` (one name as it is).
fn joined_name(names: &[&str]) -> String {
    let Some((first, rest)) = names.split_first() else {
        return String::new();
    };
    if rest.is_empty() {
        return first.to_string();
    }
    let mut cut = first.len();
    for n in rest {
        let mut common = first
            .bytes()
            .zip(n.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        while !first.is_char_boundary(common) {
            common -= 1;
        }
        cut = cut.min(first[..common].rfind('/').map_or(0, |i| i + 1));
    }
    let tails: Vec<&str> = names.iter().map(|n| &n[cut..]).collect();
    format!("{}{}", &first[..cut], tails.join("+"))
}
