#!/usr/bin/env python3
"""Reference supervised fine-tuning script written by gpu-advisor (transformers Trainer + peft).

Reads training_args.yaml (sections model / data / training / lora / quantization), so the run uses
exactly the micro-batch, accumulation, checkpointing, optimizer, precision, attention and sequence
length that were estimated. Start it with launch.sh (accelerate launch) so FSDP / DeepSpeed come
from accelerate_config.yaml.

Data: a local JSONL file of {"text": ...} rows, or a .txt file (documents separated by blank lines),
packed into blocks of exactly data.max_seq_length tokens.
Smoke test without weights: --init_from_config CONFIG.json random-initialises the model from a
config and, when no tokenizer sits next to it, uses a byte-level tokenizer (needs vocab >= 257).

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
    return p.parse_args(argv)


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

    def __init__(self, ids: list[int], seq_len: int):
        if not ids:
            sys.exit("train.py: the dataset is empty.")
        if len(ids) < seq_len:  # keep the estimated shape even for a tiny file
            print(f"train.py: dataset has {len(ids)} tokens < one block of {seq_len}; repeating it", flush=True)
            ids = ids * math.ceil(seq_len / len(ids))
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


def load_model_and_tokenizer(cfg: dict, args: argparse.Namespace):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    m = cfg["model"]
    dtype = getattr(torch, m["dtype"])
    if args.init_from_config:
        path = Path(args.init_from_config)
        config = AutoConfig.from_pretrained(str(path))
        config._attn_implementation = m["attn_implementation"]
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).to(dtype)
        folder = path if path.is_dir() else path.parent
        has_tok = any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
        tok = AutoTokenizer.from_pretrained(str(folder)) if has_tok else ByteTokenizer(config.vocab_size)
        if cfg.get("quantization"):
            print("train.py: --init_from_config skips 4-bit quantization (needs real weights)", flush=True)
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config_path = Path(args.config)
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))

    from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

    ta = dict(cfg["training"])
    for key in ("max_steps", "learning_rate", "logging_steps", "output_dir"):
        if getattr(args, key) is not None:
            ta[key] = getattr(args, key)
    if ta.get("use_liger_kernel") and importlib.util.find_spec("liger_kernel") is None:
        sys.exit("train.py: the estimate assumed Liger Kernel (training.use_liger_kernel); pip install liger-kernel "
                 "(requirements.txt) or set use_liger_kernel: false and re-estimate without --liger.")
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
    for text in load_texts(data_path):
        ids += tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    dataset = PackedDataset(ids, int(cfg["data"]["max_seq_length"]))

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

    trainer = Trainer(
        model=model, args=targs, train_dataset=dataset, data_collator=default_data_collator,
        callbacks=[PrintLoss()], compute_loss_func=compute_loss_func,
    )
    trainer.train()
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
