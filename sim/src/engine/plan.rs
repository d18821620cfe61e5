//! What the engine works out once, when it is built: the executable checked against every
//! assumption the execution makes (so that running it never panics), and the per-step
//! figures that do not depend on values — each compute set's tiles and cycles per tile
//! (from `ipusim_compiler::cycles` on its vertices), each exchange's cycles per tile and
//! its byte moves (sources gathered, writes grouped by destination tile), each stream copy's
//! cycles.

use super::error::EngineError;
use super::memory::{check_tensor, TileIndex};
use crate::codelets::{amp, block, map, operands};
use ipusim_compiler::codelets::{Codelet, VertexParams};
use ipusim_compiler::cycles;
use ipusim_compiler::executable::{Executable, StreamDirection};
use ipusim_ir::DType;

/// A compute set, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct ComputeSetPlan {
    /// Dense tile index of each `TileWork`, ascending.
    pub dense: Vec<usize>,
    /// Cycles of each `TileWork` ([`cycles::tile_work_cycles`]).
    pub tile_cycles: Vec<u64>,
    /// The slowest tile's cycles ([`cycles::compute_set_cycles`]).
    pub cycles: u64,
    /// The sum of `tile_cycles`: how much host work the compute set is, to decide whether
    /// handing its tiles to a pool pays.
    pub work: u64,
}

/// An exchange, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct ExchangePlan {
    /// [`cycles::exchange_cycles`].
    pub cycles: u64,
    /// [`cycles::exchange_tile_cycles`].
    pub tile_cycles: Vec<(u32, u64)>,
    /// Bytes moved (every destination counted).
    pub bytes: u64,
    /// Bytes of all sources: the staging buffer every source is read into first.
    pub source_bytes: usize,
    /// The sources, in copy order: (dense source tile, source offset → staging offset),
    /// adjacent copies merged.
    pub gather: Vec<(usize, Piece)>,
    /// Dense destination tiles, ascending.
    pub dst_tiles: Vec<usize>,
    /// For each of `dst_tiles`, its writes (staging offset → tile offset) in copy order,
    /// adjacent ones merged. Tiles are disjoint, so they may be written in parallel.
    pub scatter: Vec<Vec<Piece>>,
}

/// One contiguous byte move of an exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Offset read from.
    pub from: usize,
    /// Offset written to.
    pub to: usize,
    /// Bytes.
    pub len: usize,
}

impl Piece {
    /// Whether `p` starts where `self` ends in both memories (one move does both, with the
    /// same bytes landing in the same places in the same order).
    fn continued_by(&self, p: &Piece) -> bool {
        self.from + self.len == p.from && self.to + self.len == p.to
    }

    /// Appends `p` to `pieces`, extending the last piece when `p` continues it.
    fn push(pieces: &mut Vec<Piece>, p: Piece) {
        match pieces.last_mut() {
            Some(last) if last.continued_by(&p) => last.len += p.len,
            _ => pieces.push(p),
        }
    }
}

/// The whole plan.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub compute_sets: Vec<ComputeSetPlan>,
    pub exchanges: Vec<ExchangePlan>,
    /// Cycles of one stream copy of each stream.
    pub stream_cycles: Vec<u64>,
    /// Every tensor's element type ([`operands::dtypes`]).
    pub dtypes: Vec<DType>,
}

