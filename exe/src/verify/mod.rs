//! The verifier: the executable's invariants, written once (cranelift's verifier and naga's
//! validator are the models). A verified executable is what the engine may run without
//! re-checking a table index.
//!
//! [`executable`] checks a finished executable and collects **every** violation, each with a
//! typed [`Location`]; the engine runs it on load, and the compiler after the memory plan
//! ([`executable_resolved`]: all but what the compiler's passes have established by then —
//! the mapping, operands and copies). The invariants (each violation says which):
//!
//! 1. **tables**: every id the program, the streams, the vertices, the copies and the node
//!    values name is in its table; the program tree has exactly one leaf per listed step, in
//!    order; a node's value is held by a tensor of as many elements (a channel-grouped value
//!    by one of its storage shape, `crate::layout`);
//! 2. **mapping**: a tensor's slices are on tiles of the system, sorted by tile; its intervals
//!    are ascending, disjoint and cover `[0, elements)` exactly once;
//! 3. **operands**: every vertex runs on a worker context of the target and its operands lie
//!    inside their tensor's bytes on the vertex's tile (absolute tile addresses);
//! 4. **copies**: every copy's source and destinations lie inside their tensors' bytes on
//!    their tiles; an `Exchange` stays on one IPU, an `IpuCopy` crosses IPUs;
//! 5. **streams**: a stream's tensor has the stream's dtype and bytes per micro-batch.
//!
//! [`passes`] holds the checks the compiler runs between its own passes, on executables whose
//! operand offsets are still slice-relative (after lowering) and on the memory plan.

mod overlap;
mod passes;

pub use crate::error::{render, Location, VerifierError};
pub use passes::{lowered, planned};

use crate::executable::{ComputeSet, Exchange, Executable, StepKind, Tensor, TensorId, TensorKind};
use crate::slices::{find_tile, SliceLookup};
use crate::system::TileId;
use rayon::prelude::*;

/// Every violation found in `exe`, in the order of the invariants; empty when it is sound.
pub fn executable(exe: &Executable) -> Vec<VerifierError> {
    check(exe, true)
}

/// [`executable`] but for what the compiler's passes have established by the time it runs
/// after them: the mapping (invariant 2), which [`lowered`] checked and no pass since
/// changes (the memory plan and the offset resolution write only byte offsets), and the
/// vertices and copies (invariants 3 and 4), whose workers and tensor ids [`lowered`]
/// checked (no pass since changes them) and whose operands and endpoints the offset
/// resolution made absolute by adding each slice's base, checking each range against that
/// slice's bytes as it did (the compiler's `resolve_offsets`, which fails the compile on a
/// range outside its slice): each lies inside its tensor's bytes on its tile, and
/// a walk over every operand and copy endpoint (tens of millions on a large CNN) would find
/// nothing. The engine's check on load ([`executable`]) still walks them all.
pub fn executable_resolved(exe: &Executable) -> Vec<VerifierError> {
    check(exe, false)
}

fn check(exe: &Executable, full: bool) -> Vec<VerifierError> {
    let mut v = Verifier {
        exe,
        errors: Vec::new(),
        slice_bytes: if full { slice_bytes(exe) } else { Vec::new() },
        slice_tiles: if full { slice_tiles(exe) } else { Vec::new() },
    };
    v.tables();
    if full {
        v.errors.extend(mapping_errors(exe));
        v.operands();
        v.copies();
    }
    v.streams();
    v.errors
}

/// The tiles of every tensor's slices, in slice order (dense, for the searches of the
/// operand and copy checks).
pub(crate) fn slice_tiles(exe: &Executable) -> Vec<Vec<TileId>> {
    exe.tensors
        .par_iter()
        .map(|t| t.slices.iter().map(|s| s.tile).collect())
        .collect()
}

/// The bytes of every tensor's slices, by tensor and slice, computed once: the operand and
/// copy checks ask for them millions of times, and a slice of a large feature map has many
/// intervals.
pub(crate) fn slice_bytes(exe: &Executable) -> Vec<Vec<u64>> {
    exe.tensors
        .par_iter()
        .map(|t| {
            let es = t.dtype.size_bytes() as u64;
            t.slices.iter().map(|s| s.num_elements() * es).collect()
        })
        .collect()
}

