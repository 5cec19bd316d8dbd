"""Launch bundles: the files that run one plan candidate on exactly the stack that was estimated.

`build_bundle` is pure (candidate + model spec in, filename -> text out); `write_bundle` puts the
files on disk atomically. Every memory-relevant setting of the candidate appears once in
`training_args.yaml` / `accelerate_config.yaml`, following the traps listed in
shared/reference/ACCELERATE_CONFIG.md (accelerate 1.15.0, transformers 5.24.0, peft 0.21.2).

Precision mapping (why): the estimator's "bf16"/"fp16" mean pure 16-bit weights. accelerate's
FSDP2 path upcasts trainable parameters to fp32 whenever `mixed_precision != 'no'`
(accelerate/utils/fsdp_utils.py, fsdp2_prepare_model), and transformers' grad scaler refuses fp16
gradients, so pure 16-bit runs load the model in that dtype with autocast off. "amp-*" loads fp32
weights and autocasts. DeepSpeed needs its bf16/fp16 mode to train 16-bit weights at all; that mode
keeps fp32 master weights and Adam states (ZeRO paper, Rajbhandari et al. 2020, K = 12 B/param).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from advisor import techniques
from advisor.approval import Approval
from advisor.errors import AdvisorError, BadInput
from advisor.estimate.memory import DEEPSPEED_ZERO3
from advisor.explain import launch_figures
from advisor.launch import caps, launchers, rl
from advisor.launch.axolotl import AXOLOTL_FILE, axolotl_config, wants_axolotl
from advisor.launch.caveats import (  # noqa: F401 - re-exported: the bundle's facts live with its caveats
    DECODER_LAYERS,
    caveats,
    cpu_adam,
    distributed_type,
    expert_lora,
    runs_as,
    sky_caveat,
    sky_cloud,
    total_gpus,
)
from advisor.model.spec import ModelSpec
from advisor.results import Candidate
from advisor.text import md, plain
from advisor.units import GB, GiB, money
from advisor.workload import chat_mask
from pricing.files import atomic_write

if TYPE_CHECKING:  # PyYAML is imported where a bundle is written (_dump)
    import yaml


class LaunchWarning(UserWarning):
    """A bundle setting that differs from, or could not be checked against, the estimate."""



# The 1.15.0 wizard's neutral values; launch ignores these keys (reference §2), we keep them for parity.
_COMMON_KEYS = {
    "use_cpu": False,
    "debug": False,
    "main_training_function": "main",
    "enable_cpu_affinity": False,
    "downcast_bf16": "no",
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
}

ATTN_NAMES = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}
# precision -> (load dtype, autocast mode)
PRECISIONS = {
    "bf16": ("bfloat16", "no"),
    "fp16": ("float16", "no"),
    "fp32": ("float32", "no"),
    "amp-bf16": ("float32", "bf16"),
    "amp-fp16": ("float32", "fp16"),
}
LOSS_PATH = ("TRL fused LM head: log-probabilities of the labelled tokens only, in tiles of 4,096 tokens x 32,768 "
             "vocabulary columns, fp32 accumulators, logits never materialised")
HEAD_NODE_PLACEHOLDER = "HEAD_NODE_IP"
MAIN_PROCESS_PORT = 29500
MAX_GRAD_NORM = 1.0
DS_CONFIG_FILE = "ds_config.json"  # the bundle's DeepSpeed config (deepspeed_json), next to train.py
SMOKE_CONFIG_FILE = "smoke_config.json"  # the tiny random model of `launch.sh --smoke` (launchers.smoke_config)
SAVE_TOTAL_LIMIT = 2  # checkpoints kept: the newest, and the one before in case the newest was cut off mid-write
TEMPLATES = Path(__file__).resolve().parent / "templates"


def mixed_precision(c: Candidate) -> str:
    """accelerate's `mixed_precision`: autocast for amp-*, DeepSpeed's 16-bit mode for pure 16-bit."""
    amp = PRECISIONS[c.stack.precision][1]
    if c.stack.is_zero and c.stack.half_weights:
        return c.stack.precision
    return amp


def accelerate_config(c: Candidate, model: ModelSpec) -> dict:
    """The accelerate YAML as a dict (schema of reference §3-§6); its caveats are in `caveats`."""
    dist = distributed_type(c)
    cfg: dict = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": dist,
        "mixed_precision": mixed_precision(c),
        "num_machines": c.nodes,
        "num_processes": total_gpus(c),
        "machine_rank": 0,
        "gpu_ids": "0" if dist == "NO" else "all",
    }
    if c.nodes > 1:
        cfg["main_process_ip"] = HEAD_NODE_PLACEHOLDER
    if dist != "NO":
        cfg["main_process_port"] = MAIN_PROCESS_PORT
    cfg.update(_COMMON_KEYS)
    if dist == "FSDP":
        cfg["fsdp_config"] = _fsdp_config(c, model)
    elif dist == "DEEPSPEED":
        cfg["deepspeed_config"] = _deepspeed_config(c)
        del cfg["mixed_precision"]  # ds_config.json's bf16/fp16 (accelerate refuses both places)
    return cfg


def _fsdp_config(c: Candidate, model: ModelSpec) -> dict:
    fsdp: dict = {"fsdp_version": 2, "fsdp_reshard_after_forward": True}
    layer = DECODER_LAYERS.get(model.family)
    if layer:
        fsdp["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        fsdp["fsdp_transformer_layer_cls_to_wrap"] = layer  # one string, never a list (reference §4)
    else:
        fsdp["fsdp_auto_wrap_policy"] = "SIZE_BASED_WRAP"
        fsdp["fsdp_min_num_params"] = 100_000_000
    fsdp["fsdp_offload_params"] = c.stack.offloads
    fsdp["fsdp_state_dict_type"] = "SHARDED_STATE_DICT"
    fsdp["fsdp_cpu_ram_efficient_loading"] = True
    fsdp["fsdp_activation_checkpointing"] = c.stack.grad_checkpointing
    return fsdp


def _deepspeed_config(c: Candidate) -> dict:
    """accelerate's deepspeed_config section: it only points at the bundle's ds_config.json (`deepspeed_json`),
    which holds every DeepSpeed setting -- stage, offload, accumulation, clipping, precision and the ZeRO
    buckets the estimate used. accelerate refuses those keys (and mixed_precision) beside a config file
    (accelerate/utils/dataclasses.py DeepSpeedPlugin._deepspeed_config_checks); the path is relative to the
    bundle and train.py resolves it there."""
    stage = int(c.stack.sharding[-1])
    return {
        "deepspeed_config_file": DS_CONFIG_FILE,
        "deepspeed_multinode_launcher": "standard",  # torchrun on every node, no pdsh/hostfile
        "zero3_init_flag": stage == 3,
    }


def deepspeed_json(c: Candidate) -> dict:
    """ds_config.json for a DeepSpeed candidate: concrete values only (no "auto"), so DeepSpeed's own
    DeepSpeedConfig reads exactly what was estimated. The bucket sizes are advisor.estimate.memory.DEEPSPEED_ZERO3,
    the numbers the memory estimate's zero3_* components use."""
    Z = DEEPSPEED_ZERO3

    stage = int(c.stack.sharding[-1])
    mp = mixed_precision(c)
    zero: dict = {
        "stage": stage,
        "offload_optimizer": {"device": "cpu" if c.stack.offloads_optimizer else "none"},
        "contiguous_gradients": Z["contiguous_gradients"],
        "reduce_bucket_size": Z["reduce_bucket_size"],
    }
    if stage == 3:
        zero["offload_param"] = {"device": "cpu" if c.stack.offloads_params else "none"}
        for key in ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                    "stage3_max_live_parameters", "stage3_max_reuse_distance"):
            zero[key] = Z[key]
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {
        # Must equal TrainingArguments or the Trainer raises (reference §5).
        "train_micro_batch_size_per_gpu": c.shape.micro_batch,
        "gradient_accumulation_steps": c.shape.grad_accum,
        "train_batch_size": c.shape.micro_batch * c.shape.grad_accum * total_gpus(c),
        "gradient_clipping": MAX_GRAD_NORM,
        "bf16": {"enabled": mp == "bf16"},
        "fp16": {"enabled": mp == "fp16"},
        "zero_optimization": zero,
    }


