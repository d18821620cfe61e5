"""ipusim: an open, fast, cycle-accounting simulator of the Graphcore IPU, from Python.

The core is Rust (``ipusim._ipusim``); this layer gives it PopTorch's option names::

    import ipusim
    opts = ipusim.Options().deviceIterations(4)
    opts.Training.gradientAccumulation(2)
    opts.Precision.setFloatingPointBehaviour(oflo=True)
    program = ipusim.load("programs/mlp_digits.ron")
    report = program.compile(opts)          # report.to_dict() == `ipusim compile --json`
    result = program.run(steps=300)         # numpy arrays of every outfeed

Errors are real exception classes (``ipusim.OptionsError``, ``ipusim.OutOfMemoryError``,
``ipusim.FloatingPointException``, ...) carrying the message the CLI prints.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

import numpy as np

from . import _ipusim, pva
from ._ipusim import (
    CompileError,
    FloatingPointException,
    IpusimError,
    OptionsError,
    OutOfMemoryError,
    ProgramError,
    StreamError,
)

__all__ = [
    "Options",
    "PipelinedExecution",
    "ShardedExecution",
    "TensorLocationSettings",
    "Program",
    "Report",
    "RunResult",
    "load",
    "model",
    "pva",
    "IpusimError",
    "ProgramError",
    "OptionsError",
    "CompileError",
    "OutOfMemoryError",
    "FloatingPointException",
    "StreamError",
]


def _positive(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise OptionsError(f"{name}: {n!r} must be an integer of at least 1")
    return n


class _Training:
    def __init__(self, owner: "Options") -> None:
        self._owner = owner

    def gradientAccumulation(self, n: int) -> "Options":
        """Micro-batches per weight update (``--gradient-accumulation``)."""
        self._owner._set("gradient_accumulation", _positive("gradientAccumulation", n))
        return self._owner


class _Precision:
    def __init__(self, owner: "Options") -> None:
        self._owner = owner

    def setPartialsType(self, t: Any) -> "Options":
        """``float`` / ``half`` (or ``numpy.float32`` / ``numpy.float16``): the partials."""
        names = {np.float32: "float", np.float16: "half", "float": "float", "half": "half",
                 "float32": "float", "float16": "half"}
        if t not in names:
            raise OptionsError(f"setPartialsType: {t!r} is not float or half")
        self._owner._set("partials", names[t])
        return self._owner

    def enableStochasticRounding(self, on: bool) -> "Options":
        """Stochastic rounding of FP16 results (``--sr on``)."""
        self._owner._set("sr", bool(on))
        return self._owner

    def setFloatingPointBehaviour(self, inv: bool = False, div0: bool = False, oflo: bool = False,
                                  esr: bool = False, nanoo: bool = False) -> "Options":
        """Trap on invalid operations, division by zero and overflow; stochastic rounding;
        NaN on overflow — PopTorch's names."""
        for k, v in (("inv", inv), ("div0", div0), ("oflo", oflo), ("sr", esr), ("nanoo", nanoo)):
            self._owner._set(k, bool(v))
        return self._owner

    def precision(self, policy: str) -> "Options":
        """The precision policy, ``16.16``, ``16.32`` or ``32.32`` (``--precision``)."""
        self._owner._set("precision", policy)
        return self._owner

    def enableStableNorm(self, on: bool) -> "Options":
        """Batch norm's batch statistics in two passes instead of PopLibs' single sweep
        (``--stable-norm``), PopTorch's name."""
        self._owner._set("stable_norm", bool(on))
        return self._owner


_SCHEDULES = ("Grouped", "Interleaved", "Sequential")


class ShardedExecution:
    """PopTorch's ``poptorch.ShardedExecution``: the program split over several IPUs at the
    named nodes (or module paths, ``"layer3.8"``), one stage at a time (the Sequential
    schedule; ``--pipeline-splits``)."""

    schedule = "Sequential"

    def __init__(self, *splits: str, ipus: Optional[int] = None, recompute: bool = False) -> None:
        if not splits or not all(isinstance(s, str) and s for s in splits):
            raise OptionsError(f"{type(self).__name__}: {splits!r}: name the nodes that begin stages 1, 2, ...")
        self.splits = list(splits)
        self.ipus = None if ipus is None else _positive("ipus", ipus)
        self.recompute = bool(recompute)


