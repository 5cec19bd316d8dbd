"""What a launch bundle for a plan candidate runs and where it differs from the estimate: the one list of
caveats that `gpu-advisor launch` prints, the bundle README shows and the report lists (a pure function of the
candidate and its model's family, so reports can call it without the bundle writer).

Library versions behind each caveat: accelerate 1.15.0, transformers 5.24.0, peft 0.21.2, deepspeed 0.19.8
(shared/reference/ACCELERATE_CONFIG.md).
"""

from __future__ import annotations

from advisor.model import families
from advisor.results import Candidate
from pricing import providers

# config.json model_type -> class name FSDP wraps (each is in `_no_split_modules` of the family's
# *ForCausalLM / *ForConditionalGeneration in transformers 5.24.0; families.json decoder_layer_class).
DECODER_LAYERS: dict[str, str] = families.decoder_layers()
# Provider names as price sheets spell them -> SkyPilot's cloud name (pricing/data/providers.csv `skypilot`).
SKY_NAMES = {s: p.skypilot for p in providers.providers().values() for s in p.aliases if p.skypilot}
# The SkyPilot release sky.yaml is checked against (the test extra's pin; tests/advisor/launch/test_sky_yaml.py loads every
# planner-written sky.yaml in it) and its clouds: sorted(sky.utils.registry.CLOUD_REGISTRY) in skypilot 0.9.2.
# Hyperbolic is a cloud from SkyPilot 0.10 (sky/clouds/hyperbolic.py in skypilot-org/skypilot).
SKYPILOT_CHECKED = "0.9.2"
SKY_NOTE = "`sky launch sky.yaml` refuses it"  # in the caveat below; sky.yaml repeats that caveat as a comment
# The clouds themselves are providers.csv's `skypilot` column plus kubernetes and vsphere.
SKYPILOT_CLOUDS = providers.skypilot_clouds()


def total_gpus(c: Candidate) -> int:
    """Training processes: every GPU of the run, less those a GRPO vLLM server holds."""
    return c.offer.gpu_count * c.nodes - c.stack.objective.server_gpus


def distributed_type(c: Candidate) -> str:
    if c.stack.sharding == "fsdp":
        return "FSDP"
    if c.stack.is_zero:
        return "DEEPSPEED"
    return "MULTI_GPU" if total_gpus(c) > 1 else "NO"


def expert_lora(c: Candidate, family: str, moe: bool) -> bool:
    """LoRA on a MoE whose fused experts peft wraps with ParamWrapper (all-linear, families.json expert_lora):
    ParamWrapper refuses lora_dropout != 0 (peft 0.21.2 peft/tuners/lora/layer.py ParamWrapper.__init__:
    "does not work with lora_dropout != 0"), so the bundle writes 0, as the estimate assumed."""
    return (c.stack.is_adapter and moe and families.traits(family).expert_lora
            and c.stack.lora_targets.strip() == "all-linear")


def cpu_adam(c: Candidate) -> bool:
    """ZeRO optimizer offload: accelerate replaces the Trainer's optimizer with DeepSpeedCPUAdam
    (accelerate 1.15.0 Accelerator._prepare_deepspeed -> utils/deepspeed.py map_pytorch_optim_to_deepspeed,
    whenever offload_optimizer.device != "none" and zero_force_ds_cpu_optimizer is not false)."""
    return c.stack.is_zero and c.stack.offloads_optimizer


def sky_cloud(provider: str) -> str:
    """The cloud name sky.yaml gives SkyPilot for a price sheet's provider."""
    return providers.sky_cloud(provider)


def runs_as(c: Candidate) -> str:
    """The stack label as it actually trains: the optimizer part says DeepSpeedCPUAdam under ZeRO offload."""
    label = c.label or c.stack.label()
    if not cpu_adam(c):
        return label
    parts = [p.strip() for p in label.split("·")]
    swapped = [f"cpu-adam (DeepSpeedCPUAdam, fp32 states; asked: {p})" if p == c.stack.optimizer else p for p in parts]
    return " · ".join(swapped if swapped != parts else [*parts, "cpu-adam (DeepSpeedCPUAdam, fp32 states)"])


