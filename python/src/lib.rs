//! `ipusim._ipusim`: the Rust core of the Python package (PyO3). The Python layer
//! (`python/ipusim/__init__.py`) gives it PopTorch's option names; this module takes plain
//! data — an options dict with the CLI's names, bytes for tensors — and raises the package's
//! exception classes with the messages the CLI prints.

#![allow(unexpected_cfgs)] // PyO3 0.22's create_exception! tests a feature of its own crate.
#![allow(clippy::useless_conversion)] // PyO3 0.22's #[pyfunction] wrappers convert PyResult into itself.

use ipusim::compiler::build::{compile_step, report, step_graph, BuildOptions};
use ipusim::ir::{DType, Precision, Program as IrProgram};
use ipusim::runtime::{RuntimeError, Session as RtSession, SessionOptions};
use ipusim::sim::engine::EngineError;
use ipusim::sim::numerics::flags::{FpConfig, StochasticRounding};
use ipusim::sim::tensor::Tensor;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::{Path, PathBuf};

create_exception!(_ipusim, IpusimError, PyException, "Every ipusim error.");
create_exception!(
    _ipusim,
    ProgramError,
    IpusimError,
    "A program or model that cannot be read or is not valid."
);
create_exception!(
    _ipusim,
    OptionsError,
    IpusimError,
    "An option with a wrong name or value."
);
create_exception!(
    _ipusim,
    CompileError,
    IpusimError,
    "A program that does not compile."
);
create_exception!(
    _ipusim,
    OutOfMemoryError,
    IpusimError,
    "A program that does not fit in tile memory."
);
create_exception!(
    _ipusim,
    FloatingPointException,
    IpusimError,
    "A trapped floating-point exception; the message is the state dump."
);
create_exception!(
    _ipusim,
    StreamError,
    IpusimError,
    "An infeed or outfeed fault."
);

/// A program: a RON file, an ONNX model or a model-zoo network.
#[pyclass(module = "ipusim._ipusim")]
struct Program {
    inner: IrProgram,
    base: PathBuf,
    file: String,
}

/// Loads a RON program or imports an ONNX model (`input_shapes` binds symbolic dimensions;
/// `training` builds a training step over an ONNX model's output).
#[pyfunction]
#[pyo3(signature = (path, input_shapes=None, training=false))]
fn load(
    path: &str,
    input_shapes: Option<Vec<(String, Vec<usize>)>>,
    training: bool,
) -> PyResult<Program> {
    let p = Path::new(path);
    let inner = if p
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    {
        let options = ipusim::onnx::Options {
            input_shapes: input_shapes.unwrap_or_default(),
            training: training.then(ipusim::onnx::Training::default),
            ..Default::default()
        };
        ipusim::onnx::load(p, &options).map_err(|e| ProgramError::new_err(e.to_string()))?
    } else {
        ipusim::ir::text::load_program(p).map_err(|e| ProgramError::new_err(e.to_string()))?
    };
    Ok(Program {
        inner,
        base: p.parent().map(Path::to_path_buf).unwrap_or_default(),
        file: path.to_string(),
    })
}

/// A network of the model zoo (`ipusim model`).
#[pyfunction]
#[pyo3(signature = (name, batch=1, image_size=None, classes=None, precision="16.16"))]
fn model(
    name: &str,
    batch: usize,
    image_size: Option<usize>,
    classes: Option<usize>,
    precision: &str,
) -> PyResult<Program> {
    use ipusim::ir::resnet::{resnet, Model, MODELS};
    let m = Model::named(name).ok_or_else(|| {
        let names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        ProgramError::new_err(format!(
            "no model '{name}' (the models: {})",
            names.join(", ")
        ))
    })?;
    let mut spec = m.default_spec();
    spec.batch = batch;
    spec.precision = precision
        .parse()
        .map_err(|e: ipusim::ir::UnknownValue| OptionsError::new_err(e.to_string()))?;
    if let Some(s) = image_size {
        spec.image_size = s;
    }
    if let Some(c) = classes {
        spec.classes = c;
    }
    let inner = resnet(&spec).map_err(|e| ProgramError::new_err(e.to_string()))?;
    Ok(Program {
        inner,
        base: PathBuf::new(),
        file: name.to_string(),
    })
}

