//! Lanes: the supersteps of independent lowerings held back and emitted interleaved, the
//! `i`-th of every lane as one superstep (PopLibs' `reduceMany`, which reduces several
//! tensors in the same compute sets).

use super::Lowerer;
use crate::executable::TileWork;
use crate::lower::core::copies::Copies;
use ipusim_ir::NodeId;

/// A superstep held back while lanes are open.
struct Pending {
    name: String,
    node: Option<NodeId>,
    copies: Copies,
    tiles: Vec<TileWork>,
}

/// The supersteps of each open lane, and the lane being lowered.
pub(super) struct Lanes {
    current: usize,
    steps: Vec<Vec<Pending>>,
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
    /// nothing but supersteps.
    pub fn begin_lanes(&mut self) {
        self.lanes = Some(Lanes {
            current: 0,
            steps: vec![Vec::new()],
        });
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
        let mut lanes: Vec<_> = lanes.steps.into_iter().map(Vec::into_iter).collect();
        for _ in 0..n {
            let parts: Vec<Pending> = lanes.iter_mut().filter_map(Iterator::next).collect();
            let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
            let name = joined_name(&names);
            let node = parts.first().and_then(|p| p.node);
            let mut copies = Copies::default();
            let mut tiles = Vec::new();
            for p in parts {
                copies.append(p.copies);
                tiles.extend(p.tiles);
            }
            self.superstep(&name, node, copies, tiles);
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
