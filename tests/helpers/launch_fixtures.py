"""Candidates, model specs and plans for the launch-bundle tests (no planner needed)."""

from __future__ import annotations

import json
from pathlib import Path

from advisor.model.spec import ModelSpec
from advisor.results import Candidate, ModelInfo, Plan

TINY_LLAMA = {  # random-initialised in tests; never downloaded
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "bos_token_id": 256,
    "eos_token_id": 256,
}


def candidate(**overrides) -> Candidate:
    fields = dict(
        rank=1, provider="aws", region="us-east-1", instance_type="p4de.24xlarge", gpu_model="A100-80GB",
        gpu_count=8, nodes=1, spot=False, method="full", precision="bf16", optimizer="adamw",
        grad_checkpointing=True, attention="sdpa", sharding="fsdp", offload="none", lora_rank=None,
        micro_batch=2, grad_accum=4, seq_len=2048, peak_memory_bytes=61_000_000_000,
        gpu_memory_bytes=79_000_000_000, hours=3.5, train_hours=3.2, cost_usd=114.7, price_hour=32.77,
        price_source="test sheet", price_date="2026-11-30", stack_label="test stack",
        tokens_per_sec=20_000.0, mfu=0.4,
    )
    fields.update(overrides)
    return Candidate(**fields)


def spec(family: str = "llama", name: str = "meta-llama/Llama-3.1-8B") -> ModelSpec:
    return ModelSpec(
        name=name, family=family, source="test", vocab_size=128256, hidden_size=4096,
        intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=131072,
    )


def write_plan(path: Path, candidates: list[Candidate], family: str = "llama",
               name: str = "meta-llama/Llama-3.1-8B") -> Path:
    info = ModelInfo(name=name, family=family, source="test", params_total=8_000_000_000,
                     params_trainable=8_000_000_000, params_active=8_000_000_000)
    plan = Plan(model=info, workload={"seq_len": candidates[0].shape.seq_len if candidates else 2048},
                candidates=candidates, pareto=candidates[:1])
    path.write_text(plan.model_dump_json(), encoding="utf-8")
    return path


def write_tiny_llama(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    return path


def sft_config(training: dict, **overrides):
    """The bundle's `training` section read as train.py reads it: TRL's SFTConfig through transformers'
    HfArgumentParser (the section as defaults, here on the CPU)."""
    from transformers import HfArgumentParser
    from trl import SFTConfig

    parser = HfArgumentParser(SFTConfig)
    parser.set_defaults(**{**training, "use_cpu": True, **overrides})
    (config,) = parser.parse_args_into_dataclasses(args=[])
    return config
