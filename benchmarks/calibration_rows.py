"""Published peak-memory measurements as typed rows the estimator can be run on.

Reads `benchmarks/data/calibration/measured_memory.csv` (see SOURCES.md and PROVENANCE.md beside it) and turns each
row into a model (catalog ModelSpec, or one built from the model's published config), a
`Stack`, a `Shape`, the measured bytes (unit converted per row) and the kind of number
measured. Rows whose settings the estimator does not model are kept, marked `excluded`
with the reason -- never dropped silently.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from advisor.model.architecture import default_attention, supported_attention
from advisor.model.spec import ModelSpec
from advisor.stacks import Shape, Stack

REPO = Path(__file__).resolve().parents[1]
CALIBRATION_DIR = REPO / "benchmarks" / "data" / "calibration"
MEASURED_CSV = CALIBRATION_DIR / "measured_memory.csv"

GB, GIB = 10**9, 2**30
KINDS = ("allocated", "reserved", "nvidia-smi", "fit_test", "unknown", "none")
CONF_ORDER = ("high", "med", "low")

# Longest Alpaca example in Llama-2 tokens with the prompt template (LitGPT's resource
# tables, rows lr-11..19: "longest example 1304 tok"). Used where a row says only
# "alpaca, dynamic": with dynamic padding the peak step is the longest batch.
ALPACA_LONGEST_LLAMA2 = 1304


@dataclass
class CalibrationRow:
    """One published measurement, mapped onto our model / stack / shape vocabulary."""

    id: str
    source_url: str
    conf: str  # high | med | low (after any downgrade noted in `assumptions`)
    model_ref: str  # the model as the source names it
    params: int  # published parameter count
    kind: str  # allocated | reserved | nvidia-smi | fit_test | unknown | none
    spec: ModelSpec | None = None
    stack: Stack | None = None
    shape: Shape | None = None
    gpu: str | None = None  # canonical GPU name (pricing.gpus) when known
    measured_bytes: int | None = None
    unit: str = ""  # GB | GiB: the unit the published number was in
    fit_observed: str | None = None  # fits | oom (fit_test rows)
    tokens_per_sec_total: float | None = None  # over all GPUs of the run
    grad_accum: int = 1
    excluded: str | None = None
    assumptions: list[str] = field(default_factory=list)
    transformers: str | None = None  # the release the source ran, where it differs in what we model (RELEASE_BY_SOURCE)

    @property
    def included(self) -> bool:
        return self.excluded is None


# ----------------------------------------------------------------------------- models

def _spec(name: str, family: str, source: str, **kw) -> ModelSpec:
    return ModelSpec(name=name, family=family, source=source, **kw)


def _qwen1(name: str, hidden: int, mlp: int, layers: int, heads: int, vocab: int) -> ModelSpec:
    """Qwen-1 as a Qwen2-layout spec: same block (RMSNorm, RoPE, SwiGLU, qkv bias, full MHA).

    Qwen-1's config lists intermediate_size as twice the SwiGLU width (w1 and w2 each have
    half); `mlp` here is the per-matrix width. Parameter counts match the published 1.8B /
    7.7B / 14.2B / 72.3B.
    """
    return _spec(
        name, "qwen2", f"https://huggingface.co/{name}/blob/main/config.json (Qwen-1 mapped to the Qwen2 layout)",
        vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=hidden // heads,
        max_position_embeddings=32768, attention_bias=True,
    )


# Models the published rows use that are not (or not under this name) in the catalog.
# Facts from each model's config.json on the Hub.
FACT_SPECS: dict[str, ModelSpec] = {
    "huggyllama/llama-7b": _spec(
        "huggyllama/llama-7b", "llama", "https://huggingface.co/huggyllama/llama-7b/blob/main/config.json",
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128, max_position_embeddings=2048,
    ),
    "huggyllama/llama-13b": _spec(
        "huggyllama/llama-13b", "llama", "https://huggingface.co/huggyllama/llama-13b/blob/main/config.json",
        vocab_size=32000, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=40, head_dim=128, max_position_embeddings=2048,
    ),
    "Qwen/Qwen-1_8B-Chat": _qwen1("Qwen/Qwen-1_8B-Chat", 2048, 5504, 24, 16, 151936),
    "Qwen/Qwen-7B-Chat": _qwen1("Qwen/Qwen-7B-Chat", 4096, 11008, 32, 32, 151936),
    "Qwen/Qwen-14B-Chat": _qwen1("Qwen/Qwen-14B-Chat", 5120, 13696, 40, 40, 152064),
    "Qwen/Qwen-72B-Chat": _qwen1("Qwen/Qwen-72B-Chat", 8192, 24576, 80, 64, 152064),
}

# Architectures the estimator does not cover (advisor.model.spec.SUPPORTED_FAMILIES).
UNSUPPORTED = {
    "bigscience/T0_3B": "T5 encoder-decoder",
    "bigscience/mt0-xxl": "mT5 encoder-decoder",
    "bigscience/bloomz-7b1": "BLOOM (ALiBi, fused query_key_value)",
    "tiiuae/falcon-7b": "Falcon (parallel attention/MLP, multi-query)",
    "tiiuae/falcon-40b": "Falcon (parallel attention/MLP, grouped multi-query)",
    "microsoft/phi-1_5": "Phi-1/Phi-2 (parallel block, partial rotary, GELU MLP)",
    "microsoft/phi-2": "Phi-1/Phi-2 (parallel block, partial rotary, GELU MLP)",
    "stabilityai/stablelm-base-alpha-3b": "GPT-NeoX (StableLM-alpha)",
    "facebook/opt-1.3b": "OPT",
    "facebook/opt-13b": "OPT",
    "facebook/opt-66b": "OPT",
}


def resolve_model(ref: str) -> tuple[ModelSpec | None, str | None]:
    """(spec, None) for a model we can estimate, or (None, exclusion reason).

    Catalog first (offline: only names the catalog holds, never a Hub fetch), then the
    facts above.
    """
    name = ref.split(" (")[0].strip()
    if name.endswith("-Int4"):
        return None, "GPTQ int4 base (Qwen-*-Chat-Int4) is not bitsandbytes NF4 QLoRA"
    if name in UNSUPPORTED:
        return None, f"architecture not supported ({UNSUPPORTED[name]})"
    from advisor.model import catalog as models

    if name.lower() in {n.lower() for n in models.catalog_names()}:
        return models.load_model(name), None
    if name in FACT_SPECS:
        return FACT_SPECS[name], None
    from benchmarks import throughput_rows  # the time rows' config facts (Yi-34B, CodeLlama-34B, ...)

    if name in throughput_rows.FACT_SPECS:
        return throughput_rows.FACT_SPECS[name], None
    return None, f"model '{name}' not in the catalog and no config facts recorded"


# ----------------------------------------------------------------------------- fields

GPU_PATTERNS = (  # (regex on the source's GPU text, canonical name); first match wins
    (r"A100.*80GB", "A100-80GB"),
    (r"A100", "A100"),
    (r"40GB GPUs", "A100"),
    (r"H100", "H100"),
    (r"A10G", "A10G"),
    (r"T4", "T4"),
    (r"A6000", "A6000"),
    (r"RTX 3090", "RTX3090"),
    (r"RTX 4090", "RTX4090"),
    (r"L40S", "L40S"),
)


def canonical_gpu(text: str, patterns=None) -> str | None:
    """The canonical GPU a source's free-text GPU column names (first matching pattern wins)."""
    for pattern, name in patterns or GPU_PATTERNS:
        if re.search(pattern, text):
            return name
    return None