def save_steps(c: Candidate) -> int:
    """Optimizer steps between checkpoints: the plan's checkpoint interval (timing.checkpoint_interval_hours,
    the one its cost assumes: Young's optimum for its failure rate, at most billing.json's max_interval_hours, so a
    run over an hour checkpoints before its end) over the step time; 500 (transformers' default) when the plan has
    neither."""
    t = c.timing
    if t.checkpoint_interval_hours > 0 and t.step_seconds > 0:
        return max(1, round(t.checkpoint_interval_hours * 3600 / t.step_seconds))
    return 500


def training_args(
    c: Candidate, model: ModelSpec, *, dataset: str, options: Mapping[str, object] | None = None
) -> dict:
    """training_args.yaml as a dict: sections model / data / training / lora / quantization / estimate."""
    opts = dict(options or {})
    dtype, _ = PRECISIONS[c.stack.precision]
    mp = mixed_precision(c)
    dist = distributed_type(c)
    fsdp_ckpt = dist == "FSDP"  # checkpointing lives in fsdp_config; transformers refuses both (§4)
    # TRL SFTConfig (trl 1.16.0): a TrainingArguments subclass whose defaults differ (bf16 and gradient
    # checkpointing on, fp32 weights), so every one of those is written explicitly.
    training: dict = {
        "output_dir": "output",
        # TRL loads the model with these (SFTTrainer -> create_model_from_path, which loads fp32 unless told);
        # device_map None: the Trainer / FSDP / DeepSpeed place the weights (TRL's "auto" would spread one
        # process's model over every visible GPU under FSDP).
        "model_init_kwargs": {"dtype": dtype, "attn_implementation": ATTN_NAMES[c.stack.attention], "device_map": None},
        "max_length": c.shape.seq_len,
        # Every micro-batch holds micro_batch x max_length tokens, the shape that was estimated. FlashAttention
        # packs best-fit without padding and without attention across documents (TRL "bfd", padding-free); SDPA
        # and eager would build a dense mask over the flattened micro-batch, so they pack contiguous blocks.
        "packing": True,
        "packing_strategy": "bfd" if c.stack.attention == "flash" else "wrapped",
        "per_device_train_batch_size": c.shape.micro_batch,
        "gradient_accumulation_steps": c.shape.grad_accum,
        # transformers 5.24 renamed gradient_checkpointing(_kwargs) to activation_checkpointing(_kwargs); the old
        # names warn "will be removed in v6" (transformers/training_args.py, TrainingArguments.__post_init__)
        "activation_checkpointing": c.stack.grad_checkpointing and not fsdp_ckpt,
        "optim": techniques.get(c.stack.optimizer).hf_optim,
        "bf16": mp == "bf16",
        "fp16": mp == "fp16",
        "learning_rate": 2e-5 if c.stack.is_full else 2e-4,
        "num_train_epochs": float(opts.get("epochs") or 1),
        "max_grad_norm": MAX_GRAD_NORM,
        "logging_steps": 10,
        "save_strategy": "steps",
        "save_steps": save_steps(c),
        "save_total_limit": SAVE_TOTAL_LIMIT,
        "report_to": "none",
        "seed": 42,
    }
    if training["activation_checkpointing"]:
        training["activation_checkpointing_kwargs"] = {"use_reentrant": False}
    if dist == "MULTI_GPU":
        training["ddp_find_unused_parameters"] = False
    lora = None
    st = c.stack
    if st.is_adapter:
        targets = st.lora_targets.strip()
        lora = {
            "task_type": "CAUSAL_LM",
            "r": st.lora_rank,
            "lora_alpha": st.lora_alpha,
            "lora_dropout": 0.0 if expert_lora(c, model.family, model.is_moe) else st.lora_dropout,
            "target_modules": targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
            "bias": "none",
        }
        if st.dora:
            lora["use_dora"] = True  # peft LoraConfig(use_dora=True): magnitude vectors + weight-norm path
        if st.saved_modules:
            lora["modules_to_save"] = list(st.saved_modules)  # trainable copies beside the frozen originals
    if st.liger:
        # transformers Trainer applies liger-kernel's layer kernels (RMSNorm, RoPE, SwiGLU) to the model; TRL 1.16.0
        # turns Liger's fused linear cross-entropy off and runs its own fused LM head (SFTTrainer.__init__)
        training["use_liger_kernel"] = True
    if st.compile:
        training["torch_compile"] = True
    quant = None
    if c.stack.is_qlora:
        compute = "float16" if c.stack.precision in ("fp16", "amp-fp16") else "bfloat16"
        quant = {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": st.double_quant,
            "bnb_4bit_compute_dtype": compute,
        }
        if c.stack.shards_params:
            quant["bnb_4bit_quant_storage"] = compute  # so FSDP/ZeRO-3 can flatten the packed weights (§9)
    cfg = {
        "model": {
            "name_or_path": model.name,
            "family": model.family,
            "adapter_dtype": st.adapter_dtype,
        },
        "data": {"path": dataset},
        "training": training,
        "lora": lora,
        "quantization": quant,
        "estimate": {
            "stack": c.label,
            "runs_as": runs_as(c),  # what actually trains (DeepSpeed's CPU Adam under ZeRO optimizer offload)
            # what `launch.sh --benchmark` writes into measured.json as the stack it ran (advisor/workload/measurements.py)
            "stack_settings": c.stack.model_dump(mode="json"),
            "gpu_model": c.offer.gpu_model,
            "tokens_per_sec": c.timing.tokens_per_sec,
            "peak_memory_bytes_per_gpu": c.fit.peak_bytes,
            "gpu_memory_bytes": c.fit.usable_bytes,
            "hours": c.timing.hours,
            "cost_usd": c.cost.usd,
            # the loss TRL 1.16.0's SFTTrainer computes, whatever the stack's --loss: its fused LM head
            # (trl/trainer/utils.py add_fused_lm_head -> trl/kernels/chunked_logprob.py ChunkedLogProbFunction)
            "loss": LOSS_PATH,
        },
    }
    return cfg


