#!/usr/bin/env python3
"""Reference supervised fine-tuning script written by gpu-advisor (transformers Trainer + peft).

Reads training_args.yaml (sections model / data / training / lora / quantization), so the run uses
exactly the micro-batch, accumulation, checkpointing, optimizer, precision, attention and sequence
length that were estimated. Start it with launch.sh (accelerate launch) so FSDP / DeepSpeed come
from accelerate_config.yaml.

Data: a local JSONL file of {"text": ...} rows, or a .txt file (documents separated by blank lines),
packed into blocks of exactly data.max_seq_length tokens (chat JSONL: convert it with chat_to_text.py).
Attention: flash_attention_2 when flash-attn is installed, else PyTorch SDPA (printed).
Smoke test without weights: --init_from_config CONFIG.json random-initialises the model from a
config and, when no tokenizer sits next to it, uses a byte-level tokenizer (needs vocab >= 257).

Measured run: --benchmark [--steps N] [--warmup_steps W] trains W warm-up steps plus N timed optimizer
steps (20 by default) of exactly this setup, saves nothing, and writes measured.json next to this script:
step times (a TrainerCallback from on_step_begin to on_step_end, CUDA synchronised), the whole job's
tokens/s, peak memory (torch.cuda.max_memory_allocated / max_memory_reserved, device memory in use),
library versions and the stack and shape it ran. `gpu-advisor calibrate measured.json` compares it
with the estimate; `gpu-advisor plan --measured measured.json` plans with it.

Techniques: LoRA/DoRA settings (use_dora, lm_head / embed_tokens targets, modules_to_save) go to peft's
LoraConfig as written; training.use_liger_kernel and training.torch_compile to TrainingArguments; a
`loss: {type: chunked}` section computes the chunked cross-entropy below; a DeepSpeed bundle's
ds_config.json is found next to this script.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import sys
from pathlib import Path

import torch
import yaml
from transformers import TrainerCallback


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(here / "training_args.yaml"), help="training_args.yaml")
    p.add_argument("--model_name_or_path", help="override model.name_or_path (hub id or local folder)")
    p.add_argument("--init_from_config", help="config.json (or its folder): random init, no weights")
    p.add_argument("--dataset", help="override data.path")
    p.add_argument("--max_steps", type=int, help="stop after N optimizer steps")
    p.add_argument("--learning_rate", type=float)
    p.add_argument("--logging_steps", type=int)
    p.add_argument("--output_dir")
    p.add_argument("--benchmark", action="store_true",
                   help="measured run: warm-up + --steps timed optimizer steps, write measured.json, save nothing")
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps of --benchmark [20]")
    p.add_argument("--warmup_steps", type=int, default=3, help="untimed steps before the timed ones [3]")
    p.add_argument("--measured_out", help="where --benchmark writes its JSON [measured.json beside train.py]")
    args = p.parse_args(argv)
    if args.benchmark and (args.steps < 1 or args.warmup_steps < 0):
        p.error("--steps must be at least 1 and --warmup_steps at least 0")
    return args


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255 and 256 as end-of-text: for random-initialised test models only."""

    eos_token_id = 256

    def __init__(self, vocab_size: int):
        if vocab_size < 257:
            sys.exit(f"train.py: the byte tokenizer needs vocab_size >= 257 (config has {vocab_size}).")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))


def load_texts(path: Path) -> list[str]:
    if not path.is_file():
        sys.exit(f"train.py: dataset {path} not found (data.path in training_args.yaml or --dataset).")
    if path.suffix == ".jsonl":
        texts = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    sys.exit(f"train.py: {path}:{n}: each JSONL row needs a string 'text' field.")
                texts.append(row["text"])
        return texts
    return [t for t in path.read_text(encoding="utf-8").split("\n\n") if t.strip()]


class PackedDataset(torch.utils.data.Dataset):
    """All documents concatenated (EOS between them) and cut into blocks of exactly seq_len tokens."""

    def __init__(self, ids: list[int], seq_len: int, min_blocks: int = 1):
        if not ids:
            sys.exit("train.py: the dataset is empty.")
        if len(ids) < seq_len * min_blocks:  # keep the estimated shape even for a tiny file
            print(f"train.py: dataset has {len(ids)} tokens < {min_blocks} block(s) of {seq_len}; repeating it",
                  flush=True)
            ids = ids * math.ceil(seq_len * min_blocks / len(ids))
        n = len(ids) // seq_len
        self.blocks = torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        x = self.blocks[i]
        return {"input_ids": x, "labels": x.clone(), "attention_mask": torch.ones_like(x)}


