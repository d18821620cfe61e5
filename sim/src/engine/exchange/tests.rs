//! Exchange plans against the meaning of an exchange (every source read, then every
//! destination written in copy order), on one host thread and in parallel, with the writes
//! applied at once or left to each tile, with the sources gathered early by tile or not, on
//! the exchanges of a compiled program and on one whose destinations overlap its sources.

use super::*;
use crate::engine::memory::TileMem;
use crate::numerics::FpSts;
use ipusim_compiler::{compile, CompileOptions, Target};
use ipusim_exe::executable::{ByteCopy, ComputeSet, CopyDst, TensorId};
use ipusim_exe::system::TileId;
use ipusim_ir::{DType, GraphBuilder, Init};

/// A matmul and a ReLU spread over 16 tiles: exchanges with broadcasts and many small
/// copies.
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

/// The exchange's meaning.
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

/// Tiles whose memories hold `mems`.
fn tiles_holding(mems: &[Vec<u8>]) -> Vec<TileState> {
    (mems.iter())
        .map(|m| {
            let mut mem = TileMem::zeroed(m.len());
            mem.bytes_mut().copy_from_slice(m);
            TileState {
                mem,
                rngs: Vec::new(),
                sts: FpSts::empty(),
            }
        })
        .collect()
}

/// `ex` planned and applied to tiles holding `mems`, by every kind of workers (the
/// parallel ones taking the parallel path: sources gathered in runs, destination tiles
/// written in parallel).
fn applied(
    exe: &Executable,
    ex: &Exchange,
    index: &TileIndex,
    sizes: &[usize],
    mems: &[Vec<u8>],
) -> Vec<Vec<Vec<u8>>> {
    let mut plan = ExchangePlan::new(exe, ex, index, sizes).unwrap();
    let writes: usize = ex.copies.iter().map(|c| c.dsts.len()).sum();
    assert!(plan.gather.len() <= ex.copies.len());
    assert!(plan.scatter.iter().map(Vec::len).sum::<usize>() <= writes);
    assert!(plan.dst_tiles.windows(2).all(|p| p[0] < p[1]));
    plan.bytes = plan.bytes.max(PARALLEL_BYTES);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    [Workers::Caller, Workers::Global, Workers::Pool(pool)]
        .iter()
        .map(|workers| {
            let mut tiles = tiles_holding(mems);
            // A staging buffer left larger and full by an earlier exchange.
            let mut staging = vec![0xA5; 3 * plan.source_bytes + 7];
            plan.apply(&mut tiles, &mut staging, workers);
            tiles.iter().map(|t| t.mem.bytes().to_vec()).collect()
        })
        .collect()
}

/// `ex` gathered, then its writes left pending: the tiles of `done` (every other
/// destination, and every tile that is none) take their own ([`ExchangePlan::writes_along`]),
/// as a compute set's tiles do, then [`ExchangePlan::scatter_except`] writes the rest. With
/// `early`, the sources are gathered as a compute set before the exchange gathers them: two
/// of every three tiles their own, at once on two threads ([`EarlyGather::tile`]), then
/// [`ExchangePlan::gather_except`] the others', into a buffer left larger and full by an
/// earlier exchange.
fn deferred(
    exe: &Executable,
    ex: &Exchange,
    index: &TileIndex,
    sizes: &[usize],
    mems: &[Vec<u8>],
    early: bool,
) -> Vec<Vec<u8>> {
    let mut plan = ExchangePlan::new(exe, ex, index, sizes).unwrap();
    let mut tiles = tiles_holding(mems);
    let mut staging = Vec::new();
    if early {
        (plan.by_tile, plan.segments) = by_source_tile(&plan.gather);
        assert!(plan.gathers_early());
        staging = vec![0xA5; plan.source_bytes() + 5];
        let gathering: Vec<usize> = (0..sizes.len()).filter(|d| d % 3 != 2).collect();
        let moves = plan.early_moves(&gathering);
        assert_eq!(moves.len(), gathering.len());
        {
            let gather = plan.early_gather(&mut staging);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            pool.install(|| {
                (gathering.par_iter().zip(&moves)).for_each(|(&d, m)| {
                    if let Some(m) = m {
                        gather.tile(m, tiles[d].mem.bytes());
                    }
                })
            });
        }
        plan.gather_except(&tiles, &mut staging, &gathering);
    } else {
        plan.gather(&tiles, &mut staging, &Workers::Caller);
    }
    let mut done: Vec<usize> = plan.dst_tiles.iter().copied().step_by(2).collect();
    done.extend((0..sizes.len()).filter(|d| !plan.dst_tiles.contains(d)));
    done.sort_unstable();
    for (&d, pieces) in done.iter().zip(plan.writes_along(&done)) {
        assert_eq!(pieces.is_empty(), !plan.dst_tiles.contains(&d));
        write_tile(tiles[d].mem.bytes_mut(), pieces, &staging);
    }
    plan.scatter_except(&mut tiles, &staging, &done);
    tiles.iter().map(|t| t.mem.bytes().to_vec()).collect()
}