def setup_commands(c: Candidate) -> list[str]:
    """What a fresh machine runs before launch.sh: the pinned requirements, and FlashAttention's CUDA build when
    the plan assumed it (train.py falls back to SDPA without it)."""
    cmds = ["pip install -r requirements.txt"]
    if c.stack.attention == "flash":
        cmds.append(f"pip install flash-attn=={pins()['flash-attn']} --no-build-isolation")
    return cmds


def sky_task(c: Candidate, model: ModelSpec) -> dict:
    cloud = sky_cloud(c.offer.provider)
    setup = "set -e\n" + "".join(f"{cmd}\n" for cmd in setup_commands(c))
    return {
        "name": _slug(f"ft-{model.name}"),
        "resources": {
            "cloud": cloud,
            "region": c.offer.region,
            "instance_type": c.offer.instance_type,
            "accelerators": f"{c.offer.gpu_model}:{c.offer.gpu_count}",
            "use_spot": c.cost.spot,
        },
        "num_nodes": c.nodes,
        "workdir": ".",
        "envs": {"HF_TOKEN": ""},
        "setup": setup,
        # launch.sh reads SKYPILOT_NODE_RANK and SKYPILOT_NODE_IPS itself.
        "run": "bash launch.sh\n",
    }


@functools.cache
def pins() -> dict[str, str]:
    """Package -> exact version the bundle pins (advisor/launch/templates/versions.json, cited there)."""
    return dict(json.loads((TEMPLATES / "versions.json").read_text(encoding="utf-8"))["packages"])


