"""The accuracy benchmark: published rows parsed honestly, baselines as published, summaries right."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from advisor.model.catalog import load_model
from advisor.stacks import Shape, Stack
from benchmarks import accuracy
from benchmarks.baselines import (
    accelerate_estimate,
    llama_factory,
    seed_simple,
    unsloth_minimum,
    zero_16_bytes,
)
from benchmarks.calibration_rows import GB, GIB, MEASURED_CSV, load_rows, parse_row

HEADER = ("id,source_url,source_locator,model,params_b,method,lora_rank,lora_targets,quant_bits,precision,optimizer,"
          "gpus,gpu_model,parallelism,micro_batch,seq_len,grad_checkpointing,attention,compile,peak_mem_gb_per_gpu,"
          "mem_kind,tokens_per_sec,wall_time,notes")


def row(**over) -> dict[str, str]:
    base = dict(
        id="t-01", source_url="https://github.com/Lightning-AI/litgpt", source_locator="x",
        model="meta-llama/Llama-2-7b-hf", params_b="6.74", method="lora", lora_rank="8", lora_targets="q,v",
        quant_bits="", precision="pure_bf16", optimizer="adamw (torch)", gpus="1", gpu_model="A100-SXM4 40GB",
        parallelism="none", micro_batch="1", seq_len="512", grad_checkpointing="no", attention="sdpa",
        compile="no", peak_mem_gb_per_gpu="21.3", mem_kind="allocated", tokens_per_sec="", wall_time="",
        notes="conf=high; GB=1e9 (max_memory_allocated/1e9)",
    )
    base.update(over)
    return base


# ----------------------------------------------------------------------------- parsing

def test_units_follow_each_rows_notes():
    assert parse_row(row()).measured_bytes == round(21.3 * GB)
    gib = parse_row(row(notes="conf=med; labelled 'GB' but torchtune reports GiB"))
    assert gib.measured_bytes == round(21.3 * GIB) and gib.unit == "GiB"


def test_litgpt_lora_row_maps_to_our_stack_and_shape():
    r = parse_row(row(seq_len="Alpaca full length, dynamic pad (longest example 1304 tok)"))
    assert r.included and r.conf == "high"
    assert r.stack.method == "lora" and r.stack.lora_targets == "q_proj,v_proj" and r.stack.precision == "bf16"
    assert r.shape.seq_len == 1304 and r.gpu == "A100"


def test_dynamic_alpaca_length_lowers_confidence():
    r = parse_row(row(seq_len="alpaca, unpacked (dynamic)", notes="conf=med; GiB"))
    assert r.shape.seq_len == 1304 and r.conf == "low"


def test_peft_method_comparison_rows_map_dora_dropout_and_padding():
    """PEFT's MetaMathQA runs: DoRA named in the targets, dropout from the notes, batches padded to the longest
    row under a 768 cap, the card (L40S) canonical; a row without them keeps the Stack's defaults."""
    r = parse_row(row(id="peftmmqa-06", source_url="https://github.com/huggingface/peft/tree/main/method_comparison",
                      lora_rank="32", lora_targets="q_proj,v_proj (DoRA)", gpu_model="NVIDIA L40S", micro_batch="4",
                      seq_len="768 max (rows padded per batch to the longest)", mem_kind="reserved",
                      notes="conf=high; GB = 1e9; GA1; DoRA r32 alpha 64 dropout 0; adapters fp32"))
    assert r.included and r.stack.dora and r.stack.lora_dropout == 0.0 and r.stack.adapter_dtype == "fp32"
    assert r.shape.seq_len == 768 and r.shape.padded and r.shape.grad_accum == 1 and r.gpu == "L40S"
    assert r.transformers == "5.13.1"  # the release the source's runs name (RELEASE_BY_SOURCE)
    plain = parse_row(row())
    assert not plain.stack.dora and plain.stack.lora_dropout == Stack(method="lora").lora_dropout
    assert not plain.shape.padded


