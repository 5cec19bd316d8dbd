"""CUDA measurement harness: what real training steps allocate, next to what we estimate.

    python benchmarks/gpu_measure.py --budget-seconds 480          # on a CUDA GPU
    python benchmarks/gpu_measure.py --device cpu --tiny           # mechanics only (tests)
    python benchmarks/gpu_measure.py --list                        # print the plan

For each case (catalog model random-initialised from its config -- nothing downloaded --,
method full / LoRA / QLoRA, checkpointing on/off, SDPA / FlashAttention 2, micro-batch and
sequence length) it runs a few AdamW steps on random tokens in a fresh CUDA state and
records torch.cuda.max_memory_allocated, max_memory_reserved, device memory in use (NVML,
else cudaMemGetInfo) and the step time -- forward, backward and optimizer step timed apart,
the median over the timed steps after one warm-up -- with the estimator's memory and the
time model's tokens/s, step time and held-out band side by side. Cases that cannot run here
are recorded as skipped with the reason; OOM is recorded and the run goes on. The CSV (GPU,
library versions, date on every row) is rewritten after each case, so a run cut short still
leaves its rows. `benchmarks/throughput_rows.py` reads a CUDA run's CSV as a calibration
source of its own (`gpumeasure`).

The optimizer is torch's fused AdamW on CUDA (HF Trainer's default `adamw_torch_fused`, what
the memory and time models assume); no gradient clipping, scheduler or logging, so the time
model's fixed per-step overhead is an upper bound here.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gc
import importlib.util
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from advisor.model.spec import ModelSpec  # noqa: E402
from advisor.stacks import Shape, Stack  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

COLUMNS = [
    "date", "gpu_name", "gpu", "torch", "transformers", "peft", "bitsandbytes", "flash_attn", "cuda",
    "case", "model", "params", "method", "precision", "optimizer", "grad_checkpointing", "attention",
    "lora_rank", "micro_batch", "seq_len", "steps", "status", "reason",
    "max_allocated_bytes", "max_reserved_bytes", "device_used_bytes", "device_used_source",
    "tokens_per_sec", "step_seconds", "forward_seconds", "backward_seconds", "optimizer_seconds",
    "case_seconds", "planned_seconds",
    "est_peak_allocated", "est_peak_reserved", "est_device_total", "est_tokens_per_sec",
    "est_tokens_per_sec_low", "est_tokens_per_sec_high", "est_step_seconds",
    "err_allocated_pct", "err_reserved_pct", "err_device_pct", "err_tokens_per_sec_pct", "tokens_per_sec_in_band",
]

# A tiny Llama for the CPU run: exercises every code path in well under a second per case.
TINY = ModelSpec(
    name="tiny-llama", family="llama", source="benchmarks/gpu_measure.py (mechanics test)",
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
)

# Effective bf16 throughput assumed when planning case times on an H200 (about 40 % of the
# ~790 TFLOP/s dense peak; conservative, so the plan finishes inside the budget).
PLAN_FLOPS = 3.0e14


@dataclass(frozen=True)
class Case:
    model: str  # catalog name, or "tiny"
    method: str  # full | lora | qlora
    grad_checkpointing: bool
    attention: str  # sdpa | flash | eager
    micro_batch: int
    seq_len: int

    @property
    def id(self) -> str:
        ck = "ckpt" if self.grad_checkpointing else "nockpt"
        short = self.model.split("/")[-1]
        return f"{short}:{self.method}:{ck}:{self.attention}:{self.micro_batch}x{self.seq_len}"

    def stack(self) -> Stack:
        return Stack(loss="standard", method=self.method, precision="bf16", optimizer="adamw", lora_rank=16, lora_alpha=32,
                     lora_targets="all-linear", adapter_dtype="fp32", double_quant=True,
                     grad_checkpointing=self.grad_checkpointing, attention=self.attention)

    def shape(self) -> Shape:
        return Shape(micro_batch=self.micro_batch, seq_len=self.seq_len, grad_accum=1)  # one micro-batch per step


def cuda_matrix() -> list[Case]:
    """Real-size cases for one H200, most informative first (about 6 minutes planned)."""
    q05, l1, l3, l8 = "Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.1-8B"
    cases = [
        # the 8B workhorse: each method, checkpointing on
        Case(l8, "lora", True, "sdpa", 2, 2048),
        Case(l8, "qlora", True, "sdpa", 2, 2048),
        Case(l8, "full", True, "sdpa", 1, 2048),
        Case(l8, "lora", False, "sdpa", 1, 2048),
        # 3B: checkpointing off/on, batch and length
        Case(l3, "lora", False, "sdpa", 2, 1024),
        Case(l3, "lora", True, "sdpa", 4, 2048),
        Case(l3, "full", False, "sdpa", 2, 1024),
        Case(l3, "qlora", False, "sdpa", 2, 1024),
        # 1B: attention kernels and long sequences
        Case(l1, "full", False, "sdpa", 4, 1024),
        Case(l1, "full", True, "sdpa", 4, 1024),
        Case(l1, "lora", False, "flash", 4, 1024),
        Case(l1, "lora", False, "sdpa", 4, 1024),
        Case(l1, "lora", True, "flash", 1, 8192),
        Case(l1, "qlora", True, "sdpa", 2, 4096),
        # 0.5B (big vocabulary relative to its size): logits-dominated peaks
        Case(q05, "full", False, "sdpa", 8, 512),
        Case(q05, "full", True, "sdpa", 8, 2048),
        Case(q05, "lora", False, "sdpa", 8, 1024),
        Case(q05, "lora", False, "eager", 2, 1024),
    ]
    return cases


def tiny_matrix() -> list[Case]:
    cases = [Case("tiny", m, ck, "sdpa", 2, 32) for m in ("full", "lora") for ck in (False, True)]
    cases += [Case("tiny", "lora", False, "eager", 2, 32), Case("tiny", "qlora", True, "sdpa", 2, 32),
              Case("tiny", "lora", False, "flash", 2, 32)]
    return cases


# ----------------------------------------------------------------------------- helpers

def spec_for(case: Case) -> ModelSpec:
    if case.model == "tiny":
        return TINY
    from advisor.model.catalog import load_model

    return load_model(case.model)


def params_of(spec: ModelSpec) -> int:
    try:
        from advisor.model.architecture import build

        return int(build(spec).params_total)
    except Exception:  # noqa: BLE001 - planning only
        h, L = spec.hidden_size, spec.num_hidden_layers
        return spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2) + L * (4 * h * h + 3 * h * spec.intermediate_size)


def planned_seconds(case: Case, params: int, steps: int) -> float:
    """Setup (init, quantise) plus the training steps at PLAN_FLOPS."""
    flops_per_token = (6 if case.method == "full" else 4) * params + (2 * params if case.grad_checkpointing else 0)
    compute = (steps + 1) * flops_per_token * case.micro_batch * case.seq_len / PLAN_FLOPS
    setup = 4 + 1.0 * params / 1e9 + (3.0 * params / 1e9 if case.method == "qlora" else 0)
    return setup + compute


def skip_reason(case: Case, device: str) -> str | None:
    if case.method == "qlora":
        if device != "cuda":
            return "QLoRA needs bitsandbytes' NF4 CUDA kernels (no CUDA device)"
        if importlib.util.find_spec("bitsandbytes") is None:
            return "QLoRA needs bitsandbytes, which is not importable"
    if case.attention == "flash":
        if device != "cuda":
            return "FlashAttention 2 needs a CUDA device"
        if importlib.util.find_spec("flash_attn") is None:
            return "FlashAttention 2 needs flash_attn, which is not importable"
    return None


def versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "transformers", "peft", "bitsandbytes", "flash_attn"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = ""
    import torch

    out["cuda"] = torch.version.cuda or ""
    return out


def hf_config(spec: ModelSpec) -> dict:
    from advisor.model.catalog import to_hf_config

    return to_hf_config(spec)


def build_model(case: Case, spec: ModelSpec, device: str):
    """Random-initialised model on `device` (bf16) with the case's method applied."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(hf_config(spec))
    model_type = cfg.pop("model_type")
    cfg.pop("torch_dtype", None)
    cfg["use_cache"] = False
    config = AutoConfig.for_model(model_type, **cfg)
    attn = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}[case.attention]
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.bfloat16)
    if case.method == "qlora":
        quantize_nf4(model, double_quant=True)
    from benchmarks.measure import apply_stack

    return apply_stack(model, case.stack(), reentrant=False)  # the very stack the estimate is given