class PipelinedExecution(ShardedExecution):
    """PopTorch's ``poptorch.PipelinedExecution``: the stages on different micro-batches at once
    (``--pipeline-schedule``: ``Grouped``, PopTorch's default, or ``Interleaved``); the pipeline
    depth is the gradient accumulation. ``recompute`` recomputes the forward activations the
    backward pass reads (``--recompute``)."""

    def __init__(self, *splits: str, schedule: str = "Grouped", ipus: Optional[int] = None,
                 recompute: bool = False) -> None:
        super().__init__(*splits, ipus=ipus, recompute=recompute)
        if schedule not in _SCHEDULES:
            raise OptionsError(f"PipelinedExecution: schedule {schedule!r} is not one of {', '.join(_SCHEDULES)}")
        self.schedule = schedule


class TensorLocationSettings:
    """PopTorch's ``poptorch.TensorLocationSettings`` for the optimizer state: kept on chip
    (the default) or in streaming memory (``useOnChipStorage(False)``: ``--offload-optimizer-state``,
    the TF-IPU guide's §6.8), and sharded over the replicas (``useReplicatedTensorSharding(True)``:
    ``--replicated-optimizer-state-sharding``, §6.9). Setters chain."""

    def __init__(self) -> None:
        self.on_chip = True
        self.replicated_tensor_sharding = False

    def useOnChipStorage(self, use: bool = True) -> "TensorLocationSettings":
        self.on_chip = bool(use)
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> "TensorLocationSettings":
        self.replicated_tensor_sharding = bool(use)
        return self


class _TensorLocations:
    def __init__(self, owner: "Options") -> None:
        self._owner = owner

    def setOptimizerLocation(self, settings: TensorLocationSettings) -> "Options":
        """Where the optimizer state lives (a :class:`TensorLocationSettings`)."""
        if not isinstance(settings, TensorLocationSettings):
            raise OptionsError(
                f"TensorLocations.setOptimizerLocation: {settings!r} is not a TensorLocationSettings")
        self._owner._set("offload_optimizer_state", not settings.on_chip)
        self._owner._set("replicated_optimizer_state_sharding", settings.replicated_tensor_sharding)
        return self._owner


