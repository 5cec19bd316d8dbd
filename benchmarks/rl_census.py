"""What a real TRL DPO or GRPO step holds, term by term, to check advisor/estimate/objectives against.

A tiny random-initialised Llama (saved to a temporary folder, as TRL loads by path) goes through one step of the
real `trl.DPOTrainer` or `trl.GRPOTrainer` (trl 1.16.0; GRPO generates with transformers, no vLLM) on the CPU.
The same saved-tensor census as the SFT harness (benchmarks/measure.py `_Recorder`: saved_tensors_hooks, one count
per storage, parameters excluded) runs around the trainer's `compute_loss` and its backward; model states, the
reference model, transformers' KV cache at the end of generation and GRPO's buffered batch are counted exactly.

    python benchmarks/rl_census.py            # the table: measured vs estimated, per term (~1 min on 2 cores)

The estimate is advisor/estimate/objectives/memory.py with compact=False: off CUDA TRL's fused head scores every
position (trl/trainer/utils.py:1642-1658), which is what runs here.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from advisor.objective import Objective  # noqa: E402
from advisor.stacks import Shape, Stack  # noqa: E402
from benchmarks.measure import _Recorder, _storage_key, _tensor_bytes, model_spec  # noqa: E402

# A small Llama (GQA 4:2) the CPU runs in seconds; vocabulary 1,024 word tokens + pad + eos.
VOCAB = 1024
LLAMA_RL = {
    "model_type": "llama", "vocab_size": VOCAB + 2, "hidden_size": 128, "intermediate_size": 344,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 512, "tie_word_embeddings": False, "pad_token_id": VOCAB, "eos_token_id": VOCAB + 1,
}
# Per-term tolerance: the SFT census's (benchmarks/measure.py TOLERANCE) for what it checks, and the same 10 % for
# the terms these trainers add.
TOLERANCE = {"weights": 0.02, "reference": 0.02, "gradients": 0.02, "optimizer": 0.02, "activations": 0.10,
             "fused_head": 0.10, "loss_terms": 0.10, "kv_cache": 0.10, "buffered_batch": 0.10}


@dataclass(frozen=True)
class RLCase:
    name: str
    stack: Stack
    shape: Shape
    prompt: int  # tokens of every prompt (DPO) or of the longest prompt (GRPO)
    completion: int  # DPO: chosen tokens (rejected are 2 shorter, so rows are padded); GRPO: max_completion_length


@dataclass
class RLMeasured:
    terms: dict[str, int] = field(default_factory=dict)  # weights, reference, gradients, optimizer, activations, ...
    saved: list = field(default_factory=list)  # the SavedTensor records (debugging)
    rows_shape: tuple[int, ...] = ()  # input_ids of the training forward


def _tokenizer(folder: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)}
    vocab.update({"<pad>": VOCAB, "<eos>": VOCAB + 1})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="t0")
    hf.save_pretrained(folder)
    return hf


def _model_folder(folder: Path, precision: str) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = {k: v for k, v in LLAMA_RL.items() if k != "model_type"}
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**cfg, attention_dropout=0.0)).save_pretrained(folder)
    return str(folder)


def _words(n: int, start: int) -> str:
    return " ".join(f"t{(start + i) % VOCAB}" for i in range(n))


def _peft(stack: Stack):
    if stack.method == "full":
        return None
    from peft import LoraConfig

    return LoraConfig(r=stack.lora_rank, lora_alpha=stack.lora_alpha, lora_dropout=stack.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")


def _common_args(stack: Stack, shape: Shape, out: Path) -> dict:
    dtype = {"bf16": "bfloat16", "fp32": "float32", "amp-bf16": "float32"}[stack.precision]
    return dict(output_dir=str(out), per_device_train_batch_size=shape.micro_batch, max_steps=1, report_to=[],
                use_cpu=True, bf16=stack.precision == "amp-bf16", logging_steps=1, save_strategy="no",
                gradient_checkpointing=stack.grad_checkpointing,
                gradient_checkpointing_kwargs={"use_reentrant": True} if stack.grad_checkpointing else None,
                model_init_kwargs={"dtype": dtype, "attn_implementation": stack.attention},
                optim="adamw_torch", gradient_accumulation_steps=shape.grad_accum or 1, disable_dropout=True,
                dataloader_num_workers=0, seed=0)


class _Census:
    """The recorder around compute_loss and its backward, and the states counted after the step."""

    def __init__(self):
        self.recorder = None
        self.gradients = 0
        self.rows_shape = ()

    def wrap(self, trainer) -> None:
        census = self
        original = trainer.compute_loss
        backward = trainer.accelerator.backward

        def compute_loss(model, inputs, return_outputs=False, num_items_in_batch=None):
            params = [*trainer.model.parameters(), *trainer.model.buffers()]
            if trainer.ref_model is not None:
                params += [*trainer.ref_model.parameters(), *trainer.ref_model.buffers()]
            census.recorder = rec = _Recorder(trainer.model, {_storage_key(t) for t in params})
            census.rows_shape = tuple(inputs["input_ids"].shape) if "input_ids" in inputs else \
                (inputs["prompt_ids"].shape[0], inputs["prompt_ids"].shape[1] + inputs["completion_ids"].shape[1])
            with rec.hooks, rec.fn_mode, rec.cast_mode:
                return original(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

        def recorded_backward(loss, **kw):
            rec = census.recorder
            rec.phase = "backward"
            live = rec.live_keys()
            for key, record in rec.seen.items():
                record.transient = key not in live
            with rec.hooks, rec.fn_mode:
                backward(loss, **kw)
            rec.close()
            census.gradients = _tensor_bytes([p.grad for p in trainer.model.parameters() if p.grad is not None])[0]

        trainer.compute_loss = compute_loss
        trainer.accelerator.backward = recorded_backward


def _states(trainer, census: _Census) -> dict[str, int]:
    import torch

    policy = _tensor_bytes(list(trainer.model.parameters()))[0]
    ref = _tensor_bytes(list(trainer.ref_model.parameters()))[0] if trainer.ref_model is not None else 0
    state = [v for s in trainer.optimizer.state.values() for v in s.values()
             if isinstance(v, torch.Tensor) and v.dim() > 0]  # fused/foreach AdamW's scalar step left out, as the SFT harness's
    rec = census.recorder
    saved = [r for r in rec.seen.values() if not r.transient]
    acts = sum(r.storage_bytes for r in saved)
    recompute = 0
    for records in rec.recompute.values():
        recompute = max(recompute, sum(r.storage_bytes for r in records.values()))
    head = sum(r.storage_bytes for r in saved if r.module in _ROOT)
    loss = sum(r.storage_bytes for r in saved if r.module == "<top>")
    return {"weights": policy, "reference": ref, "gradients": census.gradients, "optimizer": _tensor_bytes(state)[0],
            "activations": acts + recompute, "fused_head": head, "loss_terms": loss}


# TRL's fused head (its autograd function and the masked outputs it re-expands) runs in the patched root forward,
# outside every submodule; the trainer's loss runs outside the model ("<top>").
_ROOT = ("", "base_model", "base_model.model")


def measure_dpo(case: RLCase) -> RLMeasured:
    import datasets
    from trl import DPOConfig, DPOTrainer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tok = _tokenizer(folder)
        path = _model_folder(folder, case.stack.precision)
        # TRL appends EOS to each response ("Adding EOS to train dataset"): chosen rows are prompt + completion
        # tokens, rejected ones 2 shorter (right-padded to the chosen ones)
        rows = [{"prompt": _words(case.prompt, 7 * k), "chosen": " " + _words(case.completion - 1, 100 + k),
                 "rejected": " " + _words(case.completion - 3, 300 + k)} for k in range(8)]
        o = case.stack.objective
        args = DPOConfig(**_common_args(case.stack, case.shape, folder / "out"), max_length=None,
                         precompute_ref_log_probs=o.reference(case.stack.method) == "precomputed")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = DPOTrainer(model=path, args=args, train_dataset=datasets.Dataset.from_list(rows),
                                 processing_class=tok, peft_config=_peft(case.stack))
            census = _Census()
            census.wrap(trainer)
            trainer.train()
        return RLMeasured(terms=_states(trainer, census), saved=list(census.recorder.seen.values()),
                          rows_shape=census.rows_shape)


def measure_grpo(case: RLCase) -> RLMeasured:
    import datasets
    import torch
    from trl import GRPOConfig, GRPOTrainer

    o = case.stack.objective
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tok = _tokenizer(folder)
        path = _model_folder(folder, case.stack.precision)
        # two prompts, of case.prompt tokens and 3 fewer: every generation batch of 2 prompts holds both (left
        # padding, as real prompts of different lengths have); completions forced to full length
        rows = [{"prompt": _words(case.prompt - 3 * k, 11 * k)} for k in range(2)]
        args = GRPOConfig(**_common_args(case.stack, case.shape, folder / "out"), num_generations=o.num_generations,
                          max_completion_length=o.max_completion_length, beta=o.effective_beta,
                          generation_kwargs={"min_new_tokens": o.max_completion_length})

        def reward(completions, **kw):
            return [float(len(c)) for c in completions]

        caches = []

        def keep_cache(module, args, kwargs, output):
            if not torch.is_grad_enabled() and getattr(output, "past_key_values", None) is not None:
                caches[:] = [output.past_key_values]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = GRPOTrainer(model=path, reward_funcs=reward, args=args,
                                  train_dataset=datasets.Dataset.from_list(rows), processing_class=tok,
                                  peft_config=_peft(case.stack))
            base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
            handle = base.register_forward_hook(keep_cache, with_kwargs=True)
            census = _Census()
            census.wrap(trainer)
            trainer.train()
            handle.remove()
        terms = _states(trainer, census)
        cache = caches[0] if caches else None
        kv = []
        for layer in getattr(cache, "layers", []) or []:
            kv += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if t is not None]
        terms["kv_cache"] = _tensor_bytes(kv)[0]
        buffered = [v for batch in (trainer._buffered_inputs or []) for v in batch.values()
                    if isinstance(v, torch.Tensor)]
        terms["buffered_batch"] = _tensor_bytes(buffered)[0]
        return RLMeasured(terms=terms, saved=list(census.recorder.seen.values()), rows_shape=census.rows_shape)


def measure(case: RLCase) -> RLMeasured:
    """One real step of the case's trainer on the CPU, counted."""
    return measure_dpo(case) if case.stack.objective.kind == "dpo" else measure_grpo(case)


