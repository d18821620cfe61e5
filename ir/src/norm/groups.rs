//! Group norm's per-group statistics as ops, shared by its decomposition
//! ([`super::decompose`]) and its backward pass ([`super::grad`]): a `[N, C, …]` value summed
//! per image and channel over the spatial dimensions, then over each group's channels
//! (`[N, C, 1…]` sums reshaped to `[N, G, C/G]`), and a `[N, G, 1]` statistic broadcast back
//! to every channel of its group (`[N, C, 1…]`). Only the `[N, C]` sums are reshaped: the
//! full-size value is read as it is held (a channel-grouped feature map in its own order).

use crate::dtype::Shape;
use crate::error::IrError;
use crate::graph::NodeId;
use crate::op::Op;

/// Adds a node `part` of `op` over `inputs` to the graph being built; returns it.
pub(crate) type Add<'a> = dyn FnMut(&str, Op, &[NodeId]) -> Result<NodeId, IrError> + 'a;

/// The sums of `v` (logical `dims`, `[N, C, …]`) per image over each of `groups` groups of
/// channels: `[N, G, 1]`, in `v`'s type (an FP32 `v` for FP32 sums), the nodes named
/// `{what}_channel_sums`, `{what}_channel_sums_by_group` and `{what}_sum`.
pub(crate) fn group_sums(
    add: &mut Add<'_>,
    what: &str,
    v: NodeId,
    dims: &[usize],
    groups: usize,
) -> Result<NodeId, IrError> {
    let (n, c) = (dims[0], dims[1]);
    let sums = add(
        &format!("{what}_channel_sums"),
        Op::ReduceSum {
            axes: (2..dims.len()).collect(),
            keep_dims: true,
        },
        &[v],
    )?;
    let by_group = add(
        &format!("{what}_channel_sums_by_group"),
        Op::Reshape {
            shape: Shape(vec![n, groups, c / groups]),
        },
        &[sums],
    )?;
    add(
        &format!("{what}_sum"),
        Op::ReduceSum {
            axes: vec![2],
            keep_dims: true,
        },
        &[by_group],
    )
}

/// A `[N, G, 1]` statistic `v` for every channel of its group, `[N, C, 1…]` for a value of
/// logical `dims`: the nodes `{what}_b` (the broadcast) and `name` (the reshape).
pub(crate) fn per_channel(
    add: &mut Add<'_>,
    (what, name): (&str, &str),
    v: NodeId,
    dims: &[usize],
    groups: usize,
) -> Result<NodeId, IrError> {
    let (n, c) = (dims[0], dims[1]);
    let wide = add(
        &format!("{what}_b"),
        Op::Broadcast {
            shape: Shape(vec![n, groups, c / groups]),
        },
        &[v],
    )?;
    let mut per_image_channel = vec![n, c];
    per_image_channel.extend(std::iter::repeat_n(1, dims.len() - 2));
    add(
        name,
        Op::Reshape {
            shape: Shape(per_image_channel),
        },
        &[wide],
    )
}
