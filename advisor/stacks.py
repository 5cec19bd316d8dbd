"""Technique stacks: every training setting that moves memory or time, validated.

A `Stack` is what a user would put in TrainingArguments + peft + accelerate; a `Shape` is
the per-GPU micro-batch and sequence length. Invalid combinations fail here, once, with one
sentence naming the field and the accepted values.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from advisor import techniques
from advisor.objective import SFT, Objective

Method = Literal["full", "lora", "qlora"]
Precision = Literal["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]


def _known_optimizer(name: str) -> str:
    """An optimizer is a row of advisor/data/optimizers.csv (advisor/techniques.py)."""
    if name not in techniques.rows():
        *rest, last = (repr(n) for n in techniques.names())
        raise ValueError(f"expected {', '.join(rest)} or {last}")  # the words pydantic gives a Literal
    return name


Optimizer = Annotated[str, AfterValidator(_known_optimizer)]
Attention = Literal["flash", "sdpa", "eager"]
Sharding = Literal["none", "ddp", "fsdp", "zero1", "zero2", "zero3"]
Offload = Literal["none", "optimizer", "params", "both"]
AdapterDtype = Literal["fp32", "bf16"]
# The loss path (advisor/estimate/activations.py): "trl" is what the launch bundle's train.py runs, TRL 1.16.0's
# SFTTrainer fused LM head (trl/trainer/sft_trainer.py add_fused_lm_head, trl/kernels/chunked_logprob.py); "standard"
# transformers' ForCausalLMLoss (Trainer, older TRL); "chunked" torchtune's CEWithChunkedOutputLoss; "cce" Apple's
# Cut Cross-Entropy (cut-cross-entropy, axolotl's CutCrossEntropyPlugin).
Loss = Literal["trl", "standard", "chunked", "cce"]
# The training framework the time model predicts for (advisor/estimate/throughput.py): "hf" is what `launch` writes
# (transformers Trainer/TRL + peft + accelerate FSDP or DeepSpeed ZeRO + bitsandbytes, eager modules);
# "tuned" is a torchtitan / llm-foundry-like stack (FSDP2, compile or fused kernels, a lean loop).
Framework = Literal["hf", "tuned"]

METHODS: tuple[str, ...] = get_args(Method)
PRECISIONS: tuple[str, ...] = get_args(Precision)
OPTIMIZERS: tuple[str, ...] = techniques.names()
ATTENTIONS: tuple[str, ...] = get_args(Attention)
SHARDINGS: tuple[str, ...] = get_args(Sharding)
OFFLOADS: tuple[str, ...] = get_args(Offload)
LOSSES: tuple[str, ...] = get_args(Loss)
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
# Subsets the estimator and the bundle ask about, each said once (the predicates on Stack read them).
ADAPTER_METHODS: tuple[Method, ...] = ("lora", "qlora")  # frozen base + trainable adapters (peft)
ZERO_SHARDINGS: tuple[Sharding, ...] = ("zero1", "zero2", "zero3")  # DeepSpeed ZeRO stages
# What each sharding splits across ranks (ZeRO paper, Rajbhandari et al. 2020, §5: stage 1 optimizer states,
# stage 2 + gradients, stage 3 + parameters; FSDP FULL_SHARD splits all three). ddp replicates everything.
PARAM_SHARDINGS: tuple[Sharding, ...] = ("fsdp", "zero3")
GRAD_SHARDINGS: tuple[Sharding, ...] = ("fsdp", "zero2", "zero3")
OPTIMIZER_SHARDINGS: tuple[Sharding, ...] = ("fsdp", "zero1", "zero2", "zero3")
MIXED_PRECISIONS: tuple[Precision, ...] = ("amp-bf16", "amp-fp16")  # fp32 master weights + 16-bit autocast
HALF_PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16")  # weights held in 16-bit (pure bf16 / fp16)
OPTIMIZER_OFFLOADS: tuple[Offload, ...] = ("optimizer", "both")
PARAM_OFFLOADS: tuple[Offload, ...] = ("params", "both")
# Modules peft's modules_to_save can train fully beside the adapters (every supported family names them so).
SAVABLE_MODULES: tuple[str, ...] = ("embed_tokens", "lm_head")
# --lora-targets / --modules-to-save: module names (config attribute names: q_proj, self_attn.o_proj, w1) or
# all-linear, comma-separated. Names only, so nothing else reaches training_args.yaml, and a length no model's
# module list comes near (all of a family's linear names are under 200 characters), checked before any work.
MAX_MODULE_LIST_CHARS = 4_096
_MODULE_LIST = re.compile(r"[A-Za-z0-9_.\-, ]*")


class StackError(ValueError):
    """An impossible combination of settings (exit 2)."""

    exit_code = 2


class Stack(BaseModel):
    """How the model is trained: method, dtypes, optimizer, memory savers, parallelism."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Method = "full"
    lora_rank: int = Field(16, gt=0, le=65_536)  # no model has a linear wider than this
    lora_alpha: int = Field(32, gt=0, le=1_000_000, description="default: 2 × lora_rank")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0)
    lora_targets: str = "all-linear"  # or comma list of module names: "q_proj,v_proj"
    adapter_dtype: AdapterDtype = "fp32"  # peft >= 0.12 upcasts adapters to fp32 by default
    double_quant: bool = True  # QLoRA: quantise the NF4 absmax constants too
    # Older bitsandbytes (the 0.41-0.42 releases of 2023-24) kept every 4-bit linear's input
    # for backward (MatMul4Bit ctx.tensors = (A, B)); current releases keep only the weight.
    bnb_saves_inputs: bool = False
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    grad_checkpointing: bool = False
    attention: Attention = "sdpa"
    gpus: int = Field(1, gt=0)  # total data-parallel ranks (all nodes)
    sharding: Sharding = "none"
    offload: Offload = "none"
    # Techniques a Hugging Face user switches on: Liger Kernel (TrainingArguments
    # use_liger_kernel: fused linear cross-entropy, RMSNorm, SwiGLU, RoPE), a chunked
    # cross-entropy without the other kernels, torch.compile, peft DoRA, and modules trained fully
    # beside the adapters (peft modules_to_save, e.g. "embed_tokens,lm_head").
    liger: bool = False
    loss: Loss = "trl"
    compile: bool = False
    dora: bool = False
    modules_to_save: str = ""
    framework: Framework = "hf"  # time only: what runs the steps (memory is the same)
    # SFT, DPO or GRPO and their settings (advisor/objective.py): what one step of the policy runs
    objective: Objective = SFT

    @field_validator("lora_targets", "modules_to_save", mode="before")
    @classmethod
    def _module_list(cls, v, info):
        """Module names and commas only, at most MAX_MODULE_LIST_CHARS (the length first: a 3.5 MB list is
        refused without being scanned)."""
        option = "--" + info.field_name.replace("_", "-")
        if not isinstance(v, str):
            raise StackError(f"{option}: expected comma-separated module names (got {type(v).__name__}).")
        if len(v) > MAX_MODULE_LIST_CHARS:
            raise StackError(f"{option}: at most {MAX_MODULE_LIST_CHARS:,} characters of module names (got "
                             f"{len(v):,}).")
        if not _MODULE_LIST.fullmatch(v):
            bad = next(ch for ch in v if not _MODULE_LIST.fullmatch(ch))
            raise StackError(f"{option}: U+{ord(bad):04X} refused; give module names (letters, digits, '_', '.', "
                             "'-') separated by commas, e.g. q_proj,v_proj, or all-linear.")
        return v

    @model_validator(mode="before")
    @classmethod
    def _alpha_follows_rank(cls, data):
        """An absent (or null) lora_alpha is 2 × lora_rank, the scaling the CLI and launch bundles use."""
        if isinstance(data, dict) and data.get("lora_alpha") is None:
            data = {**data, "lora_alpha": 2 * int(data.get("lora_rank") or 16)}
        return data

    @model_validator(mode="after")
    def _check(self) -> Stack:
        """Refuse an impossible combination, the first one found in this order: precision and offload, the modules
        an adapter run trains, the loss path, the objective's reference and head."""
        self._check_precision_and_offload()
        targets = self._target_names()
        self._check_trained_modules(targets)
        self._check_loss_path(targets)
        self._check_objective(targets)
        return self

    def _target_names(self) -> set[str]:
        """The --lora-targets names as a set (all-linear stays one name)."""
        return {t.strip() for t in self.lora_targets.split(",")}

    def _check_precision_and_offload(self) -> None:
        if self.is_qlora and self.pure_fp32:
            raise StackError(
                "--precision: QLoRA computes in 16-bit; use bf16, fp16, amp-bf16 or amp-fp16, not fp32."
            )
        if self.offloads and not self.is_sharded:
            raise StackError(
                "--offload: CPU offload needs --sharding fsdp, zero1, zero2 or zero3."
            )
        if self.offloads_params and not self.shards_params:
            raise StackError("--offload: parameter offload needs --sharding fsdp or zero3.")
        # A sharding on one GPU is legal (FSDP on one GPU is used for CPU offload): nothing to shard, no error.

    def _check_trained_modules(self, targets: set[str]) -> None:
        """DoRA and modules_to_save belong to adapter runs; a module is trained fully or adapted, not both."""
        if self.dora and self.is_full:
            raise StackError("--dora: DoRA is a LoRA variant (peft use_dora=True); use it with --method lora or qlora.")
        saved = self.saved_modules
        if saved and self.is_full:
            raise StackError("--modules-to-save: only with --method lora or qlora (full fine-tuning already trains "
                             "every module).")
        unknown = [m for m in saved if m not in SAVABLE_MODULES]
        if unknown:
            raise StackError(f"--modules-to-save: {', '.join(unknown)} not accepted; use "
                             f"{' and/or '.join(SAVABLE_MODULES)} (comma-separated).")
        both = [m for m in saved if m in targets]
        if both and self.is_adapter:
            # peft's ModulesToSaveWrapper refuses a module that already is a LoRA layer (peft/utils/other.py
            # AuxiliaryTrainingWrapper._check_module: BaseTunerLayer -> TypeError).
            raise StackError(f"--modules-to-save: {', '.join(both)} is also in --lora-targets; train it fully or "
                             "with an adapter, not both.")

    def _check_loss_path(self, targets: set[str]) -> None:
        """One fused loss at a time, and none of them under an lm_head adapter (they read its weight directly)."""
        if self.liger and self.loss in ("chunked", "cce"):
            raise StackError(f"--loss {self.loss}: --liger already replaces the loss with its fused linear "
                             "cross-entropy (chunked); use one of them.")
        adapter_on_head = self.is_adapter and "lm_head" in targets
        if self.loss in ("trl", "cce") and adapter_on_head:
            # TRL's fused LM head and CCE multiply lm_head.weight itself (trl/trainer/utils.py _fused_forward:
            # self.get_output_embeddings().weight; axolotl's CCE patch: lm_head.weight): an adapter there never runs.
            raise StackError(f"--lora-targets: --loss {self.loss} reads lm_head's weight directly, so a LoRA adapter on "
                             "lm_head would not train; drop lm_head, train it fully (--modules-to-save lm_head) or use "
                             "--loss standard.")
        if self.liger_loss and adapter_on_head:
            # liger-kernel's lce_forward passes self.lm_head.weight to the fused loss: a LoRA adapter on lm_head
            # would never run (src/liger_kernel/transformers/model/llama.py, lce_forward).
            raise StackError("--lora-targets: Liger's fused linear cross-entropy reads lm_head's weight directly, so a "
                             "LoRA adapter on lm_head would not train; drop lm_head or use --loss chunked instead of "
                             "--liger.")

    def _check_objective(self, targets: set[str]) -> None:
        """DPO / GRPO: the adapter-off reference needs an adapter; their fused head refuses an lm_head adapter."""
        if self.objective.ref_model == "adapter-off" and self.method == "full":
            raise StackError("--ref-model adapter-off: the reference is the base with the LoRA adapter switched off; "
                             "use it with --method lora or qlora (full fine-tuning keeps a copy or precomputes).")
        if not self.objective.is_sft and self.method != "full" and "lm_head" in targets:
            # trl/trainer/dpo_trainer.py:835-842: the fused log-prob head reads lm_head's weight directly
            raise StackError("--lora-targets: TRL's DPO/GRPO trainers score tokens with a fused head that reads "
                             "lm_head's weight directly, so an adapter on lm_head is refused; drop lm_head.")

    @property
    def liger_loss(self) -> bool:
        """Liger's fused linear cross-entropy runs: --liger under transformers' Trainer loss. TRL 1.16.0's
        SFTTrainer turns it off and keeps only Liger's layer kernels (trl/trainer/sft_trainer.py: liger_kernel_config
        fused_linear_cross_entropy False), its own fused LM head computing the loss."""
        return self.liger and self.loss == "standard"

    @property
    def saved_modules(self) -> tuple[str, ...]:
        """The modules trained fully beside the adapters (peft modules_to_save), in order, without blanks."""
        return tuple(dict.fromkeys(m.strip() for m in self.modules_to_save.split(",") if m.strip()))

    @property
    def key(self) -> tuple:
        """The field values as a tuple: a cheap dictionary key for the engine's caches (computed each
        time: a cached value would survive `model_copy(update=...)` and name the wrong stack)."""
        return tuple(self.__dict__.values())  # pydantic keeps exactly the fields there, in order

    # ----------------------------------------------------------------- predicates: the closed sets, asked once
    @property
    def is_full(self) -> bool:
        """Full fine-tuning: every base weight trains."""
        return self.method == "full"

    @property
    def is_adapter(self) -> bool:
        """LoRA or QLoRA: a frozen base with trainable adapters."""
        return self.method in ADAPTER_METHODS

    @property
    def is_qlora(self) -> bool:
        """The frozen base's linears held in NF4 (bitsandbytes 4-bit)."""
        return self.method == "qlora"

    @property
    def is_distributed(self) -> bool:
        """Wrapped for data parallelism (ddp, fsdp or a ZeRO stage), sharded or not."""
        return self.sharding != "none"

    @property
    def is_sharded(self) -> bool:
        """Some training state is split across ranks: fsdp or any ZeRO stage (optimizer states at least)."""
        return self.sharding in OPTIMIZER_SHARDINGS

    @property
    def shards_grads(self) -> bool:
        return self.sharding in GRAD_SHARDINGS

    @property
    def shards_params(self) -> bool:
        """Weights split across ranks: FSDP full shard or ZeRO-3."""
        return self.sharding in PARAM_SHARDINGS

    @property
    def is_zero(self) -> bool:
        """DeepSpeed ZeRO (any stage); its 16-bit modes keep fp32 master weights."""
        return self.sharding in ZERO_SHARDINGS

    @property
    def mixed_precision(self) -> bool:
        """amp-bf16 / amp-fp16: fp32 master weights, 16-bit autocast compute."""
        return self.precision in MIXED_PRECISIONS

    @property
    def pure_fp32(self) -> bool:
        return self.precision == "fp32"

    @property
    def half_weights(self) -> bool:
        """Weights held in 16-bit (pure bf16 or fp16)."""
        return self.precision in HALF_PRECISIONS

    @property
    def fp32_weights(self) -> bool:
        """Weights held in fp32: fp32 itself or mixed precision's masters."""
        return self.pure_fp32 or self.mixed_precision

    @property
    def offloads(self) -> bool:
        return self.offload != "none"

    @property
    def offloads_optimizer(self) -> bool:
        return self.offload in OPTIMIZER_OFFLOADS

    @property
    def offloads_params(self) -> bool:
        return self.offload in PARAM_OFFLOADS

    @property
    def chunked_loss(self) -> bool:
        return self.loss == "chunked"

    @property
    def shard_degree_params(self) -> int:
        """Over how many ranks weights are split (ZeRO-3 / FSDP full shard)."""
        return self.gpus if self.shards_params else 1

    @property
    def shard_degree_grads(self) -> int:
        return self.gpus if self.shards_grads else 1

    @property
    def shard_degree_optimizer(self) -> int:
        return self.gpus if self.is_sharded else 1

    def label(self) -> str:
        """Short human label, e.g. 'qlora r16 · bf16 · adamw-8bit · ckpt · flash · fsdp×8'. DeepSpeed's
        16-bit modes keep fp32 master weights, so a full fine-tune there reads 'bf16 (fp32 master)'."""
        parts = [self.method if self.is_full else f"{self.method} r{self.lora_rank}"]
        if self.dora:
            parts[0] += " dora"
        precision: str = self.precision
        if self.is_full and self.is_zero and self.half_weights:
            precision += " (fp32 master)"
        parts += [precision, self.optimizer]
        if self.grad_checkpointing:
            parts.append("ckpt")
        parts.append(self.attention)
        parts += [name for name, on in (("liger", self.liger), ("chunked-loss", self.loss == "chunked"),
                                        ("cce-loss", self.loss == "cce"),
                                        ("compile", self.compile)) if on]
        if self.modules_to_save:
            parts.append(f"train {self.modules_to_save}")
        if self.is_distributed:
            parts.append(f"{self.sharding}×{self.gpus}")
        elif self.gpus > 1:
            parts.append(f"×{self.gpus}")
        if self.offloads:
            parts.append(f"offload-{self.offload}")
        if self.framework != "hf":
            parts.append(f"{self.framework} framework")
        if not self.objective.is_sft:
            parts.append(self.objective.label(self.method))
        return " · ".join(parts)

    def cli_args(self) -> list[str]:
        """The `gpu-advisor estimate` / `plan` options that reproduce this stack exactly."""
        return _cli_args(self)