def quantize_nf4(model, double_quant: bool) -> None:
    """Swap every block nn.Linear (not lm_head) for a bitsandbytes NF4 Linear4bit, in place.

    What from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...))
    produces, without a checkpoint. Embeddings, norms and lm_head stay bf16 (no
    prepare_model_for_kbit_training upcast).
    """
    import bitsandbytes as bnb
    import torch

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or name == "lm_head":
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=torch.bfloat16, compress_statistics=double_quant,
                                  quant_type="nf4", device="meta")
            q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=double_quant,
                                         quant_type="nf4")
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            q = q.to(child.weight.device)  # Params4bit quantises on its move to CUDA
            setattr(parent, name, q)
            del child
    gc.collect()
    torch.cuda.empty_cache()


def device_used(device: str) -> tuple[int | None, str]:
    """Memory in use on the whole device, as nvidia-smi shows it (includes the CUDA context)."""
    if device != "cuda":
        return None, ""
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used), "nvml"
    except Exception:  # noqa: BLE001 - NVML absent: the CUDA runtime's view of the same thing
        free, total = torch.cuda.mem_get_info()
        return int(total - free), "cudaMemGetInfo"


def estimates(spec: ModelSpec, case: Case, gpu: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        from advisor.api import estimate_memory

        est = estimate_memory(spec, case.stack(), case.shape())
        out.update(est_peak_allocated=int(est.peak_allocated), est_peak_reserved=int(est.peak_reserved),
                   est_device_total=int(est.device_total))
    except Exception as exc:  # noqa: BLE001 - estimator missing or failing: leave the columns blank
        out["est_error"] = f"memory: {type(exc).__name__}: {exc}"
    if gpu:
        try:
            from advisor.api import estimate_throughput

            t = estimate_throughput(spec, case.stack(), case.shape(), gpu)
            out.update(est_tokens_per_sec=f"{t.tokens_per_sec:.1f}", est_tokens_per_sec_low=f"{t.tokens_per_sec_low:.1f}",
                       est_tokens_per_sec_high=f"{t.tokens_per_sec_high:.1f}", est_step_seconds=f"{t.step_seconds:.4f}")
        except Exception as exc:  # noqa: BLE001
            out.setdefault("est_error", f"throughput: {type(exc).__name__}: {exc}")
    return out


def in_band(row: dict[str, Any]) -> str:
    """'yes' / 'no' when the measured tokens/s falls inside the time model's held-out band, '' when unknown."""
    try:
        measured, low, high = (float(row[k]) for k in ("tokens_per_sec", "est_tokens_per_sec_low",
                                                       "est_tokens_per_sec_high"))
    except (KeyError, TypeError, ValueError):
        return ""
    return "yes" if low <= measured <= high else "no"


def _err(est: Any, measured: Any) -> str:
    if est in (None, "") or not measured:
        return ""
    return f"{(float(est) - float(measured)) / float(measured) * 100:.1f}"


# ----------------------------------------------------------------------------- one case

def run_case(case: Case, spec: ModelSpec, device: str, steps: int) -> dict[str, Any]:
    """Fresh state, build, `steps` timed optimizer steps after one warm-up; memory peaks."""
    import torch

    cuda = device == "cuda"
    out: dict[str, Any] = {}
    model = optimizer = batch = loss = None
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        model = build_model(case, spec, device)
        if cuda:  # quantisation / init transients are not training memory
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        params = [p for p in model.parameters() if p.requires_grad]
        # fused AdamW (states in the parameter dtype), as HF Trainer's adamw_torch_fused on CUDA
        optimizer = torch.optim.AdamW(params, lr=1e-5, fused=cuda)
        gen = torch.Generator(device="cpu").manual_seed(0)
        batch = torch.randint(0, spec.vocab_size, (case.micro_batch, case.seq_len), generator=gen).to(device)
        phases: list[tuple[float, float, float]] = []  # (forward, backward, optimizer) seconds per timed step

        def sync() -> float:
            if cuda:
                torch.cuda.synchronize()
            return time.perf_counter()

        for i in range(steps + 1):
            t0 = sync()
            loss = model(input_ids=batch, labels=batch).loss
            t1 = sync()
            loss.backward()
            t2 = sync()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t3 = sync()
            if i > 0:  # step 0 is warm-up (optimizer state creation, kernel selection)
                phases.append((t1 - t0, t2 - t1, t3 - t2))
        step = statistics.median(sum(p) for p in phases)
        out["status"] = "ok"
        out["step_seconds"] = f"{step:.6f}"
        out["forward_seconds"] = f"{statistics.median(p[0] for p in phases):.6f}"
        out["backward_seconds"] = f"{statistics.median(p[1] for p in phases):.6f}"
        out["optimizer_seconds"] = f"{statistics.median(p[2] for p in phases):.6f}"
        out["tokens_per_sec"] = f"{case.micro_batch * case.seq_len / step:.1f}"
    except Exception as exc:  # noqa: BLE001
        oom = type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()
        out["status"] = "oom" if oom else "error"
        out["reason"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if cuda:
        out["max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["max_reserved_bytes"] = torch.cuda.max_memory_reserved()
        used, source = device_used(device)
        out["device_used_bytes"], out["device_used_source"] = used, source
    del model, optimizer, batch, loss
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


# ----------------------------------------------------------------------------- driver

def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import io

    from pricing.files import atomic_write

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
    atomic_write(path, buf.getvalue())


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny config, mechanics only")
    parser.add_argument("--budget-seconds", type=float, default=480.0,
                        help="stop starting new cases once this much time would be exceeded")
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps per case (after 1 warm-up)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the CSV")
    parser.add_argument("--list", action="store_true", help="print the planned cases and times, run nothing")
    return parser.parse_args(argv)


def _device(args: argparse.Namespace) -> tuple[str, str | None]:
    """(the device's name, its canonical GPU name or None); one clear line and exit 2 for CUDA without a GPU."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available() and not args.list:
        print("error: --device cuda: no CUDA device here; use --device cpu --tiny for the mechanics run",
              file=sys.stderr)
        raise SystemExit(2)
    gpu_name = torch.cuda.get_device_name() if args.device == "cuda" and torch.cuda.is_available() else args.device
    gpu = None
    if args.device == "cuda":
        from pricing.gpus import canonical_name

        gpu = canonical_name(gpu_name)
    return gpu_name, gpu


def _print_plan(plan: list[tuple[Case, float]]) -> None:
    total = 0.0
    for c, secs in plan:
        total += secs
        print(f"{c.id:55s} {secs:7.1f} s  (cumulative {total:7.1f} s)")


def _skip_reason(case: Case, secs: float, elapsed: float, args: argparse.Namespace) -> str | None:
    reason = skip_reason(case, args.device)
    if reason is None and elapsed + secs > args.budget_seconds:
        reason = f"budget: {elapsed:.0f} s used, case planned at {secs:.0f} s, budget {args.budget_seconds:.0f} s"
    return reason


def _run_row(row: dict[str, Any], case: Case, spec: ModelSpec, gpu: str | None, args: argparse.Namespace) -> None:
    """Run the case into `row`, with the estimate and its errors beside the measurement."""
    t0 = time.perf_counter()
    row.update(run_case(case, spec, args.device, args.steps))
    row["case_seconds"] = f"{time.perf_counter() - t0:.1f}"
    est = estimates(spec, case, gpu)
    row.update({k: v for k, v in est.items() if k != "est_error"})
    if est.get("est_error"):
        row["reason"] = ((row.get("reason") or "") + " " + est["est_error"]).strip()
    row["err_allocated_pct"] = _err(row.get("est_peak_allocated"), row.get("max_allocated_bytes"))
    row["err_reserved_pct"] = _err(row.get("est_peak_reserved"), row.get("max_reserved_bytes"))
    row["err_device_pct"] = _err(row.get("est_device_total"), row.get("device_used_bytes"))
    row["err_tokens_per_sec_pct"] = _err(row.get("est_tokens_per_sec"), row.get("tokens_per_sec"))
    row["tokens_per_sec_in_band"] = in_band(row)
    print(f"{row['status']:5s} {case.id} {row['case_seconds']} s alloc={row.get('max_allocated_bytes')} "
          f"est={row.get('est_peak_allocated')} tok/s={row.get('tokens_per_sec')}", file=sys.stderr)


def main(argv: list[str] | None = None) -> Path | None:
    args = _parse_args(argv)
    cases = tiny_matrix() if args.tiny else cuda_matrix()
    gpu_name, gpu = _device(args)
    today = dt.date.today().isoformat()
    slug = re.sub(r"[^A-Za-z0-9.-]+", "-", gpu or gpu_name).strip("-") or "gpu"
    path = args.out / f"gpu_measure_{slug}{'-tiny' if args.tiny else ''}_{today}.csv"
    meta = {"date": today, "gpu_name": gpu_name, "gpu": gpu or "", **versions()}

    specs = {c.model: spec_for(c) for c in cases}
    plan = [(c, planned_seconds(c, params_of(specs[c.model]), args.steps)) for c in cases]
    if args.list:
        _print_plan(plan)
        return None

    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for case, secs in plan:
        spec = specs[case.model]
        row: dict[str, Any] = {
            **meta, "case": case.id, "model": spec.name, "params": params_of(spec), "method": case.method,
            "precision": "bf16", "optimizer": "adamw (torch, states in bf16)",
            "grad_checkpointing": case.grad_checkpointing, "attention": case.attention,
            "lora_rank": 16 if case.method != "full" else "", "micro_batch": case.micro_batch,
            "seq_len": case.seq_len, "steps": args.steps, "planned_seconds": f"{secs:.1f}",
        }
        reason = _skip_reason(case, secs, time.perf_counter() - start, args)
        if reason:
            row.update(status="skipped", reason=reason)
            print(f"skip {case.id}: {reason}", file=sys.stderr)
        else:
            _run_row(row, case, spec, gpu, args)
        rows.append(row)
        write_csv(path, rows)
    print(path)
    return path


if __name__ == "__main__":
    main()
