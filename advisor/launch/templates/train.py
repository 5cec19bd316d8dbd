#!/usr/bin/env python3
"""Supervised fine-tuning with TRL's SFTTrainer, written by gpu-advisor for one plan candidate.

training_args.yaml holds the plan's stack in the libraries' own config classes: `training` is a TRL SFTConfig
(loaded through transformers' HfArgumentParser, so any other SFTConfig field can be given on the command line,
e.g. --lr_scheduler_type cosine), `lora` a peft LoraConfig, `quantization` a transformers BitsAndBytesConfig;
`model` and `data` say what to load, `estimate` what was predicted. Start it with launch.sh (accelerate launch), so
FSDP / DeepSpeed come from accelerate_config.yaml; a DeepSpeed bundle's ds_config.json is found next to this file.

Data (data.path or --dataset): JSONL / JSON / Parquet rows, a .txt file (documents separated by blank lines) or a
`datasets` save_to_disk folder, read by `datasets` into memory-mapped Arrow, tokenized once into its cache (the
main process first, the other ranks read the cache), then packed by TRL into blocks of training.max_length tokens.
  {"text": ...}                 plain text: every token carries loss.
  {"messages": [{role, content}, ...]}  chat: only the assistant's tokens carry loss (--train-on-all-tokens: all),
                                with TRL's assistant_only_loss where it knows the chat template, else the template's
                                own turn boundaries (chat_mask.py beside this file).
  {"prompt": ..., "completion": ...}   only the completion carries loss (TRL's completion_only_loss).

Checkpoints every training.save_steps optimizer steps into training.output_dir (the newest
training.save_total_limit kept); --resume continues from the newest one, weights, optimizer, scheduler, data order
and random state included.

--smoke: a few steps on the CPU, one process, with the tiny random model of smoke_config.json and a byte-level
tokenizer (nothing downloaded); the checks that need a GPU (Liger Kernel, FlashAttention, bf16/fp16 autocast,
4-bit weights) are relaxed and each relaxation is printed.
--init_from_config CONFIG.json: random-initialise the planned model from a config (a tokenizer beside it, or the
byte-level one).

Measured run: --benchmark [--steps N] [--warmup_steps W] trains W warm-up steps plus N timed optimizer steps (20
by default) of exactly this setup on random token ids of the planned shape, saves nothing, and writes measured.json
next to this script: step times (a TrainerCallback from on_step_begin to on_step_end, CUDA synchronised), the whole
job's tokens/s, peak memory, library versions and the stack and shape it ran. `gpu-advisor calibrate
measured.json` compares it with the estimate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
from pathlib import Path

import torch
import yaml
from transformers import TrainerCallback

try:  # the approved budget's stop, where `gpu-advisor launch --approval` wrote budget_cap.py beside this script
    from budget_cap import callbacks as budget_callbacks
except ImportError:
    def budget_callbacks() -> list:
        return []

HERE = Path(__file__).resolve().parent
SMOKE_CONFIG = "smoke_config.json"  # the tiny random model of --smoke, written beside this file
# JSON lines are parsed this many bytes at a time (datasets' json builder `chunksize`, 10 MiB by default, whose parse
# holds about five times the chunk): the reader's buffer per rank stays a few MiB whatever the file's size.
JSON_CHUNK_BYTES = 1 << 20
SMOKE_STEPS = 3
SMOKE_MAX_LENGTH = 128
SMOKE_GRAD_ACCUM = 2
# A byte-level tokenizer for random-initialised models without one: ids 0..255 are bytes, then these.
BYTE_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False,
                                epilog="Any other --name value is an SFTConfig field (training section).")
    p.add_argument("--config", default=str(HERE / "training_args.yaml"), help="training_args.yaml")
    p.add_argument("--model_name_or_path", help="override model.name_or_path (hub id or local folder)")
    p.add_argument("--init_from_config", help="config.json (or its folder): random init, no weights")
    p.add_argument("--dataset", help="override data.path")
    p.add_argument("--chat_template", help="a .jinja chat template (or a tokenizer folder / hub id) for chat data")
    p.add_argument("--train-on-all-tokens", "--train_on_all_tokens", dest="train_on_all_tokens", action="store_true",
                   help="chat data: every token carries loss, not only the assistant's")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in output_dir")
    p.add_argument("--smoke", action="store_true", help="a few CPU steps with the tiny random model, nothing downloaded")
    p.add_argument("--benchmark", action="store_true",
                   help="measured run: warm-up + --steps timed optimizer steps, write measured.json, save nothing")
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps of --benchmark [20]")
    p.add_argument("--warmup_steps", type=int, default=3, help="untimed steps before the timed ones [3]")
    p.add_argument("--measured_out", help="where --benchmark writes its JSON [measured.json beside train.py]")
    args, rest = p.parse_known_args(argv)
    if args.benchmark and (args.steps < 1 or args.warmup_steps < 0):
        p.error("--steps must be at least 1 and --warmup_steps at least 0")
    if args.smoke and args.benchmark:
        p.error("--smoke and --benchmark: give one (a benchmark measures the planned model on its GPU)")
    return args, rest


def say(text: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"train.py: {text}", flush=True)


# ----------------------------------------------------------------------------- the estimate's checks


def resolve_attention(name: str, benchmark: bool) -> str:
    """flash_attention_2 when the flash-attn package is installed (a CUDA build, so requirements.txt leaves it to
    sky.yaml / the README), else PyTorch SDPA, said on stdout. A --benchmark refuses the fallback: it would measure
    another kernel than the one planned."""
    if name != "flash_attention_2" or importlib.util.find_spec("flash_attn") is not None:
        return name
    if benchmark:
        sys.exit("train.py: the plan assumed FlashAttention-2 and flash-attn is not installed "
                 "(pip install flash-attn --no-build-isolation); a --benchmark with SDPA would not measure it.")
    say("flash-attn is not installed; attention falls back to PyTorch SDPA "
        "(pip install flash-attn --no-build-isolation for the planned kernel)")
    return "sdpa"


def check_stack(training: dict, quantized: bool, smoke: bool) -> None:
    """What the estimate assumed and this machine must have. --smoke relaxes each one and says so."""
    if training.get("use_liger_kernel") and importlib.util.find_spec("liger_kernel") is None:
        if not smoke:
            sys.exit("train.py: the estimate assumed Liger Kernel (training.use_liger_kernel); pip install "
                     "liger-kernel (requirements.txt) or set use_liger_kernel: false and re-estimate without --liger.")
        say("smoke: Liger Kernel off (not installed; the plan runs with it)")
        training["use_liger_kernel"] = False
    if smoke:
        for flag in ("bf16", "fp16"):
            if training.get(flag):
                say(f"smoke: {flag} autocast off on the CPU (the plan runs with it)")
                training[flag] = False
        if training.get("torch_compile"):
            say("smoke: torch.compile off (the plan runs with it)")
            training["torch_compile"] = False
        if quantized:
            say("smoke: 4-bit weights off (bitsandbytes needs CUDA; the plan runs QLoRA)")
        if str(training.get("optim", "")).endswith(("8bit",)) or "bnb" in str(training.get("optim", "")):
            say(f"smoke: optimizer {training['optim']} replaced by adamw_torch (bitsandbytes needs CUDA)")
            training["optim"] = "adamw_torch"
        training.update(use_cpu=True, max_length=min(int(training["max_length"]), SMOKE_MAX_LENGTH),
                        gradient_accumulation_steps=min(int(training["gradient_accumulation_steps"]),
                                                        SMOKE_GRAD_ACCUM))
        kwargs = dict(training.get("model_init_kwargs") or {})
        if kwargs.get("attn_implementation") == "flash_attention_2":
            say("smoke: attention sdpa (FlashAttention needs CUDA; the plan runs flash_attention_2)")
        if kwargs.get("dtype") in ("bfloat16", "float16"):
            say(f"smoke: weights in float32 (the plan loads {kwargs['dtype']})")
        training["model_init_kwargs"] = {**kwargs, "attn_implementation": "sdpa", "dtype": "float32"}
        if training.get("packing_strategy") != "wrapped":
            training["packing_strategy"] = "wrapped"  # padding-free packing is for FlashAttention


def resolve_deepspeed_config(bundle: Path) -> None:
    """accelerate passes the bundle's relative ds_config.json path on; read it from the bundle folder wherever
    launch.sh was started."""
    path = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if path and path != "none" and not Path(path).is_absolute() and not Path(path).is_file():
        if (bundle / path).is_file():
            os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(bundle / path)


# ----------------------------------------------------------------------------- configs

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


def sft_config(cfg: dict, args: argparse.Namespace, rest: list[str]):
    """The SFTConfig: training_args.yaml's `training` section as defaults, this command line over it."""
    from transformers import HfArgumentParser
    from trl import SFTConfig

    training = dict(cfg["training"])
    if args.benchmark:  # the planned setup for warm-up + timed steps, nothing written but measured.json
        import tempfile

        if "--max_steps" in rest or "--save_strategy" in rest:
            sys.exit("train.py: --benchmark sets max_steps (--warmup_steps + --steps) and saves nothing.")
        training.update(max_steps=args.warmup_steps + args.steps, save_strategy="no",
                        output_dir=tempfile.mkdtemp(prefix="benchmark-"))
    if args.smoke:
        training.update(max_steps=SMOKE_STEPS, save_steps=1, logging_steps=1, output_dir=str(HERE / "smoke-output"))
    check_stack(training, bool(cfg.get("quantization")), args.smoke)
    if not torch.cuda.is_available() and not training.get("use_cpu"):
        say("no CUDA device: training on the CPU (bf16 autocast there is the CPU's)" if training.get("bf16") else
            "no CUDA device: training on the CPU")
        training["use_cpu"] = True  # transformers refuses bf16 without a GPU unless told the CPU is meant
    kwargs = dict(training.get("model_init_kwargs") or {})
    kwargs["attn_implementation"] = resolve_attention(kwargs.get("attn_implementation", "sdpa"), args.benchmark)
    if kwargs["attn_implementation"] != "flash_attention_2" and training.get("packing_strategy") != "wrapped":
        say("packing: wrapped blocks of max_length (padding-free packing needs FlashAttention)")
        training["packing_strategy"] = "wrapped"
    training["model_init_kwargs"] = kwargs
    parser = HfArgumentParser(SFTConfig)
    parser.set_defaults(**for_this_release(SFTConfig, training))
    try:
        (config,) = parser.parse_args_into_dataclasses(args=rest)
    except ValueError as exc:  # SFTConfig's own checks (argparse errors exit 2 with their line)
        sys.exit(f"train.py: {exc}")
    return config


