//! Placement of a program over IPUs (`ipusim_ir::pipeline`): split points begin stages in
//! program order, sources sit with their first reader, and bad placements name the option
//! and the value.

use ipusim_ir::models::{mlp, MlpSpec};
use ipusim_ir::pipeline::{forward_stages, place, Origin, PipelineSpec, PlacementError, Schedule};

fn spec(splits: &[&str]) -> PipelineSpec {
    PipelineSpec {
        splits: splits.iter().map(|s| s.to_string()).collect(),
        ..PipelineSpec::default()
    }
}

#[test]
fn a_split_begins_a_stage_and_sources_sit_with_their_first_reader() {
    let p = mlp(&MlpSpec::new(4, &[6, 5, 3])).unwrap();
    let names: Vec<&str> = p.graph.nodes().map(|(_, n)| n.name.as_str()).collect();
    // A module path: the first node named `dense1/...` or `dense1.…` begins stage 1.
    assert!(names.iter().any(|n| n.starts_with("dense2/")), "{names:?}");
    let split = "dense2".to_string();
    let st = forward_stages(&p.graph, std::slice::from_ref(&split), Origin::Program).unwrap();
    for (id, n) in p.graph.nodes() {
        let s = st[n.name.as_str()];
        if n.name.starts_with(&split) {
            assert_eq!(s, 1, "{}", n.name);
        }
        for &i in &n.inputs {
            assert!(
                st[p.graph.node(i).name.as_str()] <= s,
                "{} reads a later stage",
                n.name
            );
        }
        if n.op.is_source() {
            let first = p
                .graph
                .consumers(id)
                .into_iter()
                .map(|c| st[p.graph.node(c).name.as_str()])
                .min();
            assert_eq!(Some(s), first.or(Some(0)), "{}", n.name);
        }
    }
    assert!(st.values().any(|&s| s == 0));
}

#[test]
fn bad_splits_name_the_option_and_the_value() {
    let p = mlp(&MlpSpec::new(4, &[6, 5, 3])).unwrap();
    let e = place(
        &p.graph,
        &p.graph,
        &spec(&["layer9"]),
        None,
        Origin::CommandLine,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--pipeline-splits: split point 'layer9'"),
        "{e}"
    );
    let e = place(
        &p.graph,
        &p.graph,
        &spec(&["dense2", "dense1"]),
        None,
        Origin::Program,
    )
    .unwrap_err();
    assert!(matches!(e, PlacementError::OutOfOrder { .. }), "{e}");
    let e = place(
        &p.graph,
        &p.graph,
        &spec(&["dense1"]),
        Some(1),
        Origin::Program,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--ipus 1: stage 1 is placed on IPU 1"),
        "{e}"
    );
    let mut s = spec(&["dense1"]);
    s.ipus = vec![1];
    let e = place(&p.graph, &p.graph, &s, None, Origin::Program).unwrap_err();
    assert!(matches!(e, PlacementError::MappingLength { .. }), "{e}");
    assert_eq!("grouped".parse::<Schedule>(), Ok(Schedule::Grouped));
    assert!("pipelined".parse::<Schedule>().is_err());
}
