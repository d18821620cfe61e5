//! Broken-executable fixtures: a sound executable, then one invariant of `ipusim_exe::verify`
//! broken at a time; the verifier names the invariant and its typed location, collects every
//! violation, and the engine refuses the executable on load with the same list.

mod common;

use ipusim_compiler::executable::{Executable, Program, TileId};
use ipusim_compiler::{compile, CompileOptions, Target};
use ipusim_exe::verify::{self, Location};
use ipusim_ir::DType;

fn sound() -> Executable {
    let g = common::mlp_training_step(8, &[16, 12, 4], DType::F16, DType::F32);
    let mut t = Target::mk2();
    t.tiles = 16;
    compile(&g, &t, &CompileOptions::default()).unwrap()
}

/// The single violation of `exe` (there must be exactly one).
fn only(exe: &Executable) -> verify::VerifierError {
    let errors = verify::executable(exe);
    assert_eq!(errors.len(), 1, "{}", verify::render(&errors));
    errors.into_iter().next().unwrap()
}

#[test]
fn a_compiled_executable_is_sound() {
    assert!(verify::executable(&sound()).is_empty());
}

#[test]
fn each_invariant_is_named_with_its_location() {
    // 1. The program tree lists a step that is not there.
    let mut exe = sound();
    exe.steps.pop();
    let e = verify::executable(&exe);
    assert!(e
        .iter()
        .any(|e| e.invariant == 1 && e.location == Location::Executable));

    // 2. A tensor slice on a tile the system does not have.
    let mut exe = sound();
    let name = exe.tensors[0].name.clone();
    exe.tensors[0].slices[0].tile = TileId::on_first_ipu(99);
    let errors = verify::executable(&exe);
    assert!(errors.iter().any(|e| e.invariant == 2
        && e.location
            == Location::Tensor {
                tensor: name.clone()
            }));

    // 3. A vertex on a worker the target does not have.
    let mut exe = sound();
    let cs = exe.compute_sets[0].name.clone();
    let tile = exe.compute_sets[0].tiles[0].tile;
    exe.compute_sets[0].tiles[0].groups[0].vertices[0].worker = 6;
    let e = only(&exe);
    assert_eq!(e.invariant, 3);
    assert_eq!(
        e.location,
        Location::Vertex {
            compute_set: cs,
            tile,
            group: 0,
            vertex: 0
        }
    );
    assert!(e.to_string().contains("worker 6 of 6"), "{e}");

    // 3. An operand past its tensor's bytes.
    let mut exe = sound();
    exe.compute_sets[0].tiles[0].groups[0].vertices[0].operands[0].offset += 1 << 20;
    assert_eq!(only(&exe).invariant, 3);

    // 4. A copy whose source is past its tensor's bytes.
    let mut exe = sound();
    let ex = exe
        .exchanges
        .iter()
        .position(|x| !x.copies.is_empty())
        .unwrap();
    let ex_name = exe.exchanges[ex].name.clone();
    exe.exchanges[ex].copies[0].src_offset += 1 << 20;
    let e = only(&exe);
    assert_eq!(e.invariant, 4);
    assert_eq!(
        e.location,
        Location::Copy {
            exchange: ex_name,
            copy: 0
        }
    );

    // 5. A stream whose bytes do not match its tensor.
    let mut exe = sound();
    let stream = exe.streams[0].name.clone();
    exe.streams[0].bytes_per_micro_batch += 2;
    let e = only(&exe);
    assert_eq!((e.invariant, e.location), (5, Location::Stream { stream }));
}

#[test]
fn every_violation_is_collected_and_the_engine_refuses_them_all() {
    let mut exe = sound();
    exe.streams[0].bytes_per_micro_batch += 2;
    exe.compute_sets[0].tiles[0].groups[0].vertices[0].worker = 9;
    let name = exe
        .exchanges
        .iter()
        .position(|x| !x.copies.is_empty())
        .unwrap();
    exe.exchanges[name].copies[0].src_offset += 1 << 20;
    let errors = verify::executable(&exe);
    let invariants: Vec<u8> = errors.iter().map(|e| e.invariant).collect();
    assert!(invariants.contains(&3) && invariants.contains(&4) && invariants.contains(&5));
    // An exchange that crosses IPUs must run as an IpuCopy.
    let mut two = sound();
    two.system.ipus = 2;
    let ex = two
        .exchanges
        .iter()
        .position(|x| !x.copies.is_empty())
        .unwrap();
    let c = &mut two.exchanges[ex].copies[0];
    c.dsts[0].tile = TileId::new(1, c.dsts[0].tile.tile());
    let errors = verify::executable(&two);
    assert!(
        errors
            .iter()
            .any(|e| e.invariant == 4 && e.message.contains("IpuCopy")),
        "{}",
        verify::render(&errors)
    );
    assert!(matches!(exe.program, Program::Sequence(_)));
}