def byte_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer without merges (ids 0..255 = bytes, then BYTE_SPECIALS) and a ChatML template,
    for random-initialised models: nothing to download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(BYTE_SPECIALS):
        sys.exit(f"train.py: the byte tokenizer needs vocab_size >= {256 + len(BYTE_SPECIALS)} (config has "
                 f"{vocab_size}).")
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({s: 256 + i for i, s in enumerate(BYTE_SPECIALS)})
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=BYTE_SPECIALS[0], pad_token=BYTE_SPECIALS[0],
                                  extra_special_tokens=list(BYTE_SPECIALS[1:]))
    tok.chat_template = CHATML
    return tok


def random_model(cfg: dict, args: argparse.Namespace, sft):
    """(model, tokenizer) random-initialised from --init_from_config or the bundle's smoke_config.json."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = Path(args.init_from_config) if args.init_from_config else HERE / SMOKE_CONFIG
    if not path.exists():
        sys.exit(f"train.py: {path} not found (--init_from_config CONFIG.json, or the bundle's {SMOKE_CONFIG}).")
    kwargs = dict(sft.model_init_kwargs or {})
    config = AutoConfig.from_pretrained(str(path))
    config._attn_implementation = kwargs.get("attn_implementation", "sdpa")
    torch.manual_seed(0)
    dtype = getattr(torch, str(kwargs.get("dtype", "float32")).replace("torch.", ""))
    # One CUDA process (no FSDP / DeepSpeed to shard it first): initialise on the GPU, not the host.
    device = "cuda" if torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) == 1 else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config).to(dtype)
    folder = path if path.is_dir() else path.parent
    has_tok = any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
    tok = AutoTokenizer.from_pretrained(str(folder)) if has_tok and not args.smoke else byte_tokenizer(config.vocab_size)
    sft.model_init_kwargs = None  # the model is built here, not by TRL
    if cfg.get("quantization") and not args.smoke:
        if not (torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes")):
            if args.benchmark:
                sys.exit("train.py: a QLoRA --benchmark needs 4-bit weights (CUDA and bitsandbytes); this machine "
                         "has neither, so it would not measure the planned stack.")
            say("--init_from_config skips 4-bit quantization (needs CUDA and bitsandbytes)")
            return model, tok
        model = _quantised_random_model(model, cfg, kwargs)
    return model, tok


def _quantised_random_model(model, cfg: dict, kwargs: dict):
    """The random-initialised model in 4-bit, as QLoRA runs it: bitsandbytes quantises while loading, so the random
    weights are saved to a scratch folder and loaded back with the bundle's BitsAndBytesConfig."""
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    scratch = tempfile.mkdtemp(prefix="random-weights-")
    try:
        model.save_pretrained(scratch)
        del model
        torch.cuda.empty_cache()
        return AutoModelForCausalLM.from_pretrained(scratch, **kwargs,
                                                    quantization_config=BitsAndBytesConfig(**cfg["quantization"]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------------------- data


def read_rows(path: Path):
    """The dataset as a memory-mapped Arrow `datasets.Dataset` (cached by `datasets`, main process first)."""
    from datasets import load_dataset, load_from_disk

    if path.is_dir():
        return load_from_disk(str(path))
    if not path.is_file():
        sys.exit(f"train.py: dataset {path} not found (data.path in training_args.yaml or --dataset).")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return load_dataset("json", data_files=str(path), split="train", chunksize=JSON_CHUNK_BYTES)
    if suffix == ".parquet":
        return load_dataset("parquet", data_files=str(path), split="train")
    return load_dataset("text", data_files=str(path), sample_by="paragraph", split="train")  # blank-line separated


def random_blocks(sft, vocab: int, blocks: int):
    """--benchmark data: `blocks` sequences of exactly max_length random token ids (speed does not depend on the
    text), every token carrying loss."""
    from datasets import Dataset

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(vocab, 32_000), (blocks, int(sft.max_length)), generator=gen)
    return Dataset.from_dict({"input_ids": ids.tolist()})


def prepare_chat(dataset, tok, sft, args: argparse.Namespace):
    """Chat rows: assistant tokens only carry loss, with TRL's assistant_only_loss where TRL can mask the template
    ({% generation %} markers, or a training template TRL ships), else labels from the template's own turn
    boundaries (chat_mask.py). --train-on-all-tokens: TRL renders the chat and every token carries loss."""
    if not getattr(tok, "chat_template", None):
        sys.exit("train.py: chat data needs a chat template and this tokenizer has none; give one with "
                 "--chat_template (a .jinja file, or the instruct model's tokenizer).")
    if args.train_on_all_tokens:
        say("chat data: every token carries loss (--train-on-all-tokens)")
        return dataset
    from trl.chat_template_utils import get_training_chat_template

    try:
        get_training_chat_template(tok)
    except ValueError:
        pass
    else:
        sft.assistant_only_loss = True
        say("chat data: loss on the assistant's tokens only (TRL assistant_only_loss)")
        return dataset
    from trl.trainer.utils import global_then_local_main_first

    sys.path.insert(0, str(HERE))
    from chat_mask import NotPrefixPreserving, chat_labels

    def labels(row):
        try:
            return chat_labels(tok, row["messages"])
        except NotPrefixPreserving as exc:
            raise SystemExit(f"train.py: {exc}; train on all tokens (--train-on-all-tokens) or give a chat "
                             "template with {% generation %} markers (--chat_template).") from None

    say("chat data: loss on the assistant's tokens only (turn boundaries from the chat template, chat_mask.py)")
    with global_then_local_main_first():
        return dataset.map(labels, remove_columns=dataset.column_names, desc="Masking chat turns",
                           num_proc=sft.dataset_num_proc)


def training_data(cfg: dict, args: argparse.Namespace, sft, tok, vocab: int, config_path: Path):
    """The train dataset handed to SFTTrainer, which tokenizes, masks and packs what is left."""
    data_path = Path(args.dataset or cfg["data"]["path"])
    if not data_path.is_absolute() and not data_path.exists():
        data_path = config_path.parent / data_path  # relative to the bundle
    if args.benchmark:
        blocks = (args.warmup_steps + args.steps) * sft.per_device_train_batch_size \
            * sft.gradient_accumulation_steps * sft.world_size
        say(f"--benchmark: {blocks} random blocks of {sft.max_length} tokens (the planned shape)")
        return random_blocks(sft, vocab, blocks)
    if args.smoke and not data_path.exists():
        from datasets import Dataset

        say(f"smoke: {data_path} not found; a few chat rows made up here")
        chats = [[{"role": "user", "content": f"What is {i} + {i}?"},
                  {"role": "assistant", "content": f"{i} + {i} = {2 * i}."}] for i in range(64)]
        dataset = Dataset.from_dict({"messages": chats})
    else:
        from trl.trainer.utils import global_then_local_main_first

        with global_then_local_main_first():
            dataset = read_rows(data_path)
    columns = set(dataset.column_names)
    if "messages" in columns:
        return prepare_chat(dataset, tok, sft, args)
    if "text" not in columns and not {"prompt", "completion"} <= columns and "input_ids" not in columns:
        sys.exit(f"train.py: {data_path}: rows need a 'text', 'messages' or 'prompt'/'completion' field "
                 f"(found: {', '.join(sorted(columns)) or 'none'}).")
    return dataset


def token_counts(dataset) -> tuple[int, int]:
    """(tokens that go through the model, tokens that carry loss) of the prepared dataset, read batch by batch
    from its Arrow table (never the whole column at once)."""
    import pyarrow.compute as pc

    table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
    if "input_ids" not in table.column_names:
        return 0, 0
    total = loss = 0
    has_labels = "labels" in table.column_names
    for batch in table.select(["input_ids", "labels"] if has_labels else ["input_ids"]).to_batches(10_000):
        ids = batch.column(0)
        total += int(pc.sum(pc.list_value_length(ids)).as_py() or 0)
        if has_labels:
            loss += int(pc.sum(pc.not_equal(pc.list_flatten(batch.column(1)), -100)).as_py() or 0)
    return total, loss if has_labels else total


# ----------------------------------------------------------------------------- measured run

MEASUREMENT_SCHEMA = "gpu-advisor/measurement-1"  # read by gpu-advisor (advisor/workload/measurements.py)
VERSIONED = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes", "deepspeed",
             "liger-kernel", "flash-attn", "triton")