def requirements(c: Candidate) -> list[str]:
    """requirements.txt: exactly the packages train.py imports for this stack, each at its pinned version.
    flash-attn is not among them: it needs a CUDA build (sky.yaml and the README install it), and train.py
    falls back to PyTorch SDPA, saying so, when it is missing."""
    names = ["torch", "transformers", "trl", "datasets", "accelerate", "pyyaml"]
    if c.stack.is_adapter:
        names.append("peft")
    package = techniques.get(c.stack.optimizer).package  # the optimizer's row of advisor/data/optimizers.csv
    if c.stack.is_qlora or package == "bitsandbytes":
        names.append("bitsandbytes")
    if c.stack.is_zero:
        names.append("deepspeed")
    if c.stack.liger:
        names.append("liger-kernel")
    if not c.stack.objective.is_sft:  # DPO / GRPO run on TRL (advisor/launch/rl.py)
        names += ["trl", "datasets"] + (["vllm"] if c.stack.objective.vllm != "none" else [])
    return [f"{name}=={pins()[name]}" for name in names]


def build_bundle(
    candidate: Candidate,
    model: ModelSpec,
    *,
    dataset: str = "data/train.jsonl",
    options: Mapping[str, object] | None = None,
    approval: Approval | None = None,
) -> dict[str, str]:
    """Every file of the bundle, filename -> content. Emits a LaunchWarning per caveat (also in README). Under an
    `approval` (advisor/approval.py) every launcher carries its caps (advisor/launch/caps.py)."""
    c = candidate
    hours_cap = approval.caps.hours if approval else None
    optimizers = techniques.rows()
    if c.stack.precision not in PRECISIONS or c.stack.optimizer not in optimizers or c.stack.attention not in ATTN_NAMES:
        raise BadInput(
            f"candidate: precision {c.stack.precision!r}, optimizer {c.stack.optimizer!r} or attention {c.stack.attention!r} "
            f"unknown; accepted: {sorted(PRECISIONS)}, {sorted(optimizers)}, {sorted(ATTN_NAMES)}."
        )
    acc = accelerate_config(c, model)
    args = training_args(c, model, dataset=dataset, options=options)
    notes = caveats(c, model.family, model.is_moe)
    for note in notes:
        warnings.warn(note, LaunchWarning, stacklevel=2)
    reqs = requirements(c)
    job = _slug(f"ft-{model.name}")
    ctx = {
        "c": c,
        "model": model,
        "gpus": total_gpus(c),
        "dist": acc["distributed_type"],
        "mp": mixed_precision(c),
        "args": args,
        "notes": notes,
        "sky_ok": not sky_caveat(c),
        "dataset": dataset,
        "gb": lambda b: f"{b / GB:.1f} GB",
        "gib": lambda b: f"{b / GiB:.1f} GiB",
        "money": money,
        "runs_as": runs_as(c),
        "save_steps": args["training"]["save_steps"],
        "pins": pins(),
        "port": MAIN_PROCESS_PORT,
        "placeholder": HEAD_NODE_PLACEHOLDER,
        "vllm_server": rl.server(c, model),  # GRPO with vLLM as a server: launch.sh starts it first
        "tokens": _token_facts(c, options or {}),
        "quantile": launch_figures.quantile(c),  # the card's figures at the plan's ranking quantile
        "wall_time": launch_figures.wall_time_cell(c),
        "cost": launch_figures.cost_cell(c),
        "smoke": SMOKE_CONFIG_FILE,
        "keep": SAVE_TOTAL_LIMIT,
    }
    header = (
        _comment(f"accelerate {acc['distributed_type']} config written by gpu-advisor for {model.name}")
        + _comment(f"stack: {c.label or c.stack.method}; {c.nodes} node(s) x {c.offer.gpu_count} {c.offer.gpu_model}")
        + "# num_processes is the total over all nodes. launch.sh passes --machine_rank / --main_process_ip\n"
        "# on multi-node runs; rdzv_backend and same_network are ignored by accelerate launch 1.15.0.\n"
    )
    return {
        "accelerate_config.yaml": header + _dump(acc),
        "training_args.yaml": _args_header(c, acc) + _dump(args),
        "train.py": (TEMPLATES / "train.py").read_text(encoding="utf-8"),
        "launch.sh": _templates("shell").get_template("launch.sh.j2").render(ctx),
        "README.md": _templates("markdown").get_template("README.md.j2").render(ctx) + (  # which framework's hours
            f"\nHours are predicted for the `{c.stack.framework}` framework (`--framework`); `train.py` runs `hf`: "
            "TRL SFTTrainer (transformers Trainer) + peft + accelerate/DeepSpeed + bitsandbytes.\n")
        + ("" if c.stack.objective.is_sft else rl.rl_readme(c)) + (caps.readme(approval) if approval else ""),
        "sky.yaml": ("# SkyPilot task: sky launch sky.yaml\n" + _comment(f"Estimate: {launch_figures.estimate_line(c)}")
                     + (_comment(sky_caveat(c)) if sky_caveat(c) else "")
                     + _dump(sky_task(c, model))),
        "requirements.txt": "\n".join(reqs) + "\n",
        "slurm.sbatch": launchers.slurm_script(c, model, job, hours_cap),
        **_dstack_files(c, model, job, hours_cap),
        **(caps.files(approval) if approval else {}),
        SMOKE_CONFIG_FILE: json.dumps(launchers.smoke_config(model), indent=2) + "\n",
        "chat_mask.py": Path(chat_mask.__file__).read_text(encoding="utf-8"),
        **({DS_CONFIG_FILE: json.dumps(deepspeed_json(c), indent=2) + "\n"} if acc["distributed_type"] == "DEEPSPEED" else {}),
        **_axolotl_file(c, model, dataset, options or {}),
        **_rl_files(c, args, acc, options or {}),
    }