def test_fsdp_qlora_rows_are_consumer_multi_gpu_with_bf16_adapters():
    """Answer.AI's fsdp_qlora runs on two GeForce cards: FSDP1 keeps the adapters in bf16, the cards have no
    peer-to-peer (the consumer multi-GPU class), its own loader is the CPU-staged one, and a model the time rows
    record (Yi-34B) resolves here too."""
    r = parse_row(row(id="afqlora-m11", source_url="https://github.com/AnswerDotAI/fsdp_qlora/blob/main/x.md",
                      model="01-ai/Yi-34B", params_b="34.4", method="qlora", lora_rank="64",
                      lora_targets="k_proj,q_proj,v_proj,up_proj,down_proj,gate_proj (train.py 'all')",
                      gpus="2", gpu_model="RTX 3090 (2 x 3090, no NVLink)", parallelism="fsdp_full_shard",
                      micro_batch="2", seq_len="2048", mem_kind="reserved",
                      notes="conf=med; GiB; dropout 0.1; double quant"))
    assert r.included and r.spec.num_hidden_layers == 60 and r.gpu == "RTX3090"
    assert r.stack.adapter_dtype == "bf16" and r.stack.lora_dropout == 0.1 and r.stack.sharding == "fsdp"
    assert r.stack.double_quant and r.transformers == "4.39.0"
    assert accuracy._row_classes(r) == ["consumer multi-GPU (no P2P)", "QLoRA"]


def test_unmodelled_settings_are_excluded_with_a_reason():
    cases = {
        "Unsloth": row(attention="flash (FA2) + unsloth kernels"),
        "GPTQ": row(model="Qwen/Qwen-7B-Chat-Int4", method="qlora", quant_bits="4 (GPTQ int4, Qwen-*-Chat-Int4)"),
        "T5": row(model="bigscience/T0_3B"),
        "4-bit optimizer": row(method="full", optimizer="adamw_4bit (torchao)"),
        "8-bit": row(method="lora (8-bit base)", quant_bits="8"),
        "torch.compile": row(compile="yes"),
    }
    for word, r in cases.items():
        parsed = parse_row(r)
        assert not parsed.included and word.lower() in parsed.excluded.lower(), (word, parsed.excluded)


def test_qlora_double_quant_read_from_notes():
    plain = parse_row(row(method="qlora", quant_bits="4", notes="conf=high; GB=1e9; quantize=bnb.nf4"))
    dq = parse_row(row(method="qlora", quant_bits="4", notes="conf=high; GB=1e9; quantize=bnb.nf4-dq"))
    assert plain.stack.double_quant is False and dq.stack.double_quant is True


def test_deepspeed_bf16_means_16bit_weights_with_fp32_master_and_adam():
    r = parse_row(row(method="full", precision="amp_bf16 (DeepSpeed bf16)", parallelism="zero3", gpus="2"))
    assert r.stack.precision == "bf16" and r.stack.optimizer == "adamw-fp32" and r.stack.sharding == "zero3"


def test_fit_test_rows_keep_the_observed_outcome():
    r = parse_row(row(mem_kind="fit_test", peak_mem_gb_per_gpu="", micro_batch="4",
                      notes="conf=high; GB=1e9; OOM on 40GB (fit test)"))
    assert r.fit_observed == "oom" and r.measured_bytes is None


def test_every_published_row_is_used_or_excluded_with_a_reason():
    with MEASURED_CSV.open(newline="") as f:
        n = sum(1 for _ in csv.DictReader(f))
    rows = load_rows()
    assert len(rows) == n
    assert all(r.included or r.excluded for r in rows)
    assert sum(r.included for r in rows) >= 100  # most rows are usable
    assert sum(r.conf == "high" and r.included for r in rows) >= 10


# ----------------------------------------------------------------------------- baselines

def test_seed_formula_reproduces_the_4b_case_of_the_design():
    spec = load_model("google/gemma-3-4b-pt")
    full = seed_simple(spec, 4_000_000_000, Stack(method="full", precision="bf16"), Shape())
    assert full == 32 * GB  # 8 GB weights + 8 GB gradients + 16 GB AdamW states
    lora = seed_simple(spec, 4_000_000_000, Stack(method="lora", precision="bf16", lora_rank=16), Shape())
    assert 8 * GB < lora < 8.5 * GB


