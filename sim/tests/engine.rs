//! The BSP engine through its public API: executed cycles equal the static estimate on
//! every program, determinism across seeds and host threads, floating-point exceptions and
//! their dump, variables, control flow, errors.

mod common;

use common::programs;
use ipusim_compiler::executable::{Program, TensorId};
use ipusim_compiler::BuildOptions;
use ipusim_runtime::launch::{launch, LaunchOptions};
use ipusim_sim::engine::{EngineError, EngineOptions, Place, Settled};
use ipusim_sim::numerics::{FpConfig, FpSts, StochasticRounding};
use ipusim_sim::tensor::Tensor;
use ipusim_sim::Engine;
use std::sync::Arc;

fn sr() -> FpConfig {
    FpConfig {
        esr: StochasticRounding::On,
        ..FpConfig::default()
    }
}

#[test]
fn executed_cycles_equal_the_static_estimate_on_every_program() {
    for path in programs::all() {
        for tiles in [16, 64, 1472] {
            let Some(mut l) = programs::try_launch(
                &path,
                &programs::mk2(tiles),
                EngineOptions::default(),
                Default::default(),
            ) else {
                assert!(tiles < 1472, "{} does not fit a whole mk2", path.display());
                continue;
            };
            let est = l.executable.estimate.clone();
            for run in 1..=2 {
                let s = l.engine.run(&mut l.host).unwrap();
                let what = format!("{} on {tiles} tiles, run {run}", programs::name(&path));
                assert_eq!(s.cycles.total, est.total_cycles, "{what}");
                assert_eq!(s.cycles.on_tile_execute, est.on_tile_execute, "{what}");
                assert_eq!(s.cycles.do_exchange, est.do_exchange, "{what}");
                assert_eq!(s.cycles.sync, est.sync, "{what}");
                assert_eq!(s.cycles.stream_copy, est.stream_copy, "{what}");
                assert_eq!(s.stream_bytes_in, est.stream_bytes_in, "{what}");
                assert_eq!(s.stream_bytes_out, est.stream_bytes_out, "{what}");
                let cs: Vec<u64> = est.compute_sets.iter().map(|c| c.executions).collect();
                assert_eq!(s.compute_set_executions, cs, "{what}");
                let ex: Vec<u64> = est.exchanges.iter().map(|c| c.executions).collect();
                assert_eq!(s.exchange_executions, ex, "{what}");
                // Per-tile compute cycles add up to the compiler's per-tile figures.
                let busy: u64 = s.tiles.iter().map(|t| t.on_tile_execute).sum();
                let expect: u64 = l
                    .executable
                    .compute_sets
                    .iter()
                    .zip(&est.compute_sets)
                    .map(|(c, e)| c.tiles.iter().map(|t| t.cycles).sum::<u64>() * e.executions)
                    .sum();
                assert_eq!(busy, expect, "{what}");
                assert_eq!(l.engine.cycle(), est.total_cycles * run, "{what}");
            }
        }
    }
}

/// Everything observable of one program run: trace, outfeeds, variables.
fn observe(
    name: &str,
    options: EngineOptions,
) -> (ipusim_sim::trace::Trace, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut l = programs::launch_with(&programs::sim_program(name), &programs::mk2(16), options);
    l.engine.run(&mut l.host).unwrap();
    l.engine.run(&mut l.host).unwrap();
    observed(&mut l)
}

/// The trace, outfeeds and variables of a launched program after its runs.
fn observed(
    l: &mut ipusim_runtime::launch::Launched,
) -> (ipusim_sim::trace::Trace, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let outfeeds = l
        .host
        .outfeeds
        .values()
        .flatten()
        .map(Tensor::to_bytes)
        .collect();
    let vars = l
        .engine
        .variables()
        .iter()
        .map(|(n, _)| l.engine.read_tensor(n).unwrap().to_bytes())
        .collect();
    (l.engine.take_trace(), outfeeds, vars)
}

