"""Hostile plan files: a plan is checked for consistency as well as shape.

A shared plan JSON whose numbers contradict each other (a stack sharded 64 ways on a 1-GPU offer), lie
outside what `plan` itself accepts (17 billion GPUs, 1e18 sequences per micro-batch, -5 epochs), carry an
unknown schema version, a bool where a count goes, or control characters in the LoRA target list, is
refused by `launch --from` and `report` with one line (exit 2) and nothing written. A full disk during
`launch` leaves no partial bundle; a plan naming a local JSON file never prints that file's values.
"""

from __future__ import annotations

import copy
import errno
import json
import os
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error, saved_plan
from helpers.launch_fixtures import candidate, write_plan

DATA = Path(__file__).parents[2] / "data" / "plans"
BUNDLE_FILES = {"README.md", "accelerate_config.yaml", "chat_mask.py", "dstack.yml", "launch.sh", "requirements.txt",
                "sky.yaml", "slurm.sbatch", "smoke_config.json", "train.py", "training_args.yaml"}


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def benign(tmp_path_factory) -> dict:
    """An 8-GPU FSDP LoRA plan (schema 3), as `plan --format json` writes it."""
    c = candidate(nodes=1, sharding="fsdp", gpu_count=8, method="lora", lora_rank=16, grad_checkpointing=True)
    return json.loads(write_plan(tmp_path_factory.mktemp("benign") / "plan.json", [c]).read_text())


def first(d: dict) -> dict:
    return d["candidates"][0]


def _everywhere(d: dict, change) -> None:
    for c in d["candidates"] + d["others"]:  # every stored candidate (schema 4)
        change(c)


# (what the plan says, how to make it, the field the refusal names)
INCONSISTENT = {
    "fsdp x64 on a 1-GPU offer": (lambda d: _everywhere(d, lambda c: (c["offer"].update(gpu_count=1),
                                                                      c["stack"].update(gpus=64))), "stack.gpus"),
    "8-GPU offer, 1-GPU stack": (lambda d: _everywhere(d, lambda c: c["stack"].update(gpus=1, sharding="none")),
                                 "stack.gpus"),
    "16384 nodes x 1048576 GPUs": (lambda d: _everywhere(d, lambda c: (
        c["offer"].update(gpu_count=1_048_576), c.update(nodes=16_384), c["stack"].update(gpus=16_384 * 1_048_576))),
        "1,048,576"),
    "seq_len 1e30": (lambda d: first(d)["shape"].update(seq_len=1e30), "seq_len"),
    "seq_len 2**40 (a whole number)": (lambda d: first(d)["shape"].update(seq_len=2**40), "seq_len"),
    "micro_batch 1e18": (lambda d: first(d)["shape"].update(micro_batch=1e18), "micro_batch"),
    "micro_batch 10**18": (lambda d: first(d)["shape"].update(micro_batch=10**18), "micro_batch"),
    "grad_accum 10**9": (lambda d: first(d)["shape"].update(grad_accum=10**9), "grad_accum"),
    "epochs -5": (lambda d: d["workload"].update(epochs=-5), "epochs"),
    "epochs 0": (lambda d: d["workload"].update(epochs=0), "epochs"),
    "epochs 1e308": (lambda d: d["workload"].update(epochs=1e308), "epochs"),
    "epochs true": (lambda d: d["workload"].update(epochs=True), "epochs"),
    "workload seq_len 2.5": (lambda d: d["workload"].update(seq_len=2.5), "seq_len"),
    "max_nodes 10**6": (lambda d: d["workload"].update(max_nodes=10**6), "max_nodes"),
    "schema_version 999": (lambda d: d.update(schema_version=999), "schema_version"),
    "schema_version 0": (lambda d: d.update(schema_version=0), "schema_version"),
    "schema_version -1": (lambda d: d.update(schema_version=-1), "schema_version"),
    'schema_version "2"': (lambda d: d.update(schema_version="2"), "schema_version"),
    "schema_version true": (lambda d: d.update(schema_version=True), "schema_version"),
    "schema_version 2.0": (lambda d: d.update(schema_version=2.0), "schema_version"),
    "gpu_count true": (lambda d: first(d)["offer"].update(gpu_count=True), "gpu_count"),
    'stack.gpus "8"': (lambda d: first(d)["stack"].update(gpus="8"), "gpus"),
    "nodes true": (lambda d: first(d).update(nodes=True), "nodes"),
    "lora_rank 16.0": (lambda d: first(d)["stack"].update(lora_rank=16.0), "lora_rank"),
    "lora_targets ESC": (lambda d: first(d)["stack"].update(lora_targets="q_proj\x1b[2J"), "U+001B"),
    "lora_targets LF": (lambda d: first(d)["stack"].update(lora_targets="q_proj\ntarget_modules: evil"), "U+000A"),
    "lora_targets U+202E": (lambda d: first(d)["stack"].update(lora_targets="q_proj\u202ev_proj"), "U+202E"),
    "lora_targets a quote": (lambda d: first(d)["stack"].update(lora_targets="q_proj', '!!python"), "U+0027"),
    "lora_targets a list": (lambda d: first(d)["stack"].update(lora_targets=["q_proj"]), "lora"),
    "timing.band_basis ESC": (lambda d: first(d)["timing"].update(band_basis="p10-p90\x1b[2J"), "U+001B"),
    "modules_to_save ESC": (lambda d: first(d)["stack"].update(modules_to_save="lm_head\x1b]0;x\x07"), "U+001B"),
    # values the schema takes (finite, non-negative, printable) that no run has (issue 50)
    "hours_high 0": (lambda d: first(d)["timing"].update(hours_high=0.0), "timing.hours_high"),
    "tokens_per_sec 1e-300": (lambda d: first(d)["timing"].update(tokens_per_sec=1e-300), "timing.tokens_per_sec"),
    'price_date "yesterday"': (lambda d: first(d)["offer"].update(price_date="yesterday"), "offer.price_date"),
    # a listed price the cost was not computed at (a report would show a $1e12/h row beside its $20 cost)
    "offer.price_hour 1e12": (lambda d: first(d)["offer"].update(price_hour=1e12), "offer.price_hour"),
}


