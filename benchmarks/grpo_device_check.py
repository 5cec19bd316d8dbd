"""GRPO on a lent GPU: vLLM colocated beside the trainer, measured against advisor/estimate/objectives.

scripts/device_check.sh runs this after its SFT cases. With CUDA and vLLM importable: a random-weight model (from a
config.json, saved in bf16 so vLLM can load it; nothing downloaded) trains a few GRPO steps with LoRA and vLLM
colocated (trl.GRPOTrainer, vllm_mode colocate, gpu_memory_utilization 0.3, vllm_max_model_length = prompt +
completion). Written to --out/grpo_device.json:
- `measured`: free/total device memory before and after the trainer (with vLLM) is built, torch's peak allocated
  and reserved over the steps, vLLM's own start-up figures from its log (weights, KV cache, CUDA graphs), and the
  dtypes of the generation cache when generation runs through transformers;
- `estimated`: the same setup from advisor/estimate/objectives (vLLM budget, weights, KV pool, trainer peak).
Without vLLM (or with --dry on a CPU) it runs transformers generation instead and checks the KV-cache dtypes TRL's
default fp32 load gives under autocast (keys fp32, values 16-bit for a full model; both fp32 for a PEFT model).

    python benchmarks/grpo_device_check.py --config CONFIG.json --out DIR [--steps 3] [--dry]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from advisor.objective import Objective  # noqa: E402
from advisor.stacks import Shape, Stack  # noqa: E402

GENERATIONS, BATCH = 8, 8
PROMPT, COMPLETION = 256, 256  # on the GPU; --dry uses 16 + 8 (the tests' tiny Llama)
_VLLM_LINES = re.compile(r"(model weights took|Model loading took|KV cache|Graph capturing|CUDA graph|"
                         r"GPU KV cache size|Available KV cache memory|Maximum concurrency)", re.I)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        text = record.getMessage()
        if _VLLM_LINES.search(text):
            self.lines.append(text[:400])


def _tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab - 2)}
    words.update({"<pad>": vocab - 2, "<eos>": vocab - 1})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="t0")


def _estimate(config: dict, use_vllm: bool, card_bytes: int, precision: str) -> dict:
    from advisor.estimate.engine import Engine
    from advisor.model.catalog import from_hf_config

    o = Objective(kind="grpo", num_generations=GENERATIONS, max_completion_length=COMPLETION, prompt_length=PROMPT,
                  vllm="colocate" if use_vllm else "none", card_bytes=card_bytes if use_vllm else None)
    stack = Stack(method="lora", precision=precision, attention="sdpa", grad_checkpointing=True, objective=o)
    est = Engine(from_hf_config(config, name="device check", source="config")).memory(
        stack, Shape(micro_batch=BATCH, seq_len=PROMPT + COMPLETION, grad_accum=1))
    return {"device_total": est.device_total, "phases": est.objective.phases, "vllm": est.objective.vllm,
            "generation": est.objective.generation, "refusals": est.objective.refusals}


def run(config_path: Path, out: Path, steps: int, dry: bool) -> dict:
    global PROMPT, COMPLETION
    if dry:
        PROMPT, COMPLETION = 16, 8
    import datasets
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cuda = torch.cuda.is_available() and not dry
    try:
        import vllm  # noqa: F401

        use_vllm = cuda
    except ImportError:
        use_vllm = False
    config = json.loads(config_path.read_text())
    handler = _Lines()
    logging.getLogger("vllm").addHandler(handler)
    result: dict = {"cuda": cuda, "vllm": use_vllm, "config": config_path.name}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        cfg = AutoConfig.from_pretrained(str(config_path.parent) if config_path.name == "config.json"
                                         else str(config_path))
        with torch.device("cuda" if cuda else "cpu"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        del model
        tok = _tokenizer(cfg.vocab_size)
        tok.save_pretrained(folder)
        if cuda:
            torch.cuda.empty_cache()
            free0, total = torch.cuda.mem_get_info()
            result["measured"] = {"free_before_bytes": free0, "total_bytes": total}
        rows = [{"prompt": " ".join(f"t{(7 * k + i) % 500}" for i in range(PROMPT - 3 * (k % 2)))} for k in range(64)]
        import trl
        from peft import LoraConfig

        # fp32 load (TRL's default) when generating with transformers: the cache dtypes are what is checked
        dtype = "bfloat16" if use_vllm else "float32"
        args = trl.GRPOConfig(
            output_dir=str(Path(tmp) / "out"), per_device_train_batch_size=BATCH, num_generations=GENERATIONS,
            max_completion_length=COMPLETION, max_steps=steps, report_to=[], logging_steps=1, save_strategy="no",
            use_cpu=not cuda, bf16=True, gradient_checkpointing=True, model_init_kwargs={"dtype": dtype},
            use_vllm=use_vllm, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
            vllm_max_model_length=PROMPT + COMPLETION, generation_kwargs={"min_new_tokens": COMPLETION})
        caches = []

        def keep(module, a, kw, output):
            pkv = getattr(output, "past_key_values", None)
            layers = getattr(pkv, "layers", None)
            if layers and getattr(layers[0], "keys", None) is not None and not torch.is_grad_enabled():
                caches[:] = [(str(layers[0].keys.dtype), str(layers[0].values.dtype))]

        t0 = time.time()
        trainer = trl.GRPOTrainer(model=str(folder), reward_funcs=lambda completions, **k: [float(len(c)) for c in
                                                                                          completions],
                                  args=args, train_dataset=datasets.Dataset.from_list(rows), processing_class=tok,
                                  peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                         task_type="CAUSAL_LM"))
        trainer.model.get_base_model().register_forward_hook(keep, with_kwargs=True)
        if cuda:
            free1, _ = torch.cuda.mem_get_info()
            torch.cuda.reset_peak_memory_stats()
            result["measured"]["free_after_init_bytes"] = free1
        trainer.train()
        result["seconds"] = time.time() - t0
        if cuda:
            result["measured"].update(peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                                      peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                                      free_end_bytes=torch.cuda.mem_get_info()[0])
        result["kv_cache_dtypes"] = caches[0] if caches else None
        result["vllm_log"] = handler.lines
        total = result.get("measured", {}).get("total_bytes") or 80 * 2**30
        result["estimated"] = _estimate(config, use_vllm, int(total), "bf16" if use_vllm else "amp-bf16")
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpo_device.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, type=Path, help="config.json of the model (random weights)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dry", action="store_true", help="CPU mechanics only (no vLLM)")
    a = p.parse_args(argv)
    r = run(a.config, a.out, a.steps, a.dry)
    print(f"grpo: vllm={r['vllm']} cuda={r['cuda']} kv cache dtypes {r['kv_cache_dtypes']} "
          f"{r.get('seconds', 0):.0f} s; estimate {r['estimated']['device_total'] / 1e9:.1f} GB"
          + (f"; measured peak reserved {r['measured']['peak_reserved_bytes'] / 1e9:.1f} GB, used after init "
             f"{(r['measured']['total_bytes'] - r['measured']['free_after_init_bytes']) / 1e9:.1f} GB"
             if r.get("measured") else ""))


if __name__ == "__main__":
    main()