/// The HTML page of `ipusim report html` for `reports` (`(name, JSON text)`; a second one
/// adds the Compare view).
#[pyfunction]
fn html(reports: Vec<(String, String)>) -> PyResult<String> {
    let values = reports
        .into_iter()
        .map(|(name, text)| {
            serde_json::from_str(&text)
                .map(|v| (name.clone(), v))
                .map_err(|e| {
                    ProgramError::new_err(format!("{name}: error: not a JSON report: {e}"))
                })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(ipusim::runtime::report::html::html(&values))
}

/// The options dict (the CLI's names) as session options.
fn session_options(d: Option<&Bound<'_, PyDict>>) -> PyResult<SessionOptions> {
    let mut build = BuildOptions::default();
    let mut fp = FpConfig::default();
    let mut seed = 0u64;
    let bad =
        |k: &str, e: &dyn std::fmt::Display| OptionsError::new_err(format!("option '{k}': {e}"));
    let mut target_name = None;
    let mut tiles = None;
    if let Some(d) = d {
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            match k.as_str() {
                "target" => target_name = Some(v.extract::<String>()?),
                "tiles" => tiles = Some(v.extract::<u32>()?),
                "precision" => {
                    let s: String = v.extract()?;
                    build.precision = Some(s.parse::<Precision>().map_err(|e| bad(&k, &e))?);
                }
                "partials" => {
                    let s: String = v.extract()?;
                    build.partials = s.parse().map_err(|e: ipusim::ir::UnknownValue| bad(&k, &e))?;
                }
                "available_memory_proportion" => {
                    let p: f64 = v.extract()?;
                    if !(p > 0.0 && p <= 1.0) {
                        return Err(bad(&k, &format!("{p} is not in (0, 1]")));
                    }
                    build.available_memory_proportion = Some(p);
                }
                "gradient_accumulation" | "device_iterations" | "replicas" | "batch" => {
                    let n: u32 = v.extract()?;
                    if n == 0 {
                        return Err(bad(&k, &"must be at least 1"));
                    }
                    match k.as_str() {
                        "gradient_accumulation" => build.gradient_accumulation = Some(n),
                        "device_iterations" => build.device_iterations = Some(n),
                        "replicas" => build.replicas = Some(n),
                        _ => build.batch = Some(n),
                    }
                }
                "pipeline_splits" => build.pipeline_splits = Some(v.extract()?),
                "pipeline_schedule" => {
                    let s: String = v.extract()?;
                    build.pipeline_schedule =
                        Some(s.parse().map_err(|e: ipusim::ir::UnknownValue| bad(&k, &e))?);
                }
                "ipus" => {
                    let n: u32 = v.extract()?;
                    if n == 0 {
                        return Err(bad(&k, &"must be at least 1"));
                    }
                    build.ipus = Some(n);
                }
                "recompute" => build.recompute = v.extract()?,
                "offload_optimizer_state" => build.offload_optimizer_state = v.extract()?,
                "elementwise_fusion" => build.elementwise_fusion = v.extract()?,
                "early_weight_update" => build.early_weight_update = v.extract()?,
                "stable_norm" => build.stable_norm = v.extract()?,
                "replicated_optimizer_state_sharding" => {
                    build.replicated_optimizer_state_sharding = v.extract()?
                }
                "seed" => seed = v.extract()?,
                "sr" => {
                    fp.esr = if v.extract::<bool>()? { StochasticRounding::On } else { StochasticRounding::Off }
                }
                "inv" => fp.inv = v.extract()?,
                "div0" => fp.div0 = v.extract()?,
                "oflo" => fp.oflo = v.extract()?,
                "nanoo" => fp.nanoo = v.extract()?,
                other => {
                    return Err(OptionsError::new_err(format!(
                        "unknown option '{other}' (known: target, tiles, precision, partials, available_memory_proportion, gradient_accumulation, device_iterations, replicas, batch, pipeline_splits, pipeline_schedule, ipus, recompute, offload_optimizer_state, replicated_optimizer_state_sharding, elementwise_fusion, early_weight_update, stable_norm, seed, sr, inv, div0, oflo, nanoo)"
                    )))
                }
            }
        }
    }
    let mut target = ipusim::cli::compile::target_from_arg(target_name.as_deref().unwrap_or("mk2"))
        .map_err(OptionsError::new_err)?;
    if let Some(t) = tiles {
        if t == 0 || t > target.tiles {
            return Err(bad("tiles", &format!("{t} is not in 1..={}", target.tiles)));
        }
        target.tiles = t;
    }
    build.target = target;
    Ok(SessionOptions {
        build,
        fp,
        seed,
        ..SessionOptions::default()
    })
}

fn runtime_error(e: RuntimeError) -> PyErr {
    let message = e.to_string();
    match e {
        RuntimeError::OutOfMemory(_) => OutOfMemoryError::new_err(message),
        RuntimeError::Engine(EngineError::FpException(_)) => {
            FloatingPointException::new_err(message)
        }
        RuntimeError::Program(_) => ProgramError::new_err(message),
        RuntimeError::Build { .. } => CompileError::new_err(message),
        RuntimeError::Stream(_) => StreamError::new_err(message),
        _ => IpusimError::new_err(message),
    }
}

#[pymethods]
impl Program {
    /// The program's name.
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    /// Compiles the program; returns the report as the JSON text `ipusim compile --json`
    /// prints (with `execution_trace`, as `--execution-trace` adds it).
    #[pyo3(signature = (options=None, execution_trace=false))]
    fn compile(
        &self,
        py: Python<'_>,
        options: Option<&Bound<'_, PyDict>>,
        execution_trace: bool,
    ) -> PyResult<String> {
        let opts = session_options(options)?.build;
        let program = &self.inner;
        let file = &self.file;
        py.allow_threads(|| {
            let step = step_graph(program, &opts).map_err(|e| format!("{file}: error: {e}"))?;
            let exe = compile_step(&step, &opts).map_err(|e| format!("{file}: error: {e}"))?;
            let mut r = report(&program.name, &step, &exe);
            if execution_trace {
                r.execution = Some(ipusim::compiler::timeline::estimate(&exe));
            }
            serde_json::to_string_pretty(&r).map_err(|e| format!("error: {e}"))
        })
        .map(|s| s + "\n")
        .map_err(CompileError::new_err)
    }

    /// A simulator session of the program.
    #[pyo3(signature = (options=None))]
    fn session(&self, options: Option<&Bound<'_, PyDict>>) -> PyResult<Session> {
        let opts = session_options(options)?;
        let inner = RtSession::new(&self.inner, &self.base, opts).map_err(runtime_error)?;
        Ok(Session { inner })
    }
}

/// A compiled program on the simulator.
#[pyclass(module = "ipusim._ipusim", unsendable)]
struct Session {
    inner: RtSession,
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::I32 => "int32",
        DType::U8 => "uint8",
        DType::Bool => "bool",
    }
}