def tampered(folder, benign: dict, case: str):
    """(path of the benign plan with INCONSISTENT[case] applied, the text its refusal must name)."""
    mutate, named = INCONSISTENT[case]
    data = copy.deepcopy(benign)
    mutate(data)
    path = folder / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, named


@pytest.mark.parametrize("case", INCONSISTENT)
def test_inconsistent_or_out_of_bounds_plan_is_refused_by_launch_and_writes_nothing(tmp_path, capsys, benign, case):
    path, named = tampered(tmp_path, benign, case)
    out = tmp_path / "bundle"
    code, stdout, err = gpu_advisor(capsys, "launch", "--from", path, "--out", out)
    line = one_line_error(code, err)
    assert named in line and "--from" in line
    assert not out.exists() and stdout == ""
    assert set(os.listdir(tmp_path)) <= {"cache", "plan.json"}  # no bundle, no staging folder


@pytest.mark.parametrize("case", ["fsdp x64 on a 1-GPU offer", "schema_version 999", "epochs 1e308", "hours_high 0",
                                  "tokens_per_sec 1e-300", 'price_date "yesterday"', "offer.price_hour 1e12"])
def test_report_refuses_the_same_plans(tmp_path, capsys, benign, case):
    path, named = tampered(tmp_path, benign, case)
    code, _, err = gpu_advisor(capsys, "report", path, "-o", tmp_path / "r.html")
    assert named in one_line_error(code, err)
    assert not (tmp_path / "r.html").exists()


def test_multi_node_plan_with_matching_gpus_still_launches(tmp_path, capsys):
    """Consistency is offer GPUs per node × nodes = stack ranks: 2 nodes × 8 GPUs with 16 ranks is fine."""
    import yaml

    path = write_plan(tmp_path / "plan.json", [candidate(nodes=2, gpu_count=8, sharding="fsdp")])
    assert json.loads(path.read_text())["candidates"][0]["stack"]["gpus"] == 16
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    assert code == 0, err
    acc = yaml.safe_load((tmp_path / "b" / "accelerate_config.yaml").read_text())
    assert acc["num_processes"] == 16 and acc["num_machines"] == 2


