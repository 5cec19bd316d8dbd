"""Preference (DPO) or reinforcement (GRPO) fine-tuning with TRL, exactly as the plan's estimate assumed.

Written by gpu-advisor into a launch bundle for a DPO or GRPO candidate; runs under `accelerate launch` (launch.sh).
Reads training_args.yaml (model, LoRA, quantization, data sections: the same file the SFT bundle has) and
trl_config.yaml (the trl.DPOConfig / trl.GRPOConfig fields: batch, lengths, beta, generations, vLLM), builds the
trainer TRL 1.16 provides and trains.

Data (JSONL, one example per line): DPO {"prompt": ..., "chosen": ..., "rejected": ...} (TRL's preference format);
GRPO {"prompt": ...}, scored by the reward functions in rewards.py (edit them: the example rewards length).

Measured run: --benchmark [--steps N] [--warmup_steps W] trains W warm-up steps plus N timed optimizer steps (20
and 3) of the planned setup, saves nothing, and writes measured.json beside this script (--measured_out PATH), as
the SFT bundle does: tokens through the policy per second (DPO: chosen + rejected rows; GRPO: completions with
their prompts, generation included), step-time quantiles, peak memory and versions; then
`gpu-advisor calibrate measured.json`.

Smoke test without weights: --init_from_config CONFIG.json random-initialises the model from a config (saved to a
temporary folder, as TRL loads by path) and, when no tokenizer sits next to it, uses a byte-level tokenizer
(needs vocab >= 258). Generation then runs with transformers (no vLLM).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:  # the approved budget's stop, where `gpu-advisor launch --approval` wrote budget_cap.py beside this script
    from budget_cap import callbacks as budget_callbacks
except ImportError:
    def budget_callbacks() -> list:
        return []


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="training_args.yaml (model, lora, quantization, data)")
    p.add_argument("--trl_config", help="trl_config.yaml (default: beside --config)")
    p.add_argument("--init_from_config", help="config.json (or its folder): random init, no weights")
    p.add_argument("--dataset", help="training data (JSONL) instead of the config's data.path")
    p.add_argument("--max_steps", type=int, help="stop after this many optimizer steps")
    p.add_argument("--output_dir", help="where checkpoints go")
    p.add_argument("--logging_steps", type=int)
    p.add_argument("--learning_rate", type=float)
    p.add_argument("--benchmark", action="store_true",
                   help="time --warmup_steps + --steps optimizer steps and write measured.json (nothing saved)")
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps of --benchmark [20]")
    p.add_argument("--warmup_steps", type=int, default=3, help="untimed steps before them [3]")
    p.add_argument("--measured_out", help="where --benchmark writes its JSON [measured.json beside train.py]")
    args = p.parse_args(argv)
    if args.benchmark and (args.steps < 1 or args.warmup_steps < 0):
        p.error("--benchmark: --steps must be at least 1 and --warmup_steps at least 0")
    if args.benchmark and args.max_steps is not None:
        p.error("--benchmark sets max_steps (--warmup_steps + --steps)")
    return args


def byte_tokenizer(vocab_size: int):
    """A byte-level tokenizer (256 byte tokens, eos 256, pad 257) for random-init smoke tests."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 258:
        sys.exit(f"train.py: the byte tokenizer needs vocab_size >= 258 (config has {vocab_size}).")
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab.update({"<eos>": 256, "<pad>": 257})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")