def _rl_files(c: Candidate, args: dict, acc: dict, options: Mapping[str, object]) -> dict[str, str]:
    """DPO / GRPO: TRL's script and config in place of the SFT ones (advisor/launch/rl.py); {} for SFT."""
    o = c.stack.objective
    if o.is_sft:
        return {}
    dtype, _ = PRECISIONS[c.stack.precision]
    cfg = rl.trl_config(c, dtype=dtype, attention=ATTN_NAMES[c.stack.attention], mixed_precision=mixed_precision(c),
                        optim=techniques.get(c.stack.optimizer).hf_optim, checkpointing=bool(args["training"]["activation_checkpointing"]),
                        epochs=float(options.get("epochs") or 1), save_steps=args["training"]["save_steps"])
    shared = {k: v for k, v in args.items() if k != "training"}
    shared["objective"] = {"kind": o.kind, "trl_config": rl.TRL_CONFIG_FILE, "settings": o.model_dump(mode="json"),
                           "seq_len": c.shape.seq_len}  # rows' tokens, the planner's unit (--benchmark's measured.json)
    header = _comment(f"trl.{o.kind.upper()}Config fields written by gpu-advisor: the stack of the estimate "
                      f"({c.label or c.stack.method}); train.py reads them (trl.{o.kind.upper()}Config(**this file))")
    files = {
        "train.py": (TEMPLATES / "train_rl.py").read_text(encoding="utf-8"),
        rl.TRL_CONFIG_FILE: header + _dump(cfg),
        "training_args.yaml": _args_header(c, acc) + "# DPO/GRPO: the trainer's own fields are in trl_config.yaml\n"
        + _dump(shared),
    }
    if o.kind == "grpo":
        files[rl.REWARDS_FILE] = (TEMPLATES / "rewards.py").read_text(encoding="utf-8")
    return files


