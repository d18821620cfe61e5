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
