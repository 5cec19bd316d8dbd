"""Memory estimator vs real PyTorch: measured and estimated bytes per case and component.

Runs every case of `benchmarks.measure.VALIDATION_CASES` (small random-initialised transformers
models on the CPU, one training step; DoRA, LoRA on lm_head / embed_tokens, modules_to_save and the
chunked loss among them) and prints, per case and component, the measured bytes,
the estimate of `advisor.api.estimate_memory` and the signed error. Goal: within 2 % on
weights, gradients and optimizer, within 10 % on activations. Stacks the CPU cannot run are
listed with their reason.

    python benchmarks/memory_vs_torch.py            # the error table (~30 s)
    python benchmarks/memory_vs_torch.py --dump     # also rewrite results/saved_tensors_llama.txt
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.stacks import Shape, Stack  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    EXCLUDED_STACKS,
    LLAMA_SMALL,
    TOLERANCE,
    VALIDATION_CASES,
    Measured,
    activation_target,
    measure,
    model_spec,
)

DUMP = ROOT / "benchmarks" / "results" / "saved_tensors_llama.txt"


def _estimate(case):
    from advisor.api import estimate_memory

    try:
        return estimate_memory(model_spec(case.config, case.name), case.stack, case.shape), ""
    except Exception as exc:  # report the estimator's failure in the table, keep going
        return None, f"{type(exc).__name__}: {exc}"


def table() -> int:
    print(f"{'case':46s} {'component':11s} {'measured':>14s} {'estimated':>14s} {'error':>8s}")
    failures = 0
    for case in VALIDATION_CASES:
        t0 = time.perf_counter()
        m = measure(case.config, case.stack, case.shape)
        seconds = time.perf_counter() - t0
        est, why = _estimate(case)
        measured = {
            "weights": m.weights,
            "gradients": m.gradients,
            "optimizer": m.optimizer,
            "activations": activation_target(m, case.stack),
        }
        for comp, value in measured.items():
            if est is None:
                print(f"{case.name:46s} {comp:11s} {value:14,d} {'-':>14s} {'-':>8s}")
                continue
            guess = getattr(est.breakdown, comp)
            err = (guess - value) / value if value else 0.0
            bad = abs(err) > TOLERANCE[comp]
            failures += bad
            flag = "  <-- over tolerance" if bad else ""
            print(f"{case.name:46s} {comp:11s} {value:14,d} {guess:14,d} {err:+7.1%}{flag}")
        if est is None:
            print(f"{'':46s} (no estimate: {why})")
        print(f"{'':46s} ({seconds:.1f} s; {m.saved_storages} saved storages, "
              f"weight casts {m.weight_copies:,d} B, recompute {m.recompute_max_layer:,d} B, "
              f"dropped within forward {m.transient_graphs:,d} B)")
    print()
    for name, _stack, reason in EXCLUDED_STACKS:
        print(f"excluded: {name}: {reason}")
    print(f"\n{failures} component(s) over tolerance")
    return failures


# --- the saved-tensor dump for one small Llama -----------------------------------------------

DUMP_SHAPE = Shape(micro_batch=2, seq_len=128)
DUMP_STACKS = [
    ("full bf16 sdpa", Stack(loss="standard", method="full", precision="bf16", attention="sdpa")),
    ("full bf16 eager", Stack(loss="standard", method="full", precision="bf16", attention="eager")),
    ("full fp32 sdpa", Stack(loss="standard", method="full", precision="fp32", attention="sdpa")),
    ("full amp-bf16 sdpa", Stack(loss="standard", method="full", precision="amp-bf16", attention="sdpa")),
    ("lora r16 dropout 0 bf16 sdpa (fp32 adapters)", Stack(loss="standard", method="lora", lora_dropout=0.0)),
    ("lora r16 dropout 0.05 bf16 sdpa (fp32 adapters)", Stack(loss="standard", method="lora", lora_dropout=0.05)),
    ("lora r16 dropout 0 bf16 sdpa (bf16 adapters)", Stack(loss="standard", method="lora", lora_dropout=0.0, adapter_dtype="bf16")),
    ("lora r16 dropout 0 amp-bf16 sdpa", Stack(loss="standard", method="lora", lora_dropout=0.0, precision="amp-bf16")),
    ("full bf16 sdpa + grad checkpointing", Stack(loss="standard", method="full", grad_checkpointing=True)),
    ("lora r16 dropout 0.05 bf16 sdpa + grad checkpointing", Stack(loss="standard", method="lora", grad_checkpointing=True)),
]


def _line(s) -> str:
    flags = " [autocast weight copy]" if s.weight_copy else ""
    return (f"    {s.module:58s} {s.op:30s} {str(s.shape):20s} {s.dtype:9s} "
            f"{s.storage_bytes:>10,d} B{flags}")


def _describe(title: str, m: Measured, out: list[str]) -> None:
    b, s = DUMP_SHAPE.micro_batch, DUMP_SHAPE.seq_len
    h = LLAMA_SMALL["hidden_size"]
    out.append(f"== {title}")
    out.append(f"   weights {m.weights:,d}  gradients {m.gradients:,d}  optimizer {m.optimizer:,d}  "
               f"activations {m.activations:,d} (CUDA-equivalent {m.activations_cuda:,d}; "
               f"autocast weight copies {m.weight_copies:,d}; CPU dropout noise {m.dropout_mask_bytes:,d})")
    out.append(f"   pack-hook calls {m.saved_tensor_calls}, distinct non-parameter storages {m.saved_storages}")
    per_layer: dict[str, int] = defaultdict(int)
    for t in m.saved:
        layer = next((p for p in ("layers.0.", "layers.1.", "layers.2.") if p in t.module + "."), "outside layers")
        per_layer[layer.rstrip(".")] += t.storage_bytes
    for layer, total in per_layer.items():
        out.append(f"   {layer:15s} {total:>12,d} B = {total / (b * s * h):6.2f} bytes per token per hidden unit")
    out.append("   -- layer 1 (a middle layer; layer 0 differs under LoRA: its input needs no grad) --")
    out += [_line(t) for t in m.saved if "layers.1." in t.module + "."]
    out.append("   -- outside the layers (embedding, final norm, lm_head, loss) --")
    out += [_line(t) for t in m.saved if ".layers." not in t.module]
    if m.recomputed:
        out.append(f"   -- recomputed in backward, largest layer ({m.recompute_max_layer:,d} B) --")
        out += [_line(t) for t in m.recomputed]
    out.append("")


# What the lists below add up to (checked to the byte against this file's layer totals;
# h hidden, I intermediate, nh/kv heads, d head_dim, r rank, V vocab, s seq, per token):
SUMMARY = """\
Per token, per middle layer (bf16 weights unless stated), bytes:
  full bf16 sdpa : 16h + 4*nh*d + 4*kv*d + 8I + 4*nh + 8
                   (each RMSNorm: fp32 input copy 4h + rsqrt 4 + bf16 normalised 2h; q/k/v input 2h;
                    sdpa: q, k, v (kv heads, no repeat), out 2 B each + fp32 logsumexp 4*nh; o_proj input
                    IS the sdpa out; gate/up input 2h; silu in, silu out, up out, down in: 2I each;
                    rotary saves cos/sin once for the model, not q/k before rotation)
  full bf16 eager: 16h + 8*nh*d + 6*nh*s + 8I + 8  (k and v saved repeated to nh heads; fp32 softmax
                   4*nh*s + its bf16 cast 2*nh*s; o_proj input is a fresh contiguous copy)
  full fp32 sdpa : 24h + 8*nh*d + 8*kv*d + 16I + 4*nh + 8 (norm input no longer copied: it is fp32)
  amp-bf16 sdpa  : 16h+8 (norms, fp32 residual) + 2h per q/k/v and per gate/up (autocast casts the same
                   input once per linear) + bf16 sdpa + 8I, plus a bf16 copy of every linear weight
                   (2 B/param, autocast weight cache, saved by mm)
  LoRA r, fp32 adapters, dropout 0: 8h+8 (norms: fp32 input + rsqrt only; frozen weight -> the bf16
                   normalised x is not saved) + 4*in per adapted linear (peft casts x to fp32 per adapter,
                   q/k/v each get their own copy) + 4r per adapter (lora_B input) + sdpa + 6I (down input
                   is only saved through its fp32 cast)
  LoRA dropout>0 : + one dropout mask per adapted linear of its input size (CUDA: bool, 1 B; CPU: float
                   noise in the adapter dtype); lora_A then saves the dropout output instead of the cast
  LoRA bf16 adapters: no casts: q/k/v share one 2h input, gate/up one, o_proj's is the sdpa out,
                   down's is the mlp product (2I); + 2r per adapter
  LoRA layer 0   : input needs no grad (frozen embedding), so q/k/v save no input/mask there
