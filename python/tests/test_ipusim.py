"""The Python package against the CLI: the same reports, the same outfeeds, real exceptions.

Needs the package installed (``pip install ./python``) and the CLI built
(``cargo build --release``; ``IPUSIM_BIN`` overrides its path), as ``.ci/run`` does.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ipusim

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("IPUSIM_BIN", str(REPO / "target" / "release" / "ipusim"))
FLAGSHIP = str(REPO / "programs" / "mlp_digits.ron")


def cli(*args):
    out = subprocess.run([BIN, *args], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_flagship_report_equals_the_clis_json():
    report = ipusim.load(FLAGSHIP).compile(ipusim.Options())
    assert report.to_dict() == json.loads(cli("compile", FLAGSHIP, "--json"))
    opts = ipusim.Options().deviceIterations(10)
    opts.Training.gradientAccumulation(2)
    opts.Precision.setPartialsType(np.float16).Precision.precision("16.16")
    got = ipusim.load(FLAGSHIP).compile(opts).to_dict()
    want = json.loads(cli("compile", FLAGSHIP, "--json", "--device-iterations", "10",
                          "--gradient-accumulation", "2", "--partials", "half", "--precision", "16.16"))
    assert got == want
    assert got["gradient_accumulation"] == 2 and got["device_iterations"] == 10


def test_a_resnet_from_the_zoo_compiles_like_the_cli(tmp_path):
    program = tmp_path / "resnet8.ron"
    cli("model", "resnet8", "--batch", "2", "--image-size", "8", "-o", str(program))
    want = json.loads(cli("compile", str(program), "--json"))
    got = ipusim.model("resnet8", batch=2, image_size=8).compile().to_dict()
    # The zoo program is the same network; only where it was loaded from differs.
    assert got == want
    assert got["convolutions"], "per-layer convolution rows"


def test_ten_training_steps_return_the_clis_outfeeds():
    opts = ipusim.Options().deviceIterations(10)
    result = ipusim.load(FLAGSHIP).run(steps=10, opts=opts)
    want = json.loads(cli("run", FLAGSHIP, "--json", "--device-iterations", "10", "--steps", "10"))
    assert set(result.outfeeds) == set(want["outfeeds"])
    for name, values in want["outfeeds"].items():
        got = result.outfeeds[name]
        assert got.shape[0] == 10
        np.testing.assert_array_equal(got.astype(np.float64), np.asarray(values, dtype=np.float64))
    assert result.outfeeds["accuracy"].dtype == np.float16  # FP16 stays FP16
    assert result.flags == {"OFLO": False, "DIV0": False, "INV": False}
    assert result.report.to_dict()["steps"] == 10


def test_inputs_from_numpy_and_output_modes():
    program = ipusim.load(FLAGSHIP)
    # Ten micro-batches of one digit repeated: the model sees only these.
    rng = np.random.default_rng(0)
    features = np.repeat(rng.integers(0, 17, size=(1, 50, 64)), 10, axis=0)
    labels = np.repeat(rng.integers(0, 10, size=(1, 50)), 10, axis=0)
    inputs = {"features": features, "labels": labels}
    opts = ipusim.Options().deviceIterations(10)
    every = program.run(inputs=inputs, steps=10, opts=opts)
    assert every.outfeeds["loss"].shape == (10,)
    # Training on the same batch lowers its loss.
    assert every.outfeeds["loss"][-1] < every.outfeeds["loss"][0]
    last = program.run(inputs=inputs, steps=10, opts=ipusim.Options().deviceIterations(10).outputMode("Final"))
    np.testing.assert_array_equal(last.outfeeds["loss"], every.outfeeds["loss"][-1:])
    total = program.run(inputs=inputs, steps=10, opts=ipusim.Options().deviceIterations(10).outputMode("Sum"))
    assert total.outfeeds["loss"][0] == pytest.approx(every.outfeeds["loss"].astype(np.float64).sum())
    with pytest.raises(ipusim.StreamError, match="no infeed is named 'pixels'"):
        program.run(inputs={"pixels": features}, steps=10, opts=opts)
    with pytest.raises(ipusim.StreamError, match="micro-batches of \\[50, 64\\]"):
        program.run(inputs={"features": features[:, :10]}, steps=10, opts=opts)


def test_an_fp16_overflow_trap_raises_with_the_dump():
    opts = ipusim.Options()
    opts.Precision.setFloatingPointBehaviour(oflo=True)
    with pytest.raises(ipusim.FloatingPointException) as e:
        ipusim.load(str(REPO / "programs" / "fp_exceptions.ron")).run(opts=opts)
    message = str(e.value)
    for part in ("floating-point exception", "OFLO", "tile"):
        assert part in message, message
    assert isinstance(e.value, ipusim.IpusimError)


def test_wrong_options_and_files_raise_named_exceptions(tmp_path):
    with pytest.raises(ipusim.OptionsError, match="deviceIterations: 0"):
        ipusim.Options().deviceIterations(0)
    with pytest.raises(ipusim.OptionsError, match="outputMode"):
        ipusim.Options().outputMode("Sometimes")
    with pytest.raises(ipusim.OptionsError, match="setPartialsType"):
        ipusim.Options().Precision.setPartialsType("quarter")
    with pytest.raises(ipusim.OptionsError, match="precision"):
        ipusim.load(FLAGSHIP).compile(ipusim.Options().Precision.precision("8.8"))
    with pytest.raises(ipusim.ProgramError, match="missing.ron"):
        ipusim.load(str(tmp_path / "missing.ron"))
    with pytest.raises(ipusim.ProgramError, match="no model 'resnet51'"):
        ipusim.model("resnet51")
    tiny = tmp_path / "tiny.ron"
    tiny.write_text('(base: "mk1", tiles: 2, bytes_per_tile: 4096)')
    with pytest.raises(ipusim.OutOfMemoryError, match="out of memory on"):
        ipusim.load(FLAGSHIP).run(opts=ipusim.Options().useIpuModel(target=str(tiny)))
    report = ipusim.load(FLAGSHIP).compile(ipusim.Options().useIpuModel(target=str(tiny)))
    assert report.oom


def test_onnx_models_load_from_python(tmp_path):
    zoo = tmp_path / "r8.ron"
    onnx = tmp_path / "r8.onnx"
    cli("model", "resnet8", "--batch", "2", "--image-size", "8", "-o", str(zoo))
    cli("export", str(zoo), "-o", str(onnx), "--symbolic-batch")
    program = ipusim.load(str(onnx), input_shapes={"image": (2, 3, 8, 8)}, training=True)
    want = json.loads(cli("compile", str(onnx), "--json", "--input-shape", "image=2x3x8x8", "--training"))
    assert program.compile().to_dict() == want


def test_the_execution_trace_and_the_html_page_equal_the_clis(tmp_path):
    report = ipusim.load(FLAGSHIP).compile(execution_trace=True)
    want = json.loads(cli("compile", FLAGSHIP, "--json", "--execution-trace"))
    assert report.to_dict() == want
    assert report.to_dict()["execution"]["source"] == "estimate"
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(want))
    page = tmp_path / "cli.html"
    cli("report", "html", str(saved), "-o", str(page))
    mine = tmp_path / "py.html"
    assert report.to_html(str(mine), name=str(saved)) == page.read_text() == mine.read_text()
    assert 'id="execution-trace"' in mine.read_text()
    other = ipusim.load(FLAGSHIP).compile(ipusim.Options().Precision.setPartialsType("half"))
    assert 'id="compare"' in report.to_html(compare=other)


def test_a_libpva_shaped_view_reads_the_reports(tmp_path):
    from ipusim import pva

    compiled = tmp_path / "compile.json"
    cli("compile", FLAGSHIP, "--json", "-o", str(compiled))
    d = json.loads(compiled.read_text())
    r = pva.openReport(compiled)
    assert r.compilation.target.numTiles == d["target"]["tiles"]
    assert r.compilation.target.numIPUs == 1
    assert [t.memory.total.includingGaps for t in r.compilation.tiles] == d["memory"]["tiles"]
    steps = r.compilation.livenessProgramSteps
    assert max(s.notAlwaysLiveMemory.bytes for s in steps) == d["memory"]["peak_live_bytes"]
    assert r.compilation.alwaysLiveMemory.bytes == d["memory"]["always_live_bytes"]
    assert r.execution is None
    ran = tmp_path / "run.json"
    cli("run", FLAGSHIP, "--json", "-o", str(ran))
    executed = json.loads(ran.read_text())["report"]["executed"]
    e = pva.openReport(ran).execution
    assert e.cycles == executed["total_cycles"]
    assert [x.cycles for x in e.runs] == executed["cycles_per_run"]
    # The execution trace (`--execution-trace`): libpva's steps, from the static walk of a
    # compile and from the recorded run, step for step the same.
    traced = tmp_path / "trace.json"
    cli("compile", FLAGSHIP, "--json", "--execution-trace", "-o", str(traced))
    t = json.loads(traced.read_text())["execution"]
    est = pva.openReport(traced).execution
    assert est.source == "estimate" and est.runs == []
    assert est.totalCycles.total == t["total_cycles"] == d["total_cycles"]
    assert len(est.steps) == t["shown_steps"]
    lane = t["ipus"][0]["slices"]
    assert [(s.program.name, s.ipus[0].cycles) for s in est.steps] == [
        (x.get("name", ""), x["cycles"]) for x in lane
    ]
    first = est.steps[0].ipus[0].activeCycles
    assert (first.cyclesFrom, first.cyclesTo) == (0, lane[0]["cycles"])
    assert {s.program.type for s in est.steps} >= {"OnTileExecute", "DoExchange", "Sync", "StreamCopy"}
    ran_traced = tmp_path / "run-trace.json"
    cli("run", FLAGSHIP, "--json", "--execution-trace", "-o", str(ran_traced))
    rec = pva.openReport(ran_traced).execution
    assert rec.source == "run"
    assert [(s.program.name, s.program.type, s.ipus[0].cycles, s.ipus[0].activeCycles.cyclesFrom) for s in rec.steps] == [
        (s.program.name, s.program.type, s.ipus[0].cycles, s.ipus[0].activeCycles.cyclesFrom) for s in est.steps
    ]
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ipusim.ProgramError, match="not an ipusim report"):
        pva.openReport(bad)


def test_execution_strategies_place_the_program_like_the_cli():
    resnet = str(REPO / "programs" / "resnet_digits.ron")
    opts = ipusim.Options().setExecutionStrategy(ipusim.PipelinedExecution("layer2", schedule="Interleaved"))
    opts.Training.gradientAccumulation(3)
    got = ipusim.load(resnet).compile(opts).to_dict()
    want = json.loads(cli("compile", resnet, "--json", "--pipeline-splits", "layer2",
                          "--pipeline-schedule", "Interleaved", "--gradient-accumulation", "3"))
    assert got == want
    assert got["pipeline"]["schedule"] == "Interleaved" and len(got["ipus"]) == 2
    sharded = ipusim.Options().setExecutionStrategy(ipusim.ShardedExecution("layer2", recompute=True))
    got = ipusim.load(resnet).compile(sharded).to_dict()
    assert got == json.loads(cli("compile", resnet, "--json", "--pipeline-splits", "layer2", "--recompute"))
    assert len(got["ipus"]) == 2 and "pipeline" not in got
    with pytest.raises(ipusim.OptionsError, match="schedule 'Staggered'"):
        ipusim.PipelinedExecution("layer2", schedule="Staggered")
    with pytest.raises(ipusim.OptionsError, match="setExecutionStrategy"):
        ipusim.Options().setExecutionStrategy("layer2")
    with pytest.raises(ipusim.CompileError, match="layer9"):
        ipusim.load(resnet).compile(ipusim.Options().setExecutionStrategy(ipusim.ShardedExecution("layer9")))


def test_optimizer_state_locations_are_the_clis_offload_and_sharding():
    resnet = str(REPO / "programs" / "resnet_digits.ron")
    offload = ipusim.Options()
    offload.TensorLocations.setOptimizerLocation(ipusim.TensorLocationSettings().useOnChipStorage(False))
    got = ipusim.load(resnet).compile(offload).to_dict()
    assert got == json.loads(cli("compile", resnet, "--json", "--offload-optimizer-state"))
    on_chip = json.loads(cli("compile", resnet, "--json"))
    assert got["memory"]["categories"]["variables"] < on_chip["memory"]["categories"]["variables"]
    sharded = ipusim.Options().replicationFactor(2)
    sharded.TensorLocations.setOptimizerLocation(
        ipusim.TensorLocationSettings().useReplicatedTensorSharding(True))
    got = ipusim.load(resnet).compile(sharded).to_dict()
    want = json.loads(cli("compile", resnet, "--json", "--replicas", "2", "--replicated-optimizer-state-sharding"))
    assert got == want
    assert got["collectives"]["reduce_scatter"]["count"] > 0
    # A sharded run gives the CLI's outfeeds, and the unsharded run's: sharding moves state.
    result = ipusim.load(FLAGSHIP).run(steps=2, opts=sharded.deviceIterations(2))
    args = ("run", FLAGSHIP, "--json", "--steps", "2", "--device-iterations", "2", "--replicas", "2")
    want = json.loads(cli(*args, "--replicated-optimizer-state-sharding"))
    plain = json.loads(cli(*args))
    assert want["outfeeds"] == plain["outfeeds"]
    for name, values in want["outfeeds"].items():
        np.testing.assert_array_equal(result.outfeeds[name].astype(np.float64), np.asarray(values, dtype=np.float64))
    with pytest.raises(ipusim.OptionsError, match="setOptimizerLocation"):
        ipusim.Options().TensorLocations.setOptimizerLocation(True)


def test_elementwise_fusion_is_the_clis_and_can_be_turned_off():
    program = str(REPO / "tests" / "programs" / "sim" / "elementwise.ron")
    fused = ipusim.load(program).compile(ipusim.Options()).to_dict()
    assert fused == json.loads(cli("compile", program, "--json"))
    plain = ipusim.load(program).compile(ipusim.Options().elementwiseFusion(False)).to_dict()
    assert plain == json.loads(cli("compile", program, "--json", "--no-elementwise-fusion"))
    assert len(fused["compute_sets"]) < len(plain["compute_sets"])


def test_early_weight_update_is_the_clis():
    program = str(REPO / "tests" / "programs" / "sim" / "cnn_tour.ron")
    early = ipusim.load(program).compile(ipusim.Options().earlyWeightUpdate(True)).to_dict()
    assert early == json.loads(cli("compile", program, "--json", "--early-weight-update"))
    late = ipusim.load(program).compile(ipusim.Options()).to_dict()
    assert early["program_tree"] != late["program_tree"]


def test_stable_norm_is_the_clis():
    program = str(REPO / "programs" / "resnet_digits.ron")
    opts = ipusim.Options()
    opts.Precision.enableStableNorm(True)
    stable = ipusim.load(program).compile(opts).to_dict()
    assert stable == json.loads(cli("compile", program, "--json", "--stable-norm"))
    single = json.loads(cli("compile", program, "--json"))
    assert stable["total_cycles"] > single["total_cycles"]