def _dstack_files(c: Candidate, model: ModelSpec, job: str, hours_cap: float | None = None) -> dict[str, str]:
    """dstack.yml (a task), and for a multi-node plan fleet.dstack.yml (placement: cluster), which the task names."""
    task = launchers.dstack_task(c, model, job, setup_commands(c), hours_cap)
    note = _comment(f"Estimate: {launch_figures.estimate_line(c)}") + ("" if launchers.dstack_backend(c.offer.provider)
        else _comment(f"dstack has no {c.offer.provider!r} backend: no backends/regions pin; any backend within max_price."))
    if c.nodes == 1:
        return {"dstack.yml": "# dstack task: dstack apply -f dstack.yml\n" + note + _dump(task)}
    fleet = launchers.dstack_fleet(c, model, job)
    return {
        "dstack.yml": ("# dstack task on a cluster fleet: dstack apply -f fleet.dstack.yml, then dstack apply -f "
                       "dstack.yml\n" + note + _dump(task)),
        "fleet.dstack.yml": "# dstack fleet for dstack.yml's nodes: dstack apply -f fleet.dstack.yml\n" + note + _dump(fleet),
    }


def _token_facts(c: Candidate, options: Mapping[str, object]) -> dict:
    """What the README says about tokens: those the plan's hours count (through the model), and those that carry
    loss when the plan counted its dataset (`plan --dataset`: dataset_loss_tokens)."""
    loss = options.get("dataset_loss_tokens")
    kept = options.get("dataset_kept_tokens")
    return {"train": options.get("train_tokens"), "kept": kept if isinstance(kept, (int, float)) else None,
            "loss": loss if isinstance(loss, (int, float)) and not isinstance(loss, bool) else None,
            "epochs": float(options.get("epochs") or 1)}


