//! The Executable as a contract: serialisable, deterministic, self-consistent (operands on
//! their tiles, values of the right type), and compiled for every precision on both chips.

mod common;

use ipusim_compiler::executable::{Executable, StreamDirection, TensorKind};
use ipusim_compiler::{compile, CompileOptions, Target};
use ipusim_ir::models::{mlp, MlpSpec};
use ipusim_ir::{DType, Op};

fn flagship_forward() -> ipusim_ir::Program {
    mlp(&MlpSpec {
        input_dtype: DType::U8,
        input_scale: 1.0 / 16.0,
        seed: 11,
        ..MlpSpec::new(32, &[64, 128, 10])
    })
    .unwrap()
}

/// Every operand and copy lies inside its tensor's slice on its tile, in absolute bytes.
fn check_addresses(exe: &Executable) {
    let inside = |t: ipusim_compiler::executable::TensorId,
                  tile: ipusim_compiler::executable::TileId,
                  off: u64,
                  bytes: u64| {
        let tensor = exe.tensor(t);
        let s = tensor
            .slice_on(tile)
            .unwrap_or_else(|| panic!("'{}' not on tile {tile}", tensor.name));
        let size = s.num_elements() * tensor.dtype.size_bytes() as u64;
        assert!(
            off >= s.offset as u64 && off + bytes <= s.offset as u64 + size,
            "'{}' tile {tile}: [{off}, {}) outside [{}, {})",
            tensor.name,
            off + bytes,
            s.offset,
            s.offset as u64 + size
        );
    };
    for cs in &exe.compute_sets {
        for tw in &cs.tiles {
            for g in &tw.groups {
                for v in &g.vertices {
                    for o in &v.operands {
                        let es = exe.tensor(o.tensor).dtype.size_bytes() as u64;
                        inside(o.tensor, tw.tile, o.offset as u64, o.len as u64 * es);
                    }
                }
            }
        }
    }
    for ex in &exe.exchanges {
        for c in &ex.copies {
            inside(
                c.src_tensor,
                c.src_tile,
                c.src_offset as u64,
                c.bytes as u64,
            );
            for d in &c.dsts {
                inside(c.dst_tensor, d.tile, d.offset as u64, c.bytes as u64);
            }
        }
    }
    for v in &exe.values {
        if let Some(t) = v.tensor {
            let t = exe.tensor(t);
            assert_eq!(t.dtype, v.dtype, "{}", v.name);
            assert_eq!(
                t.num_elements(),
                v.shape.num_elements() as u64,
                "{}",
                v.name
            );
        }
    }
    for s in &exe.streams {
        assert_eq!(exe.tensor(s.tensor).size_bytes(), s.bytes_per_micro_batch);
        if s.direction == StreamDirection::HostToDevice {
            assert!(matches!(
                exe.tensor(s.tensor).kind,
                TensorKind::StreamBuffer { .. }
            ));
        }
    }
}

#[test]
fn executable_round_trips_through_json_and_is_deterministic() {
    let p = flagship_forward();
    let t = Target::parse("(tiles: 16)", "t16").unwrap();
    let a = compile(&p.graph, &t, &CompileOptions::default()).unwrap();
    let b = compile(&p.graph, &t, &CompileOptions::default()).unwrap();
    assert_eq!(a, b);
    let json = serde_json::to_string(&a).unwrap();
    let back: Executable = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
    check_addresses(&a);
}

