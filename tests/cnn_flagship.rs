//! The shipped CNN, `programs/resnet_digits.ron` (a residual CNN with batch norm on the 8×8
//! digits): it trains to at least 95% accuracy over the last of its 5 epochs in 16.16 with
//! stochastic rounding and in 32.32, through the CLI, with one loss and one accuracy per step.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn ipusim(args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_ipusim"))
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&out).unwrap()
}

#[test]
fn trains_to_95_percent_in_16_16_with_sr_and_in_32_32() {
    for (precision, sr) in [("16.16", "on"), ("32.32", "off")] {
        let run = ipusim(&[
            "run",
            "programs/resnet_digits.ron",
            "--json",
            "--precision",
            precision,
            "--sr",
            sr,
        ]);
        let acc: Vec<f64> = run["outfeeds"]["accuracy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let loss = run["outfeeds"]["loss"].as_array().unwrap();
        assert_eq!((acc.len(), loss.len()), (150, 150), "one entry per step");
        // The last epoch: the final 30 micro-batches of 50 cover the training file once.
        let last: f64 = acc[120..].iter().sum::<f64>() / 30.0;
        let first: f64 = acc[..30].iter().sum::<f64>() / 30.0;
        assert!(last >= 0.95, "{precision}: last-epoch accuracy {last}");
        assert!(first < last, "{precision}: {first} then {last}");
        let report = &run["report"];
        assert!(
            report["convolutions"].as_array().unwrap().len() >= 5,
            "per-layer rows in the report"
        );
    }
}