class StepTimer(TrainerCallback):
    """TrainerCallback timing each optimizer step from on_step_begin to on_step_end (the forward and backward of
    every micro-batch, clipping and the optimizer step), after `warmup` untimed steps. On CUDA it synchronises at
    both ends, so queued kernels are counted in the step that launched them. `window` runs from the end of the last
    warm-up step to the end of the last step: the whole job's time, with data loading and logging between steps."""

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
    """The GPU table's name when gpu-advisor is installed here; else the device's own name, which gpu-advisor maps
    (pricing/data/gpus.csv aliases) when it reads the file."""
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


def measurement(cfg: dict, args, sft, timer: StepTimer) -> dict:
    """measured.json: what ran (model, device, stack, shape) and what it measured."""
    import datetime as dt

    est = cfg.get("estimate") or {}
    if not isinstance(est.get("stack_settings"), dict):
        sys.exit("train.py: training_args.yaml has no estimate.stack_settings; write the bundle again with gpu-advisor "
                 "launch to measure it.")
    if not timer.steps:
        sys.exit("train.py: --benchmark timed no step (did training stop early?)")
    world = sft.world_size
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    shape = {"micro_batch": sft.per_device_train_batch_size, "seq_len": int(sft.max_length),
             "grad_accum": sft.gradient_accumulation_steps}
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