#[test]
fn same_seed_same_traces_and_values_on_one_and_two_threads() {
    for name in ["train_mlp", "elementwise", "matmul"] {
        let options = |threads| EngineOptions {
            fp: sr(),
            seed: 42,
            threads: Some(threads),
            record_trace: true,
        };
        let one = observe(name, options(1));
        let again = observe(name, options(1));
        let two = observe(name, options(2));
        assert!(!one.0.events.is_empty());
        assert_eq!(one, again, "{name}: two runs with one thread");
        assert_eq!(one, two, "{name}: one thread against two");
    }
}

/// The shipped CNN on a whole mk2, two training steps with stochastic rounding: its
/// convolutions and batch norms are large enough to run their tiles on the pool with two
/// threads, and give the same trace, outfeeds and variables as on one.
#[test]
fn a_cnn_step_is_the_same_on_one_and_two_threads() {
    let observe = |threads| {
        let options = LaunchOptions {
            build: BuildOptions {
                device_iterations: Some(2),
                ..BuildOptions::default()
            },
            engine: EngineOptions {
                fp: sr(),
                seed: 7,
                threads: Some(threads),
                record_trace: true,
            },
        };
        let mut l = launch(
            &programs::root().join("programs/resnet_digits.ron"),
            &options,
        )
        .expect("resnet_digits launches");
        let parallel = l.engine.parallel_compute_sets();
        l.engine.run(&mut l.host).unwrap();
        (parallel, observed(&mut l))
    };
    let (parallel, one) = observe(1);
    let (_, two) = observe(2);
    assert!(parallel > 10, "{parallel} compute sets on the pool");
    assert!(!one.0.events.is_empty());
    assert_eq!(one, two, "one thread against two");
}

#[test]
fn different_seeds_with_stochastic_rounding_give_different_values() {
    let run = |seed| {
        observe(
            "train_mlp",
            EngineOptions {
                fp: sr(),
                seed,
                ..EngineOptions::default()
            },
        )
    };
    let (a, b) = (run(1), run(2));
    assert_ne!(a.2, b.2, "variables after training with SR");
    assert_ne!(a.1, b.1, "outfeeds with SR");
    // Without SR the seed changes nothing.
    let rne = |seed| {
        observe(
            "train_mlp",
            EngineOptions {
                seed,
                ..EngineOptions::default()
            },
        )
    };
    assert_eq!(rne(1).2, rne(2).2);
}

#[test]
fn traces_cost_nothing_when_not_recorded() {
    let mut l = programs::launch_with(
        &programs::sim_program("repeat_feeds"),
        &programs::mk2(16),
        EngineOptions::default(),
    );
    l.engine.run(&mut l.host).unwrap();
    assert!(l.engine.take_trace().events.is_empty());
}

fn overflow_engine(fp: FpConfig) -> ipusim_runtime::launch::Launched {
    programs::launch_with(
        &programs::sim_program("overflow"),
        &programs::mk2(16),
        EngineOptions {
            fp,
            record_trace: true,
            ..EngineOptions::default()
        },
    )
}

/// An FP32 reduction whose partial sums overflow gives +inf and OFLO; the same sum of
/// values that stay finite raises nothing.
#[test]
fn an_overflowing_fp32_sum_raises_oflo() {
    let mut l = programs::launch_with(
        &programs::sim_program("overflow_sum"),
        &programs::mk2(16),
        EngineOptions::default(),
    );
    let s = l.engine.run(&mut l.host).unwrap();
    assert_eq!(s.flags, FpSts::OFLO);
    assert_eq!(l.host.outfeeds["s"][0].to_f64_vec(), vec![f64::INFINITY; 8]);
}