impl Plan {
    /// Checks `exe` and plans it. `sizes` are the bytes of each dense tile.
    pub fn new(exe: &Executable, index: &TileIndex, sizes: &[usize]) -> Result<Plan, EngineError> {
        for t in &exe.tensors {
            check_tensor(t, index, sizes)?;
        }
        let compute_sets = exe
            .compute_sets
            .iter()
            .map(|cs| plan_compute_set(exe, cs, index, sizes))
            .collect::<Result<_, _>>()?;
        let exchanges = exe
            .exchanges
            .iter()
            .map(|ex| plan_exchange(exe, ex, index, sizes))
            .collect::<Result<_, _>>()?;
        let mut stream_cycles = Vec::with_capacity(exe.streams.len());
        for s in &exe.streams {
            let t = exe.tensors.get(s.tensor.0 as usize).ok_or_else(|| {
                EngineError::invalid(format!("stream '{}' names tensor {}", s.name, s.tensor.0))
            })?;
            if t.size_bytes() != s.bytes_per_micro_batch || t.dtype != s.dtype {
                return Err(EngineError::invalid(format!(
                    "stream '{}' moves {} bytes of {}, its tensor '{}' holds {} bytes of {}",
                    s.name,
                    s.bytes_per_micro_batch,
                    s.dtype,
                    t.name,
                    t.size_bytes(),
                    t.dtype
                )));
            }
            if s.direction == StreamDirection::HostToDevice
                && t.slices.is_empty()
                && t.num_elements() > 0
            {
                return Err(EngineError::invalid(format!(
                    "infeed '{}' lands on no tile",
                    s.name
                )));
            }
            stream_cycles.push(cycles::stream_copy_cycles(
                &exe.target,
                s.bytes_per_micro_batch,
            ));
        }
        for iv in &exe.initial_values {
            if exe.tensors.get(iv.tensor.0 as usize).is_none() {
                return Err(EngineError::invalid(format!(
                    "an initial value names tensor {}",
                    iv.tensor.0
                )));
            }
        }
        Ok(Plan {
            compute_sets,
            exchanges,
            stream_cycles,
            dtypes: operands::dtypes(&exe.tensors),
        })
    }
}

fn plan_compute_set(
    exe: &Executable,
    cs: &ipusim_compiler::executable::ComputeSet,
    index: &TileIndex,
    sizes: &[usize],
) -> Result<ComputeSetPlan, EngineError> {
    let nw = exe.target.worker_contexts;
    let mut dense = Vec::with_capacity(cs.tiles.len());
    let mut tile_cycles = Vec::with_capacity(cs.tiles.len());
    for work in &cs.tiles {
        let d = index.require(work.tile, &|| format!("compute set '{}' has work", cs.name))?;
        if dense.last().is_some_and(|&last| last >= d) {
            return Err(EngineError::invalid(format!(
                "compute set '{}' lists tile {} out of order or twice",
                cs.name, work.tile
            )));
        }
        dense.push(d);
        let mut vertex = 0usize;
        for group in &work.groups {
            for v in &group.vertices {
                let at = || {
                    format!(
                        "compute set '{}', tile {}, vertex {vertex} ({})",
                        cs.name,
                        work.tile,
                        group.codelet.full_name()
                    )
                };
                if u32::from(v.worker) >= nw {
                    return Err(EngineError::invalid(format!(
                        "{}: worker {} of {nw}",
                        at(),
                        v.worker
                    )));
                }
                check_vertex(&group.codelet, v, &exe.tensors, sizes[d])
                    .map_err(|m| EngineError::invalid(format!("{}: {m}", at())))?;
                vertex += 1;
            }
        }
        tile_cycles.push(cycles::tile_work_cycles(&exe.target, work));
    }
    Ok(ComputeSetPlan {
        cycles: cycles::compute_set_cycles(&exe.target, cs),
        work: tile_cycles.iter().sum(),
        dense,
        tile_cycles,
    })
}

/// Checks one vertex: its operands against the tile memory, then its codelet's contract.
fn check_vertex(
    codelet: &Codelet,
    v: &ipusim_compiler::executable::Vertex,
    tensors: &[ipusim_compiler::executable::Tensor],
    mem_len: usize,
) -> Result<(), String> {
    let elementwise = matches!(v.params, VertexParams::Map(_));
    operands::check(v, tensors, mem_len, elementwise)?;
    match (codelet, &v.params) {
        (Codelet::AmpMatMul { .. }, VertexParams::Amp(p)) => amp::check(codelet, p, v, tensors),
        (
            Codelet::Reduce { .. }
            | Codelet::ArgMax { .. }
            | Codelet::Softmax { .. }
            | Codelet::SoftmaxCrossEntropy { .. },
            VertexParams::Block(p),
        ) => block::check(codelet, p, v, tensors),
        (_, VertexParams::Map(_) | VertexParams::Fill { .. }) => map::check(codelet, v, tensors),
        (_, p) => Err(format!(
            "has {} parameters",
            crate::codelets::params_name(p)
        )),
    }
}