def load_model_path(cfg: dict, args: argparse.Namespace, workdir: Path):
    """(model path, tokenizer): the pretrained model, or a random-initialised one saved to `workdir`."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not args.init_from_config:
        name = cfg["model"]["name_or_path"]
        return name, AutoTokenizer.from_pretrained(name)
    path = Path(args.init_from_config)
    folder = path if path.is_dir() else path.parent
    config = AutoConfig.from_pretrained(str(folder))
    AutoModelForCausalLM.from_config(config).save_pretrained(workdir / "model")
    has_tok = any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
    tok = AutoTokenizer.from_pretrained(str(folder)) if has_tok else byte_tokenizer(config.vocab_size)
    tok.save_pretrained(workdir / "model")
    return str(workdir / "model"), tok


def peft_config(cfg: dict):
    lora = cfg.get("lora")
    if not lora:
        return None
    from peft import LoraConfig

    return LoraConfig(**lora)


def quantization(cfg: dict, args: argparse.Namespace) -> dict:
    """model_init_kwargs additions for QLoRA (bitsandbytes needs CUDA: skipped with --init_from_config)."""
    q = cfg.get("quantization")
    if not q:
        return {}
    if args.init_from_config:
        print("train.py: --init_from_config skips 4-bit quantization (needs CUDA and bitsandbytes)", file=sys.stderr)
        return {}
    import torch
    from transformers import BitsAndBytesConfig

    q = dict(q)
    for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
        if key in q:
            q[key] = getattr(torch, q[key])
    return {"quantization_config": BitsAndBytesConfig(**q)}


def rewards(bundle: Path) -> list:
    """The reward functions of rewards.py beside this script (REWARD_FUNCS)."""
    spec = importlib.util.spec_from_file_location("bundle_rewards", bundle / "rewards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.REWARD_FUNCS)


# transformers 5.24 renamed these TrainingArguments fields (training_args.py); requirements.txt pins a release that
# has both names, and an older one knows only the old
RENAMED = {"activation_checkpointing": "gradient_checkpointing",
           "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}


def for_this_release(config_class, fields: dict) -> dict:
    """`fields` under the names the installed transformers/TRL knows; a field it has under no name is one line."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(config_class)}
    named = {}
    for key, value in fields.items():
        name = key if key in known else RENAMED.get(key, key)
        if name not in known:
            sys.exit(f"train.py: the installed {config_class.__name__} has no field {key!r}; install the versions "
                     "requirements.txt pins")
        named[name] = value
    return named


def trl_args(trl_cfg: dict, args: argparse.Namespace, kind: str, workdir: Path | None = None):
    import trl

    overrides = {k: getattr(args, k) for k in ("max_steps", "output_dir", "logging_steps", "learning_rate")
                 if getattr(args, k) is not None}
    if args.benchmark:  # the planned setup for warm-up + timed steps, nothing written but measured.json
        overrides.update(max_steps=args.warmup_steps + args.steps, save_strategy="no",
                         output_dir=str((workdir or Path(tempfile.mkdtemp())) / "benchmark"))
    fields = {**trl_cfg, **overrides}
    if args.init_from_config and kind == "grpo":  # a random model: generate with transformers, not vLLM
        fields["use_vllm"] = False
    config_class = trl.DPOConfig if kind == "dpo" else trl.GRPOConfig
    return config_class(**for_this_release(config_class, fields))


MEASUREMENT_SCHEMA = "gpu-advisor/measurement-1"  # read by gpu-advisor (advisor/workload/measurements.py)
VERSIONED = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes", "deepspeed",
             "liger-kernel", "flash-attn", "triton", "vllm")


def step_timer(warmup: int):
    """A TrainerCallback timing each optimizer step after `warmup` untimed ones (CUDA synchronised at both ends, so
    a GRPO step's generation and a DPO step's reference pass count in it); `window` is the timed steps' wall time."""
    import time

    import torch
    from transformers import TrainerCallback

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.steps: list[float] = []
            self.window_start: float | None = None
            self.window_end = 0.0
            self._begin = 0.0

        def on_step_begin(self, a, state, control, **kw):
            sync()
            self._begin = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            sync()
            end = time.perf_counter()
            if state.global_step > warmup:  # global_step counts the step just finished
                self.steps.append(end - self._begin)
                self.window_end = end
            elif state.global_step == warmup:
                self.window_start = end

    timer = StepTimer()
    if warmup == 0:
        timer.window_start = time.perf_counter()
    return timer