def parse_conf(notes: str) -> str:
    m = re.match(r"\s*conf=(high|med|low)", notes)
    return m.group(1) if m else "low"


def downgrade(conf: str) -> str:
    return CONF_ORDER[min(CONF_ORDER.index(conf) + 1, len(CONF_ORDER) - 1)]


def parse_unit(row_id: str, notes: str) -> tuple[str, str]:
    """(unit, why). SOURCES.md: notes say GB (1e9) or GiB; where silent, we assume GiB."""
    if re.search(r"GB ?= ?1e9", notes):
        return "GB", "notes: GB = 1e9"
    if "GiB" in notes:
        return "GiB", "notes: GiB"
    return "GiB", "unit not stated; assumed GiB (PyTorch and nvidia-smi count in binary units)"


def parse_seq_len(text: str) -> tuple[int | None, str | None, bool]:
    """(seq_len, assumption, lowers confidence) from the source's sequence-length text."""
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        return int(t), None, False
    m = re.search(r"longest (?:example )?(\d+) tok", t)
    if m:
        return int(m.group(1)), f"dynamic padding: seq_len = longest example ({m.group(1)} tok, stated)", False
    m = re.match(r"(\d+) \(packed", t)
    if m:
        return int(m.group(1)), "packed to a fixed length: every sequence is full, same memory as unpadded", False
    m = re.match(r"(\d+) max", t)
    if m:
        return int(m.group(1)), f"seq_len = the {m.group(1)}-token cap (peak step reaches it)", False
    if "alpaca" in t.lower() and "dynamic" in t.lower():
        return (
            ALPACA_LONGEST_LLAMA2,
            f"'alpaca, dynamic': seq_len = longest Alpaca example, {ALPACA_LONGEST_LLAMA2} Llama-2 tokens "
            "(LitGPT resource tables); confidence lowered",
            True,
        )
    return None, None, False


