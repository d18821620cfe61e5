//! Snapshots of execution traces of small programs on a 16-tile Mk2, through the public
//! helper users call in their own tests (`ipusim_runtime::launch::snapshot_trace`): the summary of every
//! step with its cycles, nested under repeat iterations, flags and traps.

mod common;

use common::programs::sim_program;
use ipusim_runtime::launch::{snapshot_trace, SnapshotOptions};
use ipusim_sim::numerics::FpConfig;

fn trace(name: &str, options: SnapshotOptions) -> ipusim_sim::trace::TraceSummary {
    snapshot_trace(sim_program(name), &options).unwrap()
}

#[test]
fn elementwise() {
    insta::assert_yaml_snapshot!(trace("elementwise", SnapshotOptions::default()));
}

#[test]
fn matmul() {
    insta::assert_yaml_snapshot!(trace("matmul", SnapshotOptions::default()));
}

#[test]
fn repeat_loop_with_infeed_and_outfeed() {
    let summary = trace(
        "repeat_feeds",
        SnapshotOptions {
            runs: 2,
            ..SnapshotOptions::default()
        },
    );
    assert_eq!(summary.runs, 2);
    insta::assert_yaml_snapshot!(summary);
}

#[test]
fn overflow_that_saturates() {
    insta::assert_yaml_snapshot!(trace("overflow", SnapshotOptions::default()));
}

#[test]
fn trapped_overflow() {
    let options = SnapshotOptions {
        fp: FpConfig {
            oflo: true,
            ..FpConfig::default()
        },
        ..SnapshotOptions::default()
    };
    insta::assert_yaml_snapshot!(trace("overflow", options));
}

#[test]
fn full_events_serialise_and_are_deterministic() {
    use ipusim_sim::engine::EngineOptions;
    let run = || {
        let mut l = common::programs::launch_with(
            &sim_program("repeat_feeds"),
            &common::programs::mk2(16),
            EngineOptions {
                record_trace: true,
                ..EngineOptions::default()
            },
        );
        l.engine.run(&mut l.host).unwrap();
        l.engine.take_trace()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    let json = serde_json::to_string(&a).unwrap();
    let back: ipusim_sim::trace::Trace = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
    // The first events of the run, in full.
    insta::assert_json_snapshot!(a.events[..6].to_vec());
}
