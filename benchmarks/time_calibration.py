"""Time model vs published throughput: predicted and measured tokens/s per calibration row.

Reads ../shared/calibration/measured_memory.csv (rows with `tokens_per_sec`; see SOURCES.md
there) and prints, per row, the prediction of `advisor.throughput.estimate_throughput`, the
published figure and the signed error, then the median |error| (goal <= 20 %). Rows the time
model cannot represent are listed as excluded with the reason; none are dropped silently.

Run: python benchmarks/time_calibration.py [--mfu X] [--csv PATH]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CAL = ROOT / ".." / "shared" / "calibration" / "measured_memory.csv"

from advisor.modelspec import ModelSpec  # noqa: E402
from advisor.stacks import Shape, Stack  # noqa: E402
from advisor.throughput import estimate_throughput  # noqa: E402

# Fallback configs (config.json values) for calibration models the catalog may not carry.
# Qwen-1 (model_type "qwen") is Llama-shaped: fused c_attn = q,k,v; w1/w2 = up/gate; its
# config's intermediate_size is twice the per-projection width.
_FALLBACK = {
    "meta-llama/Llama-2-7b-hf": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                     num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32),
    "meta-llama/Llama-2-13b-hf": dict(vocab_size=32000, hidden_size=5120, intermediate_size=13824,
                                      num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40),
    "Qwen/Qwen-1_8B-Chat": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5504,
                                num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16),
    "Qwen/Qwen-7B-Chat": dict(vocab_size=151936, hidden_size=4096, intermediate_size=11008,
                              num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32),
    "Qwen/Qwen-14B-Chat": dict(vocab_size=152064, hidden_size=5120, intermediate_size=13696,
                               num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40),
    "Qwen/Qwen-72B-Chat": dict(vocab_size=152064, hidden_size=8192, intermediate_size=24576,
                               num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=64),
}
ALPACA_ASSUMED_SEQ = 512  # "alpaca, unpacked (dynamic)": padded batch length not published


def model_spec(name: str) -> ModelSpec:
    base = name.removesuffix("-Int4")
    try:  # the catalog only: never the Hub
        from advisor.models import catalog_names, load_model

        if base in catalog_names():
            return load_model(base)
    except ImportError:
        pass
    if True:
        cfg = _FALLBACK[base]
        return ModelSpec(name=base, family="llama", source="benchmarks/time_calibration.py fallback",
                         head_dim=cfg["hidden_size"] // cfg["num_attention_heads"],
                         max_position_embeddings=4096, **cfg)


def first_int(text) -> int | None:
    m = re.search(r"\d[\d,]*", str(text))
    return int(m.group().replace(",", "")) if m else None


def parse_row(r: dict) -> tuple[dict | None, str]:
    """(setup, '') or (None, reason excluded)."""
    text = " ".join(str(r[k]) for k in ("precision", "attention", "grad_checkpointing", "parallelism"))
    if "fp8" in str(r["precision"]):
        return None, "fp8 Transformer Engine precision is not modelled"
    if "megatron" in str(r["parallelism"]).lower():
        return None, "Megatron tensor/pipeline parallelism is not modelled"
    if "unsloth" in text.lower():
        return None, "Unsloth custom kernels / offloaded checkpointing are not modelled"
    if "GPTQ" in str(r["quant_bits"]):
        return None, "GPTQ int4 (auto-gptq kernels) is not the bitsandbytes NF4 QLoRA the planner models"
    if str(r["model"]).removesuffix("-Int4") not in _FALLBACK:
        return None, f"no config for {r['model']}"
    seq = first_int(r["seq_len"])
    notes = []
    if seq is None:
        seq = ALPACA_ASSUMED_SEQ
        notes.append(f"seq assumed {seq}")
    prec = str(r["precision"])
    precision = "amp-bf16" if prec.startswith("amp_bf16") else "fp16" if prec.startswith("fp16") else "bf16"
    opt = str(r["optimizer"])
    optimizer = "adamw-8bit" if ("8bit" in opt or "4bit" in opt) else "adamw"
    if "4bit" in opt:
        notes.append("4-bit optimizer as 8-bit")
    par = str(r["parallelism"]).lower()
    sharding = "zero3" if par.startswith("zero3") else "zero2" if par.startswith("zero2") else "none"
    targets = str(r["lora_targets"]).split(" (")[0]
    targets = "all-linear" if targets in ("all", "nan") else targets
    gpu = "A100" if "40GB" in str(r["gpu_model"]) and "80" not in str(r["gpu_model"]) else "A100-80GB"
    if str(r["gpu_model"]).startswith("H100"):
        gpu = "H100"
    stack = Stack(method=r["method"], lora_rank=int(float(r["lora_rank"])) if str(r["lora_rank"]) != "nan" else 16,
                  lora_targets=targets, precision=precision, optimizer=optimizer,
                  grad_checkpointing=str(r["grad_checkpointing"]).startswith("yes"),
                  attention="flash" if str(r["attention"]).startswith("flash") else "sdpa",
                  gpus=int(r["gpus"]), sharding=sharding)
    m = re.search(r"\bGA ?(\d+)", str(r["notes"]))  # Qwen: "GA8" (s/it is one step of 8 micro-batches)
    ga = int(m.group(1)) if m else 1
    measured = float(first_int(r["tokens_per_sec"]))
    if "per GPU" in str(r["tokens_per_sec"]):
        measured *= int(r["gpus"])
    return dict(model=r["model"], stack=stack, shape=Shape(micro_batch=int(float(r["micro_batch"])), seq_len=seq),
                gpu=gpu, grad_accum=ga, measured=measured, note="; ".join(notes)), ""


def run(mfu: float | None = None, csv: Path = CAL, quiet: bool = False) -> dict:
    import pandas as pd

    rows = pd.read_csv(csv, dtype=str).fillna("nan")
    rows = rows[rows["tokens_per_sec"] != "nan"]
    included, excluded = [], []
    for r in rows.to_dict("records"):
        setup, why = parse_row(r)
        if setup is None:
            excluded.append((r["id"], why))
            continue
        tp = estimate_throughput(model_spec(setup["model"]), setup["stack"], setup["shape"], setup["gpu"],
                                 grad_accum=setup["grad_accum"], mfu=mfu)
        err = (tp.tokens_per_sec - setup["measured"]) / setup["measured"]
        included.append((r["id"], setup, tp, err))
    errs = [abs(e) for *_, e in included]
    summary = {"rows": len(included), "excluded": len(excluded),
               "median_abs_error": statistics.median(errs) if errs else float("nan"),
               "p90_abs_error": sorted(errs)[int(0.9 * (len(errs) - 1))] if errs else float("nan"),
               "within_20pct": sum(e <= 0.2 for e in errs) / len(errs) if errs else float("nan")}
    if not quiet:
        print(f"{'id':9} {'model':26} {'stack':44} {'gpu':9} {'mb':>3} {'seq':>6} "
              f"{'pred tok/s':>10} {'published':>10} {'error':>7} {'mfu':>5}")
        for rid, s, tp, err in included:
            print(f"{rid:9} {s['model'][:26]:26} {s['stack'].label()[:44]:44} {s['gpu']:9} {s['shape'].micro_batch:>3} "
                  f"{s['shape'].seq_len:>6} {tp.tokens_per_sec:>10.0f} {s['measured']:>10.0f} {err:>+7.1%} "
                  f"{tp.mfu:>5.2f} ga{s['grad_accum']} {s['note']}")
        print("\nexcluded:")
        for rid, why in excluded:
            print(f"  {rid:9} {why}")
        print(f"\nrows {summary['rows']}, excluded {summary['excluded']}; median |error| "
              f"{summary['median_abs_error']:.1%} (goal <= 20%), p90 {summary['p90_abs_error']:.1%}, "
              f"within 20%: {summary['within_20pct']:.0%}")
    return summary


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mfu", type=float, default=None, help="override the kernel efficiency table")
    ap.add_argument("--csv", type=Path, default=CAL)
    a = ap.parse_args()
    if not a.csv.exists():
        sys.exit(f"calibration file not found: {a.csv}")
    run(a.mfu, a.csv)