def test_accelerate_and_16_byte_rules_apply_to_full_fine_tunes_only():
    spec = load_model("meta-llama/Llama-2-7b-hf")
    p = 6_740_000_000
    assert accelerate_estimate(spec, p, Stack(method="full", precision="fp32"), Shape()) == 16 * p
    assert zero_16_bytes(spec, p, Stack(method="full", sharding="zero3", gpus=4), Shape()) == 4 * p
    assert accelerate_estimate(spec, p, Stack(method="lora"), Shape()) is None
    assert zero_16_bytes(spec, p, Stack(method="lora"), Shape()) is None


def test_table_rules_reproduce_their_published_points():
    spec = load_model("meta-llama/Llama-2-7b-hf")
    assert llama_factory(spec, 7_000_000_000, Stack(method="qlora"), Shape()) == 6 * GB
    assert llama_factory(spec, 14_000_000_000, Stack(method="full", precision="bf16"), Shape()) == 120 * GB
    assert unsloth_minimum(spec, 8_000_000_000, Stack(method="lora"), Shape()) == 22 * GB


# ----------------------------------------------------------------------------- benchmark

def standin_estimator(spec, stack, shape):
    """Deliberately simple stand-in: 2 B/param weights plus a per-token allowance."""
    from advisor.model.architecture import build

    base = build(spec).params_total * (0.6 if stack.method == "qlora" else 2)
    act = shape.tokens * spec.hidden_size * spec.num_hidden_layers * 20
    alloc = int(base + act)
    return SimpleNamespace(peak_allocated=alloc, peak_reserved=int(alloc * 1.05), device_total=int(alloc * 1.05) + 500 * 2**20)


def tiny_csv(tmp_path: Path) -> Path:
    rows = [
        row(id="a-01"),
        row(id="a-02", micro_batch="2", peak_mem_gb_per_gpu="29.07"),
        row(id="a-03", model="bigscience/T0_3B"),
        row(id="a-04", mem_kind="fit_test", peak_mem_gb_per_gpu="", micro_batch="64", seq_len="4096",
            notes="conf=high; GB=1e9; OOM on 40GB (fit test)"),
        row(id="a-05", mem_kind="unknown", peak_mem_gb_per_gpu="18", notes="conf=med; VRAM rounded",
            tokens_per_sec="2392 (per GPU)", micro_batch="4", seq_len="1024"),
    ]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HEADER.split(","))
    w.writeheader()
    w.writerows(rows)
    p = tmp_path / "rows.csv"
    p.write_text(buf.getvalue())
    return p


def test_benchmark_compares_like_with_like_and_writes_markdown(tmp_path):
    out = tmp_path / "accuracy.md"
    s = accuracy.main(["--csv", str(tiny_csv(tmp_path)), "--out", str(out), "--quiet"], estimate=standin_estimator,
                      throughput=lambda *a, **k: SimpleNamespace(tokens_per_sec=2000.0))
    by_id = {r["id"]: r for r in s["results"]}
    assert s["rows_total"] == 5 and s["rows_excluded"] == 1 and "a-03" in s["excluded"]
    a1 = by_id["a-01"]
    expected = standin_estimator(load_model("meta-llama/Llama-2-7b-hf"), Stack(method="lora", lora_targets="q_proj,v_proj"),
                                 Shape(micro_batch=1, seq_len=512)).peak_allocated
    assert a1["values"]["ours"] == expected  # allocated row -> peak_allocated
    assert a1["errors"]["ours"] == pytest.approx((expected - 21.3e9) / 21.3e9 * 100)
    a5 = by_id["a-05"]  # unknown metric -> peak_reserved
    assert a5["values"]["ours"] == standin_estimator(load_model("meta-llama/Llama-2-7b-hf"), Stack(method="lora"),
                                                     Shape(micro_batch=4, seq_len=1024)).peak_reserved
    assert by_id["a-04"]["fits"]["ours"] is False  # 64 x 4096 on a 40 GB card: OOM, as observed
    assert a5["tps_error"] == pytest.approx((2000 - 2392) / 2392 * 100)
    ours = s["estimators"]["ours"]
    assert ours["rows"] == 3 and ours["fit_agree"] == 1.0
    errors = sorted(abs(r["errors"]["ours"]) for r in s["results"] if "ours" in r["errors"])
    assert ours["median_abs"] == pytest.approx(errors[1])
    assert ours["worst_under"] == min(r["errors"]["ours"] for r in s["results"] if "ours" in r["errors"])
    text = out.read_text()
    assert "Date:" in text and "rows.csv" in text and "| seed (w+g+opt) |" in text and "a-03" in text


