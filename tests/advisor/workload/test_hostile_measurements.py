"""Hostile measured runs (issue 38): a measured.json is validated like a plan file. Strict types (a number
is a JSON number: never true or "5"), a rate the GPUs could really reach (at most what they do running
only the forward pass at their peak dense rate, at least 1e-7 of that), no date ahead of the clock, the
newest real run winning, and shared artefacts naming a stored run by its file name and date, never by a
path of the machine. Each case is one line naming the file and the field (exit 2), or a plan that
follows the right run."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import sys

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.stacks import Stack
from advisor.workload import measurements

MODEL = "meta-llama/Llama-3.2-1B"
SLOWER = 0.95  # a measured rate a little under the prediction: the candidate stays the top one
PLAN = ("--model", MODEL, "--tokens", "1M", "--gpu", "L4", "--providers", "aws", "--methods", "lora", "--top", "3",
        "--format", "json")


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "home" / "alice" / ".cache" / "gpu-advisor"
    monkeypatch.setenv("HOME", str(tmp_path / "home" / "alice"))
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The top candidate of PLAN (no measurement): its stack and shape make a run that matches it."""
    import subprocess

    folder = tmp_path_factory.mktemp("planned")
    env = {**os.environ, "GPU_ADVISOR_CACHE_DIR": str(folder / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "advisor", "plan", *PLAN], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["candidates"][0]


def run_of(top: dict, tokens_per_sec: float | None = None, when: str | None = None) -> dict:
    """A measured.json of `top`'s setup on one L4, at `tokens_per_sec` (default: its predicted rate)."""
    stack = {k: v for k, v in top["stack"].items()}
    shape = {k: top["shape"][k] for k in ("micro_batch", "seq_len", "grad_accum")}
    tps = top["timing"]["tokens_per_sec"] if tokens_per_sec is None else tokens_per_sec
    step = shape["micro_batch"] * shape["seq_len"] * shape["grad_accum"] / max(tps, 1e-9)
    step = min(max(step, 1e-3), 9e5)
    return {"schema": measurements.SCHEMA, "model": MODEL, "weights": "pretrained", "gpu_model": "L4",
            "device_name": "NVIDIA L4", "gpu_count": 1, "nodes": 1, "stack": stack, "shape": shape,
            "tokens_per_sec": tps,
            "step_seconds": {"median": step, "p10": step * 0.98, "p90": step * 1.03, "count": 3,
                             "steps": [step * 0.98, step, step * 1.03]},
            "warmup_steps": 2, "wall_seconds": 3 * step, "peak_allocated_bytes": 10_000_000_000,
            "versions": {"torch": "2.13.0"}, "measured_at": when or "2026-11-30T10:00:00+00:00"}


def valid() -> dict:
    """A well-formed run of Llama-3.1-8B LoRA on one H100 (no plan needed) to spoil one field at a time."""
    return {"schema": measurements.SCHEMA, "model": "meta-llama/Llama-3.1-8B", "weights": "pretrained",
            "gpu_model": "H100", "device_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "nodes": 1,
            "stack": Stack(method="lora", gpus=1).model_dump(mode="json"),
            "shape": {"micro_batch": 2, "seq_len": 2048, "grad_accum": 8}, "tokens_per_sec": 3000.0,
            "step_seconds": {"median": 10.9, "p10": 10.7, "p90": 11.2, "count": 3, "steps": [10.7, 10.9, 11.2]},
            "warmup_steps": 3, "wall_seconds": 33.0, "peak_allocated_bytes": 30_000_000_000,
            "peak_reserved_bytes": 31_000_000_000, "device_total_bytes": 32_000_000_000,
            "device_capacity_bytes": 85_000_000_000, "alloc_retries": 0, "host_peak_rss_bytes": 9_000_000_000,
            "versions": {"torch": "2.13.0"}, "measured_at": "2026-12-01T10:00:00+00:00"}


def spoiled(path_parts: str, value) -> dict:
    data = valid()
    *parents, last = path_parts.split(".")
    target = data
    for p in parents:
        target = target[p]
    target[last] = value
    return data


def write(tmp_path, data: dict, name: str = "m.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def calibrate_refused(capsys, path, *words) -> str:
    line = one_line_error(*gpu_advisor(capsys, "calibrate", path)[::2])
    assert str(path) in line, line
    for w in words:
        assert w in line, line
    return line


# --------------------------------------------------------------------------- strict types
NUMBERS = ["tokens_per_sec", "wall_seconds", "step_seconds.median", "step_seconds.p10", "step_seconds.p90",
           "step_seconds.count", "peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes",
           "device_capacity_bytes", "host_peak_rss_bytes", "shape.micro_batch", "shape.seq_len", "shape.grad_accum",
           "gpu_count", "nodes", "alloc_retries", "warmup_steps"]


@pytest.mark.parametrize("field", NUMBERS)
@pytest.mark.parametrize("value", [True, "5", [5], {"n": 5}], ids=["true", "text", "list", "map"])
def test_a_number_field_that_is_not_a_json_number_is_refused_by_name(capsys, cache, tmp_path, field, value):
    line = calibrate_refused(capsys, write(tmp_path, spoiled(field, value)), field.split(".")[-1])
    assert "expected" in line
    assert not (cache / "measurements").exists()  # nothing stored


@pytest.mark.parametrize("field", ["peak_allocated_bytes", "shape.seq_len", "gpu_count", "nodes", "alloc_retries",
                                   "step_seconds.count", "warmup_steps"])
def test_a_whole_number_written_as_a_float_is_refused(capsys, cache, tmp_path, field):
    value = 2.0 if field != "peak_allocated_bytes" else 3e10
    calibrate_refused(capsys, write(tmp_path, spoiled(field, value)), field.split(".")[-1], "whole number")


def test_a_step_time_list_of_switches_is_refused(capsys, cache, tmp_path):
    calibrate_refused(capsys, write(tmp_path, spoiled("step_seconds.steps", [True, True, True])), "steps")


@pytest.mark.parametrize("field,value", [("alloc_retries", 10**30), ("peak_allocated_bytes", 10**30),
                                         ("wall_seconds", 1e300), ("tokens_per_sec", 1e300)])
def test_numbers_beyond_any_machine_are_refused(capsys, cache, tmp_path, field, value):
    calibrate_refused(capsys, write(tmp_path, spoiled(field, value)), field)


def test_a_stack_number_written_as_text_is_refused(capsys, cache, tmp_path):
    data = valid()
    data["stack"]["lora_rank"] = "16"
    calibrate_refused(capsys, write(tmp_path, data), "lora_rank")


# --------------------------------------------------------------------------- physical plausibility
def test_the_ceiling_is_the_forward_pass_at_the_gpus_peak(planned):
    """One L4 (121 TFLOPs dense bf16, pricing/data/gpus.csv) on Llama-3.2-1B: its 1.24e9 weights a token
    passes through (embeddings excluded, lm_head included) cost 2.47 GFLOPs forward, so at most ~49,000 tokens/s;
    the time model's own prediction sits well below it."""
    from advisor.estimate.engine import Engine
    from pricing.gpus import get_gpu

    m = measurements.parse(run_of(planned), "m")
    engine, gpu = Engine.of(MODEL), get_gpu("L4")
    top = measurements.ceiling(m, engine, gpu)
    assert top == pytest.approx(121e12 / (2 * engine.counts(m.stack).matmul_active))
    assert 30_000 < top < 70_000
    assert planned["timing"]["tokens_per_sec"] < top / 2  # a training step costs at least twice the forward


@pytest.mark.parametrize("tps,words", [(1e10, ("more than 1 x L4", "not a measured rate")),
                                       (1e6, ("more than 1 x L4",)),
                                       (1e-300, ("below 1e-07",)), (1e-4, ("below 1e-07",))])
def test_an_impossible_rate_stops_the_plan_naming_the_file(capsys, cache, tmp_path, planned, tps, words):
    path = write(tmp_path, run_of(planned, tps))
    code, out, err = gpu_advisor(capsys, "plan", *PLAN, "--measured", path)
    line = one_line_error(code, err)
    assert f"--measured {path}" in line and "tokens_per_sec" in line and all(w in line for w in words), line
    assert out == ""
    calibrate_refused(capsys, path, *words)


def test_an_impossible_run_for_another_stack_of_the_same_model_is_refused_too(capsys, cache, tmp_path, planned):
    data = run_of(planned, 1e10)
    data["stack"]["optimizer"] = "sgd"  # matches no candidate, but it is still a claim about this model on an L4
    code, _, err = gpu_advisor(capsys, "plan", *PLAN, "--measured", write(tmp_path, data))
    assert "more than 1 x L4" in one_line_error(code, err)


def test_an_impossible_stored_run_is_skipped_with_a_warning(capsys, cache, tmp_path, planned):
    m = measurements.parse(run_of(planned, 1e10), "m")
    path = measurements.store(m)
    code, out, err = gpu_advisor(capsys, "plan", *PLAN)
    assert code == 0, err
    assert "skipped" in err and path.name in err
    assert not json.loads(out)["candidates"][0]["timing"]["band_basis"].startswith("measured on")


def test_a_plausible_run_still_times_its_candidate(capsys, cache, tmp_path, planned):
    slower = planned["timing"]["tokens_per_sec"] * SLOWER
    code, out, err = gpu_advisor(capsys, "plan", *PLAN, "--measured", write(tmp_path, run_of(planned, slower),
                                                                               "slower.json"))
    assert code == 0, err
    timing = json.loads(out)["candidates"][0]["timing"]
    assert timing["band_basis"] == "measured on 2026-11-30 (slower.json, 3 steps)"
    assert timing["tokens_per_sec"] == pytest.approx(slower)


# --------------------------------------------------------------------------- dates
@pytest.mark.parametrize("when,words", [("2099-01-01T00:00:00+00:00", "in the future"),
                                        ("9999-12-31T23:59:59+00:00", "in the future"),
                                        ("0001-01-01T00:00:00+00:00", "before 2000")])
def test_a_date_out_of_this_world_is_refused(capsys, cache, tmp_path, when, words):
    calibrate_refused(capsys, write(tmp_path, spoiled("measured_at", when)), "measured_at", words)


def test_a_clock_a_few_hours_ahead_is_accepted(cache, tmp_path):
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=3)).isoformat(timespec="seconds")
    assert measurements.load(write(tmp_path, spoiled("measured_at", soon))).measured_at == soon


