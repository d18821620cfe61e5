//! The options shared by the commands that simulate a program (`ipusim step` and
//! `ipusim run`): seed, stochastic rounding, NaN on overflow, floating-point exceptions,
//! host threads — the knobs of TensorFlow's `IPUConfig.floating_point_behaviour` and
//! PopTorch's `randomSeed`/`enableStochasticRounding`/`enableFloatingPointExceptions` —
//! and the data files that replace infeed sources (`--infeed NAME=FILE`); together with the
//! build arguments, the runtime session both commands open, so they see the same data.

use super::compile::BuildArgs;
use clap::{Args, ValueEnum};
use ipusim_runtime::SessionOptions;
use ipusim_sim::numerics::{FpConfig, StochasticRounding};
use std::path::PathBuf;

/// `--sr`: stochastic rounding of FP16 results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sr {
    /// Round to nearest, ties to even.
    Off,
    /// Stochastic rounding everywhere.
    On,
    /// Stochastic rounding where the graph is replica-identical (the simulator runs one
    /// replica, so: everywhere).
    #[value(alias = "replica-identical-only")]
    ReplicaIdentical,
}

/// Simulation options.
#[derive(Args, Clone, Debug)]
pub struct SimArgs {
    /// Program seed: every worker's stochastic-rounding stream derives from it.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stochastic rounding of FP16 results.
    #[arg(long, value_enum, default_value = "off")]
    pub sr: Sr,
    /// FP16 overflow gives NaN (and INV) instead of saturating to ±65504.
    #[arg(long)]
    pub nanoo: bool,
    /// Floating-point exceptions that stop the program: a comma-separated list of inv,
    /// div0, oflo.
    #[arg(long, value_name = "inv,div0,oflo", value_parser = parse_exceptions)]
    pub fp_exceptions: Option<Exceptions>,
    /// Host threads for the simulation, 1 to 1024 (default: all cores).
    #[arg(long, value_parser = parse_threads)]
    pub threads: Option<usize>,
}

/// Data files replacing infeed sources.
#[derive(Args, Clone, Debug)]
pub struct FeedArgs {
    /// Feed an infeed stream from a CSV file instead of the program's source (repeatable).
    #[arg(long = "infeed", value_name = "NAME=FILE", value_parser = parse_infeed)]
    pub infeeds: Vec<(String, PathBuf)>,
    /// Feed every infeed with synthetic data of its shape and dtype (floats uniform in
    /// [-1, 1), i32 labels 0..10, u8 pixels 0..=16) instead of the program's sources.
    #[arg(long = "synthetic-data", conflicts_with = "infeeds")]
    pub synthetic_data: bool,
}

/// Splits `NAME=VALUE` (both non-empty); `what` names the value in the error.
pub fn split_pair(s: &str, what: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() && !value.is_empty() => {
            Ok((name.to_string(), value.to_string()))
        }
        _ => Err(format!("expected NAME={what}, got '{s}'")),
    }
}

/// Most host threads `--threads` accepts: more than any host has cores, few enough that
/// building the pool cannot exhaust the process's threads.
pub const MAX_THREADS: usize = 1024;

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of threads from 1 to {MAX_THREADS}, got '{s}'"
        )),
    }
}

fn parse_infeed(s: &str) -> Result<(String, PathBuf), String> {
    split_pair(s, "FILE").map(|(n, f)| (n, PathBuf::from(f)))
}

/// The exceptions enabled by `--fp-exceptions`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exceptions {
    /// Invalid operations.
    pub inv: bool,
    /// Division by zero.
    pub div0: bool,
    /// Overflow.
    pub oflo: bool,
}

/// Parses `inv,div0,oflo` (any subset, any order; `none` for none, `all` for all three).
pub fn parse_exceptions(s: &str) -> Result<Exceptions, String> {
    let mut e = Exceptions::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.to_ascii_lowercase().as_str() {
            "inv" => e.inv = true,
            "div0" => e.div0 = true,
            "oflo" => e.oflo = true,
            "all" => {
                e = Exceptions {
                    inv: true,
                    div0: true,
                    oflo: true,
                }
            }
            "none" => {}
            other => {
                return Err(format!(
                    "unknown exception '{other}' (expected inv, div0, oflo, all or none)"
                ))
            }
        }
    }
    Ok(e)
}

impl SimArgs {
    /// The floating-point configuration.
    pub fn fp_config(&self) -> FpConfig {
        let e = self.fp_exceptions.unwrap_or_default();
        FpConfig {
            inv: e.inv,
            div0: e.div0,
            oflo: e.oflo,
            esr: match self.sr {
                Sr::Off => StochasticRounding::Off,
                Sr::On => StochasticRounding::On,
                Sr::ReplicaIdentical => StochasticRounding::ReplicaIdenticalOnly,
            },
            nanoo: self.nanoo,
        }
    }

    /// The session options of a program built as `build` says, simulated as these
    /// arguments say, its infeeds connected as `feeds` says (everything else the defaults).
    pub fn session_options(
        &self,
        build: &BuildArgs,
        feeds: &FeedArgs,
    ) -> Result<SessionOptions, String> {
        // Every message is rendered whole (file, line, `error:`).
        let b = build.build_options()?;
        let mut options = SessionOptions {
            build: b,
            fp: self.fp_config(),
            seed: self.seed,
            threads: self.threads,
            ..SessionOptions::default()
        };
        options.streams.synthetic_data = feeds.synthetic_data;
        for (name, file) in &feeds.infeeds {
            let files = &mut options.streams.infeed_files;
            if files.insert(name.clone(), file.clone()).is_some() {
                return Err(format!("error: --infeed {name}=... is given twice"));
            }
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exceptions_parse() {
        assert_eq!(
            parse_exceptions("oflo,INV").unwrap(),
            Exceptions {
                inv: true,
                div0: false,
                oflo: true
            }
        );
        assert_eq!(parse_exceptions("none").unwrap(), Exceptions::default());
        assert!(parse_exceptions("all").unwrap().div0);
        assert!(parse_exceptions("ofl")
            .unwrap_err()
            .contains("unknown exception 'ofl'"));
    }

    #[test]
    fn infeeds_parse() {
        assert_eq!(
            parse_infeed("features=a.csv").unwrap(),
            ("features".to_string(), PathBuf::from("a.csv"))
        );
        assert!(parse_infeed("features").is_err());
    }
}
