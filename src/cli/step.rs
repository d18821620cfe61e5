//! `ipusim step PROGRAM [--target mk2|mk1|FILE] [--precision 16.16|16.32|32.32]
//! [--partials float|half] [--seed N] [--sr off|on|replica-identical] [--nanoo]
//! [--fp-exceptions inv,div0,oflo] [--threads N] [--infeed NAME=FILE]`: compile a program and
//! step through it in the simulator at an interactive prompt (`help` lists the commands).
//!
//! Commands come from stdin, one per line; piped in, each is echoed after the prompt so the
//! transcript reads like a session. The program is opened as `ipusim run` opens it (a
//! runtime `Session`): its infeeds read the program's data sources — CSV files included,
//! or the files `--infeed` names — so stepping sees the data a run sees; an infeed without
//! a source is an error. Exit codes: 0 after `quit` or the end of the input, 2 when the
//! program does not fit in tile memory, 1 for any other error.

use super::compile::{BuildArgs, EXIT_OOM};
use super::output::write_stderr;
use super::sim_options::{FeedArgs, SimArgs};
use super::{EXIT_ERROR, EXIT_OK};
use clap::Args;
use ipusim_compiler::executable::StreamDirection;
use ipusim_runtime::{Session, SessionHost};
use ipusim_sim::debugger::inspect::fp_sts;
use ipusim_sim::debugger::repl::{self, repl};
use ipusim_sim::debugger::Debugger;
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
    /// Files replacing infeed sources.
    #[command(flatten)]
    pub feeds: FeedArgs,
}

/// Runs `ipusim step`; returns the exit code.
pub fn run(args: &StepArgs) -> i32 {
    let options = match args.sim.session_options(&args.build, &args.feeds) {
        Ok(o) => o,
        Err(message) => return fail(&message),
    };
    let program = match args.build.load() {
        Ok(p) => p,
        Err(message) => return fail(&message),
    };
    let base = args
        .build
        .program
        .parent()
        .unwrap_or(std::path::Path::new(""));
    let opened = Session::new(&program, base, options).and_then(|session| {
        let name = session.name().to_string();
        Ok((name, session.into_debugger()?))
    });
    let (name, debugger) = match opened {
        Ok(d) => d,
        Err(e) if e.is_out_of_memory() => {
            fail(&e.to_string());
            return EXIT_OOM;
        }
        Err(e) => return fail(&e.to_string()),
    };
    let stdin = std::io::stdin();
    let echo = !stdin.is_terminal();
    let mut out = std::io::stdout().lock();
    let banner = banner(&name, &debugger);
    let mut session = repl::Session::new(debugger);
    let result = out
        .write_all(banner.as_bytes())
        .and_then(|_| repl(&mut session, stdin.lock(), &mut out, echo))
        .and_then(|_| out.flush());
    match result {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => fail(&format!("error: ipusim step: {e}")),
    }
}

fn fail(message: &str) -> i32 {
    write_stderr(&format!("{message}\n"));
    EXIT_ERROR
}

/// What is loaded: program, target, options, loops, streams and their data.
fn banner(program: &str, d: &Debugger<SessionHost>) -> String {
    let engine = d.engine();
    let exe = engine.executable();
    let ctl = engine.fp_ctl();
    let bit = |b: FpCtl| u8::from(ctl.contains(b));
    let mut s = format!(
        "ipusim step: {program} on {} ({} tiles), seed {}\n",
        exe.target.name,
        exe.target.tiles,
        engine.options().seed
    );
    let _ = writeln!(
        s,
        "  $FP_CTL: INV=0x{} DIV0=0x{} OFLO=0x{} ESR=0x{} NANOO=0x{} ($FP_STS: {})",
        bit(FpCtl::INV),
        bit(FpCtl::DIV0),
        bit(FpCtl::OFLO),
        bit(FpCtl::ESR),
        bit(FpCtl::NANOO),
        fp_sts(engine.flags())
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
        let _ = match st.direction {
            StreamDirection::HostToDevice => writeln!(
                s,
                "  infeed  '{}' {} {}: {}",
                st.name,
                st.dtype,
                st.shape,
                d.host().describe_infeed(&st.name).unwrap_or_default()
            ),
            StreamDirection::DeviceToHost => {
                writeln!(s, "  outfeed '{}' {} {}", st.name, st.dtype, st.shape)
            }
        };
    }
    s.push_str("type 'help' for commands\n");
    s
}
