"""Training configs the user already has -> plan pins: axolotl, LLaMA-Factory, TRL / TrainingArguments, torchtune.

A config is data, never code: YAML by pricing.files.load_yaml (safe loader, size, nesting and alias
limits), JSON by load_json. Every key is accounted for: turned into a plan option or pin, listed as
`ignored` (known to the framework but without effect on memory, time or cost: learning rate,
logging, output paths, ...) or listed as `unknown`; none is dropped silently. Contradictory keys
(bf16 and fp16, two attention kernels, DeepSpeed and FSDP, a quantised full fine-tune) are refused.
Where a framework has its own default for a setting that moves memory or time (LLaMA-Factory's
LoRA rank 8 and gradient checkpointing on, TRL's 3 epochs and max_length 1024), that default is
the pin, because that is what the run will do. Each key's meaning is cited next to its reader.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from advisor import techniques
from advisor.errors import BadInput
from advisor.model.spec import MAX_BATCH, MAX_EPOCHS, MAX_SEQ_LEN
from advisor.text import plain
from advisor.workload import dataset_files, rl_config
from pricing.errors import PriceInputError
from pricing.files import load_json, load_yaml, read_text

MAX_CONFIG_BYTES = 1_000_000

ATTENTION = {"flash_attention_2": "flash", "flash_attention_3": "flash", "sdpa": "sdpa", "eager": "eager",
             "fa2": "flash", "fa3": "flash", "disabled": "eager"}
# Keys every trainer here knows that do not move memory, time or cost (listed as `ignored`).
_IGNORED_COMMON = {
    "learning_rate", "lr_scheduler", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "weight_decay",
    "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon", "seed", "data_seed", "output_dir",
    "logging_steps", "logging_dir", "logging_first_step", "save_steps", "save_strategy", "save_total_limit",
    "eval_steps", "eval_strategy", "evaluation_strategy", "per_device_eval_batch_size", "report_to", "run_name",
    "push_to_hub", "hub_model_id", "hub_strategy", "overwrite_output_dir", "do_train", "do_eval", "ddp_timeout",
    "dataloader_num_workers", "resume_from_checkpoint", "trust_remote_code", "plot_loss", "overwrite_cache",
    "preprocessing_num_workers", "val_size", "save_only_model", "remove_unused_columns", "gradient_checkpointing_kwargs",
    "tf32", "strict", "special_tokens", "tokenizer_type", "model_type", "val_set_size", "dataset_prepared_path",
    "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_log_model", "evals_per_epoch",
    "saves_per_epoch", "early_stopping_patience", "local_rank", "debug", "train_on_inputs", "lora_fan_in_fan_out",
    "lora_model_dir", "chat_template", "shuffle_dataset", "dataset_num_proc", "assistant_only_loss",
    "completion_only_loss", "truncation_mode", "eos_token", "template", "max_samples", "stage", "bf16_full_eval",
    "lr_scheduler_kwargs", "logging_strategy", "hub_private_repo", "save_safetensors", "ddp_find_unused_parameters",
    "eval_packing", "pad_to_sequence_len", "eval_sample_packing", "warmup", "loss_watchdog_threshold",
    "loss_watchdog_patience", "save_first_step",
}


# Upper bounds of the keys that become plan options, checked here so a message names the config key
# (advisor/model/spec.py's limits for the options they become; advisor/stacks.py Stack for LoRA).
_UPPER = {**dict.fromkeys(("sequence_len", "cutoff_len", "max_length", "max_seq_length", "max_seq_len"), MAX_SEQ_LEN),
          **dict.fromkeys(("micro_batch_size", "per_device_train_batch_size", "batch_size",
                           "gradient_accumulation_steps"), MAX_BATCH),
          **dict.fromkeys(("num_epochs", "num_train_epochs", "epochs"), MAX_EPOCHS),
          **dict.fromkeys(("lora_r", "lora_rank"), 65_536), "lora_alpha": 1_000_000, "lora_dropout": 1.0}
_KINDS = {"bool": "true or false", "int": "a positive whole number", "num": "a number >= 0", "text": "text",
          "map": "a mapping (key: value lines)", "list": "a list"}
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")



def _json_file(path, where: str):
    """A referenced JSON file (DeepSpeed config, dataset_info.json), read within MAX_CONFIG_BYTES with its
    nesting bounded; one line naming `where` otherwise."""
    try:
        return load_json(read_text(path, where, max_bytes=MAX_CONFIG_BYTES), where)
    except PriceInputError as exc:
        raise BadInput(str(exc) + ".") from None

def _got(value: Any) -> str:
    return repr(plain(value)[:40]) if not isinstance(value, (dict, list)) else (
        f"a {'mapping' if isinstance(value, dict) else 'list'}")


_SIMPLE_KINDS = {"bool": bool, "text": str, "map": dict, "list": list}


def typed(what: str, key: str, value: Any, kind: str) -> Any:
    """`value` when it is of `kind` (None passes), as the option it becomes wants it; else BadInput naming
    `key`. Whole numbers are ints or integral floats, never true/false; numbers are finite, and text
    such as "5e-2" (PyYAML reads exponents without a dot as text) is read as the number it spells;
    `_UPPER` bounds the keys that become options."""
    if value is None:
        return None
    name = key.rsplit(".", 1)[-1].split("[")[0]
    upper = _UPPER.get(name)
    ok, out = False, value
    if kind in _SIMPLE_KINDS:
        ok = isinstance(value, _SIMPLE_KINDS[kind])
    elif kind == "int":
        ok, out = _whole(value, upper)
    elif kind == "num":
        ok, out = _non_negative(value, upper, below=name == "lora_dropout")
    if ok:
        return out
    expected = _KINDS[kind] + ("" if upper is None else f" below {upper:g}" if name == "lora_dropout"
                               else f" at most {upper:,}")
    raise BadInput(f"{what}: {plain(key)}: expected {expected} (got {_got(value)}).")


def _whole(value: Any, upper: float | None) -> tuple[bool, Any]:
    """(is a whole number > 0 and at most `upper`, as an int): integral floats count, true/false do not."""
    out = int(value) if isinstance(value, float) and value.is_integer() else value
    return isinstance(out, int) and not isinstance(out, bool) and out > 0 and (upper is None or out <= upper), out


def _non_negative(value: Any, upper: float | None, below: bool) -> tuple[bool, Any]:
    """(is a finite number >= 0 and at most `upper` -- below it when `below` --, as a number): text that spells a
    number is read as it."""
    out = value
    if isinstance(value, str):
        try:
            out = float(value)
        except ValueError:
            pass
    ok = isinstance(out, (int, float)) and not isinstance(out, bool) and math.isfinite(out) and out >= 0
    return ok and (upper is None or (out < upper if below else out <= upper)), out


def name_list(what: str, key: str, value: Any, modules: bool = True) -> tuple[str, ...]:
    """Names from a comma string or a list of names; module names are letters, digits, '_', '.', '-'."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(x, str) for x in items):
        raise BadInput(f"{what}: {plain(key)}: expected a name or a list of names (got {_got(value)}).")
    out = tuple(n.strip() for x in items for n in x.split(",") if n.strip())
    bad = next((n for n in out if modules and not _NAME.fullmatch(n)), None)
    if bad is not None:
        raise BadInput(f"{what}: {plain(key)}: {plain(bad)[:40]!r} is not a module name (letters, digits, '_', '.', "
                       "'-').")
    return out