def lora_targets(text: str, family: str) -> tuple[str, str | None]:
    """Map the source's LoRA target list onto peft module names for this family."""
    t = text.lower()
    if t.startswith("q,k,v,proj,mlp,head"):
        # LitGPT's every linear incl. lm_head (lora_head: true): the block linears by name, plus lm_head
        # (peft's all-linear would leave the output embedding out).
        from advisor.model import families

        fam = families.traits(family)
        names = ["qkv_proj"] if fam.fused_qkv else ["q_proj", "k_proj", "v_proj"]
        names += ["o_proj"] + (["gate_up_proj"] if fam.fused_gate_up else ["gate_proj", "up_proj"]) + ["down_proj"]
        return ",".join(names + ["lm_head"]), "LitGPT LoRA on every linear incl. lm_head (lora_head)"
    if "all" in t or "c_attn,c_proj,w1,w2" in t:
        return "all-linear", None
    if t.startswith("q,v") or t.startswith("q_proj,v_proj"):
        return "q_proj,v_proj", None
    if t.startswith("unknown"):
        return "q_proj,v_proj", "LoRA targets unknown; peft's Llama default q_proj,v_proj assumed"
    return text, None


PRECISIONS = (  # (prefix of the source's precision text, our Precision)
    ("pure_bf16", "bf16"),
    ("amp_bf16", "amp-bf16"),
    ("fp32", "fp32"),
    ("bf16 compute", "bf16"),
    ("fp16 compute", "fp16"),
    ("fp16", "fp16"),
)


def _optimizer(text: str) -> tuple[str | None, str | None]:
    t = text.lower()
    if "4bit" in t:
        return None, "4-bit optimizer states (torchao AdamW4bit) not modelled"
    if "8bit" in t:
        return "adamw-8bit", None
    if t.startswith("adamw") or t.startswith("adam "):
        return "adamw", None
    return None, f"optimizer '{text}' not modelled"


def _sharding(text: str, gpus: int) -> tuple[dict, str | None, str | None]:
    """(Stack fields, assumption, exclusion) for the source's parallelism text."""
    t = text.strip()
    if t == "none":
        return ({"sharding": "ddp"} if gpus > 1 else {}), None, None
    if t.startswith("fsdp_full_shard+cpu_offload"):
        return {"sharding": "fsdp", "offload": "both"}, None, None
    if t.startswith("fsdp_full_shard"):
        return {"sharding": "fsdp"}, None, None
    if t == "zero3_offload":
        return {"sharding": "zero3", "offload": "both"}, None, None
    if t.startswith("zero3"):
        return {"sharding": "zero3"}, None, None
    if t.startswith("zero2"):
        return {"sharding": "zero2"}, None, None
    if t.startswith("deepspeed (finetune_lora_ds.sh"):
        return {"sharding": "zero2"}, "DeepSpeed stage not stated; Qwen's finetune_lora_ds.sh default (ZeRO-2) assumed", None
    return {}, None, f"parallelism '{t}' not modelled"


def _fit_result(notes: str, wall_time: str) -> str | None:
    if re.search(r"result=No OOM", notes):
        return "fits"
    if re.search(r"result=OOM|OOM on|OutOfMemoryError", notes) or wall_time.strip() == "OOM":
        return "oom"
    return None


def _tokens_per_sec(text: str, gpus: int) -> float | None:
    m = re.match(r"\s*([\d.]+)", text or "")
    if not m:
        return None
    value = float(m.group(1))
    return value * gpus if "per GPU" in text or gpus == 1 else value