/// `ex` moved directly (module `direct`), if its destinations overlap none of its sources:
/// the tiles of `done` (as in [`deferred`]) take their writes one after the other, then the
/// rest take theirs; `None` when the exchange cannot go direct.
fn direct(
    exe: &Executable,
    ex: &Exchange,
    index: &TileIndex,
    sizes: &[usize],
    mems: &[Vec<u8>],
) -> Option<Vec<Vec<u8>>> {
    let plan = ExchangePlan::new(exe, ex, index, sizes).unwrap();
    let d = direct::Direct::new(&plan)?;
    let mut tiles = tiles_holding(mems);
    let mut done: Vec<usize> = plan.dst_tiles.iter().copied().skip(1).step_by(2).collect();
    done.extend((0..sizes.len()).filter(|d| !plan.dst_tiles.contains(d)));
    done.sort_unstable();
    for (&t, k) in done.iter().zip(d.along(&done)) {
        assert_eq!(k.is_some(), plan.dst_tiles.contains(&t));
        if let Some(k) = k {
            d.write(&mut tiles, k);
        }
    }
    d.scatter_except(&mut tiles, &done);
    let once = {
        let mut tiles = tiles_holding(mems);
        d.scatter(&mut tiles);
        tiles
    };
    let bytes = |tiles: &[TileState]| -> Vec<Vec<u8>> {
        tiles.iter().map(|t| t.mem.bytes().to_vec()).collect()
    };
    assert_eq!(bytes(&tiles), bytes(&once), "exchange '{}' direct", ex.name);
    Some(bytes(&tiles))
}

/// Whether any destination byte of `ex` is a source byte on the same tile.
fn overlaps(ex: &Exchange) -> bool {
    let reads: Vec<(TileId, u32, u32)> = (ex.copies.iter())
        .map(|c| (c.src_tile, c.src_offset, c.src_offset + c.bytes))
        .collect();
    ex.copies.iter().any(|c| {
        (c.dsts.iter()).any(|d| {
            let (start, end) = (d.offset, d.offset + c.bytes);
            (reads.iter()).any(|&(t, s, e)| t == d.tile && s < end && start < e)
        })
    })
}

fn check(exe: &Executable, ex: &Exchange, index: &TileIndex, sizes: &[usize]) {
    let mems = memories(sizes);
    let mut want = mems.clone();
    reference(ex, index, &mut want);
    for got in applied(exe, ex, index, sizes, &mems) {
        assert_eq!(got, want, "exchange '{}'", ex.name);
    }
    let got = deferred(exe, ex, index, sizes, &mems, false);
    assert_eq!(got, want, "exchange '{}' with its writes deferred", ex.name);
    let got = deferred(exe, ex, index, sizes, &mems, true);
    assert_eq!(got, want, "exchange '{}' gathered early", ex.name);
    match direct(exe, ex, index, sizes, &mems) {
        Some(got) => assert_eq!(got, want, "exchange '{}' moved directly", ex.name),
        None => assert!(overlaps(ex), "exchange '{}' not direct", ex.name),
    }
}