# ----------------------------------------------------------------------------- the run


class PrintLoss(TrainerCallback):
    def on_log(self, a, state, control, logs=None, **kw):
        if state.is_world_process_zero and logs and "loss" in logs:
            print(f"step={state.global_step} loss={logs['loss']:.4f}", flush=True)


def match_adapter_dtype(model, cfg: dict) -> None:
    """The adapters in the dtype the estimate assumed (model.adapter_dtype): TRL 1.16.0 casts a 4-bit model's
    trainable LoRA weights to bf16 (trl/trainer/sft_trainer.py, SFTTrainer.__init__, "When using QLoRA"), peft keeps
    fp32 otherwise (autocast_adapter_dtype). Under ZeRO-3 TRL keeps them in the weights' dtype, which DeepSpeed needs."""
    want = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(cfg["model"].get("adapter_dtype") or "fp32")
    if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return
    changed = 0
    for name, param in model.named_parameters():
        if param.requires_grad and "lora_" in name and param.dtype != want:
            param.data = param.data.to(want)
            changed += 1
    if changed:
        say(f"{changed} adapter tensors in {str(want).replace('torch.', '')}, as estimated")


def build_trainer(argv: list[str] | None = None):
    """(trainer, args, sft, cfg, timer): everything up to training, so tests can read the prepared data."""
    args, rest = parse_args(argv)
    config_path = Path(args.config)
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    resolve_deepspeed_config(config_path.parent)
    # Built before the model so DeepSpeed ZeRO-3 init / FSDP RAM-efficient loading see it.
    sft = sft_config(cfg, args, rest)
    if args.resume and not sft.resume_from_checkpoint:
        sft.resume_from_checkpoint = newest_checkpoint(sft.output_dir)
    if args.chat_template:
        sft.chat_template_path = args.chat_template

    from trl import SFTTrainer

    model, tok, vocab = model_and_tokenizer(cfg, args, sft)
    dataset = training_data(cfg, args, sft, tok, vocab, config_path)
    peft_config = lora_config(cfg)
    quant = None
    if cfg.get("quantization") and isinstance(model, str):
        from transformers import BitsAndBytesConfig

        quant = BitsAndBytesConfig(**cfg["quantization"])
    timer = StepTimer(args.warmup_steps) if args.benchmark else None
    trainer = SFTTrainer(model=model, args=sft, train_dataset=dataset, processing_class=tok,
                         peft_config=peft_config, quantization_config=quant,
                         callbacks=[PrintLoss()] + ([timer] if timer else []) + budget_callbacks())
    if peft_config is not None:
        match_adapter_dtype(trainer.model, cfg)
        if sft.process_index == 0:
            trainer.model.print_trainable_parameters()
    total, loss = token_counts(trainer.train_dataset)
    say(f"{len(trainer.train_dataset):,} packed sequences of up to {sft.max_length:,} tokens: {total:,} tokens go "
        f"through the model, {loss:,} carry loss")
    return trainer, args, sft, cfg, timer