class Options:
    """PopTorch's ``poptorch.Options``, for the simulator. Setters chain."""

    def __init__(self) -> None:
        self._values: Dict[str, Any] = {}
        self._output_mode = "all"
        self._output_period = 1
        self.Training = _Training(self)
        self.Precision = _Precision(self)
        self.TensorLocations = _TensorLocations(self)

    def _set(self, key: str, value: Any) -> None:
        self._values[key] = value

    def deviceIterations(self, n: int) -> "Options":
        """Loop iterations per device run (``--device-iterations``)."""
        self._set("device_iterations", _positive("deviceIterations", n))
        return self

    def replicationFactor(self, n: int) -> "Options":
        """Data-parallel replicas (``--replicas``): compiled and costed."""
        self._set("replicas", _positive("replicationFactor", n))
        return self

    def outputMode(self, mode: str, output_return_period: Optional[int] = None) -> "Options":
        """Which outfeed entries come back: ``All``, ``Final``, ``Sum`` or ``EveryN``."""
        modes = {"all": "all", "final": "last", "sum": "sum", "everyn": "every"}
        m = modes.get(str(mode).split(".")[-1].lower())
        if m is None:
            raise OptionsError(f"outputMode: {mode!r} is not All, Final, Sum or EveryN")
        if m == "every":
            self._output_period = _positive("output_return_period", output_return_period)
        self._output_mode = m
        return self

    def setAvailableMemoryProportion(self, proportions: Dict[str, float]) -> "Options":
        """The planners' memory proportion, by IPU (``{"IPU0": 0.6}``); one value for all."""
        values = set(proportions.values())
        bad = [k for k in proportions if not (k.startswith("IPU") and k[3:].isdigit())]
        if bad or len(values) != 1:
            raise OptionsError(
                f"setAvailableMemoryProportion: {proportions!r}: give one proportion for IPU0, IPU1, ... "
                "(per-IPU values are not modelled yet)")
        self._set("available_memory_proportion", float(values.pop()))
        return self

    def useIpuModel(self, target: str = "mk2", tiles: Optional[int] = None) -> "Options":
        """The chip simulated: ``mk2``, ``mk1`` or a target file, and optionally fewer tiles."""
        self._set("target", target)
        if tiles is not None:
            self._set("tiles", _positive("tiles", tiles))
        return self

    def setExecutionStrategy(self, strategy: ShardedExecution) -> "Options":
        """How the program is placed over IPUs: a :class:`ShardedExecution` or
        :class:`PipelinedExecution` (``--pipeline-splits``, ``--pipeline-schedule``, ``--ipus``,
        ``--recompute``)."""
        if not isinstance(strategy, ShardedExecution):
            raise OptionsError(
                f"setExecutionStrategy: {strategy!r} is not a ShardedExecution or PipelinedExecution")
        self._set("pipeline_splits", list(strategy.splits))
        self._set("pipeline_schedule", strategy.schedule)
        if strategy.ipus is not None:
            self._set("ipus", strategy.ipus)
        if strategy.recompute:
            self._set("recompute", True)
        return self

    def elementwiseFusion(self, on: bool) -> "Options":
        """Fuse chains of element-wise ops into one vertex per tile, as PopLibs' generated
        map-expression codelets do (the default); ``False`` is ``--no-elementwise-fusion``."""
        self._set("elementwise_fusion", bool(on))
        return self

    def earlyWeightUpdate(self, on: bool) -> "Options":
        """Run each weight update as soon as its gradient exists and the step has read the
        weight for the last time (PopART's ``delayVarUpdates = False``; one micro-batch per
        update on one IPU); ``True`` is ``--early-weight-update``. The default holds every
        update to the end of the step, as PopART's default ``delayVarUpdates = True`` does."""
        self._set("early_weight_update", bool(on))
        return self

    def randomSeed(self, seed: int) -> "Options":
        """The program seed (stochastic rounding streams)."""
        self._set("seed", int(seed))
        return self

    def to_dict(self) -> Dict[str, Any]:
        """The options with the CLI's names."""
        return dict(self._values)


class Report:
    """A compile or run report; ``to_dict()`` is the JSON of ``ipusim compile --json``."""

    def __init__(self, text: str) -> None:
        self._dict = json.loads(text)

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._dict))

    @property
    def total_cycles(self) -> int:
        return self._dict["total_cycles"]

    @property
    def oom(self) -> bool:
        return self._dict["memory"]["oom"]

    def to_html(self, path: Optional[str] = None, name: str = "report", compare: Optional["Report"] = None,
                compare_name: str = "other") -> str:
        """The page of ``ipusim report html`` (PopVision's views; ``compare`` adds the Compare
        view); written to ``path`` when given. Returns the HTML."""
        reports = [(name, json.dumps(self._dict))]
        if compare is not None:
            reports.append((compare_name, json.dumps(compare._dict)))
        page = _ipusim.html(reports)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def __repr__(self) -> str:
        return f"Report({self._dict['program']!r}, total_cycles={self.total_cycles})"


class RunResult:
    """What a run returned: ``outfeeds`` (numpy arrays: entries × the stream's shape),
    ``flags`` (``$FP_STS``) and the run ``report``."""

    def __init__(self, outfeeds: Dict[str, np.ndarray], flags: Dict[str, bool], report: Report) -> None:
        self.outfeeds = outfeeds
        self.flags = flags
        self.report = report