fn plan_exchange(
    exe: &Executable,
    ex: &ipusim_compiler::executable::Exchange,
    index: &TileIndex,
    sizes: &[usize],
) -> Result<ExchangePlan, EngineError> {
    let mut gather: Vec<(usize, Piece)> = Vec::new();
    // (dense destination tile, copy order, piece), sorted by tile then order below.
    let mut writes: Vec<(usize, usize, Piece)> = Vec::new();
    let mut source_bytes = 0usize;
    for (i, c) in ex.copies.iter().enumerate() {
        let what = || format!("exchange '{}', copy {i}", ex.name);
        let bytes = u64::from(c.bytes);
        let s = index.require(c.src_tile, &what)?;
        let (so, se) = (u64::from(c.src_offset), u64::from(c.src_offset) + bytes);
        if se as usize > sizes[s] {
            return Err(EngineError::invalid(format!(
                "{}: source bytes [{so}, {se}) outside tile {}",
                what(),
                c.src_tile
            )));
        }
        let read = Piece {
            from: so as usize,
            to: source_bytes,
            len: c.bytes as usize,
        };
        match gather.last_mut() {
            Some((tile, last)) if *tile == s && last.continued_by(&read) => last.len += read.len,
            _ => gather.push((s, read)),
        }
        for d in &c.dsts {
            let t = index.require(d.tile, &what)?;
            let (o, e) = (u64::from(d.offset), u64::from(d.offset) + bytes);
            if e as usize > sizes[t] {
                return Err(EngineError::invalid(format!(
                    "{}: destination bytes [{o}, {e}) outside tile {}",
                    what(),
                    d.tile
                )));
            }
            let write = Piece {
                from: source_bytes,
                to: o as usize,
                len: c.bytes as usize,
            };
            writes.push((t, writes.len(), write));
        }
        source_bytes += c.bytes as usize;
    }
    writes.sort_unstable_by_key(|&(t, order, _)| (t, order));
    let (mut dst_tiles, mut scatter): (Vec<usize>, Vec<Vec<Piece>>) = (Vec::new(), Vec::new());
    for (t, _, p) in writes {
        if dst_tiles.last() != Some(&t) {
            dst_tiles.push(t);
            scatter.push(Vec::new());
        }
        if let Some(pieces) = scatter.last_mut() {
            Piece::push(pieces, p);
        }
    }
    Ok(ExchangePlan {
        cycles: cycles::exchange_cycles(&exe.target, ex),
        tile_cycles: cycles::exchange_tile_cycles(&exe.target, ex),
        bytes: ex.total_bytes(),
        source_bytes,
        gather,
        dst_tiles,
        scatter,
    })
}