/// The memory-plan pass: bytes on a tile are shared only by tensors whose live ranges are
/// disjoint, and never by an always-live tensor; the pass names both tensors and the tile.
#[test]
fn the_memory_plan_pass_names_two_live_tensors_that_share_bytes() {
    use ipusim_exe::memory::Usage;
    let exe = sound();
    // Each tensor live in a step of its own: every plan of the compiler passes.
    let apart: Vec<Usage> = (0..exe.tensors.len() as u32)
        .map(|i| Usage {
            first: Some(i),
            last: Some(i),
        })
        .collect();
    verify::planned(&exe, &apart).unwrap();

    // The tensors with bytes that are always live (variables, constants, stream buffers), or
    // that are not.
    let pick = |exe: &Executable, always: bool| {
        exe.tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                always == t.kind.always_live() && t.slices.iter().any(|s| s.num_elements() > 0)
            })
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    // Moves the first slice with bytes of tensor `b` onto tensor `a`'s first slice's bytes.
    let overlap = |exe: &mut Executable, a: usize, b: usize| {
        let sa = exe.tensors[a]
            .slices
            .iter()
            .find(|s| s.num_elements() > 0)
            .unwrap()
            .clone();
        let sb = sized_slice(exe, b);
        sb.tile = sa.tile;
        sb.offset = sa.offset;
    };
    let variables = pick(&exe, true);
    let (a, b) = (variables[0], variables[1]);
    let mut broken = exe.clone();
    overlap(&mut broken, a, b);
    let e = verify::planned(&broken, &apart).unwrap_err().to_string();
    assert!(
        e.contains("share bytes while both live")
            && e.contains(&format!("'{}'", exe.tensors[a].name))
            && e.contains(&format!("'{}'", exe.tensors[b].name)),
        "{e}"
    );

    // Two temporaries: sharing is sound while their lives are apart, not once they meet.
    let temps = pick(&exe, false);
    let (a, b) = (temps[0], temps[1]);
    let mut shared = exe.clone();
    overlap(&mut shared, a, b);
    verify::planned(&shared, &apart).unwrap();
    let mut meet = apart.clone();
    meet[b] = meet[a];
    let e = verify::planned(&shared, &meet).unwrap_err().to_string();
    assert!(e.contains("share bytes while both live"), "{e}");
}

/// Tensor `t`'s first slice with elements.
fn sized_slice(exe: &mut Executable, t: usize) -> &mut ipusim_compiler::executable::TileSlice {
    exe.tensors[t]
        .slices
        .iter_mut()
        .find(|s| s.num_elements() > 0)
        .unwrap()
}

/// `exe` with its byte offsets made slice-relative again, as the lowering leaves them.
fn lowered(exe: &Executable) -> Executable {
    let mut low = exe.clone();
    let base = |t: ipusim_compiler::executable::TensorId, tile: TileId| {
        exe.tensors[t.0 as usize].slice_on(tile).unwrap().offset
    };
    for cs in &mut low.compute_sets {
        for tw in &mut cs.tiles {
            for g in &mut tw.groups {
                for v in &mut g.vertices {
                    for o in &mut v.operands {
                        o.offset -= base(o.tensor, tw.tile);
                    }
                }
            }
        }
    }
    for ex in &mut low.exchanges {
        for c in &mut ex.copies {
            c.src_offset -= base(c.src_tensor, c.src_tile);
            for d in &mut c.dsts {
                d.offset -= base(c.dst_tensor, d.tile);
            }
        }
    }
    low
}

/// The first vertex with an input operand, as (compute set, tile work, group, vertex).
fn first_reader(exe: &Executable) -> (usize, usize, usize, usize) {
    for (c, cs) in exe.compute_sets.iter().enumerate() {
        for (w, tw) in cs.tiles.iter().enumerate() {
            for (g, grp) in tw.groups.iter().enumerate() {
                for (v, vx) in grp.vertices.iter().enumerate() {
                    if vx.operands.len() >= 2 {
                        return (c, w, g, v);
                    }
                }
            }
        }
    }
    panic!("no vertex reads an operand");
}