Outside the layers:
  full: input ids int64 8/token; final norm 4h+4+2h; lm_head input 2h; LoRA: final norm 4h+4 only
  loss: ONLY the fp32 log_softmax output 4*V per token + int64 targets 8/token are saved (the bf16
        logits and their fp32 upcast are transient peaks, not saved); Gemma 2 final softcapping adds
        the tanh output 2*V per token; transformers 5 pads labels instead of slicing logits (s rows)
Gradient checkpointing (reentrant): forward saves only each layer's input (2h per token per layer,
  bf16) + the non-checkpointed tail; backward recomputes one layer at a time, saving what that
  layer saves without checkpointing (+ cos/sin, + autocast weight copies under amp).
"""


def dump() -> None:
    b, s = DUMP_SHAPE.micro_batch, DUMP_SHAPE.seq_len
    out = [
        "What autograd saves for backward, one training step, small Llama on CPU (torch "
        "saved_tensors_hooks, distinct storages, parameters/buffers excluded).",
        f"config: {LLAMA_SMALL}",
        f"shape: micro_batch={b} seq_len={s} (tokens={b * s}); bytes are whole storages; a shape is "
        "that of the first tensor that saved the storage (linear saves its input as a 2-D view).",
        "Regenerate: python benchmarks/memory_vs_torch.py --dump",
        "",
        SUMMARY,
    ]
    for title, stack in DUMP_STACKS:
        _describe(title, measure(LLAMA_SMALL, stack, DUMP_SHAPE), out)
    DUMP.parent.mkdir(parents=True, exist_ok=True)
    tmp = DUMP.with_suffix(".tmp")
    tmp.write_text("\n".join(out) + "\n")
    tmp.replace(DUMP)
    print(f"wrote {DUMP}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", action="store_true", help="also rewrite results/saved_tensors_llama.txt")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.dump:
        dump()
    table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