def estimated(case: RLCase, drop: str | None = None) -> dict[str, int]:
    """The estimate's terms for the case (compact=False: every position scored, as off CUDA). `drop` leaves one
    component out (the tests show a dropped term fails)."""
    from advisor.estimate.engine import Engine
    from advisor.estimate.objectives import memory

    engine = Engine(model_spec(LLAMA_RL, "rl census llama"))
    est = memory.estimate(engine.arch, case.stack, case.shape, compact=False)
    comps = {k: c.bytes for k, c in est.components.items() if k != drop}
    out = {
        "weights": sum(v for k, v in comps.items() if k.startswith("weights.") and k != "weights.reference"),
        "reference": comps.get("weights.reference", 0),
        "gradients": sum(v for k, v in comps.items() if k.startswith("gradients.")),
        "optimizer": sum(v for k, v in comps.items() if k.startswith("optimizer.")),
        "activations": sum(v for k, v in comps.items() if k.startswith("activations.")),
        "fused_head": sum(v for k, v in comps.items() if k.startswith("activations.fused_head.")),
        "loss_terms": comps.get("activations.grpo_loss", 0) + comps.get("activations.dpo_loss", 0),
    }
    if case.stack.objective.kind == "grpo":
        out["kv_cache"] = comps.get("generation.kv_cache", 0)
        out["buffered_batch"] = comps.get("overhead.grpo_buffered_batch", 0)
    return out