/// The condition tensor of an `If` must be a Bool with element 0 on some tile.
pub(crate) fn check_condition(
    exe: &Executable,
    t: ipusim_compiler::executable::TensorId,
) -> Result<(), EngineError> {
    let tensor = exe
        .tensors
        .get(t.0 as usize)
        .ok_or_else(|| EngineError::invalid(format!("an If names tensor {}", t.0)))?;
    let has_first = tensor
        .slices
        .iter()
        .any(|s| s.intervals.iter().any(|iv| iv.begin == 0 && iv.end > 0));
    if tensor.dtype != DType::Bool || !has_first {
        return Err(EngineError::invalid(format!(
            "the condition '{}' of an If must be a Bool tensor with its first element on a tile",
            tensor.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_compiler::executable::{ByteCopy, CopyDst, Exchange, TensorId};
    use ipusim_compiler::{compile, CompileOptions, Target};
    use ipusim_ir::{GraphBuilder, Init};

    /// A matmul and a transpose spread over 16 tiles: exchanges with broadcasts and many
    /// small copies.
    fn executable() -> Executable {
        let mut b = GraphBuilder::new();
        let init = |seed| Init::Uniform {
            low: -1.0,
            high: 1.0,
            seed,
        };
        let x = b.variable("x", DType::F16, [48, 40], init(1)).unwrap();
        let w = b.variable("w", DType::F16, [40, 24], init(2)).unwrap();
        let y = b.matmul(x, w).unwrap();
        let r = b.relu(y).unwrap();
        b.outfeed("r", r).unwrap();
        let mut target = Target::mk2();
        target.tiles = 16;
        compile(&b.finish(), &target, &CompileOptions::default()).unwrap()
    }

    /// Distinct bytes in every tile.
    fn memories(sizes: &[usize]) -> Vec<Vec<u8>> {
        let mut x = 1u32;
        sizes
            .iter()
            .map(|&n| {
                (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        (x >> 16) as u8
                    })
                    .collect()
            })
            .collect()
    }

    /// The exchange's meaning: every source read first, then every destination written in
    /// copy order.
    fn reference(ex: &Exchange, index: &TileIndex, mems: &mut [Vec<u8>]) {
        let d = |t| index.get(t).unwrap();
        let read: Vec<Vec<u8>> = (ex.copies.iter())
            .map(|c| {
                let o = c.src_offset as usize;
                mems[d(c.src_tile)][o..o + c.bytes as usize].to_vec()
            })
            .collect();
        for (c, bytes) in ex.copies.iter().zip(read) {
            for dst in &c.dsts {
                let o = dst.offset as usize;
                mems[d(dst.tile)][o..o + bytes.len()].copy_from_slice(&bytes);
            }
        }
    }

    /// The plan applied as the engine applies it.
    fn apply(plan: &ExchangePlan, mems: &mut [Vec<u8>]) {
        let mut staging = vec![0u8; plan.source_bytes];
        for &(s, p) in &plan.gather {
            staging[p.to..p.to + p.len].copy_from_slice(&mems[s][p.from..p.from + p.len]);
        }
        for (&t, pieces) in plan.dst_tiles.iter().zip(&plan.scatter) {
            for p in pieces {
                mems[t][p.to..p.to + p.len].copy_from_slice(&staging[p.from..p.from + p.len]);
            }
        }
    }

    fn check(exe: &Executable, ex: &Exchange, index: &TileIndex, sizes: &[usize]) {
        let plan = plan_exchange(exe, ex, index, sizes).unwrap();
        let writes: usize = ex.copies.iter().map(|c| c.dsts.len()).sum();
        assert!(plan.gather.len() <= ex.copies.len());
        assert!(plan.scatter.iter().map(Vec::len).sum::<usize>() <= writes);
        assert!(plan.dst_tiles.windows(2).all(|w| w[0] < w[1]));
        let (mut want, mut got) = (memories(sizes), memories(sizes));
        reference(ex, index, &mut want);
        apply(&plan, &mut got);
        assert_eq!(got, want, "exchange '{}'", ex.name);
    }

    #[test]
    fn exchange_plans_move_the_bytes_the_copies_say() {
        let exe = executable();
        let (index, sizes) = TileIndex::new(&exe).unwrap();
        assert!(!exe.exchanges.is_empty());
        for ex in &exe.exchanges {
            check(&exe, ex, &index, &sizes);
        }
        // Destinations overlapping sources (a swap between two tiles, a shift on one tile,
        // then a copy overwriting part of the first): still read-all-then-write.
        let (a, b) = (index.tile(0), index.tile(1));
        let copy = |src_tile, src_offset, bytes, dsts: &[(u32, u32)]| ByteCopy {
            src_tile,
            src_offset,
            bytes,
            src_tensor: TensorId(0),
            dst_tensor: TensorId(0),
            dsts: dsts
                .iter()
                .map(|&(tile, offset)| CopyDst { tile, offset })
                .collect(),
        };
        let ex = Exchange {
            name: "overlapping".into(),
            node: None,
            copies: vec![
                copy(a, 0, 8, &[(b, 0)]),
                copy(b, 0, 8, &[(a, 0), (a, 16)]),
                copy(a, 8, 8, &[(a, 12)]),
                copy(a, 16, 4, &[(a, 20)]),
            ],
            cycles: 0,
        };
        check(&exe, &ex, &index, &sizes);
    }
}
