"""The training objective a stack runs: SFT (one forward and backward of the policy), DPO or GRPO, with the
settings that move memory or time and TRL's defaults for them.

Every default is TRL 1.16.0's, cited by file:line in its wheel (trl-1.16.0-py3-none-any.whl, sha256
c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396; no v1.16.0 tag exists in the stored
huggingface/trl history, so the wheel is the citable artifact). vLLM's are 0.33.0's (vllm-0.33.0 wheel, sha256
4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa). Only pydantic and the project's errors are
imported here: `Stack` (advisor/stacks.py) carries an `Objective`, so this module sits below everything that uses
stacks, and the estimators of advisor/estimate/objectives/ read it from there.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from advisor.errors import BadInput

TRL = "trl 1.16.0"
VLLM = "vllm 0.33.0"

Kind = Literal["sft", "dpo", "grpo"]
RefModel = Literal["copy", "adapter-off", "precomputed"]
VllmMode = Literal["colocate", "server", "none"]
KINDS: tuple[str, ...] = Kind.__args__
REF_MODELS: tuple[str, ...] = RefModel.__args__
VLLM_MODES: tuple[str, ...] = VllmMode.__args__

# DPOConfig.loss_type values (trl/trainer/dpo_config.py:245-252). Every one combines per-sequence log-prob sums
# (dpo_trainer.py:1383-1528), so none changes memory; all need the reference's log-probs.
DPO_LOSSES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
# GRPOConfig.loss_type values (trl/trainer/grpo_config.py:801; grpo_trainer.py:3096-3160): per-token elementwise
# terms over the completions, the same tensors for each.
GRPO_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")

# TRL 1.16.0 defaults that move memory or time.
DPO_BETA = 0.1  # dpo_config.py:297 (no memory effect)
DPO_MAX_LENGTH = 1024  # dpo_config.py:195: prompt + completion per sequence, chosen and rejected truncated apart
GRPO_BETA = 0.0  # grpo_config.py:681: 0 loads no reference model (grpo_trainer.py:984-986)
GRPO_GENERATIONS = 8  # grpo_config.py:480
GRPO_COMPLETION = 512  # grpo_config.py:494
GRPO_PROMPT = 512  # TRL 1.16 has no max_prompt_length (DPOConfig/GRPOConfig raise TypeError): the user states it
COLOCATE_UTILIZATION = 0.3  # grpo_config.py:656 vllm_gpu_memory_utilization (colocate only)
SERVER_UTILIZATION = 0.9  # trl/scripts/vllm_serve.py:92-160 (`trl vllm-serve` default --gpu_memory_utilization)
# TRL loads the model in float32 unless model_init_kwargs sets a dtype (trl/trainer/utils.py:1332); the bundle
# writes bfloat16. A config without it trains fp32 weights under bf16 autocast ("amp-bf16" here).
TRL_DEFAULT_LOAD_DTYPE = "float32"


# The GRPO-only fields and their defaults: any other value under SFT or DPO is refused.
GRPO_ONLY_DEFAULTS = {"num_generations": GRPO_GENERATIONS, "max_completion_length": GRPO_COMPLETION, "vllm": "none",
                      "vllm_gpu_memory_utilization": None, "vllm_server_gpus": 1, "vllm_tensor_parallel_size": 1,
                      "vllm_sleep": False, "vllm_max_model_length": None, "num_iterations": 1,
                      "steps_per_generation": None, "generation_batch_per_gpu": None}


class ObjectiveError(ValueError):
    """A setting that does not belong to the objective, or is out of range (exit 2)."""

    exit_code = 2


class Objective(BaseModel):
    """What one training step of the policy does, beyond the stack's memory savers and parallelism.

    `micro_batch` of the shape counts pairs for DPO (2 rows each through the policy) and completions for GRPO
    (TRL's per_device_train_batch_size counts completions: grpo_trainer.py:1544-1546); `seq_len` is one row
    (DPO: max_length, prompt + response; GRPO: prompt + completion)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = "sft"
    # DPO, and GRPO with beta > 0: how the reference model is held (None: what TRL does for the method --
    # the adapter switched off under PEFT, a frozen copy for full fine-tuning).
    ref_model: RefModel | None = None
    loss_type: tuple[str, ...] = ()  # () = TRL's default (DPO sigmoid, GRPO dapo)
    beta: float | None = Field(None, ge=0.0, le=1e6)  # None: TRL's default (DPO 0.1, GRPO 0.0)
    # Prompt tokens per row: DPO (the rest of the row is the response, which the log-prob head scores; default
    # half the row) and GRPO (the longest prompt; default 512). TRL 1.16 does not truncate prompts.
    prompt_length: int | None = Field(None, gt=0, le=16_777_216)
    num_generations: int = Field(GRPO_GENERATIONS, ge=2, le=65_536)
    max_completion_length: int = Field(GRPO_COMPLETION, gt=0, le=16_777_216)
    vllm: VllmMode = "none"  # GRPOConfig use_vllm False by default (grpo_config.py:587)
    vllm_gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    vllm_server_gpus: int = Field(1, ge=1, le=1024)  # GPUs of the instance given to `trl vllm-serve`
    vllm_tensor_parallel_size: int = Field(1, ge=1, le=64)  # colocate (grpo_config.py:671)
    vllm_sleep: bool = False  # vllm_enable_sleep_mode (grpo_config.py:612)
    # None: prompt + completion (what `launch` writes); 0: the model's context, TRL's default when a config leaves it unset
    vllm_max_model_length: int | None = Field(None, ge=0, le=16_777_216)
    importance_sampling: bool = True  # vllm_importance_sampling_correction (grpo_config.py:925)
    num_iterations: int = Field(1, ge=1, le=1024)  # μ (grpo_config.py:689)
    steps_per_generation: int | None = Field(None, ge=1, le=1_048_576)  # None: gradient_accumulation_steps
    # Completions per training GPU per generation when the run's batch is known (the planner: the global batch over
    # the training GPUs; TRL's default steps_per_generation = gradient accumulation makes it that); None: from the
    # shape (micro-batch × steps_per_generation). Not a user setting.
    generation_batch_per_gpu: int | None = Field(None, ge=1, le=1_048_576)
    # Total memory of the GPU vLLM colocates on (cudaMemGetInfo total): its budget is utilisation × this. Set by
    # the planner per GPU and by `estimate --gpu`; not a user setting.
    card_bytes: int | None = Field(None, gt=0)

    @field_validator("loss_type", mode="before")
    @classmethod
    def _names(cls, v):
        """A list (JSON, YAML) or a comma string, as a tuple (the record is hashable)."""
        if isinstance(v, str):
            return tuple(x.strip() for x in v.split(",") if x.strip())
        return tuple(v) if isinstance(v, list) else v

    @field_serializer("loss_type")
    def _list(self, v: tuple[str, ...]) -> list[str]:
        """A list in every dump (python and JSON alike: a dumped stack compares equal to its JSON)."""
        return list(v)

    @model_validator(mode="after")
    def _check(self) -> Objective:
        """Refuse a setting of another objective, then an out-of-place one within GRPO (first found wins)."""
        self._check_belongs()
        self._check_loss_types()
        if self.kind == "grpo":
            self._check_grpo()
        return self

    def _check_belongs(self) -> None:
        """GRPO's settings left at their defaults outside GRPO; SFT takes no reference, beta, prompt or loss type."""
        k = self.kind
        if k != "grpo":
            for name, default in GRPO_ONLY_DEFAULTS.items():
                if getattr(self, name) != default:
                    raise ObjectiveError(f"--{name.replace('_', '-')}: only with --objective grpo (got --objective {k}).")
        if k == "sft":
            for name in ("ref_model", "beta", "prompt_length"):
                if getattr(self, name) is not None:
                    raise ObjectiveError(f"--{name.replace('_', '-')}: only with --objective dpo or grpo.")
            if self.loss_type:
                raise ObjectiveError("--loss-type: only with --objective dpo or grpo (SFT's loss is --loss).")

    def _check_loss_types(self) -> None:
        k = self.kind
        valid = DPO_LOSSES if k == "dpo" else GRPO_LOSSES
        bad = [t for t in self.loss_type if t not in valid]
        if bad:
            raise ObjectiveError(f"--loss-type: {', '.join(bad)} is not a TRL {k.upper()} loss; valid: "
                                 f"{', '.join(valid)}.")

    def _check_grpo(self) -> None:
        """One loss type, a fresh reference, and vLLM settings that match the vLLM mode."""
        if len(self.loss_type) > 1:
            raise ObjectiveError("--loss-type: GRPO takes one loss type.")
        if self.ref_model == "precomputed":
            raise ObjectiveError("--ref-model precomputed: DPO only; GRPO scores fresh completions every step "
                                 "(use --beta 0 for no reference model).")
        if self.vllm == "colocate" and self.vllm_server_gpus != 1:
            raise ObjectiveError("--vllm-server-gpus: only with --vllm server.")
        if self.vllm != "colocate" and self.vllm_sleep:
            raise ObjectiveError("--vllm-sleep: sleep mode frees a colocated vLLM's memory; use it with --vllm colocate.")
        if self.vllm == "none" and self.vllm_gpu_memory_utilization is not None:
            raise ObjectiveError("--vllm-gpu-memory-utilization: only with --vllm colocate or server.")

    # ------------------------------------------------------------------ resolved settings

    @property
    def is_sft(self) -> bool:
        return self.kind == "sft"

    @property
    def effective_beta(self) -> float:
        if self.beta is not None:
            return self.beta
        return DPO_BETA if self.kind == "dpo" else GRPO_BETA if self.kind == "grpo" else 0.0

    @property
    def effective_loss(self) -> tuple[str, ...]:
        if self.loss_type:
            return self.loss_type
        return ("sigmoid",) if self.kind == "dpo" else ("dapo",) if self.kind == "grpo" else ()

    @property
    def utilization(self) -> float:
        """vLLM's gpu_memory_utilization: the user's, else TRL's colocate default or `trl vllm-serve`'s."""
        if self.vllm_gpu_memory_utilization is not None:
            return self.vllm_gpu_memory_utilization
        return SERVER_UTILIZATION if self.vllm == "server" else COLOCATE_UTILIZATION

    @property
    def server_gpus(self) -> int:
        """GPUs of the instance that serve generation (vLLM server mode), not training."""
        return self.vllm_server_gpus if self.kind == "grpo" and self.vllm == "server" else 0

    def reference(self, method: str) -> str:
        """How the reference model is held: 'none' (SFT, or GRPO at beta 0), 'adapter-off', 'copy' or
        'precomputed' (DPO: log-probs computed before training)."""
        if self.kind == "sft" or (self.kind == "grpo" and self.effective_beta == 0.0):
            return "none"
        if self.ref_model is not None:
            return self.ref_model
        return "adapter-off" if method != "full" else "copy"

    def split(self, seq_len: int) -> tuple[int, int]:
        """(prompt, completion) tokens of one row of `seq_len`: DPO's stated prompt (default half the row), the
        rest its response; GRPO's completion is max_completion_length (capped below the row), the rest prompt."""
        if self.kind == "grpo":
            c = min(self.max_completion_length, max(seq_len - 1, 1))
            return seq_len - c, c
        p = self.prompt_length if self.prompt_length is not None else seq_len // 2
        p = min(max(p, 1), max(seq_len - 1, 1))
        return p, seq_len - p

    def grpo_seq_len(self) -> int:
        """One GRPO row: the stated prompt length + max_completion_length."""
        return (self.prompt_length or GRPO_PROMPT) + self.max_completion_length

    def generation_batch(self, micro_batch: int, grad_accum: int | None, gpus: int) -> int:
        """Completions one training GPU holds per generation: per_device_train_batch_size × steps_per_generation
        (grpo_trainer.py:1272-1278; steps_per_generation defaults to gradient_accumulation_steps,
        grpo_config.py:528 / :1098-1100). When the accumulation is unknown, the fewest steps that make the
        global generation batch a whole number of prompt groups (grpo_config.py:1131-1135 refuses the rest)."""
        if self.generation_batch_per_gpu is not None and self.steps_per_generation is None:
            return max(self.generation_batch_per_gpu, micro_batch)
        spg = self.steps_per_generation or grad_accum
        if spg is None:
            per_step = micro_batch * max(gpus, 1)
            spg = self.num_generations // math.gcd(self.num_generations, per_step)
        return micro_batch * spg

    def label(self, method: str = "full") -> str:
        """'dpo ref=adapter-off', 'grpo G8 C512 vllm-colocate@0.3 sleep', '' for SFT."""
        if self.kind == "sft":
            return ""
        if self.kind == "dpo":
            return f"dpo ref={self.reference(method)}"
        parts = [f"grpo G{self.num_generations} C{self.max_completion_length}"]
        if self.vllm == "none":
            parts.append("generate")
        elif self.vllm == "server":
            parts.append(f"vllm-server×{self.vllm_server_gpus}")
        else:
            parts.append(f"vllm-colocate@{self.utilization:g}" + (" sleep" if self.vllm_sleep else ""))
        if self.effective_beta:
            parts.append(f"beta {self.effective_beta:g}")
        return " ".join(parts)

    def cli_args(self) -> list[str]:
        """The `estimate` / `plan` options that reproduce this objective (card_bytes comes from --gpu)."""
        if self.kind == "sft":
            return []
        out = ["--objective", self.kind]
        defaults = Objective(kind=self.kind)
        for name, value in self.__dict__.items():
            if name in ("kind", "card_bytes", "generation_batch_per_gpu") or value == getattr(defaults, name):
                continue
            option = "--max-prompt-length" if name == "prompt_length" else "--" + name.replace("_", "-")
            if name == "vllm_max_model_length" and value == 0:
                out += [option, "model"]
            elif isinstance(value, bool):
                out.append(option if value else "--no-" + option[2:])
            elif isinstance(value, tuple):
                out += [option, ",".join(value)]
            else:
                out += [option, str(value)]
        return out


SFT = Objective()


# Option names (the CLI's, with underscores; plan files use the same keys) -> Objective fields
OPTION_FIELDS = {
    "objective": "kind", "ref_model": "ref_model", "loss_type": "loss_type", "beta": "beta",
    "max_prompt_length": "prompt_length", "num_generations": "num_generations",
    "max_completion_length": "max_completion_length", "vllm": "vllm",
    "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization", "vllm_server_gpus": "vllm_server_gpus",
    "vllm_tensor_parallel_size": "vllm_tensor_parallel_size", "vllm_sleep": "vllm_sleep",
    "vllm_max_model_length": "vllm_max_model_length", "importance_sampling": "importance_sampling",
    "num_iterations": "num_iterations", "steps_per_generation": "steps_per_generation",
}


def pop_objective(options: dict) -> dict:
    """The Objective fields among `options` (CLI / plan-file spelling), popped; absent or None ones left to TRL.
    loss_type takes a comma list; vllm_max_model_length takes 'model' (the model's context: 0)."""
    out = {}
    for option, name in OPTION_FIELDS.items():
        value = options.pop(option, None)
        if value is None:
            continue
        if isinstance(value, Objective):
            raise BadInput(f"--{option.replace('_', '-')}: expected one of {', '.join(KINDS)}.")
        if name == "loss_type":
            value = tuple(v.strip() for v in (value if isinstance(value, (list, tuple)) else str(value).split(","))
                          if str(v).strip())
        elif name == "vllm_max_model_length":
            value = max_model_length(value)
        elif name == "kind" and isinstance(value, str):
            value = value.lower()
        elif name in ("vllm_sleep", "importance_sampling") and not isinstance(value, bool):
            # a quoted 'no' in a plan file is text, not a switch (as PlanRequest's own booleans)
            raise BadInput(f"--{option.replace('_', '-')}: expected true or false (got {str(value)[:40]!r}).")
        out[name] = value
    return out


def max_model_length(value) -> int:
    """'model' (the model's context: 0) or a positive number of tokens."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().lower()
    if text == "model":
        return 0
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise BadInput(f"--vllm-max-model-length: expected a number of tokens or 'model' (got {str(value)[:40]!r}).")


def objective_of(fields: dict) -> Objective:
    """The Objective of these fields (Objective field names); a setting of another objective is refused (exit 2)."""
    from pydantic import ValidationError

    try:
        return Objective(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        ctx = err.get("ctx") or {}
        if isinstance(ctx.get("error"), ObjectiveError):
            raise ctx["error"] from None
        field = str(err.get("loc", ("objective",))[0])
        option = next((o for o, f in OPTION_FIELDS.items() if f == field), field)
        raise BadInput(f"--{option.replace('_', '-')}: {err.get('msg', 'invalid value')} "
                       f"(got {str(err.get('input'))[:40]!r}).") from None