@pytest.mark.slow
def test_published_rows_run_through_the_real_estimator(tmp_path):
    s = accuracy.main(["--out", str(tmp_path / "a.md"), "--quiet"])
    ours = s["estimators"]["ours"]
    assert ours["rows"] >= 80 and not s["estimator_errors"]
    # ours must beat the seed formula it replaces, on the same rows
    assert s["versus"]["seed (w+g+opt)"]["ours_better"]["median_abs"]


def test_benchmark_rejects_a_missing_csv_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        accuracy.main(["--csv", str(tmp_path / "none.csv")])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.strip().count("\n") == 0 and "--csv" in err


def test_benchmark_prints_the_summary_table(tmp_path, capsys):
    out = tmp_path / "acc.md"
    accuracy.main(["--out", str(out)])
    assert "| seed (w+g+opt) |" in capsys.readouterr().out and out.is_file()


def test_mechanism_classes_gather_memory_rows_and_say_when_they_are_thin():
    """Issue 48's classes: a row counts in every class it runs (a QDoRA row with offload on two RTX 4090s in all
    four); figures per class; a class of fewer than 3 rows or one source is marked thin, one without rows
    uncalibrated; the time columns are the calibration's held-out groups."""
    from benchmarks.calibration_rows import CalibrationRow

    def cal(rid: str, stack: Stack, gpu: str | None) -> CalibrationRow:
        return CalibrationRow(id=rid, source_url="https://example.org", conf="high", model_ref="m", params=1,
                              kind="allocated", stack=stack, gpu=gpu)

    everything = Stack(method="qlora", dora=True, gpus=2, sharding="fsdp", offload="both")
    rows = [cal("aa-01", everything, "RTX4090"), cal("aa-02", Stack(method="qlora"), "RTX4090"),
            cal("bb-01", Stack(method="qlora", gpus=2, sharding="fsdp"), "H100"),
            cal("cc-01", Stack(method="qlora"), None), cal("cc-02", Stack(method="lora", gpus=2, sharding="ddp"), None)]
    errors = {"aa-01": -30.0, "aa-02": 10.0, "bb-01": -5.0, "cc-01": 20.0, "cc-02": 1.0}
    results = [{"id": rid, "errors": {"ours": e}} for rid, e in errors.items()]
    classes = accuracy.class_summaries(rows, results)
    assert list(classes) == ["consumer multi-GPU (no P2P)", "DoRA", "QLoRA", "CPU offload"]
    qlora = classes["QLoRA"]["memory"]
    assert qlora["rows"] == 4 and qlora["sources"] == ["aa", "bb", "cc"]
    assert qlora["median_abs"] == pytest.approx(15.0) and qlora["signed_median"] == pytest.approx(2.5)
    for name in ("consumer multi-GPU (no P2P)", "DoRA", "CPU offload"):
        assert classes[name]["memory"]["rows"] == 1 and classes[name]["memory"]["signed_median"] == -30.0
    text = "\n".join(accuracy._render_classes({"classes": classes}))
    assert "| QLoRA | memory | 4 | 3 | 15.0% | +2.5% | calibrated |" in text
    assert "| DoRA | memory | 1 | 1 | 30.0% | -30.0% | thin |" in text
    assert accuracy.thin(3, 1) and accuracy.thin(2, 2) and not accuracy.thin(3, 2)
    from advisor.estimate.throughput import table

    offload_time = table()["fit"]["held_out_by_group"]["CPU offload"]
    assert classes["CPU offload"]["time"] == offload_time and offload_time["rows"] > 0