#[test]
fn overflow_saturates_or_gives_nan_and_raises_oflo() {
    let mut l = overflow_engine(FpConfig::default());
    let s = l.engine.run(&mut l.host).unwrap();
    assert_eq!(s.flags, FpSts::OFLO);
    assert_eq!(l.engine.flags(), FpSts::OFLO);
    assert_eq!(l.host.outfeeds["z"][0].to_f64_vec(), vec![65504.0; 8]);
    assert_eq!(l.engine.tile_flags().len(), 1);
    l.engine.clear_flags();
    assert_eq!(l.engine.flags(), FpSts::empty());

    let mut l = overflow_engine(FpConfig {
        nanoo: true,
        ..FpConfig::default()
    });
    let s = l.engine.run(&mut l.host).unwrap();
    assert_eq!(s.flags, FpSts::OFLO | FpSts::INV);
    assert!(l.host.outfeeds["z"][0]
        .to_f64_vec()
        .iter()
        .all(|v| v.is_nan()));
}

#[test]
fn an_enabled_overflow_exception_stops_at_the_faulting_vertex() {
    let mut l = overflow_engine(FpConfig {
        oflo: true,
        ..FpConfig::default()
    });
    let err = l.engine.run(&mut l.host).unwrap_err();
    let EngineError::FpException(dump) = &err else {
        panic!("{err}")
    };
    // `y = x * x` is fused into `z = y + x`: the fused vertex's first step traps.
    assert_eq!(dump.compute_set, "z");
    assert_eq!(
        dump.codelet,
        "Fused<Binary<Mul,f16>(in0,in0);Binary<Add,f16>(t0,in0)>"
    );
    assert_eq!(dump.trapped, FpSts::OFLO);
    assert_eq!(dump.element, Some(0));
    assert!(dump.cycle > 0 && dump.cycle >= dump.compute_set_cycle);
    insta::assert_snapshot!("oflo_dump", err.to_string());
    // The run stopped before the outfeed; the cursor stays at the faulting step.
    assert!(l.host.outfeeds.is_empty());
    assert!(matches!(l.engine.places().last(), Some(Place::Step { .. })));
    // The next run starts again from the top (and traps again).
    assert!(matches!(
        l.engine.run(&mut l.host),
        Err(EngineError::FpException(_))
    ));
    assert_eq!(l.engine.runs(), 2);
}

#[test]
fn other_exceptions_name_their_operands() {
    // 1 / 0 in FP16 with div0 enabled.
    let path = programs::sim_program("elementwise");
    let mut l = programs::launch_with(
        &path,
        &programs::mk2(16),
        EngineOptions {
            fp: FpConfig {
                inv: true,
                div0: true,
                oflo: true,
                ..FpConfig::default()
            },
            ..EngineOptions::default()
        },
    );
    // Zero one element of y so that quot divides by zero.
    struct ZeroY(ipusim_sim::feeds::ProgramHost);
    impl ipusim_sim::host::HostIo for ZeroY {
        fn infeed(
            &mut self,
            s: &ipusim_compiler::executable::HostStream,
            dst: &mut [u8],
        ) -> Result<(), ipusim_sim::host::HostError> {
            self.0.infeed(s, dst)?;
            if s.name == "y" {
                dst[6] = 0;
                dst[7] = 0;
            }
            Ok(())
        }
        fn outfeed(
            &mut self,
            s: &ipusim_compiler::executable::HostStream,
            src: &[u8],
        ) -> Result<(), ipusim_sim::host::HostError> {
            self.0.outfeed(s, src)
        }
    }
    let mut host = ZeroY(l.host.clone());
    let err = l.engine.run(&mut host).unwrap_err();
    let EngineError::FpException(dump) = &err else {
        panic!("{err}")
    };
    // `quot` is step 2 of the vertices that compute `e` (sum, prod, quot, act, scaled,
    // wide and e fused).
    assert_eq!(dump.compute_set, "e");
    assert!(dump.trapped.contains(FpSts::DIV0), "{err}");
    assert_eq!(dump.operands.len(), 3, "{err}");
    assert_eq!(dump.operands[1].name, "step 2 Binary<Div,f16>: b");
    assert!(
        dump.operands[1].value.starts_with("0 (f16 0x0000)"),
        "{err}"
    );
}