class ConfigPins(BaseModel):
    """What a training config fixes, in `plan`'s own option names, and what it could not say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    framework: str
    path: str
    options: dict[str, Any]  # plan options (CLI spelling): model, seq_len, epochs, methods, global_batch, pins...
    dataset: str | None = None
    text_field: str | None = None
    messages_field: str | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    group_by_length: bool = False
    notes: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()


class _Keys:
    """The config's keys, typed on read; what was never read is `ignored` or `unknown`."""

    def __init__(self, data: dict, what: str, ignored: set[str]):
        self.data, self.what, self.ignored_names, self.used = data, what, ignored, set()
        self.notes: list[str] = []

    def raw(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        return default if value is None or value == "" else value

    def bool(self, key: str, default: bool | None = None) -> bool | None:
        return typed(self.what, key, self.raw(key, default), "bool")

    def int(self, key: str, default: int | None = None) -> int | None:
        return typed(self.what, key, self.raw(key, default), "int")

    def num(self, key: str, default: float | None = None) -> float | None:
        return typed(self.what, key, self.raw(key, default), "num")

    def text(self, key: str, default: str | None = None) -> str | None:
        return typed(self.what, key, self.raw(key, default), "text")

    def mapping(self, key: str) -> dict:
        """A nested section ({} when absent)."""
        return typed(self.what, key, self.raw(key), "map") or {}

    def names(self, key: str, modules: bool = True) -> tuple[str, ...]:
        """A comma string or a list of names (of modules unless `modules` is false)."""
        return name_list(self.what, key, self.raw(key), modules)

    def leftover(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        rest = [str(k) for k in self.data if k not in self.used]
        return (tuple(sorted(k for k in rest if k in self.ignored_names)),
                tuple(sorted(_shown(k) for k in rest if k not in self.ignored_names)))


def _shown(key: str) -> str:
    """A key as printable text: control characters and escape sequences spelled out (\\x1b), not dropped,
    so a hostile key is still listed, and never reaches a terminal raw."""
    return (key if key.isprintable() else key.encode("unicode_escape").decode("ascii"))[:80]


def _one_of(keys: _Keys, flags: dict[str, Any]) -> Any:
    """The value of the single true flag among `flags` (key -> value); refuse two."""
    on = [k for k in flags if keys.bool(k)]
    if len(on) > 1:
        raise BadInput(f"{keys.what}: {' and '.join(on)} contradict each other; set one of them.")
    return flags[on[0]] if on else None


def _deepspeed(keys: _Keys, key: str, base: Path) -> dict[str, Any]:
    """sharding/offload from a DeepSpeed JSON (zero_optimization.stage, offload_optimizer/offload_param
    .device: https://www.deepspeed.ai/docs/config-json/), a dict, or, only when no file of that name
    exists at all, a file name naming the stage. A file that is there is read (a FIFO, a device, a
    folder or a symlink loop is refused as not a regular file, never guessed from its name)."""
    ref = keys.raw(key)
    if ref is None:
        return {}
    if isinstance(ref, dict):
        cfg, where = ref, f"{keys.what}: {key}"
    elif isinstance(ref, str):
        p = Path(ref).expanduser()
        p = p if p.is_absolute() else base / p
        where = f"{key} {plain(ref)}"
        if not os.path.lexists(p):
            return _zero({"zero_optimization": _stage_from_name(keys, key, ref)}, where)
        cfg = _json_file(p, where)
        if not isinstance(cfg, dict):
            raise BadInput(f"{where}: expected a JSON object (a DeepSpeed config), got {_got(cfg)}.")
    else:
        raise BadInput(f"{keys.what}: {key}: expected a DeepSpeed JSON file name or a mapping (got {_got(ref)}).")
    return _zero(cfg, where)


def _stage_from_name(keys: _Keys, key: str, ref: str) -> dict[str, Any]:
    m = re.search(r"zero[_-]?([0-3])", ref.lower())
    if not m:
        raise BadInput(f"{keys.what}: {key}: {plain(ref)} is not a file here and its name gives no ZeRO stage.")
    keys.notes.append(f"{key}: {plain(ref)} is not here; its name says ZeRO stage {m.group(1)}")
    name = ref.lower()  # axolotl deepspeed_configs/: zero3_bf16_cpuoffload_params.json, ..._all.json
    zero: dict[str, Any] = {"stage": int(m.group(1))}
    if "offload" in name:
        if "params" not in name:
            zero["offload_optimizer"] = {"device": "cpu"}
        if "params" in name or "all" in name:
            zero["offload_param"] = {"device": "cpu"}
    return zero


OFFLOAD_DEVICES = ("none", "cpu", "nvme")  # DeepSpeed OffloadDeviceEnum (deepspeed/runtime/zero/offload_config.py)


def _zero(cfg: dict, where: str) -> dict[str, Any]:
    """sharding and offload from a DeepSpeed config's zero_optimization, every value typed."""
    zero = typed(where, "zero_optimization", cfg.get("zero_optimization"), "map") or {}
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        raise BadInput(f"{where}: zero_optimization.stage: expected 0, 1, 2 or 3 (got {_got(stage)}).")
    out: dict[str, Any] = {"sharding": "ddp" if stage == 0 else f"zero{stage}"}
    on = {}
    for name in ("offload_optimizer", "offload_param"):
        section = typed(where, f"zero_optimization.{name}", zero.get(name), "map") or {}
        device = section.get("device", "none")
        if device is None:
            device = "none"
        if not isinstance(device, str) or device.lower() not in OFFLOAD_DEVICES:
            raise BadInput(f"{where}: zero_optimization.{name}.device: expected one of {', '.join(OFFLOAD_DEVICES)} "
                           f"(got {_got(device)}).")
        on[name] = device.lower() != "none"
    opt, par = on["offload_optimizer"], on["offload_param"]
    if opt or par:
        out["offload"] = "both" if opt and par else ("optimizer" if opt else "params")
    return out


def _fsdp(keys: _Keys, key: str, config_key: str) -> dict[str, Any]:
    """FSDP from TrainingArguments `fsdp` ("full_shard auto_wrap" or a list) and fsdp_config
    (fsdp_offload_params / offload_params: transformers/training_args.py)."""
    value = keys.raw(key)
    conf = keys.mapping(config_key)
    if isinstance(value, bool):  # axolotl's older `fsdp: true`
        words = ["full_shard"] if value else []
    elif isinstance(value, list) and all(isinstance(w, str) for w in value):
        words = value
    elif isinstance(value, str) or value is None:
        words = (value or "").split()
    else:
        raise BadInput(f"{keys.what}: {key}: expected FSDP options as text or a list of words (got {_got(value)}).")
    if not words and not conf:
        return {}
    flags = [typed(keys.what, f"{config_key}.{k}", conf.get(k), "bool") for k in ("fsdp_offload_params",
                                                                                  "offload_params")]
    offload = "offload" in words or any(flags)
    # FSDP's CPU offload moves parameters, gradients and the optimizer step to the CPU (advisor/launch/bundle.py)
    return {"sharding": "fsdp", **({"offload": "both"} if offload else {})}


def _sharding(keys: _Keys, base: Path, ds_key="deepspeed", fsdp_key="fsdp", fsdp_conf="fsdp_config") -> dict:
    ds, fs = _deepspeed(keys, ds_key, base), _fsdp(keys, fsdp_key, fsdp_conf)
    if ds and fs:
        raise BadInput(f"{keys.what}: {ds_key} and {fsdp_key} contradict each other; a run uses one of them.")
    return ds or fs


def _optimizer(keys: _Keys, key: str) -> dict[str, Any]:
    name = keys.text(key)
    if name is None:
        return {}
    # Hugging Face TrainingArguments / TRL / axolotl / LLaMA-Factory `optim` names: the optimizers' rows
    # (advisor/data/optimizers.csv hf_optim_read, each cited there)
    ours = techniques.from_hf_optim(name)
    if ours is None:
        keys.notes.append(f"{key}: {plain(name)} is not modelled; the optimizer is searched")
        return {}
    return {"optimizer": ours}


def _attention(keys: _Keys, key: str) -> dict[str, Any]:
    name = keys.text(key)
    if name is None or name == "auto":
        return {}
    if name not in ATTENTION:
        raise BadInput(f"{keys.what}: {key}: unknown attention {plain(name)!r}; known: {', '.join(ATTENTION)}, auto.")
    return {"attention": ATTENTION[name]}


def _lora(method: str, rank, alpha, dropout, targets: tuple[str, ...], save: tuple[str, ...], dora) -> dict:
    if method == "full":
        return {}
    out = {"lora_rank": rank, "lora_alpha": alpha, "lora_dropout": dropout, "dora": bool(dora)}
    if targets:
        out["lora_targets"] = "all-linear" if targets in (("all",), ("all-linear",), ("all_linear",)) else ",".join(targets)
    if save:
        out["modules_to_save"] = ",".join(save)
    return out


def _common(method: str, epochs, seq_len, micro_batch, accum) -> dict[str, Any]:
    out: dict[str, Any] = {"methods": method, "epochs": epochs, "seq_len": seq_len, "_mb": micro_batch,
                           "_accum": accum}
    if micro_batch:
        out["global_batch"] = micro_batch * (accum or 1)  # per GPU: the world size is chosen at launch
    return out


# ----------------------------------------------------------------------------- axolotl
# Keys: axolotl src/axolotl/utils/schemas/{model,peft,training,config,datasets}.py and
# src/axolotl/integrations/liger/args.py (https://github.com/axolotl-ai-cloud/axolotl, commit 067b021c8b87).

def _axolotl(k: _Keys, base: Path) -> dict[str, Any]:
    method, precision, attn = _axolotl_method(k), _axolotl_precision(k), _axolotl_attention(k)
    liger_plugin, cce_plugin = _axolotl_plugins(k)
    liger = k.bool("liger_fused_linear_cross_entropy")
    for key in ("liger_rope", "liger_rms_norm", "liger_glu_activation", "liger_swiglu", "liger_layer_norm",
                "liger_cross_entropy"):
        k.bool(key)  # the kernels Liger brings along; the memory model treats Liger as one switch
    targets = ("all-linear",) if k.bool("lora_target_linear") else k.names("lora_target_modules")
    fsdp_conf = k.data.get("fsdp_config") if isinstance(k.data.get("fsdp_config"), dict) else {}
    k.int("fsdp_version")  # FSDP 1 or 2: the same sharded memory here
    ckpt = k.raw("gradient_checkpointing") or fsdp_conf.get("activation_checkpointing")  # FSDP's own switch
    pins = {
        "precision": precision, **_optimizer(k, "optimizer"), **attn,
        "grad_checkpointing": bool(ckpt),  # default false; "offload" / "offload_disk" also checkpoint
        "liger": bool(liger_plugin and liger), "compile": k.raw("torch_compile") is True,  # "auto": off here
        # axolotl trains with transformers' Trainer (its ForCausalLMLoss on full logits) unless a plugin replaces the
        # loss: CutCrossEntropyPlugin with cut_cross_entropy: true runs Apple's Cut Cross-Entropy (--loss cce), never
        # a chunked cross-entropy (axolotl src/axolotl/integrations/cut_cross_entropy)
        "loss": ("cce" if cce_plugin and k.bool("cut_cross_entropy") else "chunked"
                 if k.bool("chunked_cross_entropy") else "standard"),
        **_sharding(k, base),
        **_lora(method, k.int("lora_r", 8 if method != "full" else None), k.int("lora_alpha"),
                k.num("lora_dropout", 0.0), targets, k.names("lora_modules_to_save"), k.bool("peft_use_dora")),
    }
    out = _common(method, k.num("num_epochs", 1.0), k.int("sequence_len", 512), k.int("micro_batch_size", 1),
                  k.int("gradient_accumulation_steps", 1))
    out.update(model=k.text("base_model"), padded=not k.bool("sample_packing", False), pins=pins)
    datasets = _axolotl_datasets(k)
    if len(datasets) == 1:
        d = datasets[0]
        out["_dataset"] = (d["path"], d.get("field") if d.get("type") == "completion" else None,
                           d.get("field_messages") or "messages" if d.get("type") == "chat_template" else None)
    elif datasets:
        k.notes.append("datasets: more than one dataset; pass --dataset to count one")
    return out


def _axolotl_method(k: _Keys) -> str:
    """full, lora or qlora from adapter and load_in_4bit (8-bit LoRA and the contradictions refused)."""
    adapter = k.text("adapter")
    four, eight = k.bool("load_in_4bit"), k.bool("load_in_8bit")
    if adapter not in (None, "lora", "qlora"):
        raise BadInput(f"{k.what}: adapter: {plain(adapter)!r} is not modelled; use lora, qlora or none (full).")
    if eight:
        raise BadInput(f"{k.what}: load_in_8bit: 8-bit LoRA is not modelled; use load_in_4bit (QLoRA) or neither.")
    if adapter == "qlora" and four is False:
        raise BadInput(f"{k.what}: adapter qlora with load_in_4bit false contradict each other.")
    if four and adapter is None:
        raise BadInput(f"{k.what}: load_in_4bit needs adapter: qlora (a 4-bit model cannot be fully fine-tuned).")
    return "qlora" if adapter == "qlora" or (adapter == "lora" and four) else (adapter or "full")


def _axolotl_precision(k: _Keys) -> str | None:
    """bf16 / fp16 set the weights' dtype (src/axolotl/utils/config/__init__.py normalize_config: torch_dtype)."""
    bf16 = k.raw("bf16")
    if bf16 not in (None, True, False, "auto"):
        raise BadInput(f"{k.what}: bf16: expected true, false or auto (got {plain(bf16)[:20]!r}).")
    if bf16 and k.bool("fp16"):
        raise BadInput(f"{k.what}: bf16 and fp16 contradict each other; set one of them.")
    # bf16 false without fp16 loads float32 (normalize_config); unset bf16 is "auto", left to the search
    precision = "bf16" if bf16 else ("fp16" if k.bool("fp16") else ("fp32" if bf16 is False else None))
    if bf16 == "auto":
        k.notes.append("bf16: auto is read as bf16 (axolotl uses it where the GPU has it)")
    return precision


def _axolotl_attention(k: _Keys) -> dict[str, Any]:
    """The attention pin from axolotl's *_attention switches, else attn_implementation."""
    attention = _one_of(k, {"flash_attention": "flash", "sdp_attention": "sdpa", "eager_attention": "eager",
                            "xformers_attention": None})
    if attention is None and k.data.get("xformers_attention"):
        k.notes.append("xformers_attention is modelled as sdpa (same memory-efficient kernel class)")
        attention = "sdpa"
    return {"attention": attention} if attention else _attention(k, "attn_implementation")


def _axolotl_plugins(k: _Keys) -> tuple[bool, bool]:
    """(Liger's plugin, Cut Cross-Entropy's plugin) among `plugins`."""
    plugins = [p.lower() for p in k.names("plugins", modules=False)]
    return any("liger" in p for p in plugins), any("cut_cross_entropy" in p for p in plugins)


def _axolotl_datasets(k: _Keys) -> list[dict]:
    """axolotl `datasets`: a list of {path, type, field, field_messages, ...} (src/axolotl/utils/schemas/
    datasets.py SFTDataset: path a local file/folder or a Hub id; type a format name or a mapping of a
    custom format), each value typed before it is used."""
    datasets = k.raw("datasets")
    if datasets is None:
        return []
    if not isinstance(datasets, list) or not all(isinstance(d, dict) for d in datasets):
        raise BadInput(f"{k.what}: datasets: expected a list of entries such as {{path: data.jsonl, type: "
                       f"completion}} (got {_got(datasets)}).")
    for i, d in enumerate(datasets):
        path = d.get("path")
        if not isinstance(path, str) or not path.strip():
            raise BadInput(f"{k.what}: datasets[{i}].path: expected a file path or a Hub dataset id (got "
                           f"{_got(path)}).")
        kind = d.get("type")
        if kind is not None and not isinstance(kind, (str, dict)):
            raise BadInput(f"{k.what}: datasets[{i}].type: expected a format name or a mapping (got {_got(kind)}).")
        for key in ("field", "field_messages"):
            typed(k.what, f"datasets[{i}].{key}", d.get(key), "text")
    return datasets


# ----------------------------------------------------------------------------- LLaMA-Factory
# Keys: LLaMA-Factory src/llamafactory/hparams/{model,data,finetuning,training}_args.py and
# examples/train_lora/llama3_lora_sft.yaml (https://github.com/hiyouga/LLaMA-Factory, commit ff6d4d12eeb0).

def _llamafactory(k: _Keys, base: Path) -> dict[str, Any]:
    method = _lf_method(k)
    pure = k.bool("pure_bf16", False)
    precision = _lf_precision(k, method, pure)
    rank = k.int("lora_rank", 8)  # LoraArguments defaults: rank 8, alpha 2 × rank, dropout 0, target all
    pins = {
        "precision": precision, **_optimizer(k, "optim"), **_attention(k, "flash_attn"),
        "grad_checkpointing": not k.bool("disable_gradient_checkpointing", False),  # on unless disabled
        "liger": k.bool("enable_liger_kernel", False), "double_quant": k.bool("double_quantization"),
        "loss": "standard",  # LLaMA-Factory's CustomSeq2SeqTrainer: transformers' ForCausalLMLoss on full logits
        **_sharding(k, base),
        **_lora(method, rank, k.int("lora_alpha", 2 * rank), k.num("lora_dropout", 0.0),
                k.names("lora_target") or ("all",), k.names("additional_target"), k.bool("use_dora")),
    }
    if pure and method != "full":
        pins["adapter_dtype"] = "bf16"
    out = _common(method, k.num("num_train_epochs", 3.0), k.int("cutoff_len", 2048),
                  k.int("per_device_train_batch_size", 8), k.int("gradient_accumulation_steps", 1))
    packing = k.bool("packing") or k.bool("neat_packing")
    out.update(model=k.text("model_name_or_path"), padded=not packing, pins=pins)
    names = k.names("dataset", modules=False)
    folder = base / (k.text("dataset_dir") or "data")
    out["_dataset"] = _lf_dataset(k, names, folder)
    return out


def _lf_method(k: _Keys) -> str:
    """full, lora or qlora from finetuning_type and quantization_bit (only 4-bit LoRA is modelled)."""
    kind = k.text("finetuning_type", "lora")
    if kind not in ("lora", "full"):
        raise BadInput(f"{k.what}: finetuning_type: {plain(kind)!r} is not modelled; use lora or full.")
    bits = k.int("quantization_bit")
    if bits is not None and kind == "full":  # model/adapter.py: "Quantized models can only be used for the LoRA"
        raise BadInput(f"{k.what}: quantization_bit with finetuning_type full contradict each other.")
    if bits not in (None, 4):
        raise BadInput(f"{k.what}: quantization_bit: only 4 (QLoRA) is modelled (got {bits}).")
    return "qlora" if bits == 4 else kind


def _lf_precision(k: _Keys, method: str, pure: bool) -> str | None:
    """finetuning_args pure_bf16; model/adapter.py upcasts trainable params to fp32 unless pure_bf16."""
    bf16, fp16 = k.bool("bf16", False), k.bool("fp16", False)
    if (bf16 or pure) and fp16:
        raise BadInput(f"{k.what}: bf16 and fp16 contradict each other; set one of them.")
    if method == "full":
        return "bf16" if pure else ("amp-bf16" if bf16 else ("amp-fp16" if fp16 else None))
    return "bf16" if (bf16 or pure) else ("fp16" if fp16 else None)


def _lf_dataset(k: _Keys, names: tuple[str, ...], folder: Path):
    """The one local dataset file named in dataset_dir/dataset_info.json (LLaMA-Factory data/README.md:
    {name: {file_name, formatting, columns: {prompt, response, messages, ...}}}), every value typed; a
    dataset_info.json that is there but not a regular file is refused, never passed over."""
    if len(names) != 1:
        if names:
            k.notes.append("dataset: more than one dataset; pass --dataset to count one")
        return None
    info_path = folder / "dataset_info.json"
    if not os.path.lexists(info_path):
        k.notes.append(f"dataset: {plain(names[0])} is described in {plain(info_path)}, which is not here")
        return None
    where = plain(info_path)
    info = _json_file(info_path, where)
    if not isinstance(info, dict):
        raise BadInput(f"{where}: expected a mapping of dataset names to their descriptions (got {_got(info)}).")
    entry = typed(where, plain(names[0]), info.get(names[0]), "map")
    if entry is None or entry.get("file_name") in (None, ""):
        k.notes.append(f"dataset: {plain(names[0])} has no local file_name in dataset_info.json")
        return None
    name = plain(names[0])
    file_name = typed(where, f"{name}.file_name", entry["file_name"], "text")
    formatting = typed(where, f"{name}.formatting", entry.get("formatting"), "text")
    columns = typed(where, f"{name}.columns", entry.get("columns"), "map") or {}
    for key, value in columns.items():
        typed(where, f"{name}.columns.{plain(key)}", value, "text")
    if formatting == "sharegpt":
        return str(folder / file_name), None, columns.get("messages", "conversations")
    k.notes.append("dataset: alpaca format; counted from its output column (pass --text-field to change)")
    return str(folder / file_name), columns.get("response", "output"), None


# ----------------------------------------------------------------------------- TRL / TrainingArguments
# Keys: TRL trl/trainer/sft_config.py (max_length 1024, packing, dataset_text_field; gradient_checkpointing
# and bf16 default true), trl/trainer/model_config.py (model_name_or_path, use_peft, lora_r 16, lora_alpha 32,
# lora_dropout 0.05, lora_target_modules, load_in_4bit, attn_implementation), transformers TrainingArguments
# (per_device_train_batch_size 8, num_train_epochs 3, optim, deepspeed, fsdp, use_liger_kernel, torch_compile).

def _trl(k: _Keys, base: Path) -> dict[str, Any]:
    method = _trl_method(k)
    precision, init = _trl_precision(k, method)
    attn = _attention(k, "attn_implementation")
    init_attn = typed(k.what, "model_init_kwargs.attn_implementation", init.get("attn_implementation"), "text")
    if not attn and init_attn:
        attn = {"attention": ATTENTION.get(init_attn, "sdpa")}
    rank = k.int("lora_r", 16)
    pins = {
        "precision": precision, **_optimizer(k, "optim"), **attn,
        "grad_checkpointing": k.bool("gradient_checkpointing", True), "liger": k.bool("use_liger_kernel", False),
        "compile": k.bool("torch_compile", False), "double_quant": k.bool("use_bnb_nested_quant"), **_sharding(k, base),
        **_lora(method, rank, k.int("lora_alpha", 32), k.num("lora_dropout", 0.05),
                k.names("lora_target_modules"), k.names("lora_modules_to_save"), k.bool("use_dora")),
    }
    seq = k.int("max_length") or k.int("max_seq_length") or 1024
    out = _common(method, k.num("num_train_epochs", 3.0), seq, k.int("per_device_train_batch_size", 8),
                  k.int("gradient_accumulation_steps", 1))
    packing = k.bool("packing", False) or k.bool("padding_free", False)
    out.update(model=k.text("model_name_or_path"), padded=not packing, pins=pins)
    # DPOConfig / GRPOConfig keys -> the objective (advisor/workload/rl_config.py)
    rl_config.read(k, out, pins, method, out.get("_mb"), out.get("_accum"))
    if out.get("objective") == "grpo":
        out.pop("seq_len", None)  # a GRPO row is the prompt + max_completion_length
    out["_group"] = bool(k.bool("group_by_length", False))
    name = k.text("dataset_name")
    out["_dataset"] = (name, k.text("dataset_text_field"), None) if name else None
    return out


def _trl_method(k: _Keys) -> str:
    """full, lora or qlora from use_peft and load_in_4bit (8-bit LoRA refused)."""
    peft = k.bool("use_peft", False)
    four = k.bool("load_in_4bit", False)
    if k.bool("load_in_8bit"):
        raise BadInput(f"{k.what}: load_in_8bit: 8-bit LoRA is not modelled; use load_in_4bit (QLoRA) or neither.")
    if four and not peft:
        raise BadInput(f"{k.what}: load_in_4bit needs use_peft: true (a 4-bit model cannot be fully fine-tuned).")
    return "qlora" if four else ("lora" if peft else "full")


def _trl_precision(k: _Keys, method: str) -> tuple[str | None, dict]:
    """The precision and model_init_kwargs: bf16 / fp16 (TRL's bf16 defaults to true unless fp16) and the dtype
    the model loads in: a full fine-tune over 16-bit weights is pure 16-bit, over fp32 weights mixed precision."""
    fp16 = k.bool("fp16", False)
    bf16 = k.bool("bf16", not fp16)
    if bf16 and fp16:
        raise BadInput(f"{k.what}: bf16 and fp16 contradict each other; set one of them.")
    init = k.mapping("model_init_kwargs")
    dtype = k.text("dtype") or k.text("torch_dtype") or typed(k.what, "model_init_kwargs.dtype", init.get("dtype"),
                                                              "text") or typed(
        k.what, "model_init_kwargs.torch_dtype", init.get("torch_dtype"), "text")
    half = dtype in ("bfloat16", "float16")
    if method == "full":
        return ("bf16" if half else "amp-bf16") if bf16 else (("fp16" if half else "amp-fp16") if fp16 else "fp32"), init
    return "bf16" if bf16 else ("fp16" if fp16 else None), init


# ----------------------------------------------------------------------------- torchtune
# Keys: torchtune recipes/configs/llama3_1/8B_lora_single_device.yaml and 8B_qlora_single_device.yaml
# (https://github.com/pytorch/torchtune): model._component_ (lora_/qlora_ builders, lora_rank, lora_alpha,
# lora_dropout, lora_attn_modules, apply_lora_to_mlp, apply_lora_to_output), tokenizer.max_seq_len,
# dataset.packed, batch_size, gradient_accumulation_steps, epochs, optimizer._component_, dtype,
# enable_activation_checkpointing, compile, loss._component_ (CEWithChunkedOutputLoss).

def _torchtune(k: _Keys, base: Path) -> dict[str, Any]:
    model = k.mapping("model")
    d = lambda key, kind: typed(k.what, f"model.{key}", model.get(key), kind)  # noqa: E731
    method, ref = _torchtune_builder(d("_component_", "text") or "")
    targets = _torchtune_targets(k, model, d)
    opt_name = typed(k.what, "optimizer._component_", k.mapping("optimizer").get("_component_"), "text") or ""
    optimizer = techniques.from_torchtune(opt_name)  # advisor/data/optimizers.csv torchtune_component
    loss = typed(k.what, "loss._component_", k.mapping("loss").get("_component_"), "text") or ""
    dtype = k.text("dtype")
    tok = k.mapping("tokenizer")
    data = k.mapping("dataset")
    pins = {
        "precision": {"bf16": "bf16", "fp32": "fp32"}.get(dtype or ""), "optimizer": optimizer,
        "grad_checkpointing": k.bool("enable_activation_checkpointing", False), "compile": k.bool("compile", False),
        "liger": False,
        "loss": "chunked" if "Chunked" in loss else "standard",  # torchtune's CrossEntropyLoss: full fp32 logits
        "adapter_dtype": "bf16" if method != "full" else None,  # torchtune keeps adapters in the model dtype
        **_lora(method, d("lora_rank", "int") or 8, max(1, round(d("lora_alpha", "num") or 16)),
                d("lora_dropout", "num") or 0.0, targets, (), None),
    }
    out = _common(method, k.num("epochs", 1.0), typed(k.what, "tokenizer.max_seq_len", tok.get("max_seq_len"), "int"),
                  k.int("batch_size", 2), k.int("gradient_accumulation_steps", 1))
    if out["seq_len"] is None:
        del out["seq_len"]
    out.update(model=ref, padded=not typed(k.what, "dataset.packed", data.get("packed"), "bool"), pins=pins)
    files = data.get("data_files")
    if files is not None and not isinstance(files, (str, list)):
        raise BadInput(f"{k.what}: dataset.data_files: expected a file name or a list of them (got {_got(files)}).")
    out["_dataset"] = (files, None, None) if isinstance(files, str) else None
    return out


def _torchtune_builder(component: str) -> tuple[str, str | None]:
    """(method, catalog name) from model._component_: torchtune.models.llama3_1.qlora_llama3_1_8b -> qlora,
    llama-3.1-8b (None where the builder's name is not family + version + size)."""
    builder = component.rsplit(".", 1)[-1]
    method = "qlora" if builder.startswith("qlora_") else ("lora" if builder.startswith("lora_") else "full")
    name = re.sub(r"^(q?lora_)", "", builder)
    m = re.match(r"([a-z]+)(\d+)(?:_(\d+))?_(\d+(?:_\d+)?b)$", name)
    ref = f"{m.group(1)}-{m.group(2)}{'.' + m.group(3) if m.group(3) else ''}-{m.group(4).replace('_', '.')}" if m else None
    return method, ref


def _torchtune_targets(k: _Keys, model: dict, d) -> tuple[str, ...]:
    """LoRA targets: lora_attn_modules plus the MLP and output projections where apply_lora_to_* say so, in
    transformers' module names."""
    attn = model.get("lora_attn_modules")
    if attn is not None and not (isinstance(attn, list) and all(isinstance(x, str) for x in attn)):
        raise BadInput(f"{k.what}: model.lora_attn_modules: expected a list of module names such as [q_proj, v_proj] "
                       f"(got {_got(attn)}).")
    targets = name_list(k.what, "model.lora_attn_modules", attn)
    if d("apply_lora_to_mlp", "bool"):
        targets += ("gate_proj", "up_proj", "down_proj")  # torchtune w1/w3/w2 are the SwiGLU projections
    if d("apply_lora_to_output", "bool"):
        targets += ("lm_head",)
    return tuple(t.replace("output_proj", "o_proj") for t in targets)


READERS = {"axolotl": _axolotl, "llama-factory": _llamafactory, "trl": _trl, "torchtune": _torchtune}
_MARKERS = (
    ("torchtune", lambda d: any(isinstance(v, dict) and "_component_" in v for v in d.values())),
    ("llama-factory", lambda d: bool({"finetuning_type", "cutoff_len", "stage", "template"} & set(d))),
    ("axolotl", lambda d: bool({"base_model", "sequence_len", "micro_batch_size", "adapter", "num_epochs"} & set(d))),
    ("trl", lambda d: bool({"per_device_train_batch_size", "num_train_epochs", "max_length", "max_seq_length",
                            "model_name_or_path", "use_peft", "num_generations", "use_vllm", "beta"} & set(d))),
)
_IGNORED = {"torchtune": {"output_dir", "checkpointer", "resume_from_checkpoint", "seed", "shuffle", "lr_scheduler",
                          "metric_logger", "log_every_n_steps", "log_peak_memory_stats", "device", "profiler",
                          "max_steps_per_epoch", "clip_grad_norm", "optimizer_in_bwd", "save_adapter_weights_only",
                          "save_last_epoch_only", "log_level", "run_val_every_n_steps", "dataset_val",
                          "enable_activation_offloading"}}


def read_config(path: str | Path) -> ConfigPins:
    """The pins of a training config file (format recognised from its keys)."""
    p = Path(path).expanduser()
    what = f"--from-config {plain(p)}"
    try:
        text = read_text(p, what, max_bytes=MAX_CONFIG_BYTES)
        data = (load_json(text, what, max_bytes=MAX_CONFIG_BYTES) if p.suffix.lower() == ".json" else
                load_yaml(text, what, max_bytes=MAX_CONFIG_BYTES, max_depth=20, max_nodes=100_000))
    except PriceInputError as exc:
        raise BadInput(str(exc)) from None
    if not isinstance(data, dict) or not data:
        raise BadInput(f"{what}: must hold a mapping of training settings (key: value lines).")
    framework = next((name for name, test in _MARKERS if test(data)), None)
    if framework is None:
        raise BadInput(f"{what}: not an axolotl, LLaMA-Factory, TRL/TrainingArguments or torchtune config "
                       "(none of their keys found).")
    keys = _Keys(data, what, _IGNORED.get(framework, _IGNORED_COMMON) | _IGNORED_COMMON)
    raw = READERS[framework](keys, p.parent)
    ignored, unknown = keys.leftover()
    dataset = raw.pop("_dataset", None) or (None, None, None)
    group = raw.pop("_group", False)
    mb, accum = raw.pop("_mb", None), raw.pop("_accum", None)
    raw["pins"] = {k: v for k, v in raw["pins"].items() if v is not None}
    ds_path = dataset[0]
    if ds_path:
        local = Path(ds_path).expanduser()
        local = local if local.is_absolute() else p.parent / local
        if os.path.lexists(local):  # a FIFO, a device or a symlink loop is refused here, naming the config
            dataset_files.kind_of(local, f"{what}: dataset {plain(dataset[0])}")
            ds_path = str(local)
        else:
            ds_path = None
            keys.notes.append(f"dataset {plain(dataset[0])} is not a local file here; pass --dataset to count it")
    options = {k: v for k, v in raw.items() if v is not None}
    gb = options.get("global_batch")
    return ConfigPins(framework=framework, path=str(p), options=options, dataset=ds_path,
                      text_field=dataset[1], messages_field=dataset[2],
                      micro_batch=mb, grad_accum=accum, group_by_length=bool(group),
                      notes=tuple(keys.notes) + ((f"global batch {gb} sequences assumes one GPU (mb × accumulation; the "
                                                  "world size is chosen at launch)",) if gb else ()),
                      ignored=ignored, unknown=unknown)