def newest_checkpoint(output_dir: str) -> str:
    """--resume: the newest checkpoint-* folder in output_dir (one line and exit when there is none)."""
    from transformers.trainer_utils import get_last_checkpoint

    newest = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    if not newest:
        sys.exit(f"train.py: --resume: no checkpoint-* folder in {output_dir} to continue from.")
    return newest


def model_and_tokenizer(cfg: dict, args, sft):
    """(model or its name, tokenizer, vocabulary size): a random model from the config (--init_from_config,
    --smoke) or the named checkpoint's tokenizer; a .jinja / .j2 chat template file becomes the tokenizer's."""
    from transformers import AutoTokenizer

    if args.init_from_config or args.smoke:
        model, tok = random_model(cfg, args, sft)
        vocab = int(model.config.get_text_config().vocab_size)
    else:
        model = args.model_name_or_path or cfg["model"]["name_or_path"]
        tok = AutoTokenizer.from_pretrained(model, token=os.environ.get("HF_TOKEN") or None)
        vocab = len(tok)
    if sft.chat_template_path and sft.chat_template_path.endswith((".jinja", ".j2")):
        tok.chat_template = Path(sft.chat_template_path).read_text(encoding="utf-8")
        sft.chat_template_path = None
    return model, tok, vocab


def lora_config(cfg: dict):
    """peft's LoraConfig from the config's `lora` block (None for full fine-tuning); an adapter on lm_head is
    refused, as TRL's fused LM head reads its weight directly."""
    if not cfg.get("lora"):
        return None
    from peft import LoraConfig

    peft_config = LoraConfig(**cfg["lora"])
    if "lm_head" in (peft_config.target_modules or ()) and not isinstance(peft_config.target_modules, str):
        sys.exit("train.py: TRL's SFTTrainer refuses a LoRA adapter on lm_head (its fused LM head reads "
                 "lm_head.weight); drop lm_head from lora.target_modules or add it to lora.modules_to_save.")
    return peft_config


def main(argv: list[str] | None = None) -> None:
    trainer, args, sft, cfg, timer = build_trainer(argv)
    config_path = Path(args.config)

    if sft.resume_from_checkpoint:
        say(f"resuming from {sft.resume_from_checkpoint}")
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train(resume_from_checkpoint=sft.resume_from_checkpoint)
    if timer is not None:
        record = measurement(cfg, args, sft, timer)
        if sft.process_index == 0:
            out = Path(args.measured_out) if args.measured_out else config_path.parent / "measured.json"
            write_json(out, record)
            print(f"train.py: measured {record['tokens_per_sec']:,.0f} tokens/s over {args.steps} steps "
                  f"(median step {record['step_seconds']['median']:.4g} s); wrote {out}", flush=True)
        return
    trainer.save_model()
    if sft.process_index == 0:
        report_peak(cfg)


def report_peak(cfg: dict) -> None:
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