/// The mapping violations (invariant 2) of every tensor of `exe`.
pub(crate) fn mapping_errors(exe: &Executable) -> Vec<VerifierError> {
    // Each tensor checked on the host's cores; the errors in tensor order.
    let per_tensor: Vec<Vec<VerifierError>> = exe
        .tensors
        .par_iter()
        .map(|t| {
            let mut v = Verifier {
                exe,
                errors: Vec::new(),
                slice_bytes: Vec::new(),
                slice_tiles: Vec::new(),
            };
            v.mapping(t);
            v.errors
        })
        .collect();
    per_tensor.into_iter().flatten().collect()
}

struct Verifier<'a> {
    exe: &'a Executable,
    errors: Vec<VerifierError>,
    /// The bytes of every tensor's slices, by tensor and slice ([`slice_bytes`]; empty for
    /// the mapping checks alone, which do not use it).
    slice_bytes: Vec<Vec<u64>>,
    /// The tiles of every tensor's slices ([`slice_tiles`]; empty, as `slice_bytes` is, for
    /// the mapping checks alone).
    slice_tiles: Vec<Vec<TileId>>,
}

impl Verifier<'_> {
    fn fail(&mut self, invariant: u8, location: Location, message: String) {
        self.errors.push(VerifierError {
            invariant,
            location,
            message,
        });
    }

    fn tensor_ok(&self, t: TensorId) -> bool {
        (t.0 as usize) < self.exe.tensors.len()
    }

    /// A reduce-scatter or all-gather between `src` and `dst` (step `step`): one dtype, and
    /// one of them a shard of the other over the replicas (`ceil(n / R)` elements). A
    /// mismatch is reported here (and the step counts as naming its table entries).
    fn shards_fit(&mut self, step: usize, src: TensorId, dst: TensorId) -> bool {
        let (a, b) = (self.exe.tensor(src), self.exe.tensor(dst));
        let r = u64::from(self.exe.system.replicas.max(1));
        let (n, m) = (a.num_elements(), b.num_elements());
        if a.dtype != b.dtype || (m != n.div_ceil(r) && n != m.div_ceil(r)) {
            self.fail(
                1,
                Location::Step { step },
                format!(
                    "cross-replica collective from '{}' ({} x {}) to '{}' ({} x {}): neither \
                     is the other's shard over {r} replicas",
                    a.name, n, a.dtype, b.name, m, b.dtype
                ),
            );
        }
        true
    }

    /// Invariant 1.
    fn tables(&mut self) {
        let exe = self.exe;
        let leaves = exe.program.leaves();
        if leaves.len() != exe.steps.len() {
            self.fail(
                1,
                Location::Executable,
                format!(
                    "the program has {} leaves but {} steps are listed",
                    leaves.len(),
                    exe.steps.len()
                ),
            );
        }
        for (i, (leaf, step)) in leaves.iter().zip(&exe.steps).enumerate() {
            if *leaf != step.kind {
                self.fail(
                    1,
                    Location::Step { step: i },
                    format!(
                        "the program runs {leaf:?} where step {i} lists {:?}",
                        step.kind
                    ),
                );
            }
        }
        for (i, leaf) in leaves.iter().enumerate() {
            let ok = match *leaf {
                StepKind::Execute(c) => (c.0 as usize) < exe.compute_sets.len(),
                StepKind::Exchange(e) | StepKind::IpuCopy(e) => {
                    (e.0 as usize) < exe.exchanges.len()
                }
                StepKind::StreamCopy(s) => (s.0 as usize) < exe.streams.len(),
                StepKind::CrossReplica(t) => self.tensor_ok(t),
                StepKind::CrossReplicaTo { src, dst } => {
                    self.tensor_ok(src) && self.tensor_ok(dst) && self.shards_fit(i, src, dst)
                }
                StepKind::RemoteCopy { tensor, .. } => {
                    self.tensor_ok(tensor)
                        && exe.tensors[tensor.0 as usize].kind == TensorKind::RemoteVariable
                }
            };
            if !ok {
                self.fail(
                    1,
                    Location::Step { step: i },
                    format!("{leaf:?} names no entry of its table"),
                );
            }
            match *leaf {
                StepKind::Exchange(e) if ok && exe.exchanges[e.0 as usize].crosses_ipus() => self
                    .fail(
                        4,
                        Location::Step { step: i },
                        format!(
                            "exchange '{}' crosses IPUs: it must run as an IpuCopy",
                            exe.exchanges[e.0 as usize].name
                        ),
                    ),
                StepKind::IpuCopy(e) if ok && !exe.exchanges[e.0 as usize].crosses_ipus() => self
                    .fail(
                        4,
                        Location::Step { step: i },
                        format!(
                            "IpuCopy of exchange '{}' moves nothing between IPUs",
                            exe.exchanges[e.0 as usize].name
                        ),
                    ),
                _ => {}
            }
        }
        // A node's value names a tensor of its elements; a channel-grouped value's tensor
        // has the value's storage shape.
        for v in &exe.values {
            let Some(id) = v.tensor else { continue };
            if !self.tensor_ok(id) {
                self.fail(
                    1,
                    Location::Executable,
                    format!("the value of '{}' names no tensor", v.name),
                );
                continue;
            }
            let t = &exe.tensors[id.0 as usize];
            let want = crate::layout::storage_dims(v.shape.dims(), v.group);
            let grouped_ok = v.group <= 1
                || (crate::layout::can_group(v.shape.dims(), v.group) && t.shape.dims() == want);
            if t.num_elements() as usize != v.shape.num_elements() || !grouped_ok {
                self.fail(
                    1,
                    Location::Tensor {
                        tensor: t.name.clone(),
                    },
                    format!(
                        "holds the value of '{}' ({} grouped by {}) as shape {}",
                        v.name, v.shape, v.group, t.shape
                    ),
                );
            }
        }
    }

    /// Invariant 2 for one tensor.
    fn mapping(&mut self, t: &Tensor) {
        let loc = || Location::Tensor {
            tensor: t.name.clone(),
        };
        let (tiles, ipus) = (self.exe.target.tiles, self.exe.system.ipus);
        let mut prev: Option<TileId> = None;
        let count = t.slices.iter().map(|s| s.intervals.len()).sum();
        let mut all: Vec<(u64, u64)> = Vec::with_capacity(count);
        for s in &t.slices {
            if s.tile.tile() >= tiles || s.tile.ipu() >= ipus {
                self.fail(
                    2,
                    loc(),
                    format!(
                        "a slice is on tile {}, outside the system's {ipus} IPU(s) of {tiles} tiles",
                        s.tile
                    ),
                );
            }
            if prev.is_some_and(|p| p >= s.tile) {
                self.fail(
                    2,
                    loc(),
                    format!("slices are not sorted by tile at tile {}", s.tile),
                );
            }
            prev = Some(s.tile);
            let mut last_end: Option<u64> = None;
            for iv in &s.intervals {
                if iv.len == 0 || last_end.is_some_and(|e| iv.begin < e) {
                    self.fail(
                        2,
                        loc(),
                        format!(
                            "interval [{}, {}) on tile {} is empty or out of order",
                            iv.begin,
                            iv.end(),
                            s.tile
                        ),
                    );
                }
                last_end = Some(iv.end());
                all.push((iv.begin, iv.end()));
            }
        }
        // By first element (radix); two intervals of one first element (a broken mapping)
        // are ordered by their ends too, as the message below expects.
        crate::radix::sort_by_key(&mut all, |iv| iv.0);
        if all.windows(2).any(|w| w[0].0 == w[1].0) {
            all.sort_unstable();
        }
        let mut next = 0u64;
        for (b, e) in all {
            if b != next {
                self.fail(
                    2,
                    loc(),
                    format!(
                        "elements [{}, {}) are mapped {}",
                        next.min(b),
                        next.max(b),
                        if b < next { "twice" } else { "nowhere" }
                    ),
                );
            }
            next = next.max(e);
        }
        if next != t.num_elements() {
            self.fail(
                2,
                loc(),
                format!("the mapping covers {next} of {} elements", t.num_elements()),
            );
        }
    }

    /// Bytes `[off, off + bytes)` of tile `tile` lie inside tensor `t`'s bytes there.
    fn inside(
        &self,
        lookup: &mut SliceLookup,
        t: TensorId,
        tile: TileId,
        (off, bytes): (u64, u64),
    ) -> Result<(), String> {
        let tensor = self
            .exe
            .tensors
            .get(t.0 as usize)
            .ok_or_else(|| format!("names tensor {} of {}", t.0, self.exe.tensors.len()))?;
        let i = lookup
            .find(t, tile, || {
                let tiles = self.slice_tiles.get(t.0 as usize)?;
                find_tile(tiles, tile, |&t| t)
            })
            .ok_or_else(|| format!("tensor '{}' has no bytes on tile {tile}", tensor.name))?;
        let s = &tensor.slices[i];
        let start = s.offset as u64;
        let size = match self.slice_bytes.get(t.0 as usize).and_then(|b| b.get(i)) {
            Some(&bytes) => bytes,
            None => s.num_elements() * tensor.dtype.size_bytes() as u64,
        };
        if off < start || off + bytes > start + size {
            return Err(format!(
                "bytes [{off}, {}) are outside tensor '{}' at [{start}, {}) on tile {tile}",
                off + bytes,
                tensor.name,
                start + size
            ));
        }
        Ok(())
    }

    /// Invariant 3, every compute set checked on the host's cores, the violations in
    /// program order.
    fn operands(&mut self) {
        let found: Vec<Vec<VerifierError>> = self
            .exe
            .compute_sets
            .par_iter()
            .map(|cs| self.operands_of(cs))
            .collect();
        self.errors.extend(found.into_iter().flatten());
    }

    /// Invariant 3 in one compute set.
    fn operands_of(&self, cs: &ComputeSet) -> Vec<VerifierError> {
        let exe = self.exe;
        let mut errors = Vec::new();
        let mut lookup = SliceLookup::new();
        let mut fail = |location, message| {
            errors.push(VerifierError {
                invariant: 3,
                location,
                message,
            })
        };
        for tw in &cs.tiles {
            for (gi, g) in tw.groups.iter().enumerate() {
                for (vi, v) in g.vertices.iter().enumerate() {
                    let loc = || Location::Vertex {
                        compute_set: cs.name.clone(),
                        tile: tw.tile,
                        group: gi,
                        vertex: vi,
                    };
                    if !crate::workers::may_run_on(&g.codelet, v, exe.target.worker_contexts) {
                        fail(
                            loc(),
                            format!(
                                "runs on worker {} of {}",
                                v.worker, exe.target.worker_contexts
                            ),
                        );
                    }
                    for (oi, o) in v.operands.iter().enumerate() {
                        let es = exe
                            .tensors
                            .get(o.tensor.0 as usize)
                            .map_or(1, |t| t.dtype.size_bytes() as u64);
                        let r = self.inside(
                            &mut lookup,
                            o.tensor,
                            tw.tile,
                            (o.offset as u64, o.len as u64 * es),
                        );
                        if let Err(m) = r {
                            fail(
                                loc(),
                                format!("operand {oi} ({}): {m}", g.codelet.full_name()),
                            );
                        }
                    }
                }
            }
        }
        errors
    }

    /// Invariant 4, every exchange checked on the host's cores, the violations in program
    /// order.
    fn copies(&mut self) {
        let found: Vec<Vec<VerifierError>> = self
            .exe
            .exchanges
            .par_iter()
            .map(|ex| self.copies_of(ex))
            .collect();
        self.errors.extend(found.into_iter().flatten());
    }

    /// Invariant 4 in one exchange.
    fn copies_of(&self, ex: &Exchange) -> Vec<VerifierError> {
        let mut errors = Vec::new();
        let mut lookup = SliceLookup::new();
        for (ci, c) in ex.copies.iter().enumerate() {
            let mut fail = |message| {
                errors.push(VerifierError {
                    invariant: 4,
                    location: Location::Copy {
                        exchange: ex.name.clone(),
                        copy: ci,
                    },
                    message,
                })
            };
            if let Err(m) = self.inside(
                &mut lookup,
                c.src_tensor,
                c.src_tile,
                (c.src_offset as u64, c.bytes as u64),
            ) {
                fail(format!("source: {m}"));
            }
            for d in &c.dsts {
                if let Err(m) = self.inside(
                    &mut lookup,
                    c.dst_tensor,
                    d.tile,
                    (d.offset as u64, c.bytes as u64),
                ) {
                    fail(format!("destination: {m}"));
                }
            }
        }
        errors
    }

    /// Invariant 5.
    fn streams(&mut self) {
        for s in &self.exe.streams {
            let loc = || Location::Stream {
                stream: s.name.clone(),
            };
            match self.exe.tensors.get(s.tensor.0 as usize) {
                None => self.fail(5, loc(), format!("names tensor {}", s.tensor.0)),
                Some(t) if t.dtype != s.dtype || t.size_bytes() != s.bytes_per_micro_batch => self
                    .fail(
                        5,
                        loc(),
                        format!(
                            "moves {} bytes of {} but its tensor '{}' holds {} bytes of {}",
                            s.bytes_per_micro_batch,
                            s.dtype,
                            t.name,
                            t.size_bytes(),
                            t.dtype
                        ),
                    ),
                Some(_) => {}
            }
        }
    }
}