#[test]
fn variables_can_be_read_and_written() {
    let mut l = programs::launch_with(
        &programs::sim_program("matmul"),
        &programs::mk2(16),
        EngineOptions::default(),
    );
    assert_eq!(l.engine.variables().len(), 1);
    let (name, ty) = l.engine.variables()[0].clone();
    assert_eq!(name, "w");
    let w = l.engine.read_tensor("w").unwrap();
    assert_eq!(w.ty(), ty);
    let ones = Tensor::f16(ty.shape.clone(), vec![half::f16::ONE; ty.num_elements()]).unwrap();
    l.engine.write_variable("w", &ones).unwrap();
    assert_eq!(l.engine.read_tensor("w").unwrap(), ones);
    l.engine.run(&mut l.host).unwrap();
    // y = x · 1: every column is the row sum of x.
    let y = l.host.outfeeds["y"][0].to_f64_vec();
    assert!(y.chunks(16).all(|row| row.iter().all(|&v| v == row[0])));
    assert!(matches!(
        l.engine.write_variable("nope", &ones),
        Err(EngineError::UnknownVariable(_))
    ));
    let wrong = Tensor::f32([2], vec![0.0; 2]).unwrap();
    assert!(matches!(
        l.engine.write_variable("w", &wrong),
        Err(EngineError::VariableType { .. })
    ));
    assert!(l.engine.read_tensor("no such node").is_none());
}

#[test]
fn stepping_settles_then_steps_and_reports_where_it_is() {
    let mut l = programs::launch_with(
        &programs::sim_program("repeat_feeds"),
        &programs::mk2(16),
        EngineOptions::default(),
    );
    assert!(l.engine.places().is_empty());
    let Settled::Step(first) = l.engine.settle().unwrap() else {
        panic!()
    };
    assert_eq!(
        l.engine.settle().unwrap(),
        Settled::Step(first),
        "settling is idempotent"
    );
    let places = l.engine.places();
    assert!(
        matches!(
            places[1],
            Place::Repeat {
                iteration: 1,
                count: 3,
                ..
            }
        ),
        "{places:?}"
    );
    assert!(l.engine.in_run());
    let mut steps = 0;
    while let ipusim_sim::engine::Stepped::Step(r) = l.engine.step(&mut l.host).unwrap() {
        steps += 1;
        assert!(r.cycles > 0);
    }
    assert_eq!(steps as u64, l.engine.current_run().program_steps);
    assert!(!l.engine.in_run());
    assert_eq!(l.host.outfeeds["d1"].len(), 3);
}

#[test]
fn if_takes_the_branch_of_its_condition_and_charges_a_sync() {
    // Wrap the overflow program's body in If(condition) with an empty else: the condition
    // is a Bool tensor we add to the executable on tile 0.
    let l = programs::launch_with(
        &programs::sim_program("repeat_feeds"),
        &programs::mk2(16),
        EngineOptions::default(),
    );
    let mut exe = (*l.executable).clone();
    let mut cond = exe.tensors[0].clone();
    cond.name = "cond".into();
    cond.kind = ipusim_compiler::executable::TensorKind::Variable;
    cond.dtype = ipusim_ir::DType::Bool;
    cond.shape = ipusim_ir::Shape::new(vec![1]);
    let tile = cond.slices[0].tile;
    let top = exe.memory.tiles[exe.tile_index(tile)].total as u32 + 64;
    cond.slices = vec![ipusim_compiler::executable::TileSlice {
        tile,
        offset: top,
        intervals: vec![ipusim_compiler::executable::Interval::new(0, 1, top)].into(),
    }];
    exe.tensors.push(cond);
    let cid = TensorId(exe.tensors.len() as u32 - 1);
    exe.initial_values
        .push(ipusim_compiler::executable::InitialValue {
            tensor: cid,
            source: ipusim_compiler::executable::SourceValue::Init(ipusim_ir::Init::Constant(1.0)),
        });
    let body = std::mem::replace(&mut exe.program, Program::Sequence(vec![]));
    exe.program = Program::If {
        condition: cid,
        then: Box::new(body),
        otherwise: Box::new(Program::Sequence(vec![])),
    };
    let exe = Arc::new(exe);
    let mut engine = Engine::new(exe.clone(), EngineOptions::default()).unwrap();
    let mut host = l.host.clone();
    let s = engine.run(&mut host).unwrap();
    let sync = exe.target.sync_cycles as u64;
    assert_eq!(s.cycles.total, exe.estimate.total_cycles + sync);
    assert_eq!(host.outfeeds["d1"].len(), 3);
    engine
        .write_variable("cond", &Tensor::bool([1], vec![false]).unwrap())
        .unwrap();
    let s = engine.run(&mut host).unwrap();
    assert_eq!(s.cycles.total, sync);
    assert_eq!(s.program_steps, 0);
}

