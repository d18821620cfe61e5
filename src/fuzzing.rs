//! Fuzz harnesses: one function per input format ipusim reads, each taking raw bytes, running
//! the reader and whatever a valid input goes on to feed, and never panicking (a panic, an
//! abort or a hang is the failure the fuzzer looks for; errors are expected answers).
//!
//! The same functions serve two drivers: the libFuzzer targets of `fuzz/` (nightly, `cargo
//! fuzz run TARGET`) and the stable smoke test `tests/fuzz_smoke.rs`, which runs each
//! harness over its seed corpus ([`seeds`]) and a few thousand inputs derived from it by the
//! deterministic [`Mutator`]. Inputs that once crashed are kept in `tests/fuzz_regressions/`
//! and replayed by the smoke test.
//!
//! | target | reads |
//! |---|---|
//! | `program` | program text: RON parser, validator, summary and lint, `to_ron` round trip |
//! | `compile` | a valid program compiled for a 16-tile target, then run once when small |
//! | `csv` | the CSV infeed reader (the first 3 bytes choose dtype, header and columns) |
//! | `checkpoint` | the checkpoint reader, and its writer on what it read |
//! | `report` | the report reader of `ipusim report diff` (input split at the first NUL) |
//! | `fp` | the expression calculator of `ipusim fp` (the first byte chooses the options) |
//! | `debugger` | the command language of `ipusim step`, one command per line |
//! | `onnx` | an ONNX model: decoder, importer, validator, `to_ron` round trip |

use crate::compiler::build::{compile_step, step_graph, BuildOptions};
use crate::compiler::Target;
use crate::ir::text::{parse_program, to_ron};
use crate::ir::{Columns, DType, Program};
use crate::runtime::checkpoint::Checkpoint;
use crate::runtime::feeds::{CsvFeed, EndOfData, Feed};
use crate::runtime::report::diff;
use crate::runtime::{Session, SessionOptions, StreamType};
use crate::sim::debugger::repl;
use crate::sim::numerics::expr::{write_human, write_json, CalcOptions, Calculator};
use std::path::Path;

/// The fuzz targets, by name (the names of `fuzz/fuzz_targets/*.rs`).
pub const TARGETS: [&str; 8] = [
    "program",
    "compile",
    "csv",
    "checkpoint",
    "report",
    "fp",
    "debugger",
    "onnx",
];

/// Largest tensor (elements) the `compile` harness compiles: bigger programs are valid but
/// slow, and the fuzzer's time is better spent on many small ones.
const COMPILE_MAX_ELEMENTS: usize = 1 << 16;
/// Largest program the `compile` harness also runs: elements over all nodes, and
/// micro-batches per run.
const RUN_MAX_ELEMENTS: usize = 1 << 12;
const RUN_MAX_MICRO_BATCHES: u64 = 4;
/// Most weight elements of a program exported as an `onnx` seed. Our choice: the fuzzer's
/// time is better spent on many small models than on one large one.
const ONNX_SEED_MAX_WEIGHTS: usize = 1 << 20;
/// Most commands the `debugger` harness executes per input.
const DEBUGGER_MAX_COMMANDS: usize = 32;

/// How far an input got: refused by the reader, accepted by it, or through everything the
/// harness does with an accepted input (compiled and run, filled, written back...). The smoke
/// test checks that mutated inputs reach every depth, so a harness that stopped exercising its
/// code would fail it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Depth {
    /// The reader refused the input (an error, as expected of most fuzz inputs).
    Refused,
    /// The reader accepted it.
    Accepted,
    /// Everything downstream ran too.
    Through,
}

/// Runs harness `target` on `data`; `None` for an unknown target.
pub fn run(target: &str, data: &[u8]) -> Option<Depth> {
    Some(match target {
        "program" => program(data),
        "compile" => compile(data),
        "csv" => csv(data),
        "checkpoint" => checkpoint(data),
        "report" => report(data),
        "fp" => fp(data),
        "debugger" => debugger(data),
        "onnx" => onnx(data),
        _ => return None,
    })
}

/// The small chip the harnesses compile for: mk2 figures on 16 tiles.
pub fn small_target() -> Target {
    Target {
        name: "fuzz16".into(),
        tiles: 16,
        ..Target::mk2()
    }
}

/// Session options on [`small_target`] with `threads` host threads.
fn small_session(threads: Option<usize>) -> SessionOptions {
    SessionOptions {
        build: crate::compiler::BuildOptions {
            target: small_target(),
            ..crate::compiler::BuildOptions::default()
        },
        threads,
        ..SessionOptions::default()
    }
}

