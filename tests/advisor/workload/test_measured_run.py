"""The measured run closes the loop: a plan candidate's bundle runs `launch.sh --benchmark` (the real train.py,
tiny random-initialised Llama, on the CPU), its measured.json is validated, compared with the estimate and
stored (`calibrate`), and plans then time the matching candidates from it (`plan --measured`, the store).

A CPU run's measured.json says gpu_model "cpu" and matches no GPU candidate; the tests that plan with it
relabel a copy to the candidate's GPU (A100), so its real step times stand in for that GPU's."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error
from helpers.launch_fixtures import write_tiny_llama

from advisor.stacks import Stack
from advisor.workload import measurements

STEPS, WARMUP = 6, 2
PLAN = ["--tokens", "1M", "--seq-len", "64", "--global-batch", "8", "--gpu", "A100", "--methods", "lora",
        "--lora-rank", "8", "--attention", "sdpa", "--no-liger", "--optimizer", "adamw", "--no-grad-checkpointing",
        "--precision", "bf16", "--top", "50"]
BIN = Path(sys.executable).parent


def _cli(env: dict, *args: str, cwd: Path) -> str:
    exe = shutil.which("gpu-advisor", path=str(BIN)) or pytest.skip("gpu-advisor console script not installed")
    proc = subprocess.run([exe, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """plan -> launch -> `bash launch.sh --benchmark` once for the module: the real measured.json."""
    root = tmp_path_factory.mktemp("measured")
    if shutil.which("accelerate", path=str(BIN)) is None:
        pytest.skip("accelerate CLI not installed")
    env = {**os.environ, "GPU_ADVISOR_CACHE_DIR": str(root / "cache"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    config = write_tiny_llama(root / "tiny")
    model = ["--model", str(config)]
    plan = json.loads(_cli(env, "plan", *model, *PLAN, "--format", "json", cwd=root))
    (root / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    _cli(env, "launch", "--from", str(root / "plan.json"), "--out", str(root / "bundle"), cwd=root)
    proc = subprocess.run(["bash", str(root / "bundle" / "launch.sh"), "--init_from_config", str(config),
                           "--benchmark", "--steps", str(STEPS), "--warmup_steps", str(WARMUP)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return {"root": root, "plan": plan, "model": model, "measured": root / "bundle" / "measured.json",
            "log": proc.stdout}


def relabel(run: dict, name: str, **changes) -> Path:
    """A copy of the real measured.json as if measured on the plan's GPU (A100), with `changes`."""
    data = json.loads(run["measured"].read_text(encoding="utf-8"))
    data.update({"gpu_model": "A100", **changes})
    path = run["root"] / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def same_setup(plan: dict, top: dict) -> dict:
    """The candidate of `plan` with `top`'s instance type, stack and node count (its region may be another
    of the same offer's)."""
    def key(c: dict) -> tuple:
        return c["offer"]["provider"], c["offer"]["instance_type"], c["label"], c["nodes"]

    return next(c for c in plan["candidates"] if key(c) == key(top))


