//! `ipusim step PROGRAM [--target mk2|mk1|FILE] [--precision 16.16|16.32|32.32]
//! [--partials float|half] [--seed N] [--sr off|on|replica-identical] [--nanoo]
//! [--fp-exceptions inv,div0,oflo] [--threads N]`: compile a program and step through it
//! in the simulator at an interactive prompt (`help` lists the commands).
//!
//! Commands come from stdin, one per line; piped in, each is echoed after the prompt so the
//! transcript reads like a session. Infeeds come from the program's own data sources when
//! the simulator can produce them (`Constant`, `Uniform`, `Sequence`), else from
//! deterministic synthetic data (CSV files are read by `ipusim run`); see
//! `ipusim_sim::feeds`. Exit codes: 0 after `quit` or the end of the input, 2 when the
//! program does not fit in tile memory, 1 for any other error.

use super::compile::{BuildArgs, EXIT_OOM};
use super::sim_options::SimArgs;
use super::{EXIT_ERROR, EXIT_OK};
use clap::Args;
use ipusim_compiler::Target;
use ipusim_sim::debugger::inspect::fp_sts;
use ipusim_sim::debugger::repl::{repl, Session};
use ipusim_sim::debugger::Debugger;
use ipusim_sim::engine::EngineError;
use ipusim_sim::launch::{launch, LaunchError, LaunchOptions, Launched};
use ipusim_sim::numerics::FpCtl;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};

/// Arguments of `ipusim step`.
#[derive(Args, Debug)]
pub struct StepArgs {
    /// Program, target, precision, partials.
    #[command(flatten)]
    pub build: BuildArgs,
    /// Seed, stochastic rounding, nanoo, exceptions, threads.
    #[command(flatten)]
    pub sim: SimArgs,
}

/// Runs `ipusim step`; returns the exit code.
pub fn run(args: &StepArgs) -> i32 {
    let target = match Target::from_name_or_file(&args.build.target) {
        Ok(t) => t,
        Err(e) => return fail(&format!("error: {e}")),
    };
    let launched = launch(
        &args.build.program,
        &LaunchOptions {
            target,
            precision: args.build.precision,
            partials: args.build.partials,
            engine: args.sim.engine_options(false),
        },
    );
    let launched = match launched {
        Ok(l) => l,
        Err(
            e @ LaunchError::Build {
                source: EngineError::OutOfMemory { .. },
                ..
            },
        ) => {
            fail(&e.to_string());
            return EXIT_OOM;
        }
        Err(e) => return fail(&e.to_string()),
    };
    let stdin = std::io::stdin();
    let echo = !stdin.is_terminal();
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", banner(&launched));
    let Launched { engine, host, .. } = launched;
    let mut session = Session::new(Debugger::new(engine, host));
    match repl(&mut session, stdin.lock(), &mut out, echo) {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => fail(&format!("error: ipusim step: {e}")),
    }
}

fn fail(message: &str) -> i32 {
    let _ = writeln!(std::io::stderr(), "{message}");
    EXIT_ERROR
}

/// What is loaded: program, target, options, loops, streams and their data.
fn banner(l: &Launched) -> String {
    let exe = &l.executable;
    let o = l.engine.options();
    let ctl = l.engine.fp_ctl();
    let bit = |b: FpCtl| u8::from(ctl.contains(b));
    let mut s = format!(
        "ipusim step: {} on {} ({} tiles), seed {}\n",
        l.program.name, exe.target.name, exe.target.tiles, o.seed
    );
    let _ = writeln!(
        s,
        "  $FP_CTL: INV=0x{} DIV0=0x{} OFLO=0x{} ESR=0x{} NANOO=0x{} ($FP_STS: {})",
        bit(FpCtl::INV),
        bit(FpCtl::DIV0),
        bit(FpCtl::OFLO),
        bit(FpCtl::ESR),
        bit(FpCtl::NANOO),
        fp_sts(l.engine.flags())
    );
    let _ = writeln!(
        s,
        "  {} compute sets, {} exchanges, {} program steps per iteration; {} device iteration(s) of {} micro-batch(es); {} cycles per run (static estimate)",
        exe.compute_sets.len(),
        exe.exchanges.len(),
        exe.steps.len(),
        exe.options.device_iterations,
        exe.options.gradient_accumulation,
        exe.estimate.total_cycles
    );
    for st in &exe.streams {
        let what = match st.direction {
            ipusim_compiler::executable::StreamDirection::HostToDevice => {
                format!(
                    "infeed  '{}' {} {}: {}",
                    st.name,
                    st.dtype,
                    st.shape,
                    l.host.describe(&st.name)
                )
            }
            ipusim_compiler::executable::StreamDirection::DeviceToHost => {
                format!("outfeed '{}' {} {}", st.name, st.dtype, st.shape)
            }
        };
        let _ = writeln!(s, "  {what}");
    }
    s.push_str("type 'help' for commands\n");
    s
}