#[test]
fn bad_executables_and_oom_are_errors_not_panics() {
    let l = programs::launch_with(
        &programs::sim_program("matmul"),
        &programs::mk2(16),
        EngineOptions::default(),
    );
    let mut exe = (*l.executable).clone();
    exe.memory.oom = true;
    exe.memory.oom_tiles = vec![ipusim_exe::TileId::on_first_ipu(3)];
    let err = Engine::new(Arc::new(exe), EngineOptions::default()).unwrap_err();
    assert!(matches!(err, EngineError::OutOfMemory { .. }), "{err}");
    // An operand beyond its tile's memory.
    let mut exe = (*l.executable).clone();
    let cs = exe
        .compute_sets
        .iter_mut()
        .find(|c| !c.tiles.is_empty())
        .unwrap();
    cs.tiles[0].groups[0].vertices[0].operands[0].offset = 1 << 30;
    let err = Engine::new(Arc::new(exe), EngineOptions::default()).unwrap_err();
    // The one verifier of the contract refuses it on load, naming the vertex.
    match &err {
        EngineError::Verify(errors) => {
            assert!(errors.iter().all(|e| e.invariant == 3), "{err}");
            assert!(matches!(
                errors[0].location,
                ipusim_exe::verify::Location::Vertex { .. }
            ));
        }
        _ => panic!("{err}"),
    }
    assert!(
        err.to_string()
            .starts_with("invalid executable: 1 invariant(s) broken:\ncompute set"),
        "{err}"
    );
    // A variable without its initial value.
    let mut exe = (*l.executable).clone();
    exe.initial_values.clear();
    let err = Engine::new(Arc::new(exe), EngineOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("'w' has no initial value"),
        "{err}"
    );
    // An infeed that runs dry.
    let mut l = l;
    let mut empty = ipusim_sim::host::QueueHost::new();
    let err = l.engine.run(&mut empty).unwrap_err();
    assert!(matches!(err, EngineError::Host(_)), "{err}");
}

#[test]
fn engines_move_between_threads() {
    fn send<T: Send>() {}
    send::<Engine>();
    send::<ipusim_sim::debugger::Debugger<ipusim_sim::feeds::ProgramHost>>();
}

/// With rounding to nearest and no exception enabled, a split vertex runs as one pass, as an
/// unsplit vertex (`codelets::one_pass`); enabling an exception that no operation raises
/// runs them slice by slice, worker by worker. Both give the same trace, outfeeds and
/// variables, bit for bit: element-wise, reduction, convolution and pooling vertices.
#[test]
fn split_vertices_give_the_same_values_in_one_pass_and_slice_by_slice() {
    for name in ["train_mlp", "elementwise", "cnn_tour", "strided_shortcut"] {
        let options = |fp| EngineOptions {
            fp,
            seed: 5,
            threads: Some(1),
            record_trace: true,
        };
        let one_pass = observe(name, options(FpConfig::default()));
        let sliced = observe(
            name,
            options(FpConfig {
                oflo: true,
                div0: true,
                ..FpConfig::default()
            }),
        );
        assert!(!one_pass.0.events.is_empty());
        assert_eq!(one_pass, sliced, "{name}");
    }
}