def test_a_stored_run_dated_9999_never_outranks_a_later_real_run(capsys, cache, tmp_path, planned):
    real = planned["timing"]["tokens_per_sec"] * SLOWER
    fake = copy.deepcopy(run_of(planned, real / 2, "9999-12-31T00:00:00+00:00"))
    folder = cache / "measurements"
    folder.mkdir(parents=True)
    (folder / "0000future.json").write_text(json.dumps(fake), encoding="utf-8")  # as an old version stored it
    older = measurements.store(measurements.parse(run_of(planned, real / 3, "2026-11-01T00:00:00+00:00"), "m"))
    newer = measurements.store(measurements.parse(run_of(planned, real, "2026-11-30T00:00:00+00:00"), "m"))
    code, out, err = gpu_advisor(capsys, "plan", *PLAN)
    assert code == 0, err
    assert "0000future.json" in err and "in the future" in err  # skipped, and said so
    timing = json.loads(out)["candidates"][0]["timing"]
    assert timing["tokens_per_sec"] == pytest.approx(real)
    assert newer.name in timing["band_basis"] and older.name not in timing["band_basis"]


# --------------------------------------------------------------------------- files of the wrong kind
@pytest.mark.parametrize("make,words", [("fifo", ("FIFO", "not a regular file")),
                                        ("zero", ("character device", "not a regular file")),
                                        ("loop", ("symbolic link loop",)), ("folder", ("directory",))])