/// Program text: parse and validate; a valid program is summarised, linted and written back,
/// and what is written must parse again.
pub fn program(data: &[u8]) -> Depth {
    let text = String::from_utf8_lossy(data);
    let Ok(p) = parse_program(&text, "fuzz.ron") else {
        return Depth::Refused;
    };
    let _ = crate::ir::summary::summarize(&p);
    let back = to_ron(&p);
    if let Err(e) = parse_program(&back, "fuzz-back.ron") {
        panic!("to_ron wrote a program that does not parse: {e}\n{back}");
    }
    Depth::Through
}

/// An ONNX model: decoded and imported (every input's symbolic dimensions bound to 2); an
/// imported program is validated, and written as RON it must parse again.
pub fn onnx(data: &[u8]) -> Depth {
    let Ok(model) = crate::onnx::import::decode_model(data, "fuzz.onnx") else {
        return Depth::Refused;
    };
    let options = crate::onnx::Options::default();
    let Ok(p) = crate::onnx::import(
        &model,
        "fuzz.onnx",
        Path::new("/nonexistent"),
        "fuzz",
        &options,
    ) else {
        return Depth::Accepted;
    };
    let back = to_ron(&p);
    if let Err(e) = parse_program(&back, "fuzz-back.ron") {
        panic!("to_ron wrote an imported program that does not parse: {e}\n{back}");
    }
    Depth::Through
}

/// The largest tensor of a program, in elements.
fn largest_tensor(p: &Program) -> usize {
    p.graph
        .nodes()
        .map(|(_, n)| n.ty.num_elements())
        .max()
        .unwrap_or(0)
}

/// A valid program compiled for [`small_target`]; a small one is also run once.
pub fn compile(data: &[u8]) -> Depth {
    let text = String::from_utf8_lossy(data);
    let Ok(p) = parse_program(&text, "fuzz.ron") else {
        return Depth::Refused;
    };
    if largest_tensor(&p) > COMPILE_MAX_ELEMENTS {
        return Depth::Accepted;
    }
    let options = BuildOptions {
        target: small_target(),
        ..BuildOptions::default()
    };
    let Ok(step) = step_graph(&p, &options) else {
        return Depth::Accepted;
    };
    if step
        .graph
        .nodes()
        .map(|(_, n)| n.ty.num_elements())
        .max()
        .unwrap_or(0)
        > COMPILE_MAX_ELEMENTS
    {
        return Depth::Accepted;
    }
    let Ok(exe) = compile_step(&step, &options) else {
        return Depth::Accepted;
    };
    let _ = crate::compiler::build::report(&p.name, &step, &exe).to_text();
    let total: usize = p.graph.nodes().map(|(_, n)| n.ty.num_elements()).sum();
    let micro_batches =
        u64::from(exe.options.device_iterations) * u64::from(exe.options.gradient_accumulation);
    if exe.memory.oom || total > RUN_MAX_ELEMENTS || micro_batches > RUN_MAX_MICRO_BATCHES {
        return Depth::Through;
    }
    let options = small_session(Some(1));
    // CSV sources resolve against a directory that has no files: they are errors.
    if let Ok(mut session) = Session::new(&p, Path::new("/nonexistent-fuzz-dir"), options) {
        let _ = session.run();
        let _ = session.report().to_text();
        let _ = session.checkpoint().to_json();
    }
    Depth::Through
}

/// The CSV infeed reader: byte 0 chooses the stream's dtype and sample width, byte 1 the
/// header and the column selection, byte 2 the batch size; the rest is the file.
pub fn csv(data: &[u8]) -> Depth {
    let [a, b, c, rest @ ..] = data else {
        return Depth::Refused;
    };
    let dtype = DType::ALL[usize::from(a % 5)];
    let width = usize::from(a / 5 % 4) + 1;
    let header = b & 1 == 1;
    let columns = if b & 2 == 2 && header {
        Columns::Names((0..width).map(|i| format!("c{i}")).collect())
    } else {
        let start = usize::from(b >> 2 & 3);
        Columns::Range(start, start + width)
    };
    let batch = usize::from(c % 4) + 1;
    let stream = StreamType::new("x", dtype, vec![batch, width]);
    let end = if c & 4 == 4 {
        EndOfData::Stop
    } else {
        EndOfData::Wrap
    };
    let text = String::from_utf8_lossy(rest);
    let Ok(mut feed) = CsvFeed::parse(&text, "fuzz.csv", &columns, header, &stream, end) else {
        return Depth::Refused;
    };
    let mut buf = vec![0u8; batch * width * dtype.size_bytes()];
    for _ in 0..3 {
        if feed.fill(&stream, &mut buf).is_err() {
            return Depth::Accepted;
        }
    }
    let _ = feed.describe();
    Depth::Through
}