def _case(name: str, kind: str, method: str, micro_batch: int, prompt: int, completion: int, ckpt: bool = False,
          precision: str = "bf16", **objective) -> RLCase:
    o = Objective(kind=kind, **({"max_completion_length": completion, "prompt_length": prompt} if kind == "grpo"
                                else {"prompt_length": prompt}), **objective)
    stack = Stack(method=method, precision=precision, attention="sdpa", lora_dropout=0.0, objective=o,
                  grad_checkpointing=ckpt)
    return RLCase(name, stack, Shape(micro_batch=micro_batch, seq_len=prompt + completion, grad_accum=1), prompt,
                  completion)


CASES: tuple[RLCase, ...] = (
    _case("dpo lora (reference = adapter off)", "dpo", "lora", 2, 24, 16),
    _case("dpo full (reference = frozen copy)", "dpo", "full", 2, 24, 16),
    _case("grpo lora beta 0.04 (generate, adapter-off reference pass)", "grpo", "lora", 4, 12, 10,
          num_generations=2, beta=0.04),
    _case("grpo full beta 0 (generate)", "grpo", "full", 4, 12, 10, num_generations=2),
    # TRL's defaults: gradient checkpointing on, and no model_init_kwargs dtype -> fp32 weights under bf16 autocast
    # (keys come out of RoPE in fp32: the KV cache is 4 + 2 B per element)
    _case("dpo lora ckpt (TRL default)", "dpo", "lora", 2, 24, 16, ckpt=True),
    _case("grpo lora fp32 weights + bf16 autocast ckpt (TRL default load)", "grpo", "lora", 4, 12, 10, ckpt=True,
          precision="amp-bf16", num_generations=2),
)


def mismatches(measured: dict[str, int], estimate: dict[str, int]) -> dict[str, str]:
    """Terms whose estimate is off by more than their tolerance (term -> 'measured M estimated E (err)')."""
    out = {}
    for term, value in measured.items():
        guess = estimate.get(term, 0)
        err = (guess - value) / value if value else (0.0 if not guess else float("inf"))
        if abs(err) > TOLERANCE.get(term, 0.10):
            out[term] = f"measured {value:,} estimated {guess:,} ({err:+.1%})"
    return out


def table(cases=CASES) -> int:
    print(f"{'case':58s} {'term':15s} {'measured':>11s} {'estimated':>11s} {'error':>8s}")
    failures = 0
    for case in cases:
        m = measure(case)
        est = estimated(case)
        for term, value in m.terms.items():
            guess = est.get(term, 0)
            err = (guess - value) / value if value else (0.0 if not guess else float("inf"))
            bad = abs(err) > TOLERANCE.get(term, 0.10)
            failures += bad
            print(f"{case.name[:58]:58s} {term:15s} {value:>11,} {guess:>11,} {err:>+8.1%}{'  FAIL' if bad else ''}")
    return failures


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(1 if table() else 0)
