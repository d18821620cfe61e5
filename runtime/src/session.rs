//! A session: one program compiled for a target and run on the BSP engine, its streams
//! connected on the host, run after run with the state kept in between.
//!
//! - **Build** ([`Session::new`], [`Session::open`]): through the pipeline every front end
//!   shares ([`mod@ipusim_compiler::build`]): the step graph of the program (the training step,
//!   or the forward graph in inference), its streams connected ([`crate::connect`]) in
//!   between, compiled with the program's gradient accumulation and device iterations, and
//!   loaded into an [`Engine`]. A program that does not fit in tile memory
//!   is [`RuntimeError::OutOfMemory`], which carries the (zero-run) report.
//! - **Run length.** One [`Session::run`] is one device run: the program tree once,
//!   `device_iterations` loop iterations of `gradient_accumulation` micro-batches each (the
//!   `Repeat` loops are on the device; the host only feeds and collects). In inference,
//!   unless the options set `device_iterations`, a run is one pass over the data: as many
//!   micro-batches as the file-backed infeeds hold (rows divided by the batch size, the
//!   remainder dropped).
//! - **State.** Variables live in the engine's tile memory and persist across runs; infeeds
//!   advance (a CSV file continues where the last run stopped); each run's outfeed data is
//!   returned by that run ([`RunOutput`]). The report ([`Session::report`]) covers every
//!   run so far.
//! - **Checkpoints**: [`Session::save_variables`] / [`Session::load_variables`].
//! - **Stepping**: [`Session::into_debugger`] hands the engine and its host to the
//!   simulator's debugger (`ipusim step` sees the data `ipusim run` sees).

use crate::checkpoint::Checkpoint;
use crate::connect::{check_connected, connect};
use crate::error::{OptionsError, RuntimeError, StreamError};
use crate::feeds::Feed;
use crate::host::SessionHost;
use crate::io_model::{stream_types, HostIoModel};
use crate::labels::{label_streams, LabelCheck};
use crate::options::SessionOptions;
use crate::outfeed::OutfeedData;
use crate::report::{
    Executed, Flags, FpReport, InfeedReport, OutfeedReport, RunReport, StreamBytes,
};
use crate::stream::graph_streams;
use crate::stream::StreamType;
use ipusim_compiler::build::{self, compile_step, step_graph};
use ipusim_compiler::executable::{CollectiveOp, TensorId};
use ipusim_compiler::report::Categories;
use ipusim_compiler::{CompileReport, Executable};
use ipusim_ir::text::load_program;
use ipusim_ir::{OutfeedMode, Program};
use ipusim_sim::debugger::Debugger;
use ipusim_sim::engine::{Engine, EngineOptions, RunSummary};
use ipusim_sim::numerics::{FpSts, StochasticRounding};
use ipusim_sim::tensor::Tensor;
use ipusim_sim::trace::Trace;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one run returned.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The run's number (1 for the session's first run).
    pub run: u64,
    /// Each outfeed's data, by stream.
    pub outfeeds: BTreeMap<String, OutfeedData>,
    /// The engine's summary: executed cycles by category, flags, stream bytes.
    pub summary: RunSummary,
}

/// Progress within a run: `done` of `total` copies of the stream that paces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The run's number.
    pub run: u64,
    /// Copies done in this run.
    pub done: u64,
    /// Copies per run.
    pub total: u64,
}

#[derive(Clone, Debug, Default)]
struct Totals {
    runs: u64,
    cycles_per_run: Vec<u64>,
    categories: [u64; 4],
    flags: FpSts,
    rx: u64,
    tx: u64,
    entries: BTreeMap<String, u64>,
}