def _options(opts: Optional[Options]) -> Dict[str, Any]:
    if opts is None:
        return {}
    if not isinstance(opts, Options):
        raise OptionsError(f"expected ipusim.Options, got {type(opts).__name__}")
    return opts.to_dict()


class Program:
    """A program (RON), an imported ONNX model, or a model-zoo network."""

    def __init__(self, inner: "_ipusim.Program") -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    def compile(self, opts: Optional[Options] = None, execution_trace: bool = False) -> Report:
        """The static cycle and memory report (``ipusim compile --json``); with
        ``execution_trace``, its ``execution`` section (``--execution-trace``)."""
        return Report(self._inner.compile(_options(opts), execution_trace))

    def run(self, inputs: Optional[Dict[str, Any]] = None, steps: Optional[int] = None,
            opts: Optional[Options] = None) -> RunResult:
        """Runs the program in the simulator. ``inputs`` maps infeed names to arrays of
        micro-batches (``[n, *shape]``, converted to the stream's dtype); other infeeds read
        the program's own data sources. ``steps`` (default one device run) must fill whole
        device runs. Outfeeds come back as numpy arrays (float16 as float16)."""
        session = self._inner.session(_options(opts))
        per_run = session.steps_per_run()
        steps = per_run if steps is None else _positive("steps", steps)
        if steps % per_run:
            raise OptionsError(f"steps {steps} is not a multiple of the {per_run} steps of a device run")
        runs = steps // per_run
        streams = {name: (dtype, tuple(shape)) for name, dtype, shape in session.infeeds()}
        for name, data in (inputs or {}).items():
            if name not in streams:
                raise StreamError(f"no infeed is named {name!r} (infeeds: {', '.join(sorted(streams))})")
            dtype, shape = streams[name]
            a = np.ascontiguousarray(np.asarray(data).astype(dtype, copy=False))
            if a.shape[1:] != shape:
                raise StreamError(f"infeed {name!r}: an array of shape {a.shape}; micro-batches of {list(shape)} expected as [n, *shape]")
            session.set_infeed(name, a.tobytes(), a.shape[0])
        collected: Dict[str, list] = {}
        meta: Dict[str, Any] = {}
        for _ in range(runs):
            for name, dtype, shape, entries in session.run():
                meta[name] = (dtype, shape)
                collected.setdefault(name, []).extend(entries)
        outfeeds = {
            name: np.stack([np.frombuffer(e, dtype="<" + np.dtype(meta[name][0]).str[1:]).reshape(meta[name][1]) for e in es])
            if es else np.zeros((0, *meta[name][1]), dtype=meta[name][0])
            for name, es in collected.items()
        }
        mode = (opts._output_mode, opts._output_period) if isinstance(opts, Options) else ("all", 1)
        outfeeds = {name: _keep(a, *mode) for name, a in outfeeds.items()}
        oflo, div0, inv = session.flags()
        return RunResult(outfeeds, {"OFLO": oflo, "DIV0": div0, "INV": inv}, Report(session.report()))


def _keep(a: np.ndarray, mode: str, period: int) -> np.ndarray:
    """PopTorch's output modes over a stream's entries."""
    if mode == "last":
        return a[-1:]
    if mode == "sum":
        return a.astype(np.float64).sum(axis=0, keepdims=True)
    if mode == "every":
        return a[period - 1::period]
    return a


def load(path: str, input_shapes: Optional[Dict[str, Any]] = None, training: bool = False) -> Program:
    """A RON program, or an ONNX model (``input_shapes`` binds symbolic dimensions;
    ``training`` adds a softmax cross-entropy loss over its output, as ``--training``)."""
    shapes = [(k, [int(d) for d in v]) for k, v in (input_shapes or {}).items()]
    return Program(_ipusim.load(str(path), shapes, training))


def model(name: str, batch: int = 1, image_size: Optional[int] = None, classes: Optional[int] = None,
          precision: str = "16.16") -> Program:
    """A network of the model zoo (``ipusim model``): ``resnet50``, ``resnet20``, ..."""
    return Program(_ipusim.model(name, batch, image_size, classes, precision))