def stated_grad_accum(notes: str, micro_batch: int, gpus: int) -> int | None:
    """Gradient accumulation the source states (GA8, or a global batch), None when it does not."""
    m = re.search(r"\bGA(\d+)", notes)
    if m:
        return int(m.group(1))
    m = re.search(r"global batch (\d+)", notes)
    if m:
        return max(1, int(m.group(1)) // max(1, micro_batch * gpus))
    return None


def _grad_accum(notes: str, micro_batch: int, gpus: int) -> int:
    return stated_grad_accum(notes, micro_batch, gpus) or 1


# ----------------------------------------------------------------------------- rows

# Sources whose runs predate a loader the estimate models by release (advisor/data/transformers_releases.csv). The
# PEFT docs' FSDP and ZeRO-3 QLoRA pages (huggingface/peft docs/source/accelerate/fsdp.md @018ca9d6) were written for
# transformers 4.39 (PR #29587 added bnb_4bit_quant_storage, which their launch commands set) with FSDP1's keys
# (fsdp_sharding_strategy, fsdp_sync_module_states, fsdp_use_orig_params): quantised layers were staged on the CPU.
# fsdp_qlora (Feb-Mar 2024) loads and quantises layer by layer itself (train.py @05ed9f2a load_and_quantize_parallel,
# low_memory), the loader the cpu-staged row describes; PEFT's MetaMathQA runs name theirs (meta_info.package_info).
RELEASE_BY_SOURCE = {"peftdoc": "4.39.0", "afqlora": "4.39.0", "peftmmqa": "5.13.1"}


def parse_row(r: dict[str, str]) -> CalibrationRow:
    """One CSV row -> CalibrationRow (excluded rows carry the first reason found)."""
    kind = r["mem_kind"].strip() or "none"
    row = CalibrationRow(
        id=r["id"],
        source_url=r["source_url"],
        conf=parse_conf(r["notes"]),
        model_ref=r["model"],
        params=int(float(r["params_b"]) * 1e9),
        kind=kind,
        gpu=canonical_gpu(r["gpu_model"]),
        transformers=RELEASE_BY_SOURCE.get(r["id"].rsplit("-", 1)[0]),
    )
    _map_measurement(row, r)
    row.excluded = _map_row(row, r)
    return row


def _map_measurement(row: CalibrationRow, r: dict[str, str]) -> None:
    """The measured number: its bytes and unit, a fit test's result, what an unstated metric is compared with."""
    notes = r["notes"]
    if r["peak_mem_gb_per_gpu"].strip():
        row.unit, why = parse_unit(row.id, notes)
        row.measured_bytes = round(float(r["peak_mem_gb_per_gpu"]) * (GB if row.unit == "GB" else GIB))
        row.assumptions.append(f"unit {row.unit} ({why})")
    if row.kind == "fit_test":
        row.fit_observed = _fit_result(notes, r["wall_time"])
    if row.kind == "unknown":
        row.assumptions.append("metric not stated: compared with our max_memory_reserved")
    if "range" in notes:
        row.conf = downgrade(row.conf)
        row.assumptions.append("published as a range; upper value; confidence lowered")


def _map_row(row: CalibrationRow, r: dict[str, str]) -> str | None:
    """Fill the model, stack and shape of `row`, in order; the first reason it is excluded, or None."""
    if "SUSPECT" in r["notes"]:
        return "flagged SUSPECT by the data's compiler (below the physical floor for the stated setup)"
    spec, why = resolve_model(r["model"])
    if spec is None:
        return why or "model not resolved"
    row.spec = spec
    modules_to_save, why = _unmodelled_settings(row, r)
    if why:
        return why
    precision = next((ours for prefix, ours in PRECISIONS if r["precision"].startswith(prefix)), None)
    if precision is None:
        return f"precision '{r['precision']}' not modelled"
    optimizer, why = _optimizer(r["optimizer"])
    if optimizer is None:
        return why or "optimizer not modelled"
    gpus = int(r["gpus"] or 1)
    sharding, assumption, why = _sharding(r["parallelism"], gpus)
    if why:
        return why
    if assumption:
        row.conf = downgrade(row.conf)
        row.assumptions.append(assumption + "; confidence lowered")
    seq_len, assumption, lower = parse_seq_len(r["seq_len"])
    if seq_len is None:
        return f"sequence length not stated ('{r['seq_len']}')"
    if assumption:
        row.assumptions.append(assumption)
    if lower:
        row.conf = downgrade(row.conf)
    fields = _stack_fields(row, r, spec, precision, optimizer, gpus, sharding)
    if fields["method"] in ("lora", "qlora"):
        _adapter_fields(row, r, fields, spec, modules_to_save)
    why = _framework_fields(row, r, fields)
    if why:
        return why
    return _build(row, r, fields, seq_len, gpus)


def _unmodelled_settings(row: CalibrationRow, r: dict[str, str]) -> tuple[str, str | None]:
    """(modules_to_save, None), or ("", the first setting the estimator does not model), checked before the rest."""
    text = " ".join(r[k] for k in ("precision", "attention", "grad_checkpointing", "method", "quant_bits")).lower()
    if "fp8" in text:
        return "", "fp8 (Transformer Engine) training not modelled"
    if "unsloth" in text:
        return "", "Unsloth kernels / offloaded gradient checkpointing not modelled"
    if r["quant_bits"].strip().startswith("8") or "8-bit base" in text:
        return "", "LLM.int8 (8-bit) base weights not modelled"
    if "gptq" in text:
        return "", "GPTQ int4 base is not bitsandbytes NF4 QLoRA"
    modules_to_save = ""
    if "modules_to_save" in r["notes"] or "trains wte" in r["notes"]:
        # Qwen's finetune.py "LoRA (emb)": modules_to_save=["wte", "lm_head"] -- peft keeps a trainable copy of
        # each beside the frozen original (our names: embed_tokens, lm_head).
        modules_to_save = "embed_tokens,lm_head"
        row.assumptions.append("trains wte + lm_head fully (peft modules_to_save): embed_tokens,lm_head copies")
    if r["compile"].strip() not in ("", "no"):
        return modules_to_save, "torch.compile not modelled"
    if row.kind == "none" and not r["tokens_per_sec"].strip():
        return modules_to_save, "no memory and no tokens/s: wall time without dataset size"
    if "megatron" in r["parallelism"].lower():
        return modules_to_save, "Megatron tensor/pipeline parallelism not modelled"
    return modules_to_save, None


def _stack_fields(row: CalibrationRow, r: dict[str, str], spec: ModelSpec, precision: str, optimizer: str,
                  gpus: int, sharding: dict) -> dict:
    """The Stack's keywords from the precision, optimizer, checkpointing and attention columns."""
    if precision == "amp-bf16" and sharding.get("sharding", "").startswith("zero"):
        # DeepSpeed's bf16 mode casts the model to bf16 and keeps fp32 master weights and
        # Adam states for the trainable parameters only (DeepSpeed config docs, "bf16").
        precision, optimizer = "bf16", "adamw-fp32"
        row.assumptions.append("DeepSpeed bf16: 16-bit weights, fp32 master + Adam states (bf16 + adamw-fp32)")
    method = r["method"].split()[0]
    fields: dict = dict(method=method, precision=precision, optimizer=optimizer, gpus=gpus, **sharding)
    fields["grad_checkpointing"] = r["grad_checkpointing"].strip().lower().startswith("yes")
    attention = r["attention"].lower()
    fields["attention"] = "flash" if "flash" in attention else "eager" if attention == "eager" else "sdpa"
    if attention.startswith("sdpa/eager"):
        row.assumptions.append("'HF' attention of the time taken as SDPA")
    if fields["attention"] not in supported_attention(spec.family):
        fields["attention"] = default_attention(spec.family)
        row.assumptions.append(f"{spec.family} has no {attention or 'SDPA'} path: {fields['attention']} attention")
    return fields


def _adapter_fields(row: CalibrationRow, r: dict[str, str], fields: dict, spec: ModelSpec,
                    modules_to_save: str) -> None:
    """A LoRA / QLoRA row's rank, targets, adapter dtype and saved modules into `fields`."""
    rank = r["lora_rank"].strip()
    if rank.isdigit():
        fields["lora_rank"] = int(rank)
    else:
        fields["lora_rank"] = 8
        row.conf = "low"
        row.assumptions.append("LoRA rank unknown; peft default r=8 assumed; confidence low")
    targets, assumption = lora_targets(r["lora_targets"], spec.family)
    fields["lora_targets"] = targets
    if assumption:
        row.assumptions.append(assumption)
    if "dora" in r["lora_targets"].lower() or "use_dora true" in r["notes"].lower():
        fields["dora"] = True  # peft LoraConfig(use_dora=True)
    m = re.search(r"\bdropout ([\d.]+)", r["notes"])
    if m:
        fields["lora_dropout"] = float(m.group(1))
    if "litgpt" in r["source_url"].lower() or "fsdp_qlora" in r["source_url"]:
        # LitGPT bf16-true: the whole model, adapters too, in bf16; fsdp_qlora wraps with FSDP1, whose flat
        # parameters hold one dtype (train.py casts the adapters to the model's bf16)
        fields["adapter_dtype"] = "bf16"  # LitGPT bf16-true: the whole model, adapters too, in bf16
    if modules_to_save:
        fields["modules_to_save"] = modules_to_save


def _framework_fields(row: CalibrationRow, r: dict[str, str], fields: dict) -> str | None:
    """What the source's framework (LitGPT, LLaMA-Factory) changes in `fields`; why the row is excluded, or None."""
    method = fields["method"]
    litgpt = "litgpt" in r["source_url"].lower()
    if litgpt and fields.get("sharding") == "fsdp":
        return ("Lightning Fabric FSDP1 (PyTorch 2.1-2.3): per-GPU memory at or above the single-GPU run "
                "(SOURCES.md, lr- and lc- notes), i.e. not sharded as FSDP2 (which the estimator models) shards")
    if litgpt and method in ("lora", "qlora"):
        # litgpt/finetune/lora.py: logits = model(input_ids, lm_head_chunk_size=128); loss =
        # chunked_cross_entropy(logits, targets[..., 1:]) -- a chunked loss, never the whole b·s·V at once.
        fields["loss"] = "chunked"
        row.assumptions.append("LitGPT chunked_cross_entropy (lm_head and loss in 128-token chunks, no fp32 upcast): "
                               "estimated as --loss chunked (fp32 log_softmax kept: an upper bound)")
    if method == "qlora" and litgpt:
        # LitGPT pinned bitsandbytes 0.41.1 (stated in lr- notes) / 0.42 (2024 config hub), whose
        # MatMul4Bit kept each 4-bit linear's input for backward.
        fields["bnb_saves_inputs"] = True
        row.assumptions.append("bitsandbytes of the time (0.41-0.42) saved 4-bit linears' inputs")
    if method == "qlora":
        dq = bool(re.search(r"nf4-dq|double.quant|nested quant", r["notes"] + r["source_locator"], re.I))
        if "hiyouga" in r["source_url"]:
            dq = True  # LLaMA-Factory default double_quantization=True
            row.assumptions.append("double quantisation: LLaMA-Factory default (on)")
        fields["double_quant"] = dq
    fields.setdefault("loss", "standard")  # the published runs computed transformers' loss on full logits
    return None


def _build(row: CalibrationRow, r: dict[str, str], fields: dict, seq_len: int, gpus: int) -> str | None:
    """The Stack, the Shape, tokens/s and accumulation; why the row is excluded, or None."""
    notes = r["notes"]
    try:
        row.stack = Stack(**fields)
        row.shape = Shape(micro_batch=int(r["micro_batch"]), seq_len=seq_len,
                          grad_accum=stated_grad_accum(notes, int(r["micro_batch"]), gpus),
                          padded="padded per batch" in r["seq_len"])  # an attention mask over the padding
    except ValueError as exc:
        return f"settings not representable: {str(exc).splitlines()[0]}"
    row.tokens_per_sec_total = _tokens_per_sec(r["tokens_per_sec"], gpus)
    row.grad_accum = _grad_accum(notes, row.shape.micro_batch, gpus)
    if row.kind == "fit_test" and row.fit_observed is None:
        return "fit test without a stated result"
    if row.kind == "fit_test" and row.gpu is None:
        return "fit test on a card of unstated size"
    return None


def load_rows(path: Path | str | None = None) -> list[CalibrationRow]:
    """Every row of measured_memory.csv, parsed (excluded ones carry their reason)."""
    p = Path(path) if path else MEASURED_CSV
    with p.open(newline="") as f:
        return [parse_row(r) for r in csv.DictReader(f)]
