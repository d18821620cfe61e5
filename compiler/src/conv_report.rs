//! The convolution part of the compile report: one row per convolution or pooling layer pass
//! as a CNN user reads it — the vertex PopLibs would use, the partition over tiles, cycles,
//! FLOPs and the achieved fraction of the AMP peak.

use crate::codelets::{Codelet, VertexParams};
use crate::executable::Executable;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One convolution or pooling layer pass of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvLayerReport {
    /// The compute set (the IR node's name).
    pub name: String,
    /// `Forward`, `InputGrad`, `WeightGrad`, `MaxPool` or `MaxPoolGrad`.
    pub pass: String,
    /// The vertex PopLibs would use and our estimator follows (`ConvPartialnx1`,
    /// `ConvPartial1x1Out` for the weight gradient, `MaxPooling`).
    pub vertex: String,
    /// How the output is partitioned over tiles: groups × batch × channels × rows (the
    /// weight gradient: groups × 1 × output channels × input channels); the columns'
    /// split is `column_split`.
    pub partition: [u32; 4],
    /// Splits of the reduction summed across tiles afterwards: input channels (`Forward`),
    /// output channels (`InputGrad`), the batch and the rows and columns of the output field
    /// (`WeightGrad`); 1 when not split.
    #[serde(default = "one")]
    pub reduction_split: u32,
    /// Splits of the output's columns (`Forward`, `InputGrad`; 1 for the weight gradient,
    /// whose field splits count in `reduction_split`, and for pools).
    #[serde(default = "one")]
    pub column_split: u32,
    /// Serial phases over the output channels (PopLibs' `outChanSplit.serial`): the pass
    /// ran as this many compute sets one after the other (`NAME/serialP`), each partitioned
    /// as `partition` over its range of the channels; 1 when not split serially.
    #[serde(default = "one")]
    pub serial_split: u32,
    /// Tiles with work.
    pub tiles: u32,
    /// Cycles of one execution (one micro-batch; a split reduction: its partials, not their
    /// summation; a serial split: every phase's).
    pub cycles: u64,
    /// FLOPs of one execution (2 per multiply-accumulate; 0 for pools).
    pub flops: u64,
    /// FLOPs over what the AMP units of the layer's tiles could do in its cycles.
    pub amp_fraction: f64,
}

fn one() -> u32 {
    1
}

/// The per-layer rows of the window compute sets of `exe`.
pub(crate) fn conv_rows(exe: &Executable) -> Vec<ConvLayerReport> {
    let mut rows = Vec::new();
    // Each row's AMP capacity (FLOPs), beside it.
    let mut capacities: Vec<f64> = Vec::new();
    for (i, cs) in exe.compute_sets.iter().enumerate() {
        let Some(first) = cs.tiles.first().and_then(|t| t.groups.first()) else {
            continue;
        };
        let (pass, vertex, amp_types) = match &first.codelet {
            Codelet::Conv {
                pass,
                input,
                partials,
                method,
                ..
            } => (
                format!("{pass:?}"),
                method.vertex_name(*pass),
                Some((*input, *partials)),
            ),
            Codelet::MaxPool { grad, .. } => (
                if *grad { "MaxPoolGrad" } else { "MaxPool" }.to_string(),
                "MaxPooling",
                None,
            ),
            _ => continue,
        };
        let params: Vec<_> = cs
            .tiles
            .iter()
            .filter_map(
                |t| match t.groups.first().and_then(|g| g.vertices.first()) {
                    Some(v) => match &v.params {
                        VertexParams::Window(p) => Some(p.params()),
                        _ => None,
                    },
                    None => None,
                },
            )
            .collect();
        let Some(p0) = params.first() else { continue };
        let distinct = |f: &dyn Fn(&crate::codelets::WindowParams) -> (u32, u32)| {
            params.iter().map(f).collect::<BTreeSet<_>>().len() as u32
        };
        let weight_grad = pass == "WeightGrad";
        let partition = [
            params
                .iter()
                .map(|p| p.group)
                .collect::<BTreeSet<_>>()
                .len() as u32,
            if weight_grad {
                1
            } else {
                distinct(&|p| p.batch)
            },
            distinct(&|p| p.out_channels),
            if weight_grad {
                distinct(&|p| p.in_channels)
            } else {
                distinct(&|p| p.out_rows)
            },
        ];
        let reduction_split = match pass.as_str() {
            "WeightGrad" => params
                .iter()
                .map(|p| (p.batch, p.out_rows, p.out_cols))
                .collect::<BTreeSet<_>>()
                .len() as u32,
            "Forward" | "InputGrad" => distinct(&|p| p.in_channels),
            _ => 1,
        };
        let column_split = match pass.as_str() {
            "Forward" | "InputGrad" => distinct(&|p| p.out_cols),
            _ => 1,
        };
        let g = &p0.geometry;
        let macs = [g.n, g.o, g.oh, g.ow, g.c / g.groups.max(1), g.kh, g.kw]
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(u64::from(d)));
        let flops = if amp_types.is_some() {
            macs.saturating_mul(2)
        } else {
            0
        };
        let cycles = exe
            .estimate
            .compute_sets
            .get(i)
            .map_or(cs.cycles, |c| c.cycles_per_execution);
        // What the AMP units of the compute set's tiles could do in its cycles (FLOPs).
        let capacity = match amp_types {
            Some((input, partials)) => {
                2.0 * f64::from(exe.target.amp(input, partials).macs_per_cycle())
                    * cs.tiles.len() as f64
                    * cycles as f64
            }
            None => 0.0,
        };
        let fraction = |capacity: f64| {
            if capacity > 0.0 {
                flops as f64 / capacity
            } else {
                0.0
            }
        };
        let (name, phase) = serial_phase(&cs.name);
        // A serial split's later phases join its first's row: their cycles and their
        // capacity, which the AMP fraction is over.
        if let Some(prev) = rows.last_mut().filter(|r: &&mut ConvLayerReport| {
            phase > 0 && r.name == name && r.pass == pass && r.serial_split == phase
        }) {
            let total = capacities.last_mut().map_or(capacity, |c| {
                *c += capacity;
                *c
            });
            prev.serial_split += 1;
            prev.tiles = prev.tiles.max(cs.tiles.len() as u32);
            prev.cycles += cycles;
            prev.amp_fraction = fraction(total);
            continue;
        }
        capacities.push(capacity);
        rows.push(ConvLayerReport {
            name,
            pass,
            vertex: vertex.to_string(),
            partition,
            reduction_split,
            column_split,
            serial_split: 1,
            tiles: cs.tiles.len() as u32,
            cycles,
            flops,
            amp_fraction: fraction(capacity),
        });
    }
    rows
}

/// A compute set's layer name and serial phase: `NAME/serialP[/partials]` is phase `P` of
/// `NAME[/partials]`; any other name is phase 0 of itself.
fn serial_phase(name: &str) -> (String, u32) {
    let parsed = name.rsplit_once("/serial").and_then(|(base, rest)| {
        let (digits, tail) = rest.split_once('/').map_or((rest, ""), |(d, t)| (d, t));
        let phase = digits.parse::<u32>().ok()?;
        let tail = if tail.is_empty() {
            String::new()
        } else {
            format!("/{tail}")
        };
        Some((format!("{base}{tail}"), phase))
    });
    parsed.unwrap_or_else(|| (name.to_string(), 0))
}