def _axolotl_file(c: Candidate, model: ModelSpec, dataset: str, options: Mapping[str, object]) -> dict[str, str]:
    """axolotl.yaml when the plan came from an axolotl config (advisor/launch/axolotl.py); its caveats warn."""
    if not wants_axolotl(options):
        return {}
    cfg, notes = axolotl_config(c, model_name=model.name, family=model.family, moe=model.is_moe,
                                layer=DECODER_LAYERS.get(model.family), dataset=dataset,
                                epochs=float(options.get("epochs") or 1), optimizer=techniques.get(c.stack.optimizer).hf_optim,
                                ds_file=DS_CONFIG_FILE)
    for note in notes:
        warnings.warn(note, LaunchWarning, stacklevel=3)
    header = (_comment(f"axolotl config written by gpu-advisor for {model.name}: the stack of the estimate")
              + _comment(f"stack: {c.label or c.stack.method}; {c.nodes} node(s) x {c.offer.gpu_count} {c.offer.gpu_model}")
              + "# Run from this folder (its deepspeed and datasets paths are relative): axolotl train axolotl.yaml\n"
              + "".join(_comment(n) for n in notes))
    return {AXOLOTL_FILE: header + _dump(cfg)}


def _comment(text: str) -> str:
    """One '# ...' line for a YAML or shell file. Plan-derived text goes through advisor.text.plain, so it
    cannot hold a line break (LF, CR, NEL, U+2028/9) or an escape sequence that would end the comment."""
    return f"# {plain(text)}\n"


def _args_header(c: Candidate, acc: dict) -> str:
    text = "# Read by train.py. Every memory-relevant setting equals the estimate.\n"
    if acc["distributed_type"] == "FSDP" and c.stack.grad_checkpointing:
        text += "# Gradient checkpointing is ON, applied by FSDP (fsdp_activation_checkpointing in\n"
        text += "# accelerate_config.yaml); transformers refuses it in both places.\n"
    return text


def write_bundle(files: Mapping[str, str], out_dir: str | os.PathLike, force: bool = False) -> Path:
    """Write the bundle; refuse an existing non-empty folder unless `force`. Every file is written into a
    hidden folder beside `out_dir` first, which is then renamed into place (or, with --force into a
    non-empty folder, its files are): a full disk or a permission error leaves no partial bundle, so a
    rerun needs no --force."""
    out = Path(out_dir)
    shown = plain(out)
    if out.is_symlink() and not out.exists():
        raise AdvisorError(f"--out: {shown} is a symbolic link to {plain(os.readlink(out))}, which does not exist; "
                           "remove the link or create the folder it points to.")
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out: {shown} exists and is not a folder; give a new or empty folder.")
    staging = None
    try:
        non_empty = out.is_dir() and any(out.iterdir())
        if non_empty and not force:
            raise BadInput(f"--out: folder {shown} exists and is not empty; pass --force to overwrite its bundle files.")
        if not out.parent.exists():
            out.parent.mkdir(parents=True)
        sweep_staging(out)
        staging = _staging_folder(out)
        for name, text in files.items():
            atomic_write(staging / name, text, mode=0o755 if name.endswith((".sh", ".py")) else 0o644)
        if non_empty or out.is_symlink():  # keep the folder (and what else it holds): move the files in
            for name in files:
                os.replace(staging / name, out / name)
        else:
            os.replace(staging, out)  # rename(2) onto a missing or empty folder: all files appear at once
            staging = None
    except OSError as exc:  # permissions, a full disk, a parent that is a file: the environment, exit 1
        raise AdvisorError(f"--out: cannot write the bundle to {shown}: {(exc.strerror or str(exc)).lower()}"
                           f"{_OS_HINTS.get(exc.errno, '')}.") from None
    finally:
        if staging is not None:
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    return out


