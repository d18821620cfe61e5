//! The command language of `ipusim step`: one command per line, each answered with text.
//! It reads from any `BufRead` and writes to any `Write`, so a session can be piped in and
//! its transcript snapshot-tested. When the input is not a terminal, each command is echoed
//! after the prompt, so the transcript reads like the interactive session.

use super::inspect::{self, Liveness};
use super::{Breakpoint, Debugger, StepBy, Stop};
use crate::engine::Settled;
use crate::host::HostIo;
use crate::numerics::FpSts;
use ipusim_exe::system::TileId;
use std::io::{self, BufRead, Write};

/// The prompt.
pub const PROMPT: &str = "(ipusim) ";

/// The commands, as `help` prints them.
pub const HELP: &str = "\
commands:
  step [N]              run N program steps (compute set, exchange, sync, stream copy); s
  next [N]              run through the next N compute sets; n
  superstep [N]         run N BSP supersteps (up to the next sync); ss
  continue              run to a breakpoint, an exception or the end of the run; c
  break                 list breakpoints
  break PATTERN         stop before a compute set named PATTERN (* and ? match); b
  break cs PATTERN      the same
  break tile N          stop before a step that involves tile N (ipuI:N on IPU I)
  break ipu N           stop before a step with work on IPU N (a pipeline stage)
  break flag [NAME]     stop after a step that raises INV, DIV0, OFLO (or any flag)
  break cycle N         stop after the step during which the cycle counter reaches N
  delete [ID]           delete breakpoint ID (all without ID); d
  print NAME            a tensor by IR node name, gathered from its tiles; p
  tile N                tile N's memory: categories, tensors, what is live, $FP_STS
  flags                 $FP_STS of every tile and their OR
  where                 the position in the program tree; w
  help                  this text
  quit                  leave; q";

/// The debugger and what its commands need besides it.
pub struct Session<H: HostIo> {
    /// The debugger.
    pub debugger: Debugger<H>,
    liveness: Liveness,
}

/// The answer to one command.
pub struct Reply {
    /// Text to print (may be empty).
    pub text: String,
    /// The session should end.
    pub quit: bool,
}

fn say(text: impl Into<String>) -> Reply {
    Reply {
        text: text.into(),
        quit: false,
    }
}

impl<H: HostIo> Session<H> {
    /// A session over `debugger`.
    pub fn new(debugger: Debugger<H>) -> Session<H> {
        let liveness = Liveness::new(debugger.engine().executable());
        Session { debugger, liveness }
    }