def test_a_measured_file_that_is_not_a_regular_file_is_refused(capsys, cache, tmp_path, make, words):
    path = tmp_path / "m.json"
    {"fifo": lambda: os.mkfifo(path), "zero": lambda: path.symlink_to("/dev/zero"),
     "loop": lambda: path.symlink_to(path), "folder": lambda: path.mkdir()}[make]()
    calibrate_refused(capsys, path, *words)


# --------------------------------------------------------------------------- no machine path in shared artefacts
def test_no_shared_artefact_of_a_plan_timed_by_a_stored_run_holds_a_path_of_the_machine(capsys, cache, tmp_path,
                                                                                        planned):
    run = write(tmp_path, run_of(planned, planned["timing"]["tokens_per_sec"] * SLOWER), "measured.json")
    code, _, err = gpu_advisor(capsys, "calibrate", run)
    assert code == 0, err
    [stored] = (cache / "measurements").glob("*.json")
    out_dir = tmp_path / "share"
    out_dir.mkdir()
    code, out, err = gpu_advisor(capsys, "plan", *PLAN)
    assert code == 0, err
    plan = json.loads(out)
    basis = plan["candidates"][0]["timing"]["band_basis"]
    assert basis == f"measured on 2026-11-30 ({stored.name}, 3 steps)"
    (out_dir / "plan.json").write_text(out, encoding="utf-8")
    for report in ("report.html", "report.md"):
        code, _, err = gpu_advisor(capsys, "report", out_dir / "plan.json", "-o", out_dir / report)
        assert code == 0, err
    code, _, err = gpu_advisor(capsys, "launch", "--from", out_dir / "plan.json", "--out", out_dir / "bundle")
    assert code == 0, err
    artefacts = [p for p in out_dir.rglob("*") if p.is_file()]
    assert len(artefacts) > 5 and any(p.name == "README.md" for p in artefacts)
    home = os.environ["HOME"]
    for p in artefacts:
        text = p.read_text(encoding="utf-8", errors="replace")
        assert str(cache) not in text and home not in text and "alice" not in text, p
    assert any(stored.name in p.read_text(encoding="utf-8", errors="replace") for p in artefacts
               if p.name == "README.md")