def test_a_3_5_mb_lora_target_list_is_refused_by_its_length_before_it_is_scanned(tmp_path, capsys, benign,
                                                                                 monkeypatch):
    """The length is checked first: no character scan (advisor.text.refused_char, the target regex) and no
    model check sees the 3.5 MB string."""
    import advisor.results.checks
    import advisor.stacks
    import advisor.text

    seen: list[int] = []
    real_refused, real_pattern = advisor.text.refused_char, advisor.stacks._MODULE_LIST

    class CountingPattern:
        def fullmatch(self, text):
            seen.append(len(text))
            return real_pattern.fullmatch(text)

    def refused(text):
        seen.append(len(text))
        return real_refused(text)

    monkeypatch.setattr(advisor.results.checks, "refused_char", refused)  # where plan fields are checked
    monkeypatch.setattr(advisor.stacks, "_MODULE_LIST", CountingPattern())
    data = copy.deepcopy(benign)
    first(data)["stack"]["lora_targets"] = "q_proj," * 500_000  # 3.5 MB
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    line = one_line_error(code, err)
    assert "--lora-targets" in line and "4,096" in line and "3,500,000" in line
    assert seen and max(seen) < 1_000_000  # other (short) fields were scanned; the long list never was
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("targets, codepoint", [("q_proj\x1b[2J", "U+001B"), ("q_proj\nv_proj", "U+000A"),
                                                ("q_proj\u202e", "U+202E"), ("q_proj;rm -rf", "U+003B")])
def test_lora_targets_option_takes_module_names_only(capsys, targets, codepoint):
    code, _, err = gpu_advisor(capsys, "estimate", "llama-3.1-8b", "--method", "lora", "--lora-targets", targets)
    line = one_line_error(code, err)
    assert "--lora-targets" in line and codepoint in line


def test_module_names_with_dots_dashes_and_spaces_are_accepted(capsys):
    code, out, err = gpu_advisor(capsys, "estimate", "llama-3.1-8b", "--method", "lora", "--lora-targets",
                                 "q_proj, v_proj", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["stack"]["lora_targets"] == "q_proj, v_proj"


def test_schema_2_plan_still_loads_and_launches(tmp_path, capsys):
    code, _, err = gpu_advisor(capsys, "launch", "--from", DATA / "plan_schema2.json", "--out", tmp_path / "b")
    assert code == 0, err
    assert set(os.listdir(tmp_path / "b")) == BUNDLE_FILES


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    """A real plan of the bundled sheet (a subprocess: the planner's own output, saved as users save it)."""
    return saved_plan(tmp_path_factory.mktemp("planned"), "--model", "qwen2.5-7b", "--tokens", "2e7",
                      "--max-nodes", "2")


def test_every_planned_candidate_is_one_consistent_run_and_its_plan_reloads(planned, tmp_path, capsys):
    data = json.loads(planned.read_text())
    rows = data["candidates"] + data["others"]  # every stored candidate (schema 4)
    assert rows
    for c in rows:
        assert c["offer"]["gpu_count"] * c["nodes"] == c["stack"]["gpus"]
    code, _, err = gpu_advisor(capsys, "report", planned, "-o", tmp_path / "r.md")
    assert code == 0, err


# ----------------------------------------------------------------------------- launch writes all or nothing


def test_a_full_disk_during_launch_leaves_no_partial_bundle_and_a_rerun_needs_no_force(tmp_path, capsys, benign,
                                                                                     monkeypatch):
    import advisor.launch.bundle

    real = advisor.launch.bundle.atomic_write
    written: list[str] = []

    def third_file_fails(path, *a, **k):
        if len(written) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        written.append(Path(path).name)
        return real(path, *a, **k)

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(benign), encoding="utf-8")
    out = tmp_path / "bundle"
    monkeypatch.setattr(advisor.launch.bundle, "atomic_write", third_file_fails)
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", out)
    assert "space" in one_line_error(code, err, expected_code=1)
    assert len(written) == 2  # two files were written before the disk filled
    assert set(os.listdir(tmp_path)) <= {"cache", "plan.json"}  # neither the bundle nor its staging folder
    monkeypatch.setattr(advisor.launch.bundle, "atomic_write", real)
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", out)  # no --force needed
    assert code == 0, err
    assert set(os.listdir(out)) == BUNDLE_FILES