def _staging_folder(out: Path) -> Path:
    """A new hidden folder beside `out` (same file system, so the final rename is atomic); the umask
    decides its permissions, as for a folder made by mkdir."""
    import secrets

    for _ in range(8):
        path = out.parent / f".{out.name[:64]}.partial-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "cannot create a staging folder", str(out.parent))


def sweep_staging(out: Path) -> list[Path]:
    """Remove the staging folders a killed run left beside `out` (SIGKILL skips write_bundle's cleanup):
    those named for a process that no longer runs, and older unnamed ones (`.partial-<hex>`) an hour old.
    A folder of a live run, or one that cannot be removed, is left alone. Returns what was removed."""
    import re
    import shutil
    import time

    pattern = re.compile(re.escape(f".{out.name[:64]}.partial-") + r"(?:(\d+)-)?[0-9a-f]{8}")
    removed = []
    try:
        entries = list(os.scandir(out.parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        if m.group(1) is not None and _running(int(m.group(1))):
            continue
        if m.group(1) is None and time.time() - entry.stat(follow_symlinks=False).st_mtime < 3600:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _running(pid: int) -> bool:
    """Whether a process of this id runs (ours, or another user's that we may not signal)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


_OS_HINTS = {
    errno.EACCES: " (check the folder's permissions or choose another --out)",
    errno.EPERM: " (check the folder's permissions or choose another --out)",
    errno.ENOSPC: " (free some space or choose another --out)",
    errno.ENOTDIR: " (a part of the path is a file, not a folder)",
    errno.EROFS: " (choose a writable --out)",
    errno.EEXIST: " (a file or a broken link is in the way)",
}


class Raw(str):
    """A Markdown fragment built here (a code span of our own constant): printed unescaped."""


def _shell_value(value: object) -> str:
    """What `{{ ... }}` may print in launch.sh: numbers as they are; any text (which the template puts in
    comments only) through advisor.text.plain, so it can never end the comment line. Text that has to be
    part of a command would go through the `shq` filter (shlex.quote) instead."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return plain(value)


def _markdown_value(value: object) -> str:
    """What `{{ ... }}` prints in README.md: advisor.text.md (markup, HTML and autolinks escaped)."""
    if isinstance(value, Raw):
        return str(value)
    return md(value)


def _code(text: object) -> Raw:
    """Our own constant (a distributed type, a precision mode) as a Markdown code span."""
    s = plain(text).replace("`", "'")
    return Raw(f"`{s}`")


@functools.cache
def _templates(kind: str):
    """jinja2 for launch.sh ("shell") or README.md ("markdown"); every printed value is made safe for
    its format by `finalize`, so a template cannot forget it."""
    import shlex

    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # shell and Markdown, not HTML
        finalize=_shell_value if kind == "shell" else _markdown_value,
    )
    env.filters["shq"] = lambda v: shlex.quote(str(v))
    env.filters["code"] = _code
    return env


@functools.lru_cache(maxsize=1)
def _dumper():
    """PyYAML's SafeDumper writing multi-line strings as literal blocks; made on first use, so that
    importing this module (every `gpu-advisor` command lists `launch`) does not load PyYAML."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(str, _str_presenter)
    return _Dumper


def _str_presenter(dumper: yaml.SafeDumper, data: str):
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


def _dump(data: dict) -> str:
    # safe_dump quotes 'NO' and 'no' itself (YAML 1.1 booleans, reference §1.5).
    import yaml

    return yaml.dump(data, Dumper=_dumper(), sort_keys=False, default_flow_style=False, allow_unicode=True)


def _slug(text: str) -> str:
    """A SkyPilot task name: ASCII letters and digits joined by single dashes (sky/task.py in
    skypilot-org/skypilot: _VALID_NAME_REGEX '[a-z0-9]+(?:[._-]{1,2}[a-z0-9]+)*', "ASCII characters");
    a Cyrillic or fullwidth name, which str.isalnum accepts, would be refused by `sky launch`."""
    out = "".join(ch.lower() if ch.isascii() and ch.isalnum() else "-" for ch in text)
    return "-".join(p for p in out.split("-") if p)[:60].strip("-") or "ft"