def plan_json(capsys, run: dict, *extra) -> dict:
    code, out, err = gpu_advisor(capsys, "plan", *run["model"], *PLAN, "--format", "json", *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --------------------------------------------------------------------------- the run itself


@pytest.mark.slow
def test_benchmark_measures_the_planned_setup_over_the_timed_steps_only(run):
    m = measurements.load(run["measured"])
    top = run["plan"]["candidates"][0]
    assert m.gpu_model == "cpu" and m.weights == "random-init" and m.model == run["plan"]["model"]["name"]
    assert measurements.stack_key(m.stack) == measurements.stack_key(Stack(**top["stack"]))
    assert (m.shape.micro_batch, m.shape.seq_len, m.shape.grad_accum) == \
        (top["shape"]["micro_batch"], 64, top["shape"]["grad_accum"])
    # warm-up excluded: exactly the timed steps are recorded, and tokens/s is their tokens over their window
    assert m.step_seconds.count == len(m.step_seconds.steps) == STEPS and m.warmup_steps == WARMUP
    tokens = m.shape.micro_batch * m.shape.seq_len * m.shape.grad_accum * m.gpu_count * STEPS
    assert m.tokens_per_sec == pytest.approx(tokens / m.wall_seconds)
    assert sum(m.step_seconds.steps) <= m.wall_seconds
    assert m.step_seconds.p10 <= m.step_seconds.median <= m.step_seconds.p90
    # no CUDA here: device memory is not measured, the host's peak RSS is
    assert m.peak_allocated_bytes is None and m.device_total_bytes is None and m.host_peak_rss_bytes > 0
    assert {"torch", "transformers", "peft", "accelerate"} <= set(m.versions)
    assert f"over {STEPS} steps" in run["log"]
    assert not (run["root"] / "bundle" / "output").exists()  # a benchmark saves no checkpoint


@pytest.mark.slow
def test_calibrate_validates_compares_and_stores_the_cpu_run(run, cache, capsys):
    code, out, err = gpu_advisor(capsys, "calibrate", run["measured"], "--format", "json", *run["model"])
    assert code == 0, err
    cal = json.loads(out)
    m = measurements.load(run["measured"])
    assert cal["measured_tokens_per_sec"] == pytest.approx(m.tokens_per_sec)
    assert cal["estimated_tokens_per_sec"] is None  # no GPU time model for a CPU run
    assert [c["kind"] for c in cal["memory"]] == ["peak_allocated", "peak_reserved", "device_total"]
    assert all(c["measured_bytes"] is None and c["estimated_bytes"] > 0 for c in cal["memory"])
    assert gpu_advisor(capsys, "calibrate", run["measured"], *run["model"])[0] == 0  # the same run again: one file
    stored = list((cache / "measurements").glob("*.json"))
    assert [str(p) for p in stored] == [cal["stored_at"]] and measurements.stored()[0].tokens_per_sec == m.tokens_per_sec
    assert "stored" in err and "matches no GPU candidate" in err
    assert measurements.gather([]) and not measurements.gather([], use_store=False)


@pytest.mark.slow
def test_calibrate_says_when_the_memory_estimate_was_too_low(run, cache, capsys):
    probe = json.loads(gpu_advisor(capsys, "calibrate", relabel(run, "probe.json"), "--format", "json", *run["model"])[1])
    est = {c["kind"]: c["estimated_bytes"] for c in probe["memory"]}
    path = relabel(run, "gpu.json", peak_allocated_bytes=est["peak_allocated"] // 2,
                   peak_reserved_bytes=est["peak_reserved"] * 2, device_total_bytes=None)
    code, out, err = gpu_advisor(capsys, "calibrate", path, "--format", "json", *run["model"])
    cal = json.loads(out)
    by = {c["kind"]: c for c in cal["memory"]}
    assert by["peak_allocated"]["safe"] is True and by["peak_reserved"]["safe"] is False
    assert by["peak_reserved"]["ratio"] == pytest.approx(2.0, rel=1e-6) and by["device_total"]["safe"] is None
    assert cal["memory_safe"] is False
    assert cal["tokens_per_sec_ratio"] == pytest.approx(cal["measured_tokens_per_sec"] / cal["estimated_tokens_per_sec"])
    code, out, err = gpu_advisor(capsys, "calibrate", path, *run["model"])
    assert code == 0 and "estimate too LOW" in out and "needed more than estimated" in out


# --------------------------------------------------------------------------- plans that follow it


@pytest.mark.slow
def test_plan_hours_for_the_measured_setup_follow_the_measurement(run, cache, capsys):
    path = relabel(run, "a100.json")
    m = measurements.load(path)
    plan = plan_json(capsys, run, "--measured", path)
    c = same_setup(plan, run["plan"]["candidates"][0])
    t = c["timing"]
    assert t["tokens_per_sec"] == pytest.approx(m.tokens_per_sec)  # the shape is the measured one: ratio 1
    per_step = c["shape"]["micro_batch"] * 64 * c["shape"]["grad_accum"]
    steps = math.ceil(plan["workload"]["train_tokens"] / per_step)
    assert t["train_hours"] == pytest.approx(steps * per_step / m.tokens_per_sec / 3600)
    assert t["band_basis"].startswith(f"measured on {m.date}") and "a100.json" in t["band_basis"]
    # the band is the measured step-time spread (no extrapolation at the measured shape)
    s = m.step_seconds
    assert t["hours_high"] - t["hours"] == pytest.approx(t["train_hours"] * (s.p90 / s.median - 1), rel=1e-3)  # + interruptions
    assert t["hours"] - t["hours_low"] == pytest.approx(t["train_hours"] * (1 - s.p10 / s.median), rel=1e-3)


@pytest.mark.slow
def test_risk_p80_budgets_on_the_measured_spread_not_the_time_models_band(run, cache, capsys):
    """--risk p80 ranks a measured candidate by the 80th percentile of its own measured step times (log-linear
    between the measured p10/p90 and the median, the held-out band's own rule), not the segment's wider band."""
    from advisor.estimate.throughput import band_quantile
    from pricing.gpus import get_gpu

    path = relabel(run, "risk.json")
    s = measurements.load(path).step_seconds
    c = same_setup(plan_json(capsys, run, "--measured", path, "--risk", "p80"), run["plan"]["candidates"][0])
    t = c["timing"]
    slow = (s.p90 / s.median) ** 0.75  # p80 sits 3/4 of the way from the median to p90 on a log scale
    assert t["risk_quantile"] == 0.8
    assert t["hours_at_risk"] - t["hours"] == pytest.approx(t["train_hours"] * (slow - 1), rel=1e-3, abs=1e-9)
    segment = 1 / band_quantile(get_gpu("A100"), Stack(**c["stack"]), 0.2)[0]
    assert abs(slow - segment) > 1e-3  # the check above can tell the two apart


@pytest.mark.slow
def test_half_the_predicted_rate_doubles_training_hours_in_json_table_and_report(run, cache, capsys, tmp_path):
    before = plan_json(capsys, run)
    top = before["candidates"][0]
    path = relabel(run, "half.json", tokens_per_sec=top["timing"]["tokens_per_sec"] / 2)
    after = same_setup(plan_json(capsys, run, "--measured", path), top)
    assert after["timing"]["train_hours"] / top["timing"]["train_hours"] == pytest.approx(2.0, rel=0.10)
    assert after["timing"]["band_basis"].startswith("measured on") and "half.json" in after["timing"]["band_basis"]
    assert not top["timing"]["band_basis"].startswith("measured on")

    code, table, err = gpu_advisor(capsys, "plan", *run["model"], *PLAN, "--measured", path)
    assert code == 0, err
    line = next(x for x in table.splitlines() if x.startswith("Measured: "))
    assert "half.json" in line and f"{after['timing']['tokens_per_sec']:,.0f} tokens/s" in line

    report = tmp_path / "r.md"
    code, _, err = gpu_advisor(capsys, "plan", *run["model"], *PLAN, "--measured", path, "--report", report,
                               "--top", "1")
    assert code == 0, err
    assert "from the run measured on" in report.read_text(encoding="utf-8")


@pytest.mark.slow
def test_stored_runs_apply_automatically_and_no_measured_ignores_them(run, cache, capsys):
    path = relabel(run, "stored.json")
    assert gpu_advisor(capsys, "calibrate", path, *run["model"])[0] == 0
    top = run["plan"]["candidates"][0]
    auto = same_setup(plan_json(capsys, run), top)["timing"]
    assert auto["tokens_per_sec"] == pytest.approx(measurements.load(path).tokens_per_sec)
    assert auto["band_basis"].startswith("measured on")
    ignored = same_setup(plan_json(capsys, run, "--no-measured"), top)["timing"]
    assert ignored["tokens_per_sec"] == pytest.approx(top["timing"]["tokens_per_sec"])
    assert not ignored["band_basis"].startswith("measured on")


@pytest.mark.slow
def test_other_stack_or_gpu_is_not_timed_by_the_run_but_lora_alpha_is_irrelevant(run, cache, capsys):
    data = json.loads(run["measured"].read_text(encoding="utf-8"))
    top = run["plan"]["candidates"][0]
    other = relabel(run, "other.json", stack={**data["stack"], "optimizer": "sgd"})
    h100 = relabel(run, "h100.json", gpu_model="H100")
    alpha = relabel(run, "alpha.json", stack={**data["stack"], "lora_alpha": 64})
    plan = plan_json(capsys, run, "--measured", other, "--measured", h100)
    assert not any(c["timing"]["band_basis"].startswith("measured on") for c in plan["candidates"])
    timed = same_setup(plan_json(capsys, run, "--measured", alpha), top)["timing"]
    assert "alpha.json" in timed["band_basis"]


@pytest.mark.slow
def test_another_shape_is_scaled_by_the_time_model_and_its_band_widened(run, cache, capsys):
    """Global batch 16 runs micro-batch 16 (measured: 8): the model's own ratio scales the rate, and the
    band is wider than the measured spread, by at most the time model's held-out band."""
    from advisor.estimate.engine import Engine
    from advisor.estimate.throughput import band
    from advisor.model.catalog import load_model
    from advisor.stacks import Shape
    from pricing.gpus import get_gpu

    path = relabel(run, "shape.json")
    m = measurements.load(path)
    args = list(PLAN)
    args[args.index("--global-batch") + 1] = "16"
    code, out, err = gpu_advisor(capsys, "plan", *run["model"], *args, "--format", "json", "--measured", path)
    c = same_setup(json.loads(out), run["plan"]["candidates"][0])
    mb, accum = c["shape"]["micro_batch"], c["shape"]["grad_accum"]
    assert mb * accum == 16 and mb != m.shape.micro_batch
    engine, gpu = Engine(load_model(run["model"][1])), get_gpu("A100")
    stack = Stack(**c["stack"])
    new = engine.step(stack, Shape(micro_batch=mb, seq_len=64, grad_accum=accum), gpu)
    old = engine.step(stack, m.shape.shape(), gpu)
    t = c["timing"]
    assert t["tokens_per_sec"] == pytest.approx(m.tokens_per_sec * new.tokens_per_sec / old.tokens_per_sec)
    spread = m.step_seconds.p90 / m.step_seconds.median
    low, _, _ = band(gpu, stack)
    slow = (t["hours_high"] - t["hours"] + t["train_hours"]) / t["train_hours"]  # train hours at p90 / at p50
    assert spread < slow <= spread / low + 1e-9
    assert "scaled from micro-batch 8" in t["band_basis"]


@pytest.mark.slow
def test_a_measured_peak_above_the_estimate_raises_the_candidates_peak(run, cache, capsys):
    top = run["plan"]["candidates"][0]
    limit = top["fit"]["limit_bytes"]
    path = relabel(run, "peak.json", device_total_bytes=limit)  # the run needed the whole limit
    c = same_setup(plan_json(capsys, run, "--measured", path), top)
    assert c["fit"]["peak_bytes"] > top["fit"]["peak_bytes"] and c["fit"]["tight"] is True
    safe = same_setup(plan_json(capsys, run, "--measured", relabel(run, "low.json", device_total_bytes=1)), top)
    assert safe["fit"]["peak_bytes"] == top["fit"]["peak_bytes"] and safe["fit"]["tight"] is top["fit"]["tight"]


# --------------------------------------------------------------------------- shared data, never code


def valid() -> dict:
    """A well-formed measurement (as train.py writes it) to spoil one field at a time."""
    return {"schema": measurements.SCHEMA, "model": "meta-llama/Llama-3.1-8B", "weights": "pretrained",
            "gpu_model": "NVIDIA H100 80GB HBM3", "device_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "nodes": 1,
            "stack": Stack(method="lora", gpus=1).model_dump(mode="json"),
            "shape": {"micro_batch": 2, "seq_len": 2048, "grad_accum": 8}, "tokens_per_sec": 3000.0,
            "step_seconds": {"median": 10.9, "p10": 10.7, "p90": 11.2, "count": 3, "steps": [10.7, 10.9, 11.2]},
            "warmup_steps": 3, "wall_seconds": 33.0, "peak_allocated_bytes": 30_000_000_000,
            "peak_reserved_bytes": 31_000_000_000, "device_total_bytes": 32_000_000_000,
            "versions": {"torch": "2.13.0"}, "measured_at": "2026-12-01T10:00:00+00:00"}


def test_a_valid_file_maps_the_device_name_to_the_gpu_table(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(valid()), encoding="utf-8")
    assert measurements.load(path).gpu_model == "H100"


BAD = {
    "schema": ("schema", "gpu-advisor/measurement-9"),
    "model": ("model", "evil\x1b[31m"),
    "gpu": ("gpu_model", "TPU v5"),
    "nan": ("tokens_per_sec", float("nan")),
    "negative": ("tokens_per_sec", -1.0),
    "zero": ("tokens_per_sec", 0),
    "order": ("step_seconds", {"median": 1.0, "p10": 2.0, "p90": 3.0, "count": 1}),
    "count": ("step_seconds", {"median": 1.0, "p10": 1.0, "p90": 1.0, "count": 3, "steps": [1.0]}),
    "no_tz": ("measured_at", "2026-12-01T10:00:00"),
    "extra": ("run_this", "rm -rf /"),
    "gpus": ("gpu_count", 2),  # the stack says 1 GPU
    "stack": ("stack", {"method": "lora", "gpus": 1, "exec": "x"}),
    "version": ("versions", {"torch": "2.13\u202e"}),
    "bytes": ("peak_allocated_bytes", -5),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_measurement_is_one_line_and_exit_2(tmp_path, cache, capsys, case):
    field, value = BAD[case]
    data = valid()
    data[field] = value
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    line = one_line_error(*gpu_advisor(capsys, "calibrate", path)[::2])
    assert "m.json" in line
    assert not (cache / "measurements").exists()  # nothing stored
    code, _, err = gpu_advisor(capsys, "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "1M",
                               "--measured", path)
    one_line_error(code, err)


def test_oversized_deep_or_non_json_files_are_refused_before_parsing(tmp_path, cache, capsys, builds):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**valid(), "pad": "x" * measurements.MAX_FILE_BYTES}), encoding="utf-8")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000, encoding="utf-8")
    for path in (big, deep):
        one_line_error(*gpu_advisor(capsys, "calibrate", path)[::2])
    assert builds["json.loads"] == 0
    for text in ("not json", "[1, 2]"):
        path = tmp_path / "bad.json"
        path.write_text(text, encoding="utf-8")
        one_line_error(*gpu_advisor(capsys, "calibrate", path)[::2])
    one_line_error(*gpu_advisor(capsys, "calibrate", tmp_path / "missing.json")[::2])