def test_force_into_a_folder_keeps_its_other_files_and_a_failure_changes_none(tmp_path, capsys, benign, monkeypatch):
    import advisor.launch.bundle

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(benign), encoding="utf-8")
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "launch.sh").write_text("old")
    real = advisor.launch.bundle.atomic_write

    def fail_last(p, *a, **k):
        if Path(p).name == "training_args.yaml":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))
        return real(p, *a, **k)

    monkeypatch.setattr(advisor.launch.bundle, "atomic_write", fail_last)
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", out, "--force")
    one_line_error(code, err, expected_code=1)
    assert sorted(os.listdir(out)) == ["launch.sh", "notes.txt"] and (out / "launch.sh").read_text() == "old"
    monkeypatch.setattr(advisor.launch.bundle, "atomic_write", real)
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", out, "--force")
    assert code == 0, err
    assert set(os.listdir(out)) == BUNDLE_FILES | {"notes.txt"} and (out / "notes.txt").read_text() == "mine"
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []  # no staging folder left


# ----------------------------------------------------------------------------- model names in shared plans


def test_a_plan_naming_a_local_json_never_prints_its_values(tmp_path, capsys, benign):
    secret = tmp_path / "secrets.json"
    secret.write_text(json.dumps({"model_type": "SECRET-TOKEN-hf_abc123", "api_key": "SECRET-TOKEN-2"}))
    data = copy.deepcopy(benign)
    data["model"]["name"] = str(secret)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    assert code == 0, err
    assert "SECRET" not in out + err
    assert "warning" in err and "local file" in err
    assert not any("SECRET" in p.read_text() for p in (tmp_path / "b").iterdir())


@pytest.mark.parametrize("name", ["орг/модель", "ｍｅｔａ/ｌｌａｍａ", "meta-llama/Llama-3.1-8B\u0301"])
def test_non_ascii_hub_ids_never_go_to_the_hub(capsys, monkeypatch, name):
    import advisor.model.catalog

    asked: list[str] = []
    monkeypatch.setattr(advisor.model.catalog, "fetch_hub_config", lambda repo: asked.append(repo) or {})
    code, _, err = gpu_advisor(capsys, "estimate", name)
    line = one_line_error(code, err)
    assert "ASCII" in line or "unknown model" in line
    assert asked == []


@pytest.mark.parametrize("name, task", [("орг/модель", "ft"), ("ｏｒｇ/Ｍｏｄｅｌ-7B", "ft-7b"),
                                        ("meta-llama/Llama-3.1-8B", "ft-meta-llama-llama-3-1-8b")])
def test_sky_task_name_is_one_skypilot_accepts(tmp_path, capsys, benign, name, task):
    """SkyPilot's task names: ASCII [a-z0-9] runs joined by . _ - (sky/task.py _VALID_NAME_REGEX)."""
    import re

    import yaml

    data = copy.deepcopy(benign)
    data["model"]["name"] = name
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    assert code == 0, err
    got = yaml.safe_load((tmp_path / "b" / "sky.yaml").read_text())["name"]
    assert got == task and re.fullmatch(r"[a-z0-9]+(?:[._-]{1,2}[a-z0-9]+)*", got, re.ASCII)


def test_a_refusal_names_the_value_without_repeating_a_whole_document():
    """A model-level check sees the whole plan (or sheet row) as its input: the one-line error
    repeats at most ECHO_CHARS of it, never the document."""
    from pydantic import BaseModel, ValidationError, field_validator

    from advisor.errors import ECHO_CHARS, validation_message

    class Doc(BaseModel):
        note: str

        @field_validator("note")
        @classmethod
        def _printable(cls, v: str) -> str:
            raise ValueError("control character U+001B refused in note")

    with pytest.raises(ValidationError) as err:
        Doc(note="x" * 100_000 + "\x1b[2J")
    line = validation_message(err.value)
    assert line.startswith("--note: ") and "U+001B refused" in line and "\n" not in line
    assert len(line) < 200 + ECHO_CHARS and "\x1b" not in line