def chunked_cross_entropy(logits, labels, chunks: int = 8, ignore_index: int = -100, num_items_in_batch=None):
    """Cross-entropy the way torchtune's CEWithChunkedOutputLoss computes it (modules/loss/
    ce_chunked_output_loss.py): labels shifted as transformers shifts them, the sequence cut into `chunks`
    pieces, each piece upcast to fp32 and reduced on its own, so backward holds one chunk's fp32
    gradients at a time instead of the whole batch × sequence × vocabulary."""
    import torch.nn.functional as F

    shifted = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    total = None
    for logit_chunk, label_chunk in zip(logits.chunk(chunks, dim=1), shifted.chunk(chunks, dim=1)):
        part = F.cross_entropy(logit_chunk.reshape(-1, logit_chunk.size(-1)).float(), label_chunk.reshape(-1),
                               ignore_index=ignore_index, reduction="sum")
        total = part if total is None else total + part
    count = num_items_in_batch if num_items_in_batch is not None else (shifted != ignore_index).sum().clamp(min=1)
    return total / count


def resolve_deepspeed_config(bundle: Path) -> None:
    """accelerate passes the bundle's relative ds_config.json path on; read it from the bundle folder
    wherever launch.sh was started."""
    path = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if path and path != "none" and not Path(path).is_absolute() and not Path(path).is_file():
        if (bundle / path).is_file():
            os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(bundle / path)


def resolve_attention(cfg: dict, benchmark: bool) -> str:
    """The attention kernel to load with: flash_attention_2 when the flash-attn package is installed (it needs a
    CUDA build, so requirements.txt leaves it to sky.yaml / the README), else PyTorch SDPA, said on stdout.
    A --benchmark refuses the fallback: it would measure another kernel than the one planned."""
    name = cfg["model"]["attn_implementation"]
    if name != "flash_attention_2" or importlib.util.find_spec("flash_attn") is not None:
        return name
    if benchmark:
        sys.exit("train.py: the plan assumed FlashAttention-2 and flash-attn is not installed "
                 "(pip install flash-attn --no-build-isolation); a --benchmark with SDPA would not measure it.")
    print("train.py: flash-attn is not installed; attention falls back to PyTorch SDPA "
          "(pip install flash-attn --no-build-isolation for the planned kernel)", flush=True)
    return "sdpa"


def load_model_and_tokenizer(cfg: dict, args: argparse.Namespace):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    m = cfg["model"]
    dtype = getattr(torch, m["dtype"])
    if args.init_from_config:
        path = Path(args.init_from_config)
        config = AutoConfig.from_pretrained(str(path))
        config._attn_implementation = m["attn_implementation"]
        torch.manual_seed(0)
        # One CUDA process (no FSDP / DeepSpeed to shard it first): initialise on the GPU, not the host.
        device = "cuda" if torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) == 1 else "cpu"
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config).to(dtype)
        folder = path if path.is_dir() else path.parent
        has_tok = any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
        tok = AutoTokenizer.from_pretrained(str(folder)) if has_tok else ByteTokenizer(config.vocab_size)
        if cfg.get("quantization"):
            if not (torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes")):
                if args.benchmark:
                    sys.exit("train.py: a QLoRA --benchmark needs 4-bit weights (CUDA and bitsandbytes); "
                             "this machine has neither, so it would not measure the planned stack.")
                print("train.py: --init_from_config skips 4-bit quantization (needs CUDA and bitsandbytes)",
                      flush=True)
                return model, tok
            model = _quantised_random_model(model, cfg)
        return model, tok
    name = args.model_name_or_path or m["name_or_path"]
    import transformers

    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    kwargs: dict = {"attn_implementation": m["attn_implementation"], dtype_key: dtype}
    if cfg.get("quantization"):
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(**cfg["quantization"])
    model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    return model, AutoTokenizer.from_pretrained(name)


MEASUREMENT_SCHEMA = "gpu-advisor/measurement-1"  # read by gpu-advisor (advisor/measurements.py)
VERSIONED = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "deepspeed", "liger-kernel", "flash-attn",
             "trl", "triton")


class StepTimer(TrainerCallback):
    """TrainerCallback timing each optimizer step from on_step_begin to on_step_end (the forward and
    backward of every micro-batch, clipping and the optimizer step), after `warmup` untimed steps. On
    CUDA it synchronises at both ends, so queued kernels are counted in the step that launched them.
    `window` runs from the end of the last warm-up step to the end of the last step: the whole job's
    time, with the data loading and logging between steps."""

    def __init__(self, warmup: int):
        import time

        self.warmup, self.clock = warmup, time.perf_counter
        self.steps: list[float] = []
        self.window_start: float | None = None
        self.window_end = 0.0
        self.device_used = 0  # most device memory in use at a step end (cudaMemGetInfo: what nvidia-smi shows)
        self._begin = 0.0

    def _sync(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kw):
        self._sync()
        self._begin = self.clock()
        if self.window_start is None and state.global_step >= self.warmup:
            self.window_start = self._begin

    def on_step_end(self, args, state, control, **kw):
        self._sync()
        end = self.clock()
        if state.global_step > self.warmup:  # global_step counts the step just finished
            self.steps.append(end - self._begin)
            self.window_end = end
        elif state.global_step == self.warmup:
            self.window_start = end
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            self.device_used = max(self.device_used, total - free)


