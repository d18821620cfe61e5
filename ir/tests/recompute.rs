//! Recomputation (`ipusim_ir::recompute`): the backward pass reads clones of the forward
//! activations, recomputed from the checkpoints, and never an original that is not one.

use ipusim_ir::models::{mlp, MlpSpec};
use ipusim_ir::pipeline::Placement;
use ipusim_ir::recompute::{checkpoints, is_forward, recompute, Checkpoints, PREFIX};
use ipusim_ir::training::prepare;
use ipusim_ir::{Graph, Optimizer, Precision, TrainingSpec};
use std::collections::HashSet;

/// A small MLP training program (SGD, 32.32).
fn program() -> ipusim_ir::Program {
    let mut p = mlp(&MlpSpec::new(4, &[6, 5, 3])).unwrap();
    p.training = Some(TrainingSpec {
        loss: "loss".into(),
        optimizer: Optimizer::Sgd { learning_rate: 0.1 },
        loss_scaling: 1.0,
        precision: Precision::P32_32,
        gradient_accumulation: 1,
        accumulation_dtype: None,
        stable_norm: false,
    });
    p
}

fn step() -> Graph {
    prepare(&program(), None, false).unwrap().graph
}

/// The forward originals (not sources, not clones) a backward node reads.
fn kept_reads(g: &Graph, keep: &HashSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (_, n) in g.nodes().filter(|(_, n)| n.name.starts_with("bwd/")) {
        for &i in &n.inputs {
            let input = g.node(i);
            if is_forward(g, i) && !input.op.is_source() && !keep.contains(&input.name) {
                out.push(format!("{} reads {}", n.name, input.name));
            }
        }
    }
    out
}

#[test]
fn the_backward_pass_reads_only_checkpoints_and_clones() {
    let g = step();
    let (all, n_all) = recompute(&g, &Checkpoints::default(), &Placement::single()).unwrap();
    assert!(n_all > 0);
    assert_eq!(kept_reads(&all, &HashSet::new()), Vec::<String>::new());
    // Every clone computes what its original does: same op, same type.
    for (_, c) in all.nodes().filter(|(_, n)| n.name.starts_with(PREFIX)) {
        let original = g
            .find(&c.name[PREFIX.len()..])
            .expect("a clone names its original");
        assert_eq!((&g.node(original).op, &g.node(original).ty), (&c.op, &c.ty));
    }
    // A checkpoint is kept, and what it depends on is not recomputed for its readers.
    let first_hidden = g
        .nodes()
        .find(|(id, n)| is_forward(&g, *id) && n.name.starts_with("dense2/") && !n.op.is_source())
        .map(|(_, n)| n.name.clone())
        .expect("the mlp has a second layer");
    let names = [first_hidden.clone()];
    let keep = checkpoints(&g, &Placement::single(), &names).unwrap();
    let (some, n_some) = recompute(&g, &keep, &Placement::single()).unwrap();
    assert!(n_some < n_all, "{n_some} vs {n_all}");
    let kept: HashSet<String> = names.into_iter().collect();
    assert_eq!(kept_reads(&some, &kept), Vec::<String>::new());
    assert!(checkpoints(&g, &Placement::single(), &["no_such_node".into()]).is_err());
}

#[test]
fn a_value_sent_to_the_next_stage_is_recomputed_for_its_own_stage_and_kept_for_the_next() {
    use ipusim_ir::pipeline::{place, Origin, PipelineSpec, Schedule};
    let p = program();
    let g = prepare(&p, None, false).unwrap().graph;
    let spec = PipelineSpec {
        splits: vec!["dense2".into()],
        schedule: Schedule::Grouped,
        ipus: Vec::new(),
    };
    let placement = place(&g, &p.graph, &spec, None, Origin::Program).unwrap();
    let keep = checkpoints(&g, &placement, &[]).unwrap();
    // The first layer's output crosses into stage 1: kept for stage 1's readers only.
    let crossing: Vec<&str> = keep
        .crossing
        .iter()
        .map(|&id| g.node(id).name.as_str())
        .filter(|n| !n.starts_with("bwd/"))
        .collect();
    assert!(!crossing.is_empty());
    let (r, _) = recompute(&g, &keep, &placement).unwrap();
    let rp = place(&r, &p.graph, &spec, None, Origin::Program).unwrap();
    let mut own = 0;
    let mut next = 0;
    for (id, n) in r.nodes().filter(|(_, n)| n.name.starts_with("bwd/")) {
        for &i in &n.inputs {
            let name = r.node(i).name.as_str();
            if crossing.contains(&name) {
                // A reader of the original: never on the stage that computed it.
                assert!(rp.stage_of(id) > 0, "{} reads {name} on stage 0", n.name);
                next += 1;
            } else if let Some(orig) = name.strip_prefix(PREFIX) {
                if crossing.contains(&orig) {
                    assert_eq!(rp.stage_of(id), 0, "{} reads {name}", n.name);
                    own += 1;
                }
            }
        }
    }
    // Stage 0's backward (the first layer's ReLU gradient reads its output) reads the
    // recomputed value; stage 1's (the second layer's weight gradient) the kept one.
    assert!(own > 0 && next > 0, "own {own}, next {next}");
}
