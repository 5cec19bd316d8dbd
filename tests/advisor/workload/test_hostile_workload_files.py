"""The user's own files, read with bounds that count work: a JSON-lines file with bare carriage returns, a CSV
of 100,000 columns, a row longer than a plan's chart records, a measured run slower than any GPU could be, and
DPO / GRPO configs whose values are out of range (refused under the file and key, never a flag the user did
not type)."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers.cli_run import gpu_advisor

from advisor.errors import BadInput
from advisor.workload import dataset_files, measurements
from advisor.workload.dataset_tokens import Tokenizer, count_dataset
from advisor.workload.training_config import read_config


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer as Native, models, pre_tokenizers

    native = Native(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, "hello": 3}, unk_token="[UNK]"))
    native.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return Tokenizer("words", native)


def lengths(path, tok) -> tuple[int, float]:
    got = count_dataset(path, tok, sample=None)
    return got.stats.rows, got.stats.total_tokens


# --------------------------------------------------------------------------- line endings

@pytest.mark.parametrize("ending", [b"\r", b"\r\n", b"\n"])
def test_rows_ending_in_any_line_break_count_alike(tmp_path, tok, ending):
    rows = [b'{"text": "hello a b"}', b'{"text": "a b"}', b'{"text": "a"}']
    path = tmp_path / "rows.jsonl"
    path.write_bytes(ending.join(rows) + ending)
    assert lengths(path, tok) == (3, 6.0)


def test_a_cr_lf_cut_between_two_read_blocks_stays_one_line_break(tmp_path, tok, monkeypatch):
    monkeypatch.setattr(dataset_files, "BLOCK", 22)  # the first row's CR is the block's last byte
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b'{"text": "hello a b"}\r\n{"text": "a"}\r\n')
    assert lengths(path, tok) == (2, 4.0)


# --------------------------------------------------------------------------- wide CSV

def test_a_csv_of_100000_columns_is_refused_before_pyarrow_reads_it(tmp_path, tok):
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(100_000)) + ",text\n" + "1," * 100_000 + "hello\n")
    parsed = dataset_files.ROWS_PARSED[0]
    with pytest.raises(BadInput, match=r"^--dataset .*wide\.csv: more than the 10,000 columns"):
        count_dataset(path, tok)
    assert dataset_files.ROWS_PARSED[0] == parsed  # no row reached a parser


def test_a_csv_just_inside_the_column_limit_is_counted(tmp_path, tok):
    cols = dataset_files.MAX_COLUMNS - 1
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(cols)) + ",text\n" + ("1," * cols + "hello a\n") * 3)
    assert lengths(path, tok) == (3, 6.0)


def test_duplicate_names_among_many_columns_are_still_named(tmp_path, tok):
    path = tmp_path / "twice.csv"
    names = [f"c{i}" for i in range(5_000)] + ["c17", "text"]
    path.write_text(",".join(names) + "\n" + ",".join("1" for _ in names[:-1]) + ",hello\n")
    with pytest.raises(BadInput, match="column 'c17' appears more than once"):
        count_dataset(path, tok)


# --------------------------------------------------------------------------- a row past the chart

def test_a_row_longer_than_a_plans_chart_plans_without_the_chart(capsys, tmp_path, monkeypatch):
    """One 25,000,000-token row (a 50 MB line): the count stands, the plan is made, the chart is left out with a
    warning (it failed after counting with a dump of the bins). The count itself is replaced by its result."""
    import numpy as np

    import cli.workload_sources as sources
    from advisor.workload.dataset_tokens import DatasetCount
    from advisor.workload.length_stats import length_stats

    counted = []

    def count(dataset, **kw):
        counted.append(dataset)
        stats = length_stats(np.array([25_000_000]), 1, kw["seq_len"], kw["micro_batch"], kw["group_by_length"])
        return DatasetCount(dataset=str(dataset), field="text", kind="text", rendering="text", tokenizer="t",
                            seed=0, stats=stats, loss_tokens=stats.kept_tokens, loss_note="")

    monkeypatch.setattr(sources, "count", count)
    path = tmp_path / "line50mb.jsonl"
    path.write_text('{"text": "a"}\n')
    code, out, err = gpu_advisor(capsys, "plan", "--model", "llama-3.2-1b", "--dataset", path, "--gpu", "L4",
                                 "--top", "1", "--format", "json")
    assert code == 0, err
    assert len(counted) == 1
    plan = json.loads(out)
    assert plan["workload_lengths"] is None and plan["workload"]["dataset_kept_tokens"] == 2048
    assert any("25,000,000 tokens" in w and "chart" in w for w in plan["warnings"])
    assert "bins[" not in err and "(0, " not in err


# --------------------------------------------------------------------------- measured runs

def measured(tokens_per_sec: float) -> dict:
    from advisor.stacks import Stack

    step = 2 * 2048 * 8 / 3000
    return {"schema": measurements.SCHEMA, "model": "meta-llama/Llama-3.1-8B", "weights": "pretrained",
            "gpu_model": "H100", "device_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "nodes": 1,
            "stack": Stack(method="lora", gpus=1).model_dump(mode="json"),
            "shape": {"micro_batch": 2, "seq_len": 2048, "grad_accum": 8}, "tokens_per_sec": tokens_per_sec,
            "step_seconds": {"median": step, "p10": step, "p90": step, "count": 3, "steps": [step] * 3},
            "measured_at": "2026-12-01T10:00:00+00:00"}


@pytest.mark.parametrize("tps", [1e-300, 1e-12, 4.9e-10])
def test_a_rate_below_what_any_gpu_could_do_is_refused_on_reading(tps):
    with pytest.raises(BadInput, match="tokens_per_sec"):
        measurements.parse(measured(tps), "--measured m.json")


def test_the_floor_is_the_relative_floor_on_the_slowest_card_and_largest_model():
    from advisor.model.spec import MAX_PARAMS
    from pricing.gpus import all_gpus

    slowest = min(max(x for x in (g.dense_bf16_tflops, g.dense_fp16_tflops, g.fp32_tflops) if x) for g in all_gpus())
    assert measurements.SLOWEST_TFLOPS <= slowest
    assert measurements.MIN_TOKENS_PER_SEC == pytest.approx(measurements.PLAUSIBLE_FLOOR * 1e12 / (2 * MAX_PARAMS))
    assert measurements.parse(measured(1e-9), "m").tokens_per_sec == 1e-9  # at the floor: the per-GPU check judges


def test_a_stored_run_at_1e_300_is_skipped_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path))
    folder = measurements.store_dir()
    folder.mkdir(parents=True)
    (folder / "0badrate.json").write_text(json.dumps(measured(1e-300)), encoding="utf-8")
    measurements.store(measurements.parse(measured(3000.0), "m"))
    with pytest.warns(UserWarning, match="0badrate.json"):
        runs = measurements.stored()
    assert [m.tokens_per_sec for m in runs] == [3000.0]


# --------------------------------------------------------------------------- DPO / GRPO configs

BASE = {"model_name_or_path": "meta-llama/Llama-3.2-1B", "use_peft": True, "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2, "output_dir": "out", "model_init_kwargs": {"dtype": "bfloat16"}}
GRPO = {"num_generations": 8}


@pytest.mark.parametrize("extra, key", [
    ({"beta": "0.1", "loss_type": "sigmoid"}, "beta"),
    ({"beta": 1e7, "loss_type": "sigmoid"}, "beta"),
    ({"beta": 0.1, "loss_type": "nope"}, "loss_type"),
    ({"beta": 0.1, "max_length": 512, "max_prompt_length": 10**8}, "max_prompt_length"),
    ({"num_generations": 1}, "num_generations"),
    ({"num_generations": 10**6}, "num_generations"),
    ({**GRPO, "max_completion_length": 10**9}, "max_completion_length"),
    ({**GRPO, "use_vllm": True, "vllm_tensor_parallel_size": 100}, "vllm_tensor_parallel_size"),
    ({**GRPO, "num_iterations": 5000}, "num_iterations"),
    ({**GRPO, "steps_per_generation": 10**7}, "steps_per_generation"),
    ({**GRPO, "generation_batch_size": 10**8}, "generation_batch_size"),
    ({**GRPO, "use_vllm": True, "vllm_max_model_length": 10**9}, "vllm_max_model_length"),
    ({**GRPO, "loss_type": ["dapo", "grpo"]}, "loss_type"),
    ({**GRPO, "loss_type": "sigmoid"}, "loss_type"),
    ({**GRPO, "use_vllm": True, "vllm_gpu_memory_utilization": "0.3"}, "vllm_gpu_memory_utilization"),
])
def test_a_bad_rl_config_value_is_refused_under_its_file_and_key(tmp_path, extra, key):
    path = tmp_path / "trl.yaml"
    path.write_text(yaml.safe_dump({**BASE, **extra}))
    with pytest.raises(BadInput) as exc:
        read_config(path)
    line = str(exc.value)
    assert line.startswith(f"--from-config {path}: {key}: "), line
    assert " --" not in line.split(f"{key}: ", 1)[1].split("(")[0] or "only with" in line, line


def test_an_exponent_yaml_reads_as_text_is_still_a_number(tmp_path):
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(BASE)[:-1] + "\nbeta: 5e-2\nloss_type: sigmoid\n")
    assert read_config(path).options["beta"] == 0.05


def test_a_bad_rl_config_stops_the_plan_before_planning(capsys, tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({**BASE, "num_generations": 1}))
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", path, "--tokens", "1M", "--format", "json")
    assert code == 2 and out == ""
    assert err.strip().startswith(f"error: --from-config {path}: num_generations:") and len(err.splitlines()) == 1