    /// Runs one command line.
    pub fn execute(&mut self, line: &str) -> Reply {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&cmd, args)) = words.split_first() else {
            return say("");
        };
        let count = |args: &[&str]| -> Result<u32, String> {
            match args.first() {
                None => Ok(1),
                Some(a) => a
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("'{a}' is not a count from 1 to {}", u32::MAX)),
            }
        };
        let by = match cmd {
            "step" | "s" => Some(StepBy::ProgramStep),
            "next" | "n" => Some(StepBy::ComputeSet),
            "superstep" | "ss" => Some(StepBy::Superstep),
            _ => None,
        };
        let result: Result<String, String> = match (cmd, by) {
            (_, Some(by)) => count(args).and_then(|n| self.run(Some((by, n)))),
            (cmd, None) => self.command(cmd, args),
        };
        match result {
            Ok(text) => say(text),
            Err(e) if e.is_empty() => Reply {
                text: String::new(),
                quit: true,
            },
            Err(e) => say(format!("error: {e}")),
        }
    }

    /// The commands other than stepping; `Err("")` means quit.
    fn command(&mut self, cmd: &str, args: &[&str]) -> Result<String, String> {
        match cmd {
            "continue" | "c" | "cont" => self.run(None),
            "break" | "b" => self.breakpoint(args),
            "delete" | "d" => match args.first().map(|a| a.parse::<u32>()) {
                None => Ok(format!(
                    "deleted {} breakpoint(s)",
                    self.debugger.delete_breakpoint(None)
                )),
                Some(Ok(id)) => match self.debugger.delete_breakpoint(Some(id)) {
                    0 => Err(format!("no breakpoint {id}")),
                    _ => Ok(format!("deleted breakpoint {id}")),
                },
                Some(Err(_)) => Err(format!("'{}' is not a breakpoint number", args[0])),
            },
            "print" | "p" => match args {
                [name] => inspect::print_tensor(self.debugger.engine(), &self.liveness, name)
                    .map_err(|e| e.to_string()),
                _ => Err("usage: print NAME".into()),
            },
            "tile" => match args.first().map(|a| a.parse::<u32>()) {
                Some(Ok(t)) if args.len() == 1 => match TileId::checked(0, t) {
                    Some(tile) => {
                        inspect::tile_memory(self.debugger.engine(), &self.liveness, tile)
                            .map_err(|e| e.to_string())
                    }
                    None => Err(format!(
                        "tile {t} does not exist (the target has {} tiles)",
                        self.debugger.engine().executable().target.tiles
                    )),
                },
                _ => Err("usage: tile N".into()),
            },
            "flags" => Ok(inspect::flags(self.debugger.engine())),
            "where" | "w" | "bt" => Ok(inspect::where_am_i(self.debugger.engine())),
            "help" | "h" | "?" => Ok(HELP.into()),
            "quit" | "q" | "exit" => Err(String::new()),
            other => Err(format!("unknown command '{other}' (type 'help')")),
        }
    }

    /// Steps or continues, then says why it stopped and what comes next.
    fn run(&mut self, limit: Option<(StepBy, u32)>) -> Result<String, String> {
        let stop = match limit {
            Some((by, n)) => self.debugger.step(by, n),
            None => self.debugger.cont(),
        };
        let exe = self.debugger.engine().executable().clone();
        let mut show_next = true;
        let mut out = match stop.map_err(|e| e.to_string())? {
            Stop::Stepped(r) => {
                inspect::describe_report(&exe, &r, self.debugger.engine().last_step_flags())
            }
            Stop::Breakpoint {
                id,
                breakpoint,
                after,
                before,
            } => {
                let mut s = String::new();
                if let Some(r) = after {
                    s.push_str(&inspect::describe_report(
                        &exe,
                        &r,
                        self.debugger.engine().last_step_flags(),
                    ));
                    s.push('\n');
                }
                s.push_str(&format!("breakpoint {id} ({breakpoint})"));
                if let Some(n) = before {
                    s.push_str(&format!(": before {}", inspect::describe_step(&exe, &n)));
                    show_next = false;
                }
                s
            }
            Stop::Finished(summary) => return Ok(inspect::describe_run(&summary)),
            Stop::Exception(dump) => return Ok(dump.to_string().trim_end().to_string()),
        };
        if !show_next {
            return Ok(out);
        }
        match self.debugger.next_step() {
            Ok(Settled::Step(next)) => {
                out.push_str(&format!("\nnext: {}", inspect::describe_step(&exe, &next)))
            }
            Ok(Settled::Finished(summary)) => {
                out.push('\n');
                out.push_str(&inspect::describe_run(&summary));
            }
            Err(e) => return Err(e.to_string()),
        }
        Ok(out)
    }

    fn breakpoint(&mut self, args: &[&str]) -> Result<String, String> {
        let b = match args {
            [] => {
                let list = self.debugger.breakpoints();
                if list.is_empty() {
                    return Ok("no breakpoints".into());
                }
                return Ok(list
                    .iter()
                    .map(|(id, b)| format!("{id}: {b}"))
                    .collect::<Vec<_>>()
                    .join("\n"));
            }
            ["tile", n] => {
                // `N` on IPU 0, `ipuI:N` on IPU I.
                let (ipu, tile) = match n.strip_prefix("ipu").and_then(|r| r.split_once(':')) {
                    Some((i, t)) => (i.parse::<u32>().ok(), t.parse::<u32>().ok()),
                    None => (Some(0), n.parse::<u32>().ok()),
                };
                let (Some(ipu), Some(tile)) = (ipu, tile) else {
                    return Err(format!("'{n}' is not a tile number (N, or ipuI:N)"));
                };
                // A breakpoint that can never stop is a mistake worth saying at once.
                let exe = self.debugger.engine().executable();
                let (tiles, ipus) = (exe.target.tiles, exe.system.ipus);
                if ipu >= ipus {
                    return Err(format!(
                        "IPU {ipu} does not exist (the system has {ipus} IPU(s): 0 to {})",
                        ipus - 1
                    ));
                }
                if tile >= tiles {
                    return Err(format!(
                        "tile {tile} does not exist (the target has {tiles} tiles: 0 to {})",
                        tiles - 1
                    ));
                }
                Breakpoint::Tile(TileId::new(ipu, tile))
            }
            ["ipu", n] => {
                let ipu: u32 = n
                    .parse()
                    .map_err(|_| format!("'{n}' is not an IPU number"))?;
                let ipus = self.debugger.engine().executable().system.ipus;
                if ipu >= ipus {
                    return Err(format!(
                        "IPU {ipu} does not exist (the system has {ipus} IPU(s): 0 to {})",
                        ipus - 1
                    ));
                }
                Breakpoint::Ipu(ipu)
            }
            ["cycle", n] => {
                Breakpoint::Cycle(n.parse().map_err(|_| format!("'{n}' is not a cycle"))?)
            }
            ["flag" | "flags"] => Breakpoint::Flags(FpSts::all()),
            ["flag" | "flags", names @ ..] => {
                let mut f = FpSts::empty();
                for n in names.iter().flat_map(|n| n.split(['|', ','])) {
                    f |= match n.to_ascii_uppercase().as_str() {
                        "INV" => FpSts::INV,
                        "DIV0" => FpSts::DIV0,
                        "OFLO" => FpSts::OFLO,
                        "ANY" => FpSts::all(),
                        other => {
                            return Err(format!("unknown flag '{other}' (INV, DIV0, OFLO or any)"))
                        }
                    };
                }
                Breakpoint::Flags(f)
            }
            ["cs" | "compute-set", pattern] | [pattern] => {
                let exe = self.debugger.engine().executable();
                let matching = exe
                    .compute_sets
                    .iter()
                    .filter(|c| super::glob_match(pattern, &c.name))
                    .count();
                if matching == 0 {
                    return Err(format!("no compute set matches '{pattern}'"));
                }
                let id = self
                    .debugger
                    .add_breakpoint(Breakpoint::ComputeSet(pattern.to_string()));
                return Ok(format!(
                    "breakpoint {id}: compute set '{pattern}' ({matching} compute set(s))"
                ));
            }
            _ => {
                return Err(
                    "usage: break [cs] PATTERN | break tile N | break ipu N | break flag [NAME] | \
                     break cycle N"
                        .into(),
                )
            }
        };
        let text = b.to_string();
        let id = self.debugger.add_breakpoint(b);
        Ok(format!("breakpoint {id}: {text}"))
    }
}

/// Runs commands from `input` until `quit` or the end of the input, writing answers to
/// `output`. `echo`: print each command after the prompt (for input that is not a
/// terminal); otherwise print the prompt before reading.
pub fn repl<H: HostIo>(
    session: &mut Session<H>,
    input: impl BufRead,
    output: &mut impl Write,
    echo: bool,
) -> io::Result<()> {
    let mut lines = input.lines();
    loop {
        if !echo {
            write!(output, "{PROMPT}")?;
            output.flush()?;
        }
        let Some(line) = lines.next() else {
            if !echo {
                writeln!(output)?;
            }
            return Ok(());
        };
        let line = line?;
        if echo {
            writeln!(output, "{PROMPT}{}", line.trim_end())?;
        }
        let reply = session.execute(&line);
        if !reply.text.is_empty() {
            writeln!(output, "{}", reply.text)?;
        }
        if reply.quit {
            return Ok(());
        }
    }
}