/// A program on the engine, with its host.
pub struct Session {
    name: String,
    mode: &'static str,
    options: SessionOptions,
    gradient_accumulation: u32,
    device_iterations: u32,
    engine: Engine,
    /// The engines of replicas 1.. (replica 0 is `engine`), run in lockstep with it.
    replicas: Vec<Engine>,
    /// The operation of every cross-replica collective, by tensor.
    collectives: BTreeMap<TensorId, CollectiveStep>,
    /// The optimizer-state variables sharded over the replicas, with their whole shapes:
    /// replica `r`'s engine holds shard `r` of each.
    sharded: BTreeMap<String, ipusim_ir::Shape>,
    host: SessionHost,
    infeeds: Vec<StreamType>,
    outfeeds: Vec<StreamType>,
    io: HostIoModel,
    compile: CompileReport,
    totals: Totals,
    wall: Duration,
    progress: Option<Box<dyn FnMut(Progress) + Send>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("program", &self.name)
            .field("runs", &self.totals.runs)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

/// The zero-run report of an executable (what an out-of-memory program still reports).
fn empty_report(
    mode: &str,
    compile: CompileReport,
    io: HostIoModel,
    options: &SessionOptions,
    host: &SessionHost,
    infeeds: &[StreamType],
    outfeeds: &[StreamType],
) -> RunReport {
    RunReport {
        stream_bytes: StreamBytes {
            rx: io.rx_bytes_per_run,
            tx: io.tx_bytes_per_run,
        },
        compile,
        runs: 0,
        mode: mode.into(),
        steps: 0,
        micro_batches: 0,
        seed: options.seed,
        fp: fp_report(options),
        flags: Flags::default(),
        host_io: io,
        executed: Executed::default(),
        infeeds: infeeds
            .iter()
            .map(|s| InfeedReport {
                stream: s.name.clone(),
                source: host
                    .describe_infeed(&s.name)
                    .unwrap_or_else(|| "not connected".into()),
            })
            .collect(),
        outfeeds: outfeeds
            .iter()
            .map(|s| OutfeedReport {
                stream: s.name.clone(),
                mode: host.outfeed_mode(&s.name).unwrap_or_default().to_string(),
                entries: 0,
            })
            .collect(),
        warnings: Vec::new(),
        wall_seconds: 0.0,
    }
}

fn fp_report(options: &SessionOptions) -> FpReport {
    let fp = &options.fp;
    FpReport {
        sr: match fp.esr {
            StochasticRounding::Off => "off",
            StochasticRounding::On => "on",
            StochasticRounding::ReplicaIdenticalOnly => "replica-identical",
        }
        .into(),
        nanoo: fp.nanoo,
        exceptions: [("inv", fp.inv), ("div0", fp.div0), ("oflo", fp.oflo)]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(n, _)| n.to_string())
            .collect(),
    }
}

/// Converts raised flags to the report's form.
pub fn flags_of(flags: FpSts) -> Flags {
    Flags {
        oflo: flags.contains(FpSts::OFLO),
        div0: flags.contains(FpSts::DIV0),
        inv: flags.contains(FpSts::INV),
    }
}

impl Session {
    /// Loads the program file `path` (CSV paths relative to its directory) and builds a
    /// session.
    pub fn open(path: &Path, options: SessionOptions) -> Result<Session, RuntimeError> {
        let program = load_program(path)?;
        let base = path.parent().unwrap_or(Path::new(""));
        Session::new(&program, base, options)
    }

