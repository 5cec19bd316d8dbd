"""Preference (DPO) or reinforcement (GRPO) fine-tuning with TRL, exactly as the plan's estimate assumed.

Written by gpu-advisor into a launch bundle for a DPO or GRPO candidate; runs under `accelerate launch` (launch.sh).
Reads training_args.yaml (model, LoRA, quantization, data sections: the same file the SFT bundle has) and
trl_config.yaml (the trl.DPOConfig / trl.GRPOConfig fields: batch, lengths, beta, generations, vLLM), builds the
trainer TRL 1.16 provides and trains.

Data (JSONL, one example per line): DPO {"prompt": ..., "chosen": ..., "rejected": ...} (TRL's preference format);
GRPO {"prompt": ...}, scored by the reward functions in rewards.py (edit them: the example rewards length).

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
    p.add_argument("--benchmark", action="store_true", help="not available for DPO/GRPO bundles (SFT only)")
    p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


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


def trl_args(trl_cfg: dict, args: argparse.Namespace, kind: str):
    import trl

    overrides = {k: getattr(args, k) for k in ("max_steps", "output_dir", "logging_steps", "learning_rate")
                 if getattr(args, k) is not None}
    fields = {**trl_cfg, **overrides}
    if args.init_from_config and kind == "grpo":  # a random model: generate with transformers, not vLLM
        fields["use_vllm"] = False
    return (trl.DPOConfig if kind == "dpo" else trl.GRPOConfig)(**fields)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.benchmark:
        sys.exit("train.py: --benchmark measures SFT steps; DPO/GRPO bundles do not support it yet.")
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
        targs = trl_args(trl_cfg, args, kind)
        data = args.dataset or cfg["data"]["path"]
        train = datasets.load_dataset("json", data_files=str(data), split="train")

        class PrintLoss(TrainerCallback):
            def on_log(self, a, state, control, logs=None, **kw):
                if logs and "loss" in logs and state.is_world_process_zero:
                    print(f"step={state.global_step} loss={float(logs['loss']):.6f}", flush=True)

        import trl

        if kind == "dpo":
            trainer = trl.DPOTrainer(model=model_path, args=targs, train_dataset=train, processing_class=tok,
                                     peft_config=peft_config(cfg), callbacks=[PrintLoss(), *budget_callbacks()])
        else:
            trainer = trl.GRPOTrainer(model=model_path, reward_funcs=rewards(bundle), args=targs,
                                      train_dataset=train, processing_class=tok, peft_config=peft_config(cfg),
                                      callbacks=[PrintLoss(), *budget_callbacks()])
        trainer.train()
        trainer.save_model(targs.output_dir)
        if trainer.is_world_process_zero():
            print(json.dumps({"objective": kind, "steps": trainer.state.global_step}))


if __name__ == "__main__":
    main()