#[test]
fn flagship_compiles_on_mk2_and_mk1_in_every_precision() {
    let forward = flagship_forward();
    for target in [Target::mk2(), Target::mk1()] {
        let exe = compile(&forward.graph, &target, &CompileOptions::default()).unwrap();
        check_addresses(&exe);
        assert!(!exe.memory.oom);
        for (compute, weights) in [
            (DType::F16, DType::F16),
            (DType::F16, DType::F32),
            (DType::F32, DType::F32),
        ] {
            let g = common::mlp_training_step(32, &[64, 128, 10], compute, weights);
            let exe = compile(
                &g,
                &target,
                &CompileOptions {
                    gradient_accumulation: 4,
                    ..Default::default()
                },
            )
            .unwrap();
            check_addresses(&exe);
            assert!(!exe.memory.oom, "{} {compute}.{weights}", target.name);
            // The weight updates are done in place: no Step-phase assign exchange, and the
            // updated variable is the value of the update op.
            assert!(exe
                .exchanges
                .iter()
                .all(|x| x.name != "step/assign/exchange"));
            let w = exe.value("dense1/weights").unwrap().tensor;
            let upd = exe
                .value("update/dense1/weights/scaled_add")
                .unwrap()
                .tensor;
            assert_eq!(w, upd);
        }
    }
}

#[test]
fn small_targets_work() {
    for tiles in [1, 2, 4, 16] {
        let t = Target::parse(&format!("(base: \"mk1\", tiles: {tiles})"), "small").unwrap();
        let g = common::mlp_training_step(8, &[16, 32, 4], DType::F16, DType::F32);
        let exe = compile(&g, &t, &CompileOptions::default()).unwrap();
        check_addresses(&exe);
        assert!(exe
            .compute_sets
            .iter()
            .all(|cs| cs.tiles.iter().all(|w| w.tile.tile() < tiles)));
        assert!(exe.estimate.total_cycles > 0);
    }
    // A batch of one: the cross-entropy's mean reduces a single row.
    let g = common::mlp_training_step(1, &[8, 4], DType::F32, DType::F32);
    let exe = compile(&g, &Target::mk1(), &CompileOptions::default()).unwrap();
    check_addresses(&exe);
}

/// Every op and awkward shapes (empty tensors, scalars, batched and broadcast matmuls,
/// general transposes, reductions over separated axes, softmax and argmax along axis 0)
/// compile, pass the verifier and keep every address inside its slice.
#[test]
fn every_op_and_awkward_shapes_compile() {
    use ipusim_ir::{Activation, GraphBuilder, Init};
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [4, 6, 8]).unwrap();
    let w = b.variable("w", DType::F32, [8, 5], Init::Zeros).unwrap();
    let wb = b
        .variable("wb", DType::F32, [4, 8, 5], Init::Zeros)
        .unwrap();
    let mm = b.matmul(x, w).unwrap(); // batch folded into rows
    let bmm = b.matmul(x, wb).unwrap(); // batched
    let xt = b.transpose(x, &[0, 2, 1]).unwrap();
    let bmt = b.op("bmt", Op::MatMul, &[xt, x]).unwrap(); // transposed batched A: [4, 8, 8]
    let perm = b.transpose(x, &[2, 0, 1]).unwrap(); // general transpose
    let sum = b.add(mm, bmm).unwrap();
    let r02 = b.reduce_sum(sum, &[0, 2], false).unwrap(); // separated axes
    let mx = b
        .op(
            "max",
            Op::ReduceMax {
                axes: vec![1],
                keep_dims: true,
            },
            &[sum],
        )
        .unwrap();
    let sm0 = b.softmax(sum, 0).unwrap();
    let am0 = b.argmax(sum, 0).unwrap();
    let lsm = b.op("lsm", Op::LogSoftmax { axis: 2 }, &[sum]).unwrap();
    let g = b.unary(Op::Gelu, lsm).unwrap();
    let ag = b.activation_grad(Activation::Tanh, g, sm0).unwrap();
    let gt = b.op("gt", Op::Greater, &[ag, mx]).unwrap();
    let sel = b.op("sel", Op::Select, &[gt, ag, sm0]).unwrap();
    let sl = b
        .op(
            "slice",
            Op::Slice {
                begin: vec![1, 0, 2],
                end: vec![3, 6, 5],
            },
            &[sel],
        )
        .unwrap();
    let pad = b
        .op(
            "pad",
            Op::Pad {
                before: vec![0, 1, 0],
                after: vec![1, 0, 2],
            },
            &[sl],
        )
        .unwrap();
    let cat = b.op("cat", Op::Concat { axis: 2 }, &[pad, pad]).unwrap();
    let bc = b
        .op(
            "bc",
            Op::Broadcast {
                shape: [2, 3, 7, 10].into(),
            },
            &[cat],
        )
        .unwrap();
    let ids = b.input("ids", DType::I32, [3]).unwrap();
    let oh = b
        .op(
            "oh",
            Op::OneHot {
                depth: 4,
                dtype: DType::F16,
            },
            &[ids],
        )
        .unwrap();
    let empty = b.input("empty", DType::F32, [0, 5]).unwrap();
    let esum = b.reduce_sum(empty, &[0], false).unwrap();
    let emean = b.reduce_mean(empty, &[0], false).unwrap();
    let esm = b.softmax(empty, 1).unwrap();
    let scalar = b.scalar("s", DType::F32, 2.0).unwrap();
    let sq = b.unary(Op::Sqrt, scalar).unwrap();
    let st = b.transpose(sq, &[]).unwrap();
    let i32s = b.input("ints", DType::I32, [7]).unwrap();
    let ineg = b.unary(Op::Neg, i32s).unwrap();
    let imax = b
        .op(
            "imax",
            Op::ReduceMax {
                axes: vec![0],
                keep_dims: false,
            },
            &[ineg],
        )
        .unwrap();
    for (i, t) in [r02, mx, am0, bmt, perm, bc, oh, esum, emean, esm, st, imax]
        .into_iter()
        .enumerate()
    {
        b.outfeed(&format!("o{i}"), t).unwrap();
    }
    let graph = b.finish();
    for target in [Target::mk2(), Target::parse("(tiles: 3)", "t3").unwrap()] {
        let exe = compile(&graph, &target, &CompileOptions::default()).unwrap();
        check_addresses(&exe);
        assert!(exe.value("bmt").unwrap().tensor.is_some());
    }
}