/// A graph of large operands on a whole mk2 — a matmul whose exchanges move megabytes, and
/// an update of its weights read again by a second matmul — run with `run`, which leaves
/// the large exchanges' writes to the compute sets after them, gives the same trace,
/// outfeeds and variables as stepping it (every exchange written at once), as running it to
/// the next collective (none: to the end) and as `run` on two host threads. From the second
/// run on, `run` on two threads also gathers the sources of the exchange after a compute set
/// in that compute set, tile by tile (the matmul's reduction of partials); on one thread,
/// that exchange moves its bytes straight from the source tiles.
#[test]
fn deferred_exchange_writes_change_nothing_observable() {
    use ipusim_compiler::{compile, CompileOptions, Target};
    use ipusim_ir::{DType, GraphBuilder, Init};
    let mut b = GraphBuilder::new();
    let init = |seed| Init::Uniform {
        low: -1.0,
        high: 1.0,
        seed,
    };
    let x = b.variable("x", DType::F16, [512, 1024], init(1)).unwrap();
    let w = b.variable("w", DType::F16, [1024, 1024], init(2)).unwrap();
    let y = b.matmul(x, w).unwrap();
    let r = b.relu(y).unwrap();
    let s = b.reduce_sum(r, &[0], false).unwrap();
    let w2 = b.add(w, w).unwrap();
    b.assign(w, w2).unwrap();
    let z = b.matmul(x, w).unwrap();
    b.outfeed("r", r).unwrap();
    b.outfeed("s", s).unwrap();
    b.outfeed("z", z).unwrap();
    let exe = Arc::new(compile(&b.finish(), &Target::mk2(), &CompileOptions::default()).unwrap());
    #[derive(Clone, Copy)]
    enum Drive {
        Run,
        Step,
        ToCollective,
    }
    let observe = |threads, drive: Drive| {
        let options = EngineOptions {
            fp: sr(),
            seed: 3,
            threads: Some(threads),
            record_trace: true,
        };
        let mut engine = Engine::new(Arc::clone(&exe), options).unwrap();
        let mut host = ipusim_sim::host::QueueHost::new();
        assert!(engine.deferring_exchanges() > 0);
        // One host thread moves the large moves (the reduction's partials) directly, two
        // gather them early.
        match threads {
            1 => assert!(engine.direct_exchanges() > 0),
            _ => assert!(engine.direct_exchanges() == 0 && engine.early_gathering_exchanges() > 0),
        }
        for _ in 0..3 {
            match drive {
                Drive::Run => {
                    engine.run(&mut host).unwrap();
                }
                Drive::Step => {
                    while !matches!(
                        engine.step(&mut host).unwrap(),
                        ipusim_sim::engine::Stepped::Finished(_)
                    ) {}
                }
                // No collective: to the run's end.
                Drive::ToCollective => assert!(matches!(
                    engine.run_to_collective(&mut host).unwrap(),
                    ipusim_sim::engine::Collective::Finished(_)
                )),
            }
        }
        let vars: Vec<Vec<u8>> = (engine.variables().iter())
            .map(|(n, _)| engine.read_tensor(n).unwrap().to_bytes())
            .collect();
        (engine.take_trace(), host.outfeeds, vars)
    };
    let run = observe(1, Drive::Run);
    assert!(!run.0.events.is_empty());
    assert_eq!(run, observe(1, Drive::Step), "run against stepping");
    assert_eq!(
        run,
        observe(1, Drive::ToCollective),
        "run against run_to_collective"
    );
    assert_eq!(run, observe(2, Drive::Run), "one thread against two");
}