/// The checkpoint reader; what it reads is written and read again.
pub fn checkpoint(data: &[u8]) -> Depth {
    let text = String::from_utf8_lossy(data);
    let Ok(c) = Checkpoint::parse(&text, "fuzz.json") else {
        return Depth::Refused;
    };
    let again = c.to_json().to_string();
    if let Err(e) = Checkpoint::parse(&again, "fuzz-back.json") {
        panic!("a checkpoint written from one read does not read back: {e}");
    }
    Depth::Through
}

/// The report reader of `ipusim report diff`: two reports separated by a NUL byte (or one
/// compared with itself), compared as text and JSON.
pub fn report(data: &[u8]) -> Depth {
    let (a, b) = match data.iter().position(|&x| x == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let (Ok(a), Ok(b)) = (diff::parse(&a, "a.json"), diff::parse(&b, "b.json")) else {
        return Depth::Refused;
    };
    let d = diff::diff("a.json", &a, "b.json", &b);
    let _ = d.to_text(20);
    let _ = serde_json::to_string(&d);
    Depth::Through
}

/// The calculator of `ipusim fp`: byte 0 chooses dtype, stochastic rounding and nanoo; the
/// rest is one expression per line.
pub fn fp(data: &[u8]) -> Depth {
    let [opts, rest @ ..] = data else {
        return Depth::Refused;
    };
    let mut calc = Calculator::new(CalcOptions {
        dtype: if opts & 1 == 1 {
            DType::F32
        } else {
            DType::F16
        },
        sr: opts & 2 == 2,
        nanoo: opts & 4 == 4,
        seed: u64::from(*opts),
    });
    let text = String::from_utf8_lossy(rest);
    let mut depth = Depth::Refused;
    for line in text.lines().take(64) {
        if let Ok(outcome) = calc.eval(line) {
            let mut s = String::new();
            write_human(&outcome, &mut s);
            write_json(&outcome, &mut s);
            depth = Depth::Through;
        }
    }
    depth
}

/// The program every `debugger` input steps through: two streams, a loop, a variable.
const DEBUGGER_PROGRAM: &str = r#"Program(
    name: "fuzz_step",
    device_iterations: 2,
    nodes: [
        (name: "x1", op: Input(stream: "x1", dtype: F16, shape: [64])),
        (name: "x2", op: Input(stream: "x2", dtype: F16, shape: [64])),
        (name: "d1", op: Add, inputs: ["x1", "x2"]),
        (name: "q", op: Div, inputs: ["x1", "d1"]),
        (name: "d1_out", op: Outfeed(stream: "d1"), inputs: ["q"]),
        (name: "counter", op: Variable(dtype: I32, shape: [], init: Zeros)),
        (name: "one", op: Constant(dtype: I32, shape: [], value: Splat(1.0))),
        (name: "next", op: Add, inputs: ["counter", "one"]),
        (name: "assign", op: Assign, inputs: ["counter", "next"]),
    ],
    infeeds: [
        (stream: "x1", source: Uniform(low: -2.0, high: 2.0, seed: 1)),
        (stream: "x2", source: Sequence(start: -1.0, step: 0.5)),
    ],
)"#;

/// The stepping debugger's commands, one per line, on a small program.
pub fn debugger(data: &[u8]) -> Depth {
    let Ok(p) = parse_program(DEBUGGER_PROGRAM, "fuzz_step.ron") else {
        panic!("the debugger harness's program is invalid");
    };
    let options = small_session(Some(1));
    let Ok(session) = Session::new(&p, Path::new(""), options) else {
        panic!("the debugger harness's program does not build");
    };
    let Ok(dbg) = session.into_debugger() else {
        panic!("the debugger harness's program has an unconnected stream");
    };
    let mut s = repl::Session::new(dbg);
    let text = String::from_utf8_lossy(data);
    // Refused when any command was (a mistyped command is an answer, not a failure).
    let mut depth = Depth::Through;
    for line in text.lines().take(DEBUGGER_MAX_COMMANDS) {
        let reply = s.execute(line);
        if reply.text.starts_with("error:") {
            depth = Depth::Refused;
        }
        if reply.quit {
            break;
        }
    }
    depth
}