/// The flagship MLP's real training step (the training transform of `ipusim-ir`) compiles on
/// mk2 and mk1 in all three precisions, with every weight and optimizer state updated in
/// place.
#[test]
fn flagship_training_step_from_the_transform() {
    use ipusim_ir::training::prepare;
    use ipusim_ir::{Optimizer, Precision, TrainingSpec};
    let mut p = flagship_forward();
    p.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Momentum {
            learning_rate: 0.05,
            momentum: 0.9,
        },
        loss_scaling: 128.0,
        precision: Precision::P16_32,
        gradient_accumulation: 2,
        accumulation_dtype: None,
        stable_norm: false,
    });
    for precision in Precision::ALL {
        let step = prepare(&p, Some(precision), false).unwrap();
        for target in [Target::mk2(), Target::mk1()] {
            let opts = CompileOptions {
                gradient_accumulation: step.gradient_accumulation,
                device_iterations: step.device_iterations,
                ..CompileOptions::default()
            };
            let exe = compile(&step.graph, &target, &opts).unwrap();
            check_addresses(&exe);
            assert!(!exe.memory.oom, "{precision} on {}", target.name);
            assert!(
                exe.exchanges
                    .iter()
                    .all(|x| !x.name.ends_with("assign/exchange")),
                "{precision} on {}: an Assign was not done in place",
                target.name
            );
        }
    }
}