class Shape(BaseModel):
    """Per-GPU micro-batch (sequences) and sequence length (tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    micro_batch: int = Field(1, gt=0)
    seq_len: int = Field(2048, gt=0)
    # Micro-batches per optimizer step. None (unknown) assumes accumulation: gradients stay
    # allocated while the next micro-batch's activations build up (the conservative case).
    grad_accum: int | None = Field(None, gt=0)
    # Padded batches (dynamic padding with an attention mask) instead of packed/equal lengths.
    padded: bool = False

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq_len

    def cli_args(self) -> list[str]:
        """The `gpu-advisor estimate` options that reproduce this shape exactly."""
        return _cli_args(self)


# field -> option where the CLI spells it differently; booleans become --flag / --no-flag pairs
_OPTION_NAMES = {"bnb_saves_inputs": ("--bnb-legacy", "--no-bnb-legacy"), "micro_batch": "--batch-size",
                 "padded": ("--padded", "--packed")}


def _cli_args(model: BaseModel) -> list[str]:
    out: list[str] = []
    for name, value in model.__dict__.items():
        if name not in type(model).model_fields or value is None or value == "":
            continue
        if isinstance(value, Objective):
            out += value.cli_args()
            continue
        option = _OPTION_NAMES.get(name, "--" + name.replace("_", "-"))
        if isinstance(value, bool):
            yes, no = option if isinstance(option, tuple) else (option, "--no-" + str(option)[2:])
            out.append(yes if value else no)
        else:
            out += [str(option), str(value)]
    return out