#[test]
fn plans_move_the_bytes_the_copies_say() {
    let exe = executable();
    let (index, sizes) = TileIndex::new(&exe).unwrap();
    assert!(!exe.exchanges.is_empty());
    for ex in &exe.exchanges {
        check(&exe, ex, &index, &sizes);
    }
    assert!(exe.exchanges.iter().any(|ex| !overlaps(ex)));
    // Destinations overlapping sources: a swap between two tiles, a shift on one tile,
    // then copies overwriting part of what was just written.
    let (a, b) = (index.tile(0), index.tile(1));
    let copy = |src_tile, src_offset, bytes, dsts: &[(TileId, u32)]| ByteCopy {
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
    assert!(overlaps(&ex));
    // Destinations with tiles between and before them that are none.
    let ex = Exchange {
        name: "gaps".into(),
        node: None,
        copies: vec![
            copy(a, 0, 8, &[(index.tile(1), 0), (index.tile(3), 8)]),
            copy(index.tile(2), 4, 4, &[(index.tile(3), 0)]),
        ],
        cycles: 0,
    };
    check(&exe, &ex, &index, &sizes);
    // One destination run (one staged write) from the sources of three tiles, one of them
    // the destination itself, and a later copy over part of it.
    let ex = Exchange {
        name: "spanning".into(),
        node: None,
        copies: vec![
            copy(a, 0, 8, &[(index.tile(3), 0)]),
            copy(index.tile(2), 4, 6, &[(index.tile(3), 8)]),
            copy(index.tile(3), 40, 10, &[(index.tile(3), 14), (a, 32)]),
            copy(b, 2, 4, &[(index.tile(3), 10)]),
        ],
        cycles: 0,
    };
    let mems = memories(&sizes);
    assert!(direct(&exe, &ex, &index, &sizes, &mems).is_some());
    check(&exe, &ex, &index, &sizes);
}

/// The parallel gather fills the staging buffer as the serial one does, however its runs
/// fall: many pieces of uneven lengths from several tiles, cut into runs on 1 to 3 threads.
#[test]
fn a_gather_in_runs_fills_the_staging_as_one_pass_does() {
    let tiles: Vec<TileState> = (0..3u8)
        .map(|t| {
            let mut mem = TileMem::zeroed(4096);
            for (i, b) in mem.bytes_mut().iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31).wrapping_add(t * 85);
            }
            TileState {
                mem,
                rngs: Vec::new(),
                sts: FpSts::empty(),
            }
        })
        .collect();
    let (mut pieces, mut at) = (Vec::new(), 0usize);
    for i in 0..200usize {
        let len = 1 + (i * 37) % 61;
        pieces.push((i % 3, Piece::new((i * 97) % 3000, at, len)));
        at += len;
    }
    let mut want = vec![0u8; at];
    gather(&pieces, &tiles, &mut want);
    assert_eq!(
        want[..pieces[1].1.to],
        tiles[0].mem.bytes()[0..pieces[0].1.len]
    );
    for threads in 1..=3 {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut got = vec![0xA5u8; at];
        pool.install(|| gather_parallel(&pieces, &tiles, &mut got));
        assert_eq!(got, want, "{threads} threads");
    }
}

/// A direct exchange's writes may wait for a compute set's vertices exactly when none of
/// them writes (its last operand) a byte the exchange reads: against a count over every
/// copy and vertex, for every exchange and compute set of a compiled program, and for a
/// vertex moved onto a source.
#[test]
fn a_direct_exchange_conflicts_with_vertices_writing_its_sources() {
    let exe = &executable();
    let (index, sizes) = TileIndex::new(exe).unwrap();
    let writes = |cs: &ComputeSet| -> Vec<(TileId, u32, u32)> {
        (cs.tiles.iter())
            .flat_map(|w| {
                (w.groups.iter().flat_map(|g| &g.vertices)).filter_map(move |v| {
                    let o = v.operands.last()?;
                    let size = exe.tensor(o.tensor).dtype.size_bytes() as u32;
                    Some((w.tile, o.offset, o.offset + o.len * size))
                })
            })
            .collect()
    };
    let counted = |ex: &Exchange, cs: &ComputeSet| {
        writes(cs).iter().any(|&(t, s, e)| {
            (ex.copies.iter())
                .any(|c| c.src_tile == t && c.src_offset < e && s < c.src_offset + c.bytes && s < e)
        })
    };
    let (mut waiting, mut moved_checked) = (0, 0);
    for ex in &exe.exchanges {
        let plan = ExchangePlan::new(exe, ex, &index, &sizes).unwrap();
        let Some(d) = direct::Direct::new(&plan) else {
            continue;
        };
        for cs in &exe.compute_sets {
            let dense: Vec<usize> = cs
                .tiles
                .iter()
                .map(|w| index.get(w.tile).unwrap())
                .collect();
            let found = d.conflicts(exe, cs, &dense);
            assert_eq!(found, counted(ex, cs), "'{}' after '{}'", cs.name, ex.name);
            waiting += usize::from(!found);
            // A vertex writing the first source byte of a copy from one of its tiles.
            let mut moved = cs.clone();
            let Some((w, c)) = (moved.tiles.iter_mut()).find_map(|w| {
                let c = ex.copies.iter().find(|c| c.src_tile == w.tile)?;
                Some((w, c))
            }) else {
                continue;
            };
            let Some(v) = w.groups.iter_mut().flat_map(|g| &mut g.vertices).next() else {
                continue;
            };
            v.operands.last_mut().unwrap().offset = c.src_offset;
            assert!(d.conflicts(exe, &moved, &dense), "moved '{}'", cs.name);
            moved_checked += 1;
        }
    }
    assert!(
        waiting > 0 && moved_checked > 0,
        "{waiting} {moved_checked}"
    );
}