def caveats(c: Candidate, family: str, moe: bool = False) -> list[str]:
    """Every way the bundle for `c` differs from, or could not be checked against, the estimate: the one list
    `launch` prints, the bundle README shows and the report lists (reports.render)."""
    dist = distributed_type(c)
    notes = _fsdp_caveats(c, family, dist)
    if c.stack.optimizer == "adamw-fp32" and c.stack.is_full and c.stack.half_weights and dist != "DEEPSPEED":
        notes.append(
            "adamw-fp32 is written as adamw_torch_fused, whose states follow the weights' dtype: with pure "
            f"{c.stack.precision} weights transformers keeps 16-bit states (less memory than estimated, no fp32 master "
            "copy).")
    if dist == "DEEPSPEED" and c.stack.half_weights and c.stack.is_full:
        notes.append(
            f"DeepSpeed's {c.stack.precision} mode keeps fp32 master weights and fp32 Adam states "
            "(12 B per trainable parameter, ZeRO paper); the plan's memory estimate counts them, as "
            f"`gpu-advisor estimate --precision {c.stack.precision} --sharding {c.stack.sharding}` does.")
    if cpu_adam(c):
        # map_pytorch_optim_to_deepspeed sets adamw_mode only for torch AdamW and 32-bit bitsandbytes AdamW
        mode = ("as AdamW (decoupled weight decay)" if c.stack.optimizer in ("adamw", "adamw-fp32")
                else "as plain Adam with L2 weight decay, adamw_mode off")
        notes.append(
            f"ZeRO optimizer offload: accelerate swaps {c.stack.optimizer} for DeepSpeed's CPU Adam (DeepSpeedCPUAdam) "
            f"with fp32 states in host RAM, running {mode}; that is what trains, whatever the label's optimizer.")
    if expert_lora(c, family, moe) and c.stack.lora_dropout > 0:
        notes.append(
            f"lora_dropout is written as 0 (the plan's stack says {c.stack.lora_dropout:g}): peft wraps this MoE's "
            "experts with LoRA ParamWrappers, which refuse dropout; the estimate assumed 0 for them.")
    if lm_head_adapter(c):
        notes.append(
            "TRL 1.16.0's SFTTrainer refuses a LoRA adapter on lm_head (trl/trainer/sft_trainer.py:1066: its fused LM "
            "head multiplies by lm_head.weight directly, so the adapter would never train), so train.py stops: drop "
            "lm_head from --lora-targets, or train it fully with --modules-to-save lm_head.")
    if sky_caveat(c):
        notes.append(sky_caveat(c))
    if rocm_caveat(c):
        notes.append(rocm_caveat(c))
    return notes


def _fsdp_caveats(c: Candidate, family: str, dist: str) -> list[str]:
    """Where FSDP wraps, offloads or quantizes otherwise than the estimate assumed."""
    notes: list[str] = []
    if dist == "FSDP" and family not in DECODER_LAYERS:
        notes.append(
            f"model family {family!r} has no known decoder-layer class (known: {', '.join(sorted(DECODER_LAYERS))}); "
            "FSDP falls back to SIZE_BASED_WRAP (100M parameters per unit), so the gathered working set "
            "can differ from the estimate.")
    if dist == "FSDP" and c.stack.offload == "optimizer":
        notes.append(
            "FSDP has no optimizer-only CPU offload: fsdp_offload_params moves parameters, gradients and "
            "optimizer states to the CPU (less GPU memory, more host RAM than estimated).")
    if c.stack.is_qlora and dist == "FSDP":
        notes.append("FSDP2 with bitsandbytes 4-bit weights is not verified by accelerate 1.15.0's docs; "
                     "run a few steps before a long job.")
    return notes


def rocm_caveat(c: Candidate) -> str:
    """An AMD (ROCm) row: the bundle's requirements pin CUDA builds (advisor/planner/ranking.py rocm_cuda_pieces,
    STACK_CAVEATS "rocm-host"), so launch.sh as written installs packages this host cannot run; or '' on others.
    ROCm's PyTorch page: https://rocm.docs.amd.com/projects/install-on-linux/en/docs-6.2.0/how-to/3rd-party/
    pytorch-install.html; its FlashAttention-2 fork: https://rocmdocs.amd.com/en/develop/how-to/
    llm-fine-tuning-optimization/model-acceleration-libraries.html."""
    if "rocm-host" not in c.caveats:
        return ""
    where = {"torch": "torch from the rocm index of https://download.pytorch.org/whl/ matching the host's ROCm",
             "flash-attn": "ROCm's flash-attention fork", "bitsandbytes": "bitsandbytes' ROCm build"}
    pieces = ["torch"] + (["flash-attn"] if c.stack.attention == "flash" else [])
    pieces += ["bitsandbytes"] if "rocm-bitsandbytes" in c.caveats else []
    return (f"{c.offer.gpu_model} is an AMD GPU (ROCm): requirements.txt pins the CUDA builds of {', '.join(pieces)}; "
            f"before launch.sh, install their ROCm builds ({'; '.join(where[p] for p in pieces)}), or rent an NVIDIA "
            "row.")


def lm_head_adapter(c: Candidate) -> bool:
    """A LoRA adapter on lm_head (named in --lora-targets; peft's all-linear leaves the output layer out)."""
    return c.stack.method != "full" and "lm_head" in {t.strip() for t in c.stack.lora_targets.split(",")}


def sky_caveat(c: Candidate) -> str:
    """Why sky.yaml cannot launch `c` (its provider is no cloud of the checked SkyPilot), or '' when it can:
    the caveat, the sky.yaml comment, the bundle README's Run block and launch's Run line all follow it."""
    if sky_cloud(c.offer.provider) in providers.skypilot_clouds():
        return ""
    return (f"SkyPilot {SKYPILOT_CHECKED}, the release sky.yaml is checked against, has no "
            f"{sky_cloud(c.offer.provider)!r} cloud, so {SKY_NOTE} (a newer SkyPilot may have one): rent the machine at "
            f"{c.offer.provider}, copy this folder there and run launch.sh.")