/// The seed corpus of `target`: the shipped and test programs, and for the other formats
/// inputs made from them (a checkpoint and reports of a compiled program, CSV data, the
/// calculator's and debugger's documented commands). `repo` is the workspace root.
pub fn seeds(target: &str, repo: &Path) -> Vec<Vec<u8>> {
    let programs = program_files(repo);
    match target {
        "program" | "compile" => {
            let mut v: Vec<Vec<u8>> = programs
                .iter()
                .filter_map(|p| std::fs::read(p).ok())
                .collect();
            if let Ok(tour) = crate::ir::op_tour::op_tour() {
                v.push(to_ron(&tour).into_bytes());
            }
            v
        }
        "csv" => {
            let digits = std::fs::read_to_string(repo.join("programs/data/digits_train.csv"))
                .unwrap_or_default();
            let head: String = digits.lines().take(12).collect::<Vec<_>>().join("\n");
            let mut v = vec![
                b"\x01\x01\x00c0\n1\n2\n3\n".to_vec(),
                b"\x0b\x03\x01c0,c1,c2\n1,2,3\n4,5,6\n\"7\",8,9\r\n".to_vec(),
                b"\x02\x00\x05300,1\n-1,2.5\n,\n".to_vec(),
                b"\x04\x01\x02\xef\xbb\xbfa\ntrue\n0\n".to_vec(),
            ];
            v.push([&[0x0e, 0x01, 0x00][..], head.as_bytes()].concat());
            v
        }
        "checkpoint" => {
            let mut v = vec![br#"{"format": "ipusim-checkpoint", "version": 1, "program": "p", "variables": [{"name": "w", "dtype": "f16", "shape": [2, 2], "values": [[1, 2], [3, "NaN"]]}]}"#.to_vec()];
            if let Some(c) = checkpoint_of(repo) {
                v.push(c.into_bytes());
            }
            v
        }
        "report" => {
            let mut v = Vec::new();
            for p in programs.iter().take(3) {
                if let Some(r) = report_of(p) {
                    v.push(r.into_bytes());
                }
            }
            if v.len() >= 2 {
                let pair = [v[0].as_slice(), b"\0", v[1].as_slice()].concat();
                v.push(pair);
            }
            v
        }
        "fp" => [
            "\x000.0004 + 0.25 - 0.25",
            "\x0165504 * 2\n1 / 0\n0 / 0\nsqrt(-1)",
            "\x02(1 + 2^-11) * 3\nfma(1, 2, 3)",
            "\x04max(inf, -inf)\n0x7bff + 1",
            "\x00bits(0x3c00)\n-(-(-1e-8))",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        "debugger" => [
            "help\nwhere\nstep\nprint d1\ntile 0\nflags\nquit",
            "break d1\ncontinue\nbreak\ndelete 1\nnext 3\nsuperstep 2",
            "break tile 3\nbreak flag div0\ncontinue\ncontinue\nprint q\nprint counter",
            "break cycle 100\nc\nw\nstep 4294967295\ntile 15\ntile 16",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        // The shipped programs' forward graphs that export (MLPs and the digits CNN), not
        // the ResNet-50, whose weights would make a 100 MB seed.
        "onnx" => programs
            .iter()
            .filter_map(|p| crate::ir::text::load_program(p).ok())
            .filter(|p| {
                let weights: usize = p
                    .graph
                    .nodes()
                    .filter_map(|(_, n)| match &n.op {
                        crate::ir::Op::Variable { shape, .. } => Some(shape.num_elements()),
                        _ => None,
                    })
                    .sum();
                weights <= ONNX_SEED_MAX_WEIGHTS
            })
            .filter_map(|p| {
                let mut values = |_: &str, ty: &crate::ir::TensorType, init: &crate::ir::Init| {
                    crate::sim::init::variable_tensor(init, ty)
                        .map(|t| t.to_f64_vec())
                        .map_err(|e| e.to_string())
                };
                crate::onnx::write::export(&p, &mut values, false).ok()
            })
            .map(|m| crate::onnx::write::to_bytes(&m))
            .collect(),
        _ => Vec::new(),
    }
}

/// Every `.ron` program under `programs/` and `tests/programs/`, sorted.
fn program_files(repo: &Path) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "ron") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo.join("programs"), &mut out);
    walk(&repo.join("tests/programs"), &mut out);
    out.sort();
    out
}

/// The compile report (JSON) of the program file `path` on [`small_target`].
fn report_of(path: &Path) -> Option<String> {
    let p = crate::ir::text::load_program(path).ok()?;
    let options = BuildOptions {
        target: small_target(),
        ..BuildOptions::default()
    };
    let step = step_graph(&p, &options).ok()?;
    let exe = compile_step(&step, &options).ok()?;
    serde_json::to_string(&crate::compiler::build::report(&p.name, &step, &exe)).ok()
}