/// The lowering pass runs its tensor and worker check and its written-before-read walk side
/// by side: each still names what is wrong, a vertex naming a tensor outside the table is
/// reported (before an order violation), not a panic; an operand's bytes are the offset
/// resolution's to check after the memory plan (its test is in the compiler's `memory`).
#[test]
fn the_lowering_pass_reports_unknown_tensors_before_order_and_never_panics() {
    let low = lowered(&sound());
    verify::lowered(&low).unwrap();
    let at = first_reader(&low);
    fn operand(
        exe: &mut Executable,
        (c, w, g, v): (usize, usize, usize, usize),
        k: usize,
    ) -> &mut ipusim_compiler::executable::Operand {
        &mut exe.compute_sets[c].tiles[w].groups[g].vertices[v].operands[k]
    }

    // An input read past its slice: not this pass's to report.
    let mut past = low.clone();
    operand(&mut past, at, 0).offset += 1 << 20;
    verify::lowered(&past).unwrap();
    // An input that nothing writes: a fresh, empty-named tensor's copy of the input's.
    let mut unwritten = low.clone();
    let read = operand(&mut unwritten, at, 0).tensor;
    let mut t = unwritten.tensors[read.0 as usize].clone();
    t.kind = ipusim_compiler::executable::TensorKind::Activation;
    t.name = "never_written".into();
    unwritten.tensors.push(t);
    let fresh = ipusim_compiler::executable::TensorId(unwritten.tensors.len() as u32 - 1);
    operand(&mut unwritten, at, 0).tensor = fresh;
    let e = verify::lowered(&unwritten).unwrap_err().to_string();
    assert!(
        e.contains("never_written") && e.contains("before it is written"),
        "{e}"
    );
    // A tensor id outside the table, on a vertex and on a copy.
    let mut unknown = low.clone();
    operand(&mut unknown, at, 0).tensor = ipusim_compiler::executable::TensorId(u32::MAX - 1);
    let e = verify::lowered(&unknown).unwrap_err().to_string();
    assert!(e.contains("unknown tensor"), "{e}");
    // Both: the unknown tensor is reported.
    operand(&mut unwritten, at, 1).tensor = ipusim_compiler::executable::TensorId(u32::MAX - 1);
    let e = verify::lowered(&unwritten).unwrap_err().to_string();
    assert!(e.contains("unknown tensor"), "{e}");
    let mut unknown = low.clone();
    let ex = unknown
        .exchanges
        .iter()
        .position(|x| !x.copies.is_empty())
        .unwrap();
    unknown.exchanges[ex].copies[0].dst_tensor = ipusim_compiler::executable::TensorId(u32::MAX);
    let e = verify::lowered(&unknown).unwrap_err().to_string();
    assert!(
        e.contains("unknown tensor") && e.contains("exchange"),
        "{e}"
    );
}

/// The compiler's final check leaves out what its passes established (the mapping, checked
/// after lowering and unchanged since; the operands and copies, checked after lowering and
/// kept inside their slices by the offset resolution) and reports every other violation as
/// the full check does.
#[test]
fn the_compilers_final_check_is_the_full_one_but_for_what_its_passes_established() {
    let exe = sound();
    assert!(verify::executable_resolved(&exe).is_empty());
    // A mapping violation: a slice's interval runs past the tensor's last element.
    let mut mapping = exe.clone();
    let t = mapping
        .tensors
        .iter()
        .position(|t| t.slices.iter().any(|s| s.num_elements() > 0))
        .unwrap();
    sized_slice(&mut mapping, t).intervals[0].len += 1_000_000;
    assert!(verify::executable(&mapping)
        .iter()
        .any(|e| e.invariant == 2));
    assert!(verify::executable_resolved(&mapping)
        .iter()
        .all(|e| e.invariant != 2));
    // An operand and a copy past their tensors' bytes: the full check's alone.
    let mut bounds = exe.clone();
    bounds.compute_sets[0].tiles[0].groups[0].vertices[0].operands[0].offset += 1 << 20;
    let ex = bounds
        .exchanges
        .iter()
        .position(|x| !x.copies.is_empty())
        .unwrap();
    bounds.exchanges[ex].copies[0].src_offset += 1 << 20;
    let full: Vec<u8> = verify::executable(&bounds)
        .iter()
        .map(|e| e.invariant)
        .collect();
    assert_eq!(full, [3, 4]);
    assert!(verify::executable_resolved(&bounds).is_empty());
    // Another invariant: the same errors either way.
    let mut tables = exe.clone();
    tables.steps.pop();
    let full = verify::executable(&tables);
    assert!(!full.is_empty());
    assert_eq!(verify::executable_resolved(&tables), full);
}