    /// A session of `program` (CSV paths relative to `base_dir`).
    pub fn new(
        program: &Program,
        base_dir: &Path,
        options: SessionOptions,
    ) -> Result<Session, RuntimeError> {
        let mut build_options = options.build.clone();
        // The streams the device reads are the source program's (u8 images with
        // --eight-bit-io); it is built as it is.
        let source = build::source_program(program, &build_options)
            .map_err(|e| RuntimeError::build(program, e))?;
        let program = &*source;
        build_options = build_options.of_source();
        let step =
            step_graph(program, &build_options).map_err(|e| RuntimeError::build(program, e))?;
        let replicas = step.placement.replicas.max(1);
        let (ins, outs) = graph_streams(&step.graph);
        let mut host = connect(program, base_dir, &ins, &outs, &options.streams)?;
        for check in label_streams(&step.graph) {
            host.watch_labels(check);
        }
        if options.build.inference && build_options.device_iterations.is_none() {
            // One pass over the data of the file-backed infeeds.
            // Replicas share it: each takes every `replicas`-th micro-batch.
            let data = ins
                .iter()
                .filter_map(|s| host.remaining(&s.name).map(|n| (s.name.clone(), n)))
                .min_by_key(|(_, n)| *n);
            if let Some((stream, n)) = &data {
                if n % u64::from(replicas) != 0 {
                    return Err(OptionsError::ReplicasData {
                        replicas,
                        stream: stream.clone(),
                        micro_batches: *n,
                    }
                    .into());
                }
            }
            build_options.device_iterations = data
                .map(|(_, n)| n / u64::from(replicas))
                .filter(|&n| n > 0)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        }
        let mode = match (options.build.inference, program.training.is_some()) {
            (true, _) => "inference",
            (false, true) => "training",
            (false, false) => "forward",
        };
        let exe =
            compile_step(&step, &build_options).map_err(|e| RuntimeError::build(program, e))?;
        let gradient_accumulation = exe.options.gradient_accumulation;
        let device_iterations = exe.options.device_iterations;
        let compile_report = build::report(&program.name, &step, &exe);
        let io = HostIoModel::new(&exe, options.streams.prefetch_depth);
        let (infeeds, outfeeds) = stream_types(&exe);
        if exe.memory.oom {
            return Err(RuntimeError::OutOfMemory(Box::new(empty_report(
                mode,
                compile_report,
                io,
                &options,
                &host,
                &infeeds,
                &outfeeds,
            ))));
        }
        let exe = Arc::new(exe);
        // One engine per replica, run side by side: the host threads shared out among them;
        // with stochastic rounding on, replica r's streams from seed + r (replica-identical
        // rounding keeps one seed, so the replicas' weight updates stay identical).
        let per_replica = options.threads.map(|n| (n / replicas as usize).max(1));
        let engine_options = |r: u32, record_trace: bool| EngineOptions {
            fp: options.fp,
            seed: match options.fp.esr {
                StochasticRounding::On => options.seed.wrapping_add(u64::from(r)),
                _ => options.seed,
            },
            threads: if replicas > 1 {
                per_replica.or(Some(1))
            } else {
                options.threads
            },
            record_trace,
        };
        let engine = Engine::new(Arc::clone(&exe), engine_options(0, options.record_trace))?;
        let mut others = Vec::new();
        for r in 1..replicas {
            others.push(Engine::new(Arc::clone(&exe), engine_options(r, false))?);
        }
        let collectives = collectives(&exe.program);
        let sharded = step
            .sharded
            .iter()
            .map(|v| (v.name.clone(), v.shape.clone()))
            .collect();
        Ok(Session {
            name: program.name.clone(),
            mode,
            options,
            gradient_accumulation,
            device_iterations,
            engine,
            replicas: others,
            collectives,
            sharded,
            host,
            infeeds,
            outfeeds,
            io,
            compile: compile_report,
            totals: Totals::default(),
            wall: Duration::ZERO,
            progress: None,
        })
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options the session was built with.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The compiled program.
    pub fn executable(&self) -> &Arc<Executable> {
        self.engine.executable()
    }

    /// The compile report (one run's static estimate).
    pub fn compile_report(&self) -> &CompileReport {
        &self.compile
    }

    /// The host I/O model of one run.
    pub fn io_model(&self) -> &HostIoModel {
        &self.io
    }

    /// Infeed streams, by name.
    pub fn infeeds(&self) -> &[StreamType] {
        &self.infeeds
    }

    /// Outfeed streams, by name.
    pub fn outfeeds(&self) -> &[StreamType] {
        &self.outfeeds
    }

    /// Loop iterations per run (weight updates when training).
    pub fn steps_per_run(&self) -> u64 {
        u64::from(self.device_iterations)
    }

    /// Micro-batches per run.
    pub fn micro_batches_per_run(&self) -> u64 {
        self.steps_per_run() * u64::from(self.gradient_accumulation)
    }

    /// Runs so far.
    pub fn runs(&self) -> u64 {
        self.totals.runs
    }

    /// Connects (or replaces) the feed of an infeed stream.
    pub fn set_infeed(&mut self, stream: &str, feed: Box<dyn Feed>) -> Result<(), RuntimeError> {
        let s = self.stream(stream, &self.infeeds, "infeed")?;
        self.host.connect_infeed(s, feed);
        Ok(())
    }

    /// Changes the mode of an outfeed stream (from the next run on).
    pub fn set_outfeed_mode(
        &mut self,
        stream: &str,
        mode: OutfeedMode,
    ) -> Result<(), RuntimeError> {
        let s = self.stream(stream, &self.outfeeds, "outfeed")?;
        if let Some(c) = self.host.outfeed_mut(&s.name) {
            c.set_mode(mode);
        }
        Ok(())
    }

    fn stream(
        &self,
        name: &str,
        list: &[StreamType],
        what: &'static str,
    ) -> Result<StreamType, RuntimeError> {
        list.iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| {
                StreamError::Unknown {
                    kind: what,
                    name: name.to_string(),
                    available: list
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
                .into()
            })
    }

    /// Calls `f` as a run progresses (after every copy of the stream that paces the run: the
    /// first infeed, else the first outfeed).
    pub fn set_progress(&mut self, f: Option<Box<dyn FnMut(Progress) + Send>>) {
        self.progress = f;
    }

    /// One device run (see the module docs).
    pub fn run(&mut self) -> Result<RunOutput, RuntimeError> {
        check_connected(&self.host, &self.infeeds)?;
        let replicas = 1 + self.replicas.len() as u64;
        let needs: BTreeMap<String, u64> = self
            .io
            .infeed_needs()
            .into_iter()
            .map(|(s, n)| (s, n.saturating_mul(replicas)))
            .collect();
        self.host.begin_run(&needs)?;
        let run = self.totals.runs + 1;
        let pace = self
            .io
            .streams
            .first()
            .map(|s| (s.name.clone(), s.copies_per_run));
        if let (Some(mut f), Some((pace, total))) = (self.progress.take(), pace) {
            let mut done = 0;
            self.host.on_copy(Some(Box::new(move |stream: &str| {
                if stream == pace {
                    done += 1;
                    f(Progress { run, done, total });
                }
            })));
        }
        let start = Instant::now();
        let result = if self.replicas.is_empty() {
            self.engine.run(&mut self.host).map_err(RuntimeError::from)
        } else {
            self.run_replicas(&needs)
        };
        self.wall += start.elapsed();
        self.host.on_copy(None);
        let summary = result?;
        let outfeeds = self.host.finish_run();
        let t = &mut self.totals;
        t.runs += 1;
        let c = &summary.cycles;
        t.cycles_per_run.push(c.total);
        for (acc, v) in
            t.categories
                .iter_mut()
                .zip([c.on_tile_execute, c.do_exchange, c.sync, c.stream_copy])
        {
            *acc = acc.saturating_add(v);
        }
        t.flags |= summary.flags;
        t.rx = t.rx.saturating_add(summary.stream_bytes_in);
        t.tx = t.tx.saturating_add(summary.stream_bytes_out);
        for (name, data) in &outfeeds {
            *t.entries.entry(name.clone()).or_default() += data.received;
        }
        Ok(RunOutput {
            run,
            outfeeds,
            summary,
        })
    }

    /// One run of every replica in lockstep: the run's micro-batches of every infeed dealt
    /// round-robin (replica `r` takes global micro-batch `k·R + r`: disjoint slices of the
    /// data, as a replicated data loader gives each replica its part of the global batch);
    /// the replicas run side by side on host threads up to each cross-replica collective,
    /// whose result ([`ipusim_sim::collective::all_reduce`], in replica order) every replica
    /// then holds; their outfeed entries go to the host in global micro-batch order. The
    /// summary is replica 0's (every replica runs the same cycles).
    fn run_replicas(&mut self, needs: &BTreeMap<String, u64>) -> Result<RunSummary, RuntimeError> {
        use ipusim_sim::engine::Collective;
        use ipusim_sim::host::QueueHost;
        let r = 1 + self.replicas.len();
        let mut hosts: Vec<QueueHost> = (0..r).map(|_| QueueHost::new()).collect();
        for s in &self.infeeds {
            let bytes = s.tensor_type().size_bytes();
            for k in 0..needs.get(&s.name).copied().unwrap_or(0) {
                let mut buf = vec![0u8; bytes];
                self.host.next_infeed(&s.name, &mut buf)?;
                hosts[k as usize % r]
                    .infeeds
                    .entry(s.name.clone())
                    .or_default()
                    .push_back(buf);
            }
        }
        let nanoo = self.options.fp.nanoo;
        let summary = loop {
            let mut engines: Vec<&mut Engine> = std::iter::once(&mut self.engine)
                .chain(self.replicas.iter_mut())
                .collect();
            type Joined = Result<Result<Collective, ipusim_sim::engine::EngineError>, String>;
            let reached: Vec<Joined> = std::thread::scope(|scope| {
                let jobs: Vec<_> = engines
                    .iter_mut()
                    .zip(hosts.iter_mut())
                    .map(|(e, h)| scope.spawn(move || e.run_to_collective(h)))
                    .collect();
                jobs.into_iter()
                    .map(|j| {
                        j.join()
                            .map_err(|_| "a replica's thread panicked".to_string())
                    })
                    .collect()
            });
            let reached: Vec<Collective> = reached
                .into_iter()
                .map(|r| {
                    r.map_err(RuntimeError::Replicas)?
                        .map_err(RuntimeError::from)
                })
                .collect::<Result<_, _>>()?;
            match &reached[0] {
                Collective::Finished(summary) => break (**summary).clone(),
                Collective::At(tensor) => {
                    if reached.iter().any(|c| c != &reached[0]) {
                        return Err(RuntimeError::Replicas(format!(
                            "the replicas left lockstep at the collective of tensor {}",
                            tensor.0
                        )));
                    }
                    let tensor = *tensor;
                    let (op, dst) = self
                        .collectives
                        .get(&tensor)
                        .copied()
                        .unwrap_or((CollectiveOp::AllReduceMean, None));
                    let values: Vec<Vec<u8>> = engines
                        .iter()
                        .map(|e| e.read_tensor_id(tensor).map(|t| t.to_bytes()))
                        .collect::<Option<_>>()
                        .ok_or_else(|| {
                            RuntimeError::Replicas(format!(
                                "the collective's tensor {} cannot be read",
                                tensor.0
                            ))
                        })?;
                    let exe = Arc::clone(engines[0].executable());
                    let dtype = exe.tensor(tensor).dtype;
                    let dst_bytes = dst.map(|d| exe.tensor(d).size_bytes() as usize);
                    let (results, flags) =
                        ipusim_sim::collective::run(op, dtype, &values, dst_bytes, nanoo)
                            .ok_or_else(|| {
                                RuntimeError::Replicas(format!(
                                    "collective {op:?} over tensor {} of {dtype}: not a float \
                                     tensor, or not this collective's destination",
                                    tensor.0
                                ))
                            })?;
                    self.totals.flags |= flags;
                    for ((e, h), result) in engines.iter_mut().zip(hosts.iter_mut()).zip(&results) {
                        // In place, the result is written before the step (which leaves
                        // it); into a destination, after it (the step copies the replica's
                        // own tensor there, as one replica would).
                        match dst {
                            None => {
                                e.write_tensor_bytes(tensor, result)?;
                                e.step(h)?;
                            }
                            Some(d) => {
                                e.step(h)?;
                                e.write_tensor_bytes(d, result)?;
                            }
                        }
                    }
                }
            }
        };
        // Outfeed entries in global micro-batch order.
        for s in &self.outfeeds {
            let per: Vec<Vec<Vec<u8>>> = hosts
                .iter_mut()
                .map(|h| h.outfeeds.remove(&s.name).unwrap_or_default())
                .collect();
            let most = per.iter().map(Vec::len).max().unwrap_or(0);
            for k in 0..most {
                for entries in &per {
                    if let Some(e) = entries.get(k) {
                        self.host.receive_outfeed(&s.name, e)?;
                    }
                }
            }
        }
        Ok(summary)
    }

    /// Flags raised in any run.
    pub fn flags(&self) -> FpSts {
        self.totals.flags | self.engine.flags()
    }

    /// Every variable's name and type as the program has it, in the engine's order (an
    /// optimizer-state variable sharded over the replicas with its whole shape).
    fn variable_types(&self) -> Vec<(String, ipusim_ir::TensorType)> {
        let mut vars = self.engine.variables();
        for (name, ty) in &mut vars {
            if let Some(shape) = self.sharded.get(name) {
                ty.shape = shape.clone();
            }
        }
        vars
    }

    /// The engines of every replica, in replica order.
    fn engines(&self) -> impl Iterator<Item = &Engine> {
        std::iter::once(&self.engine).chain(&self.replicas)
    }

    /// The current value of every variable, in the engine's order (a sharded one gathered
    /// from the replicas, as [`Session::read_tensor`]).
    pub fn variables(&self) -> Vec<(String, Tensor)> {
        self.variable_types()
            .into_iter()
            .filter_map(|(name, _)| self.read_tensor(&name).map(|t| (name, t)))
            .collect()
    }

    /// The current value of a tensor (a variable, or the last value of a node): replica 0's,
    /// or for an optimizer-state variable sharded over the replicas, the replicas' shards
    /// concatenated in replica order without the last shard's padding.
    pub fn read_tensor(&self, name: &str) -> Option<Tensor> {
        let Some(shape) = self.sharded.get(name) else {
            return self.engine.read_tensor(name);
        };
        let mut bytes = Vec::new();
        let mut dtype = None;
        for e in self.engines() {
            let t = e.read_tensor(name)?;
            dtype = Some(t.dtype());
            bytes.extend(t.to_bytes());
        }
        let dtype = dtype?;
        bytes.truncate(shape.num_elements() * dtype.size_bytes());
        Tensor::from_bytes(dtype, shape.clone(), &bytes).ok()
    }

    /// Overwrites one variable (a value of exactly its type, as [`Session::variables`] gives
    /// it) on every replica; a sharded one is split into the replicas' shards.
    pub fn write_variable(&mut self, name: &str, value: &Tensor) -> Result<(), RuntimeError> {
        let Some(shape) = self.sharded.get(name).cloned() else {
            self.engine.write_variable(name, value)?;
            for e in &mut self.replicas {
                e.write_variable(name, value)?;
            }
            return Ok(());
        };
        if value.shape() != &shape {
            return Err(RuntimeError::Replicas(format!(
                "variable '{name}' has shape {shape}, the value written {}",
                value.shape()
            )));
        }
        let dtype = value.dtype();
        let k = shape.num_elements().div_ceil(1 + self.replicas.len());
        let mut bytes = value.to_bytes();
        bytes.resize(k * dtype.size_bytes() * (1 + self.replicas.len()), 0);
        let shard_shape = ipusim_ir::Shape(vec![k]);
        let engines = std::iter::once(&mut self.engine).chain(self.replicas.iter_mut());
        for (e, chunk) in engines.zip(bytes.chunks(k * dtype.size_bytes())) {
            let shard = Tensor::from_bytes(dtype, shard_shape.clone(), chunk)
                .map_err(|e| RuntimeError::Replicas(format!("a shard of '{name}': {e}")))?;
            e.write_variable(name, &shard)?;
        }
        Ok(())
    }

    /// Every variable as a checkpoint.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            program: self.name.clone(),
            precision: self.compile.precision.map(|p| p.to_string()),
            variables: self.variables(),
        }
    }

    /// Writes every variable to `path` (atomically).
    pub fn save_variables(&self, path: &Path) -> Result<(), RuntimeError> {
        Ok(self.checkpoint().save(path)?)
    }

    /// Restores the variables from `path`; returns how many were loaded. Nothing changes
    /// unless the whole checkpoint matches (see [`crate::checkpoint`]).
    pub fn load_variables(&mut self, path: &Path) -> Result<usize, RuntimeError> {
        let types = self.variable_types();
        let c = Checkpoint::load_within(path, crate::checkpoint::checkpoint_limit(&types))?;
        let values = c.matching(
            &path.display().to_string(),
            &types,
            self.options.build.inference,
        )?;
        for (name, t) in &values {
            self.write_variable(name, t)?;
        }
        Ok(values.len())
    }

    /// The session handed to the stepping debugger (`ipusim step`): its engine, and its
    /// host feeding the data a run would (an infeed without a source is an error here, as
    /// in a run). The debugger drives the runs; this session's report is not kept.
    pub fn into_debugger(self) -> Result<Debugger<SessionHost>, RuntimeError> {
        if !self.replicas.is_empty() {
            return Err(OptionsError::Replicas {
                replicas: 1 + self.replicas.len() as u32,
            }
            .into());
        }
        check_connected(&self.host, &self.infeeds)?;
        Ok(Debugger::new(self.engine, self.host))
    }

    /// The trace events recorded since the last call.
    pub fn take_trace(&mut self) -> Trace {
        self.engine.take_trace()
    }

    /// The report of every run so far.
    pub fn report(&self) -> RunReport {
        let t = &self.totals;
        let mut r = empty_report(
            self.mode,
            self.compile.clone(),
            self.io.clone(),
            &self.options,
            &self.host,
            &self.infeeds,
            &self.outfeeds,
        );
        r.runs = t.runs;
        r.steps = t.runs.saturating_mul(self.steps_per_run());
        r.micro_batches = t.runs.saturating_mul(self.micro_batches_per_run());
        r.flags = flags_of(self.flags());
        let [on_tile_execute, do_exchange, sync, stream_copy] = t.categories;
        let total = on_tile_execute
            .saturating_add(do_exchange)
            .saturating_add(sync)
            .saturating_add(stream_copy);
        r.executed = Executed {
            total_cycles: total,
            categories: Categories {
                on_tile_execute,
                do_exchange,
                sync,
                stream_copy,
            },
            cycles_per_run: t.cycles_per_run.clone(),
            seconds: total as f64 / self.compile.target.clock_hz.max(1) as f64,
            stream_bytes: StreamBytes { rx: t.rx, tx: t.tx },
        };
        for o in &mut r.outfeeds {
            o.entries = t.entries.get(&o.stream).copied().unwrap_or(0);
        }
        r.warnings = (self.host.label_checks())
            .filter_map(LabelCheck::warning)
            .collect();
        r.wall_seconds = self.wall.as_secs_f64();
        r
    }
}

/// A collective's operation and destination (`None`: in place).
type CollectiveStep = (CollectiveOp, Option<TensorId>);

/// The operation and destination of every cross-replica collective in `p`, by the tensor it
/// reads.
fn collectives(p: &ipusim_compiler::executable::Program) -> BTreeMap<TensorId, CollectiveStep> {
    p.collectives()
        .into_iter()
        .map(|(op, tensor, dst)| (tensor, (op, dst)))
        .collect()
}