#[pymethods]
impl Session {
    /// `(name, numpy dtype, shape of one micro-batch)` of every infeed.
    fn infeeds(&self) -> Vec<(String, &'static str, Vec<usize>)> {
        self.inner
            .infeeds()
            .iter()
            .map(|s| (s.name.clone(), dtype_name(s.dtype), s.shape.dims().to_vec()))
            .collect()
    }

    /// Loop iterations (weight updates) per device run.
    fn steps_per_run(&self) -> u64 {
        self.inner.steps_per_run()
    }

    /// Micro-batches each infeed delivers per device run.
    fn micro_batches_per_run(&self) -> u64 {
        self.inner.micro_batches_per_run()
    }

    /// Feeds infeed `name` from `data`: `count` micro-batches of the stream's dtype, packed.
    fn set_infeed(&mut self, name: &str, data: &[u8], count: usize) -> PyResult<()> {
        let stream = self
            .inner
            .infeeds()
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| StreamError::new_err(format!("no infeed is named '{name}'")))?;
        let per = stream.bytes();
        if count == 0 || data.len() != per * count {
            return Err(StreamError::new_err(format!(
                "infeed '{name}': {} bytes for {count} micro-batch(es) of {per} bytes",
                data.len()
            )));
        }
        let tensors = data
            .chunks_exact(per)
            .map(|c| Tensor::from_bytes(stream.dtype, stream.shape.clone(), c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StreamError::new_err(e.to_string()))?;
        let feed = ipusim::runtime::feeds::IteratorFeed::new(tensors.into_iter());
        self.inner
            .set_infeed(name, Box::new(feed))
            .map_err(runtime_error)
    }