def measurement(cfg: dict, args: argparse.Namespace, targs, kind: str, timer, world: int) -> dict:
    """measured.json in the SFT bundle's schema: what ran (model, device, stack with its objective, shape in the
    planner's units) and tokens through the policy per second of the timed steps."""
    import datetime as dt
    import os
    import resource
    import statistics
    from importlib import metadata

    import torch

    est = cfg.get("estimate") or {}
    if not isinstance(est.get("stack_settings"), dict):
        sys.exit("train.py: training_args.yaml has no estimate.stack_settings; write the bundle again with gpu-advisor "
                 "launch to measure it.")
    if not timer.steps or timer.window_start is None:
        sys.exit("train.py: --benchmark timed no step (did training stop early?)")
    seq = int(cfg["objective"].get("seq_len") or (targs.max_length if kind == "dpo" else 0))
    if seq <= 0:
        sys.exit("train.py: training_args.yaml has no objective.seq_len; write the bundle again with gpu-advisor launch.")
    mb, ga = targs.per_device_train_batch_size, targs.gradient_accumulation_steps
    rows = 2 * mb if kind == "dpo" else mb  # rows through the policy per micro-step (chosen + rejected for DPO)
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    wall = timer.window_end - timer.window_start
    cuts = statistics.quantiles(timer.steps, n=10, method="inclusive") if len(timer.steps) > 1 else timer.steps * 9
    cuda = torch.cuda.is_available()
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "schema": MEASUREMENT_SCHEMA,
        "model": cfg["model"]["name_or_path"],
        "weights": "random-init" if args.init_from_config else "pretrained",
        "gpu_model": torch.cuda.get_device_name(0) if cuda else "cpu",
        "device_name": torch.cuda.get_device_name(0) if cuda else "cpu",
        "gpu_count": per_node,
        "nodes": max(1, world // per_node),
        "stack": {**est["stack_settings"], "gpus": world},
        "shape": {"micro_batch": mb, "seq_len": seq, "grad_accum": ga},
        "tokens_per_sec": rows * seq * ga * world * len(timer.steps) / wall,
        "step_seconds": {"median": statistics.median(timer.steps), "p10": cuts[0], "p90": cuts[-1],
                         "count": len(timer.steps), "steps": [round(v, 6) for v in timer.steps]},
        "warmup_steps": args.warmup_steps,
        "wall_seconds": wall,
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()) if cuda else None,
        "host_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux reports KiB
        "versions": versions,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def write_json(path: Path, data: dict) -> None:
    """Atomically (a temp file renamed over `path`), so a reader never sees half a file."""
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import datasets
    import yaml
    from transformers import TrainerCallback

    config_path = Path(args.config)
    bundle = Path(__file__).resolve().parent
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    trl_path = Path(args.trl_config) if args.trl_config else config_path.parent / "trl_config.yaml"
    trl_cfg = yaml.safe_load(trl_path.read_text(encoding="utf-8"))
    kind = cfg["objective"]["kind"]
    with tempfile.TemporaryDirectory() as tmp:
        model_path, tok = load_model_path(cfg, args, Path(tmp))
        trl_cfg.setdefault("model_init_kwargs", {}).update(quantization(cfg, args))
        targs = trl_args(trl_cfg, args, kind, Path(tmp))
        data = args.dataset or cfg["data"]["path"]
        train = datasets.load_dataset("json", data_files=str(data), split="train")

        class PrintLoss(TrainerCallback):
            def on_log(self, a, state, control, logs=None, **kw):
                if logs and "loss" in logs and state.is_world_process_zero:
                    print(f"step={state.global_step} loss={float(logs['loss']):.6f}", flush=True)

        import trl

        timer = step_timer(args.warmup_steps) if args.benchmark else None
        callbacks = [PrintLoss(), *budget_callbacks()] + ([timer] if timer else [])
        if kind == "dpo":
            trainer = trl.DPOTrainer(model=model_path, args=targs, train_dataset=train, processing_class=tok,
                                     peft_config=peft_config(cfg), callbacks=callbacks)
        else:
            trainer = trl.GRPOTrainer(model=model_path, reward_funcs=rewards(bundle), args=targs,
                                      train_dataset=train, processing_class=tok, peft_config=peft_config(cfg),
                                      callbacks=callbacks)
        trainer.train()
        if timer is not None:
            if trainer.is_world_process_zero():
                out = Path(args.measured_out) if args.measured_out else bundle / "measured.json"
                write_json(out, measurement(cfg, args, targs, kind, timer, targs.world_size))
                print(json.dumps({"objective": kind, "steps": trainer.state.global_step, "measured": str(out)}))
            return
        trainer.save_model(targs.output_dir)
        if trainer.is_world_process_zero():
            print(json.dumps({"objective": kind, "steps": trainer.state.global_step}))


if __name__ == "__main__":
    main()