def _quantiles(values: list[float]) -> dict:
    import statistics

    if len(values) > 1:
        cuts = statistics.quantiles(values, n=10, method="inclusive")
        p10, p90 = cuts[0], cuts[-1]
    else:
        p10 = p90 = values[0]
    return {"median": statistics.median(values), "p10": p10, "p90": p90, "count": len(values),
            "steps": [round(v, 6) for v in values]}


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _gpu_model(device_name: str) -> str:
    """The GPU table's name when gpu-advisor is installed here; else the device's own name, which
    gpu-advisor maps (pricing/data/gpus.csv aliases) when it reads the file."""
    try:
        from pricing.gpus import canonical_name
    except ImportError:
        return device_name
    return canonical_name(device_name) or device_name


def _peak(value: int) -> int:
    """The largest value over all ranks (memory peaks differ per rank under sharding)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.long, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def measurement(cfg: dict, args, targs, timer: StepTimer) -> dict:
    """measured.json: what ran (model, device, stack, shape) and what it measured."""
    import datetime as dt

    est = cfg.get("estimate") or {}
    if not isinstance(est.get("stack_settings"), dict):
        sys.exit("train.py: training_args.yaml has no estimate.stack_settings; write the bundle again with gpu-advisor "
                 "launch to measure it.")
    if not timer.steps:
        sys.exit("train.py: --benchmark timed no step (did training stop early?)")
    world = targs.world_size
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    shape = {"micro_batch": targs.per_device_train_batch_size, "seq_len": int(cfg["data"]["max_seq_length"]),
             "grad_accum": targs.gradient_accumulation_steps}
    tokens = shape["micro_batch"] * shape["seq_len"] * shape["grad_accum"] * world * len(timer.steps)
    cuda = torch.cuda.is_available()
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    stats = torch.cuda.memory_stats() if cuda else {}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {
        "schema": MEASUREMENT_SCHEMA,
        "model": args.model_name_or_path or cfg["model"]["name_or_path"],
        "weights": "random-init" if args.init_from_config else "pretrained",
        "gpu_model": _gpu_model(device_name) if cuda else "cpu",
        "device_name": device_name,
        "gpu_count": per_node,
        "nodes": max(1, world // per_node),
        "stack": {**est["stack_settings"], "gpus": world},
        "shape": shape,
        "tokens_per_sec": tokens / (timer.window_end - timer.window_start),
        "step_seconds": _quantiles(timer.steps),
        "warmup_steps": args.warmup_steps,
        "wall_seconds": timer.window_end - timer.window_start,
        "peak_allocated_bytes": _peak(torch.cuda.max_memory_allocated()) if cuda else None,
        "peak_reserved_bytes": _peak(torch.cuda.max_memory_reserved()) if cuda else None,
        "device_total_bytes": _peak(timer.device_used) if cuda else None,
        "device_capacity_bytes": torch.cuda.mem_get_info()[1] if cuda else None,
        "alloc_retries": int(stats.get("num_alloc_retries", 0)) if cuda else None,
        "host_peak_rss_bytes": _peak(rss),  # the CPU run's substitute for device memory
        "versions": _versions(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json(path: Path, data: dict) -> None:
    """Atomically (a temp file renamed over `path`), so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _quantised_random_model(model, cfg: dict):
    """The random-initialised model in 4-bit, as QLoRA runs it: bitsandbytes quantises while loading,
    so the random weights are saved to a scratch folder and loaded back with the bundle's
    BitsAndBytesConfig (transformers has no from_config path that quantises)."""
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    m = cfg["model"]
    scratch = tempfile.mkdtemp(prefix="random-weights-")
    try:
        model.save_pretrained(scratch)
        del model
        torch.cuda.empty_cache()
        return AutoModelForCausalLM.from_pretrained(
            scratch, attn_implementation=m["attn_implementation"], dtype=getattr(torch, m["dtype"]),
            quantization_config=BitsAndBytesConfig(**cfg["quantization"]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config_path = Path(args.config)
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))

    from transformers import Trainer, TrainingArguments, default_data_collator

    ta = dict(cfg["training"])
    for key in ("max_steps", "learning_rate", "logging_steps", "output_dir"):
        if getattr(args, key) is not None:
            ta[key] = getattr(args, key)
    if args.benchmark:  # the planned setup for warm-up + timed steps, nothing written but measured.json
        import tempfile

        ta.update(max_steps=args.warmup_steps + args.steps, save_strategy="no",
                  output_dir=args.output_dir or tempfile.mkdtemp(prefix="benchmark-"))
    if ta.get("use_liger_kernel") and importlib.util.find_spec("liger_kernel") is None:
        sys.exit("train.py: the estimate assumed Liger Kernel (training.use_liger_kernel); pip install liger-kernel "
                 "(requirements.txt) or set use_liger_kernel: false and re-estimate without --liger.")
    cfg["model"]["attn_implementation"] = resolve_attention(cfg, args.benchmark)
    resolve_deepspeed_config(config_path.parent)
    # Built before the model so DeepSpeed ZeRO-3 init / FSDP RAM-efficient loading see it.
    targs = TrainingArguments(**ta)

    model, tok = load_model_and_tokenizer(cfg, args)
    if cfg.get("lora"):
        from peft import LoraConfig, get_peft_model

        fp32_adapters = cfg["model"].get("adapter_dtype", "fp32") == "fp32"
        model = get_peft_model(model, LoraConfig(**cfg["lora"]), autocast_adapter_dtype=fp32_adapters)
        if targs.process_index == 0:
            model.print_trainable_parameters()

    data_path = Path(args.dataset or cfg["data"]["path"])
    if not data_path.is_absolute() and not data_path.exists():
        data_path = config_path.parent / data_path  # relative to the bundle
    ids: list[int] = []
    if args.benchmark and not data_path.is_file():  # speed does not depend on the text: random tokens
        print(f"train.py: --benchmark without {data_path}: random token ids", flush=True)
        gen = torch.Generator().manual_seed(0)
        vocab = min(int(getattr(model.config, "vocab_size", 256) or 256), 32_000)
        ids = torch.randint(0, vocab, (int(cfg["data"]["max_seq_length"]),), generator=gen).tolist()
    else:
        for text in load_texts(data_path):
            ids += tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    seq_len = int(cfg["data"]["max_seq_length"])
    blocks = 1
    if args.benchmark:  # enough blocks that every measured step has the planned shape
        blocks = (args.warmup_steps + args.steps) * targs.per_device_train_batch_size \
            * targs.gradient_accumulation_steps * targs.world_size
    dataset = PackedDataset(ids, seq_len, blocks)

    class PrintLoss(TrainerCallback):
        def on_log(self, a, state, control, logs=None, **kw):
            if state.is_world_process_zero and logs and "loss" in logs:
                print(f"step={state.global_step} loss={logs['loss']:.4f}", flush=True)

    loss_cfg = cfg.get("loss") or {}
    compute_loss_func = None
    if loss_cfg.get("type") == "chunked":
        chunks = int(loss_cfg.get("chunks", 8))
        if targs.process_index == 0:
            print(f"train.py: loss = chunked cross-entropy, {chunks} chunks", flush=True)

        def chunked_loss(outputs, labels, num_items_in_batch=None):
            return chunked_cross_entropy(outputs["logits"], labels, chunks=chunks,
                                         num_items_in_batch=num_items_in_batch)

        compute_loss_func = chunked_loss

    timer = StepTimer(args.warmup_steps) if args.benchmark else None
    trainer = Trainer(
        model=model, args=targs, train_dataset=dataset, data_collator=default_data_collator,
        callbacks=[PrintLoss()] + ([timer] if timer else []), compute_loss_func=compute_loss_func,
    )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    if timer is not None:
        record = measurement(cfg, args, targs, timer)
        if targs.process_index == 0:
            out = Path(args.measured_out) if args.measured_out else config_path.parent / "measured.json"
            write_json(out, record)
            print(f"train.py: measured {record['tokens_per_sec']:,.0f} tokens/s over {args.steps} steps "
                  f"(median step {record['step_seconds']['median']:.4g} s); wrote {out}", flush=True)
        return
    trainer.save_model()

    if targs.process_index == 0:
        est = (cfg.get("estimate") or {}).get("peak_memory_bytes_per_gpu")
        if torch.cuda.is_available():
            alloc, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
            print(f"peak_memory_allocated_bytes={alloc} ({alloc / 1e9:.2f} GB) "
                  f"peak_memory_reserved_bytes={reserved} ({reserved / 1e9:.2f} GB)"
                  + (f" estimated_bytes={est} ({est / 1e9:.2f} GB)" if est else ""), flush=True)
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
            print(f"peak_memory: no CUDA device; max RSS {rss / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