/// AdamW's weight update (`decayed - delta`, `decayed = w · (1 - lr·wd)`) is one fused
/// vertex that reads the weight as a leaf: it writes the weight in place (as PopART's
/// in-place optimizer updates do), with no assign copy of the weight, in every precision;
/// so are the moments' updates. The updater term `delta` (the moments' ratio times the step)
/// is its own vertex where the moments are, and the weight's update moves only it, not the
/// two moments (PopART's `AdamUpdaterOp` and `AdamVarUpdateOp`).
#[test]
fn adamw_updates_are_done_in_place() {
    use ipusim_ir::training::prepare;
    use ipusim_ir::{DType, Optimizer, Precision, TrainingSpec};
    let mut p = flagship_forward();
    p.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::AdamW {
            learning_rate: 0.001,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
            accum_type: Some(DType::F16),
            first_order_momentum_accum_type: Some(DType::F16),
            second_order_momentum_accum_type: Some(DType::F32),
        },
        loss_scaling: 1000.0,
        precision: Precision::P16_16,
        gradient_accumulation: 2,
        accumulation_dtype: None,
        stable_norm: false,
    });
    for precision in Precision::ALL {
        let step = prepare(&p, Some(precision), false).unwrap();
        let opts = CompileOptions {
            gradient_accumulation: step.gradient_accumulation,
            ..CompileOptions::default()
        };
        let exe = compile(&step.graph, &Target::mk2(), &opts).unwrap();
        check_addresses(&exe);
        // The weights, and Adam's moments (`m·beta1 + (1 − beta1)·g` and
        // `v·beta2 + (1 − beta2)·g²`, a multiply and a ScaledAdd fused into one vertex).
        let updates = ["dense1/weights", "dense2/weights"]
            .into_iter()
            .flat_map(|w| {
                [
                    (w.to_string(), format!("update/{w}/new")),
                    (format!("{w}/adam_m"), format!("update/{w}/m_new")),
                    (format!("{w}/adam_v"), format!("update/{w}/v_new")),
                ]
            });
        for (w, new) in updates {
            let w = w.as_str();
            let var = exe.value(w).unwrap().tensor.unwrap();
            let new = exe.value(&new).unwrap().tensor.unwrap();
            assert_eq!(var, new, "{precision}: {w} is not updated in place");
            let copied = exe.exchanges.iter().any(|x| {
                x.copies
                    .iter()
                    .any(|c| c.dst_tensor == var && c.src_tensor != var)
            });
            assert!(!copied, "{precision}: {w} is written by a copy");
        }
        for w in ["dense1/weights", "dense2/weights"] {
            let tensor = |name: &str| exe.value(name).unwrap().tensor.unwrap();
            let moments = [
                tensor(&format!("{w}/adam_m")),
                tensor(&format!("{w}/adam_v")),
            ];
            let delta = tensor(&format!("update/{w}/delta"));
            let sources: Vec<_> = exe
                .exchanges
                .iter()
                .filter(|x| x.name.starts_with(&format!("update/{w}/new")))
                .flat_map(|x| &x.copies)
                .map(|c| c.src_tensor)
                .collect();
            assert!(
                !sources.iter().any(|s| moments.contains(s)),
                "{precision}: {w}'s update reads its moments"
            );
            assert!(
                sources.contains(&delta),
                "{precision}: {w}'s update does not move its updater term"
            );
        }
    }
}

#[test]
fn one_ipu_report_has_one_per_ipu_row_equal_to_the_totals() {
    let g = common::mlp_training_step(8, &[16, 12, 4], DType::F16, DType::F32);
    let exe = compile(&g, &Target::mk2(), &CompileOptions::default()).unwrap();
    assert_eq!(exe.system.ipus, 1);
    let r = ipusim_compiler::CompileReport::new("mlp", Some(ipusim_ir::Precision::P16_32), &exe);
    assert_eq!(r.ipus.len(), 1);
    let row = &r.ipus[0];
    assert_eq!(row.ipu, 0);
    assert_eq!(row.tiles, exe.target.tiles);
    assert_eq!(row.used_tiles, r.used_tiles);
    assert_eq!(row.tile_balance, r.tile_balance);
    assert_eq!(
        row.stream_bytes_host_to_device,
        r.stream_bytes_host_to_device
    );
    assert_eq!(
        row.stream_bytes_device_to_host,
        r.stream_bytes_device_to_host
    );
    assert!(row.stream_bytes_host_to_device > 0 && row.stream_bytes_device_to_host > 0);
    assert_eq!(row.memory_bytes, r.memory.total_bytes);
    assert_eq!(row.max_tile_bytes, r.memory.max_tile_bytes);
    assert_eq!(row.oom_tiles as usize, r.memory.oom_tiles.len());
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json["ipus"][0]["used_tiles"],
        serde_json::json!(r.used_tiles)
    );
    assert!(r.to_text().contains("IPU   used tiles tile balance"));
}

