"""The launch bundle of a DPO or GRPO candidate: TRL's own config (trl_config.yaml), the TRL script, rewards.py.

`rl_files` returns the files that differ from an SFT bundle (advisor/launch/bundle.py calls it): train.py is
templates/train_rl.py (trl.DPOTrainer / trl.GRPOTrainer), trl_config.yaml holds exactly the trl.DPOConfig /
trl.GRPOConfig fields the estimate assumed (it loads with `trl.DPOConfig(**yaml)` or HfArgumentParser), and
training_args.yaml keeps the model, LoRA, quantization and data sections with an `objective` section in place of the
SFT `training` one. Every field is a TRL 1.16.0 one; none that TRL 1.16 refuses (max_prompt_length, rpo_alpha, ...).

The model is loaded in the dtype the estimate used (model_init_kwargs.dtype): TRL's own default is float32
(trl/trainer/utils.py:1332), which would double the weights. vLLM server mode: launch.sh starts `trl vllm-serve` on
the instance's last GPUs and trains on the others (TRL's documented recipe).
"""

from __future__ import annotations

from advisor.estimate.engine import Engine
from advisor.estimate.objectives import vllm
from advisor.results import Candidate

REWARDS_FILE = "rewards.py"
TRL_CONFIG_FILE = "trl_config.yaml"
# learning rates TRL's configs default to (dpo_config.py:156 1e-6; grpo_config.py:423 1e-6); LoRA trains higher
LEARNING_RATE = {"full": 1e-6, "lora": 1e-5, "qlora": 1e-5}


def trl_config(c: Candidate, *, dtype: str, attention: str, mixed_precision: str, optim: str, checkpointing: bool,
               epochs: float, save_steps: int) -> dict:
    """trl.DPOConfig / trl.GRPOConfig fields (a flat dict: `trl.DPOConfig(**cfg)` reads it)."""
    st, o = c.stack, c.stack.objective
    cfg: dict = {
        "output_dir": "output",
        "per_device_train_batch_size": c.shape.micro_batch,
        "gradient_accumulation_steps": c.shape.grad_accum,
        "activation_checkpointing": checkpointing,
        "optim": optim,
        "bf16": mixed_precision == "bf16",
        "fp16": mixed_precision == "fp16",
        "learning_rate": LEARNING_RATE[st.method],
        "num_train_epochs": float(epochs),
        "max_grad_norm": 1.0,
        "logging_steps": 10,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 2,
        "report_to": "none",
        "seed": 42,
        # the dtype the estimate used; TRL would load float32 without it (trl/trainer/utils.py:1332)
        "model_init_kwargs": {"dtype": dtype, "attn_implementation": attention},
        "beta": o.effective_beta,
    }
    if checkpointing:
        cfg["activation_checkpointing_kwargs"] = {"use_reentrant": False}
    if st.liger:
        cfg["use_liger_kernel"] = True  # TRL keeps Liger's layer kernels, its own fused head replaces the loss
    if o.kind == "dpo":
        cfg.update(max_length=c.shape.seq_len, loss_type=list(o.effective_loss),
                   precompute_ref_log_probs=o.reference(st.method) == "precomputed")
        return cfg
    prompt, completion = o.split(c.shape.seq_len)
    cfg.update(num_generations=o.num_generations, max_completion_length=completion, loss_type=o.effective_loss[0],
               num_iterations=o.num_iterations, use_vllm=o.vllm != "none")
    if o.steps_per_generation:
        cfg["steps_per_generation"] = o.steps_per_generation
    if o.vllm != "none":
        cfg.update(vllm_mode=o.vllm, vllm_importance_sampling_correction=o.importance_sampling)
        # vLLM's context: what the estimate sized its KV pool for (prompt + completion unless said otherwise)
        cfg["vllm_max_model_length"] = o.vllm_max_model_length or prompt + completion
    if o.vllm == "colocate":
        cfg.update(vllm_gpu_memory_utilization=o.utilization, vllm_tensor_parallel_size=o.vllm_tensor_parallel_size,
                   vllm_enable_sleep_mode=o.vllm_sleep)
    return cfg


def server(c: Candidate, model) -> dict | None:
    """What launch.sh needs to start `trl vllm-serve` on the instance's last GPUs (None: not server mode)."""
    o = c.stack.objective
    if o.kind != "grpo" or o.vllm != "server":
        return None
    prompt, completion = o.split(c.shape.seq_len)
    total = c.offer.gpu_count  # the server runs on the first node
    gpus = o.vllm_server_gpus
    card = o.card_bytes or 0
    tp = 1
    if card:
        tp = vllm.server_tp(Engine.of(model).arch, c.stack, c.shape.seq_len, card)
    train = c.offer.gpu_count - gpus
    return {
        "model": model.name, "tp": tp, "dp": max(gpus // tp, 1), "utilization": o.utilization,
        "max_model_len": o.vllm_max_model_length or prompt + completion,
        "server_ids": ",".join(str(i) for i in range(train, total)),
        "train_ids": ",".join(str(i) for i in range(train)),
    }


def rl_readme(c: Candidate) -> str:
    """The README section of a DPO / GRPO bundle."""
    o = c.stack.objective
    lines = ["", f"## {o.kind.upper()} with TRL", "",
             f"`train.py` runs `trl.{'DPOTrainer' if o.kind == 'dpo' else 'GRPOTrainer'}` with `trl_config.yaml` "
             f"(`trl.{o.kind.upper()}Config` fields) and the model/LoRA/data sections of `training_args.yaml`. "
             "The model loads in the dtype the estimate used (`model_init_kwargs.dtype`; TRL's own default is "
             "float32, twice the weights).", ""]
    if o.kind == "dpo":
        lines += ["Data: JSONL lines `{\"prompt\": ..., \"chosen\": ..., \"rejected\": ...}`. "
                  f"`max_length` {c.shape.seq_len} tokens per sequence (prompt + response); reference: "
                  f"{o.reference(c.stack.method)}."]
    else:
        lines += ["Data: JSONL lines `{\"prompt\": ...}`. Edit `rewards.py` (its reward is a placeholder). "
                  f"`num_generations` {o.num_generations}, `max_completion_length` {o.max_completion_length}; "
                  f"`per_device_train_batch_size` counts completions. Generation: "
                  + {"none": "transformers `generate` in the trainer.",
                     "colocate": f"vLLM colocated (`vllm_gpu_memory_utilization` {o.utilization:g}).",
                     "server": f"vLLM server on the last {o.vllm_server_gpus} GPU(s), started by launch.sh "
                               "(`trl vllm-serve`); training on the others."}[o.vllm]]
    lines += ["", "Smoke test on any machine (random tiny model, transformers generation, two steps): "
              "`accelerate launch --config_file accelerate_config.yaml train.py --config training_args.yaml "
              "--init_from_config path/to/config.json --max_steps 2 --output_dir /tmp/smoke`.", "",
              "Measured run: `bash launch.sh --benchmark [--steps N]` trains 3 warm-up steps plus N timed optimizer "
              "steps (20) of the planned setup, saves nothing and writes `measured.json` (tokens through the policy "
              "per second, generation and reference passes included); then `gpu-advisor calibrate measured.json`.",
              ""]
    return "\n".join(lines)