/// A checkpoint (JSON) of the variables of `programs/feeds_repeat.ron` before any run.
fn checkpoint_of(repo: &Path) -> Option<String> {
    let p = crate::ir::text::load_program(&repo.join("programs/feeds_repeat.ron")).ok()?;
    let options = small_session(None);
    let session = Session::new(&p, repo, options).ok()?;
    Some(session.checkpoint().to_json().to_string())
}

/// A deterministic mutator of fuzz inputs: SplitMix64 choices of bit flips, byte changes,
/// deletions, duplications, and replacements of numbers and words by ones that tend to find
/// edge cases (0, -1, 2^32, 65520, NaN, dtype and op names), so that mutated programs often
/// still parse.
#[derive(Clone, Debug)]
pub struct Mutator {
    state: u64,
}

/// Replacement tokens: edge-case numbers and words of the formats.
const DICTIONARY: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "255",
    "256",
    "300",
    "65504",
    "65520",
    "70000",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "1e308",
    "-1e308",
    "1e-45",
    "NaN",
    "inf",
    "-inf",
    "0.5",
    "[]",
    "[0]",
    "[1, 0]",
    "[4294967296, 4294967296]",
    "F16",
    "F32",
    "I32",
    "U8",
    "Bool",
    "MatMul",
    "Add",
    "Div",
    "Relu",
    "Softmax(axis: 1)",
    "OneHot(depth: 4294967296, dtype: F32)",
    "Transpose(perm: [1, 0])",
    "Reshape(shape: [0])",
    "\"\"",
    "\"x\"",
    "(",
    ")",
    ",",
    "\n",
    "\u{feff}",
    "\"16.16\"",
    "\"every:0\"",
    "\"sum\"",
    "Zeros",
    "step",
    "break tile",
    "print",
    "tile",
    "\0",
];

impl Mutator {
    /// A mutator whose choices follow from `seed`.
    pub fn new(seed: u64) -> Mutator {
        Mutator { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// `input` with one to four mutations.
    pub fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..=self.below(4) {
            self.mutate_once(&mut v);
        }
        v
    }

    fn mutate_once(&mut self, v: &mut Vec<u8>) {
        let len = v.len();
        match self.below(7) {
            0 if len > 0 => {
                let i = self.below(len);
                v[i] ^= 1 << self.below(8);
            }
            1 if len > 0 => {
                let i = self.below(len);
                v[i] = self.next() as u8;
            }
            2 if len > 0 => {
                let i = self.below(len);
                let n = 1 + self.below((len - i).min(16));
                v.drain(i..i + n);
            }
            3 if len > 0 => {
                let i = self.below(len);
                let n = 1 + self.below((len - i).min(64));
                let chunk = v[i..i + n].to_vec();
                let at = self.below(len + 1);
                v.splice(at..at, chunk);
            }
            4 => {
                // Replace a run of digits (a number) by a dictionary token.
                let starts: Vec<usize> = (0..len)
                    .filter(|&i| v[i].is_ascii_digit() && (i == 0 || !v[i - 1].is_ascii_digit()))
                    .collect();
                if starts.is_empty() {
                    return;
                }
                let i = starts[self.below(starts.len())];
                let end = (i..len).find(|&j| !v[j].is_ascii_digit()).unwrap_or(len);
                let t = DICTIONARY[self.below(DICTIONARY.len())].as_bytes();
                v.splice(i..end, t.iter().copied());
            }
            5 => {
                // Replace a word (a name, a dtype, an op) by a dictionary token.
                let starts: Vec<usize> = (0..len)
                    .filter(|&i| {
                        v[i].is_ascii_uppercase() && (i == 0 || !v[i - 1].is_ascii_alphanumeric())
                    })
                    .collect();
                if starts.is_empty() {
                    return;
                }
                let i = starts[self.below(starts.len())];
                let end = (i..len)
                    .find(|&j| !v[j].is_ascii_alphanumeric())
                    .unwrap_or(len);
                let t = DICTIONARY[self.below(DICTIONARY.len())].as_bytes();
                v.splice(i..end, t.iter().copied());
            }
            _ => {
                let t = DICTIONARY[self.below(DICTIONARY.len())].as_bytes();
                let at = self.below(len + 1);
                v.splice(at..at, t.iter().copied());
            }
        }
    }
}
