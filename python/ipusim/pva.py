"""A read-only view of an ipusim report with the names of Graphcore's libpva (PopVision
Analysis Library), so that a script written for ``pva.openReport("profile.pop")`` reads an
ipusim report with few changes::

    from ipusim import pva
    report = pva.openReport("report.json")      # `ipusim compile --json` or `ipusim run --json`
    report.compilation.target.numTiles
    [t.memory.total.includingGaps for t in report.compilation.tiles]
    [s.notAlwaysLiveMemory.bytes for s in report.compilation.livenessProgramSteps]
    report.execution.runs[0].cycles              # run reports only
    [(s.program.name, s.ipus[0].cycles) for s in report.execution.steps]   # with a trace

Only what the ipusim report holds is there; every figure is the JSON's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from ._ipusim import ProgramError


class _Bytes:
    def __init__(self, n: int) -> None:
        self.bytes = n

    def __repr__(self) -> str:
        return f"{self.bytes} bytes"


class _Total:
    def __init__(self, n: int) -> None:
        # ipusim places tensors without gaps: both figures are the same.
        self.includingGaps = n
        self.excludingGaps = n


class _TileMemory:
    def __init__(self, n: int) -> None:
        self.total = _Total(n)


class Tile:
    """One tile: ``number``, ``ipu`` and ``memory.total.includingGaps``."""

    def __init__(self, number: int, tiles_per_ipu: int, n: int) -> None:
        self.number = number
        self.ipu = number // max(tiles_per_ipu, 1)
        self.memory = _TileMemory(n)


class LivenessStep:
    """One program step: ``notAlwaysLiveMemory.bytes``."""

    def __init__(self, index: int, n: int) -> None:
        self.index = index
        self.notAlwaysLiveMemory = _Bytes(n)


class Target:
    """``numTiles`` (per IPU), ``numIPUs``, ``totalTiles``, ``bytesPerTile``,
    ``clockFrequency`` and ``type``."""

    def __init__(self, d: Dict[str, Any]) -> None:
        t = d["target"]
        self.type = t["name"]
        self.numTiles = t["tiles"]
        self.numIPUs = max(len(d.get("ipus", [])), 1)
        self.totalTiles = self.numTiles * self.numIPUs
        self.bytesPerTile = t["bytes_per_tile"]
        self.clockFrequency = t["clock_hz"]


class Compilation:
    """``target``, ``tiles``, ``livenessProgramSteps``, ``alwaysLiveMemory`` and the
    ipusim figures ``totalCycles`` (static estimate) and ``computeSets``."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.target = Target(d)
        m = d["memory"]
        per_ipu = self.target.numTiles
        self.tiles: List[Tile] = [Tile(i, per_ipu, n) for i, n in enumerate(m.get("tiles", []))]
        self.livenessProgramSteps: List[LivenessStep] = [
            LivenessStep(i, n) for i, n in enumerate(m.get("liveness", []))
        ]
        self.alwaysLiveMemory = _Bytes(m["always_live_bytes"])
        self.totalCycles = d["total_cycles"]
        self.computeSets = [dict(c) for c in d.get("compute_sets", [])]


class Run:
    """One device run: ``number`` and ``cycles`` (executed)."""

    def __init__(self, number: int, cycles: int) -> None:
        self.number = number
        self.cycles = cycles


class _CycleTotal:
    def __init__(self, n: int) -> None:
        self.total = n


class CycleRange:
    """``cyclesFrom`` and ``cyclesTo`` (from the start of the run)."""

    def __init__(self, start: int, cycles: int) -> None:
        self.cyclesFrom = start
        self.cyclesTo = start + cycles


class _ProgramStep:
    """The program a step ran: ``name`` and ``type`` (``OnTileExecute``, ``DoExchange``,
    ``Sync`` or ``StreamCopy``, PopVision's categories)."""

    _TYPES = {
        "Execute": "OnTileExecute",
        "Exchange": "DoExchange",
        "Sync": "Sync",
        "StreamCopy": "StreamCopy",
    }

    def __init__(self, kind: str, name: str) -> None:
        self.name = name
        self.type = self._TYPES.get(kind, kind)


class StepIpu:
    """One IPU's part of a step: ``ipu``, ``cycles`` (its own: a compute set's slowest tile
    there) and ``activeCycles.cyclesFrom/To``; ``None`` ranges where the step does not run
    on that IPU."""

    def __init__(self, ipu: int, s: Optional[Dict[str, Any]]) -> None:
        self.ipu = ipu
        self.cycles = s["cycles"] if s else 0
        self.activeCycles: Optional[CycleRange] = CycleRange(s["start"], s["cycles"]) if s else None
        self.tiles = s.get("tiles", 0) if s else 0


class ExecutionStep:
    """One program step of the execution trace: ``program.name``, ``program.type`` and
    ``ipus[i]``."""

    def __init__(self, kind: str, name: str, ipus: List[StepIpu]) -> None:
        self.program = _ProgramStep(kind, name)
        self.ipus = ipus


def _steps(trace: Dict[str, Any]) -> List[ExecutionStep]:
    """The steps of the report's ``execution`` section: each IPU's slices joined by their
    start cycle, kind and name, in time order."""
    lanes = trace.get("ipus", [])
    order: List[Any] = []
    by_key: Dict[Any, Dict[int, Dict[str, Any]]] = {}
    for i, lane in enumerate(lanes):
        for s in lane.get("slices", []):
            key = (s["start"], s["kind"], s.get("name", ""))
            if key not in by_key:
                by_key[key] = {}
                order.append(key)
            by_key[key][i] = s
    order.sort(key=lambda k: k[0])
    return [
        ExecutionStep(k[1], k[2], [StepIpu(lanes[i]["ipu"], by_key[k].get(i)) for i in range(len(lanes))])
        for k in order
    ]


class Execution:
    """A run report's execution: ``runs`` and ``cycles`` (all runs, by category); and,
    when the report has an execution trace (``--execution-trace`` or ``--html``), its
    ``steps`` (the first ones kept), ``totalCycles.total`` of the traced run and the trace's
    ``source`` (``run``, or ``estimate`` for a compile report)."""

    def __init__(self, d: Dict[str, Any]) -> None:
        executed = d.get("executed", {})
        self.runs = [Run(i + 1, c) for i, c in enumerate(executed.get("cycles_per_run", []))]
        self.cycles = executed.get("total_cycles")
        self.categories = dict(executed.get("categories", {}))
        trace = d.get("execution")
        self.steps: List[ExecutionStep] = _steps(trace) if trace else []
        self.totalCycles = _CycleTotal(trace["total_cycles"]) if trace else None
        self.source = trace["source"] if trace else None


class Report:
    """``compilation`` and, for a run report or a report with an execution trace,
    ``execution`` (else ``None``)."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.compilation = Compilation(d)
        has = "executed" in d or "execution" in d
        self.execution: Optional[Execution] = Execution(d) if has else None


def openReport(path: Union[str, Path]) -> Report:
    """Opens the JSON report of ``ipusim compile --json`` or ``ipusim run --json``."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ProgramError(f"{p}: error: not a readable JSON report: {e}") from None
    if isinstance(d, dict) and "total_cycles" not in d and "report" in d:
        d = d["report"]
    if not isinstance(d, dict) or "total_cycles" not in d:
        raise ProgramError(f"{p}: error: not an ipusim report (no total_cycles)")
    return Report(d)