/// A softmax row too long for one worker (a ResNet's 1,000 classes at batch 1) is split
/// over the tiles holding the logits: its element-wise stages run where the logits are, and
/// the whole softmax costs a fraction of the one-vertex row's estimate (11 worker cycles per
/// element on one worker: 66,000 tile cycles for 1,000 elements).
#[test]
fn long_softmax_rows_are_split_over_the_tiles_holding_them() {
    let src = r#"Program(name: "rows", nodes: [
        (name: "x", op: Input(stream: "x", dtype: F16, shape: [1, 64])),
        (name: "w", op: Variable(dtype: F16, shape: [64, 1000], init: GlorotUniform(seed: 1))),
        (name: "logits", op: MatMul, inputs: ["x", "w"]),
        (name: "p", op: Softmax(axis: 1), inputs: ["logits"]),
        (name: "p_out", op: Outfeed(stream: "p"), inputs: ["p"]),
    ])"#;
    let program = ipusim_ir::text::parse_program(src, "rows.ron").unwrap();
    let exe = compile(&program.graph, &Target::mk2(), &CompileOptions::default()).unwrap();
    check_addresses(&exe);
    let stages: Vec<_> = exe
        .estimate
        .compute_sets
        .iter()
        .filter(|c| c.name.starts_with("p/"))
        .collect();
    let names: Vec<&str> = stages.iter().map(|c| c.name.as_str()).collect();
    for stage in ["p/exp", "p/sum", "p/out"] {
        assert!(names.contains(&stage), "no stage {stage} in {names:?}");
    }
    let tiles = |name: &str| stages.iter().find(|c| c.name == name).unwrap().tiles_used;
    assert!(
        tiles("p/exp") > 100 && tiles("p/out") == tiles("p/exp"),
        "{stages:?}"
    );
    assert_eq!(
        tiles("p/sum"),
        1,
        "the sum is sequential on the row's first tile"
    );
    let total: u64 = stages.iter().map(|c| c.cycles).sum();
    assert!(
        total < 66_000 / 5,
        "the split softmax takes {total} cycles: {stages:?}"
    );
    let one_vertex = exe
        .compute_sets
        .iter()
        .flat_map(|cs| &cs.tiles)
        .flat_map(|t| &t.groups)
        .any(|g| {
            matches!(
                g.codelet,
                ipusim_compiler::codelets::Codelet::Softmax { .. }
            )
        });
    assert!(!one_vertex, "a one-vertex softmax remains");
}

/// A variable of more elements on one tile than 32 bits count (intervals hold 32-bit
/// lengths) is laid out in pieces and refused by the memory plan as beyond 32-bit tile
/// addresses, naming the tensor and the bytes it would need: an error, not a wrapped length.
#[test]
fn a_variable_past_32_bits_of_elements_on_one_tile_is_too_large_not_wrapped() {
    let mut b = ipusim_ir::GraphBuilder::new();
    let init = ipusim_ir::Init::Zeros;
    let v = b
        .variable("v", DType::F16, [1usize << 33], init.clone())
        .unwrap();
    let w = b.variable("w", DType::F16, [1usize << 33], init).unwrap();
    b.assign(w, v).unwrap();
    let mut one_tile = Target::mk2();
    one_tile.tiles = 1;
    let e = compile(&b.finish(), &one_tile, &CompileOptions::default()).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("17179869184 bytes, beyond 32-bit tile addresses"),
        "{text}"
    );
}