    /// One device run; returns every outfeed as `(name, dtype, shape, [entry bytes...])`.
    #[allow(clippy::type_complexity)]
    fn run(
        &mut self,
        py: Python<'_>,
    ) -> PyResult<Vec<(String, &'static str, Vec<usize>, Vec<Py<PyBytes>>)>> {
        let out = self.inner.run().map_err(runtime_error)?;
        let mut result = Vec::new();
        for (name, data) in out.outfeeds {
            let entries = match &data.values {
                ipusim::runtime::outfeed::OutfeedValues::Entries(e) => e
                    .iter()
                    .map(|t| PyBytes::new_bound(py, &t.to_bytes()).unbind())
                    .collect(),
                ipusim::runtime::outfeed::OutfeedValues::Sum(s) => {
                    let bytes: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
                    result.push((
                        name,
                        "float64",
                        data.stream.shape.dims().to_vec(),
                        vec![PyBytes::new_bound(py, &bytes).unbind()],
                    ));
                    continue;
                }
            };
            result.push((
                name,
                dtype_name(data.stream.dtype),
                data.stream.shape.dims().to_vec(),
                entries,
            ));
        }
        Ok(result)
    }

    /// `$FP_STS` flags raised so far: `{"OFLO": bool, "DIV0": bool, "INV": bool}`.
    fn flags(&self) -> (bool, bool, bool) {
        use ipusim::sim::numerics::flags::FpSts;
        let f = self.inner.flags();
        (
            f.contains(FpSts::OFLO),
            f.contains(FpSts::DIV0),
            f.contains(FpSts::INV),
        )
    }

    /// The run report as the JSON text of `ipusim run --json`'s `report`.
    fn report(&self) -> PyResult<String> {
        serde_json::to_string_pretty(&self.inner.report())
            .map_err(|e| IpusimError::new_err(e.to_string()))
    }
}

#[pymodule]
fn _ipusim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(model, m)?)?;
    m.add_function(wrap_pyfunction!(html, m)?)?;
    m.add_class::<Program>()?;
    m.add_class::<Session>()?;
    m.add("IpusimError", py.get_type_bound::<IpusimError>())?;
    m.add("ProgramError", py.get_type_bound::<ProgramError>())?;
    m.add("OptionsError", py.get_type_bound::<OptionsError>())?;
    m.add("CompileError", py.get_type_bound::<CompileError>())?;
    m.add("OutOfMemoryError", py.get_type_bound::<OutOfMemoryError>())?;
    m.add(
        "FloatingPointException",
        py.get_type_bound::<FloatingPointException>(),
    )?;
    m.add("StreamError", py.get_type_bound::<StreamError>())?;
    Ok(())
}
