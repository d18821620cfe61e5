"""A read-only view of an ipusim report with the names of Graphcore's libpva (PopVision
Analysis Library), so that a script written for ``pva.openReport("profile.pop")`` reads an
ipusim report with few changes::

    from ipusim import pva
    report = pva.openReport("report.json")      # `ipusim compile --json` or `ipusim run --json`
    report.compilation.target.numTiles
    [t.memory.total.includingGaps for t in report.compilation.tiles]
    [s.notAlwaysLiveMemory.bytes for s in report.compilation.livenessProgramSteps]
    report.execution.runs[0].cycles              # run reports only

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


class Execution:
    """A run report's execution: ``runs`` and ``cycles`` (all runs, by category)."""

    def __init__(self, d: Dict[str, Any]) -> None:
        executed = d["executed"]
        self.runs = [Run(i + 1, c) for i, c in enumerate(executed.get("cycles_per_run", []))]
        self.cycles = executed["total_cycles"]
        self.categories = dict(executed.get("categories", {}))


class Report:
    """``compilation`` and, for a run report, ``execution`` (else ``None``)."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.compilation = Compilation(d)
        self.execution: Optional[Execution] = Execution(d) if "executed" in d else None


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
