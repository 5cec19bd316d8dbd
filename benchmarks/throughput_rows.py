"""Published throughput measurements as typed rows the time model can be run on.

The evidence files that feed the time calibration:

* `benchmarks/data/throughput/published_throughput.csv` (SOURCES.md beside it): 12 sources of
  tokens/s with the settings to map the run;
* `benchmarks/data/calibration/measured_memory.csv`: the memory set's rows that also state tokens/s
  or a step time (mapped by `benchmarks/calibration_rows.py`);
* `benchmarks/results/gpu_measure_*.csv`: our own CUDA harness's timed cases, when a GPU run was
  committed (a source of its own, `gpumeasure`).

Each row becomes a model spec, a `Stack`, a `Shape` (with its gradient accumulation), a GPU, a node
count and the measured tokens/s over all GPUs, with the source prefix (`vlm`, `titan`, ...) that
leave-one-source-out cross-validation holds out together. Rows the time model cannot represent, or
that the data's compiler rates `conf=low`, are kept with the reason they are excluded — never dropped
silently.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from advisor.model.spec import ModelSpec
from advisor.stacks import Shape, Stack
from benchmarks.calibration_rows import canonical_gpu, parse_conf

REPO = Path(__file__).resolve().parents[1]
PUBLISHED_CSV = REPO / "benchmarks" / "data" / "throughput" / "published_throughput.csv"
# The training framework of each source, with why (benchmarks/data/throughput/frameworks.csv)
FRAMEWORKS_CSV = REPO / "benchmarks" / "data" / "throughput" / "frameworks.csv"


def frameworks() -> dict[str, tuple[str, str]]:
    """source prefix -> (framework, why): 'hf' = transformers modeling code (+ Trainer/peft/DeepSpeed/
    bitsandbytes), 'tuned' = a framework with its own tuned model code or compiled/fused kernels."""
    with FRAMEWORKS_CSV.open(newline="") as f:
        return {r["source"]: (r["framework"], r["why"]) for r in csv.DictReader(f)}


@dataclass
class TimeRow:
    """One published throughput figure, mapped onto the time model's inputs."""

    id: str
    source: str  # the prefix of the id: the unit held out together
    conf: str
    file: str  # which evidence file it came from
    model_ref: str
    spec: ModelSpec | None = None
    stack: Stack | None = None
    shape: Shape | None = None  # grad_accum set (1 when the source says none)
    gpu: str | None = None
    nodes: int = 1
    network_gbps: float | None = None
    tokens_per_sec: float | None = None  # total over all GPUs
    link_gb_s: float | None = None  # GPU-to-GPU GB/s per direction where the card's differs from the table's
    power_w: float | None = None  # a power limit the source set below the card's own (clock ∝ power^(1/3))
    host_vcpus_per_gpu: float | None = None  # the host's vCPUs per GPU where the source names them (CPU offload)
    framework: str = "hf"  # hf | tuned: from the source (frameworks.csv); also set on `stack`
    excluded: str | None = None
    assumptions: list[str] = field(default_factory=list)

    @property
    def included(self) -> bool:
        return self.excluded is None


# ----------------------------------------------------------------------------- models

def _spec(name: str, source: str, **kw) -> ModelSpec:
    kw.setdefault("family", "llama")
    kw.setdefault("max_position_embeddings", 4096)
    return ModelSpec(name=name, source=source, **kw)


def _mpt(size: str, d: int, layers: int, heads: int) -> ModelSpec:
    """MPT (llm-foundry) as a Llama-layout spec with the same matmul parameters: MPT's GELU MLP has
    two d×4d matrices (8d²), a SwiGLU of width 8d/3 has the same; vocabulary 50368, tied embeddings,
    full multi-head attention. Parameter counts match the table's NumParams at seq 2048."""
    return _spec(
        f"mosaicml/mpt-{size} (llm-foundry yamls/pretrain/mpt-{size}.yaml)",
        f"https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/yamls/pretrain/mpt-{size}.yaml "
        "(d_model, n_layers, n_heads, expansion_ratio 4, vocab 50368) mapped to a SwiGLU layout",
        vocab_size=50368, hidden_size=d, intermediate_size=round(8 * d / 3), num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=d // heads, tie_word_embeddings=True,
    )


# Models the published rows use that are not (or not under this name) in the catalog; facts from
# each model's config.json on the Hub (or the framework's yaml).
FACT_SPECS: dict[str, ModelSpec] = {
    "01-ai/Yi-34B-200K": _spec(
        "01-ai/Yi-34B-200K", "https://huggingface.co/01-ai/Yi-34B-200K/blob/main/config.json",
        vocab_size=64000, hidden_size=7168, intermediate_size=20480, num_hidden_layers=60,
        num_attention_heads=56, num_key_value_heads=8, head_dim=128, max_position_embeddings=200000,
    ),
    "01-ai/Yi-34B": _spec(
        "01-ai/Yi-34B", "https://huggingface.co/01-ai/Yi-34B/blob/main/config.json",
        vocab_size=64000, hidden_size=7168, intermediate_size=20480, num_hidden_layers=60,
        num_attention_heads=56, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
    ),
    "huggyllama/llama-7b": _spec(
        "huggyllama/llama-7b", "https://huggingface.co/huggyllama/llama-7b/blob/main/config.json",
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128,
    ),
    "codellama/CodeLlama-34b-hf": _spec(
        "codellama/CodeLlama-34b-hf (Llama-2-34B architecture)",
        "https://huggingface.co/codellama/CodeLlama-34b-hf/blob/main/config.json",
        vocab_size=32000, hidden_size=8192, intermediate_size=22016, num_hidden_layers=48,
        num_attention_heads=64, num_key_value_heads=8, head_dim=128,
    ),
    # GPT-NeoX / GPT-J as Llama-layout specs with the same matmul parameters (their GELU MLP's two d×4d
    # matrices = a SwiGLU of width 8d/3, as for MPT above); LayerNorm and parallel attention + MLP differ only
    # in elementwise work.
    "databricks/dolly-v2-7b": _spec(
        "databricks/dolly-v2-7b (GPT-NeoX, pythia-6.9b shapes, mapped to a SwiGLU layout)",
        "https://huggingface.co/databricks/dolly-v2-7b/blob/main/config.json (hidden 4096, 32 layers, 32 heads, "
        "intermediate 16384 GELU, vocab 50280, untied embed_out)",
        vocab_size=50280, hidden_size=4096, intermediate_size=round(8 * 4096 / 3), num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128, max_position_embeddings=2048,
    ),
    "EleutherAI/gpt-j-6B": _spec(
        "EleutherAI/gpt-j-6B (GPT-J, mapped to a SwiGLU layout)",
        "https://huggingface.co/EleutherAI/gpt-j-6B/blob/main/config.json (n_embd 4096, n_layer 28, n_head 16, "
        "n_inner 16384 GELU, vocab 50400, untied lm_head)",
        vocab_size=50400, hidden_size=4096, intermediate_size=round(8 * 4096 / 3), num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=16, head_dim=256, max_position_embeddings=2048,
    ),
    "mpt-1b": _mpt("1b", 2048, 24, 16),
    "mpt-3b": _mpt("3b", 2560, 32, 20),
    "mpt-7b": _mpt("7b", 4096, 32, 32),
    "mpt-13b": _mpt("13b", 5120, 40, 40),
    "mpt-30b": _mpt("30b", 7168, 48, 64),
    "mpt-70b": _mpt("70b", 8192, 80, 64),
}


# Same architecture under another repository name (config.json identical in the fields we use).
ALIASES = {
    "NousResearch/Llama-2-7b-hf": ("meta-llama/Llama-2-7b-hf", None),
    "NousResearch/Llama-2-13b-hf": ("meta-llama/Llama-2-13b-hf", None),
    "NousResearch/Llama-2-70b-hf": ("meta-llama/Llama-2-70b-hf", None),
    "meta-llama/Meta-Llama-3-70B": ("meta-llama/Llama-3.1-70B",
                                    "Llama 3 70B = Llama 3.1 70B's architecture (same shapes; RoPE scaling differs)"),
    "lmsys/vicuna-13b-v1.3": ("meta-llama/Llama-2-13b-hf",
                              "Vicuna 13B v1.3 = LLaMA-1 13B = Llama-2-13B's parameter shapes (40 layers, hidden "
                              "5120, FFN 13824, vocab 32000)"),
}


def resolve(ref: str) -> tuple[ModelSpec | None, str | None, str | None]:
    """(spec, assumption, exclusion) for the model text of a published row."""
    from advisor.model import catalog as models

    t = ref.strip()
    m = re.match(r"MPT-(\d+b)", t, re.I)
    if m:
        return FACT_SPECS[f"mpt-{m.group(1).lower()}"], None, None
    arch = re.match(r"Llama-2-(\d+)B architecture", t)
    if arch:
        size = arch.group(1)
        if size == "34":
            return FACT_SPECS["codellama/CodeLlama-34b-hf"], "Llama-2-34B architecture = CodeLlama-34B's config", None
        return models.load_model(f"meta-llama/Llama-2-{size.lower()}b-hf"), None, None
    if t.startswith(("LLaMA-1 7B", "LLaMA-7B")):
        return FACT_SPECS["huggyllama/llama-7b"], None, None
    if t.startswith("Mistral 7B v0.2"):
        # v0.2 = v0.3 without v0.3's 768 extra tokens (32k context, no sliding window, rope_theta 1e6)
        spec = models.load_model("mistralai/Mistral-7B-v0.3")
        return (spec.model_copy(update={"name": "Mistral-7B-v0.2", "vocab_size": 32000}),
                "Mistral 7B v0.2 = Mistral-7B-v0.3's shapes with a 32000-token vocabulary", None)
    name = t.split(" (")[0].strip()
    alias = ALIASES.get(name)
    if alias:
        return models.load_model(alias[0]), alias[1], None
    if name in FACT_SPECS:
        return FACT_SPECS[name], None, None
    if name.lower() in {n.lower() for n in models.catalog_names()}:
        return models.load_model(name), None, None
    return None, None, f"model '{name}' not in the catalog and no config facts recorded"


GPUS = (  # (regex on the source's GPU text, canonical name); first match wins
    (r"H100", "H100"), (r"H800", "H100"), (r"H200", "H200"), (r"A100.*40", "A100"), (r"A100", "A100-80GB"),
    (r"A800", "A100-80GB"),
    (r"RTX 4090|GeForce RTX 4090", "RTX4090"), (r"6000 Ada|A6000 Ada", "RTX6000-Ada"), (r"A6000", "A6000"),
    (r"A5000", "A5000"), (r"L40S", "L40S"), (r"A40\b", "A40"),
    (r"T4\b", "T4"), (r"RTX 3090|GeForce RTX 3090", "RTX3090"), (r"\bL4\b", "L4"), (r"A10G", "A10G"),
    # Titan RTX: TU102 with 24 GB and full-rate fp16 tensor cores (130 TFLOPS), the Quadro RTX 6000's chip
    (r"Titan RTX", "RTX6000"),
)




# ----------------------------------------------------------------------------- published_throughput.csv

def _precision(text: str) -> tuple[str | None, str | None]:
    t = text.lower()
    if "fp8" in t:
        return None, "fp8 training (Float8 linears / Transformer Engine) not modelled"
    if t.startswith("amp-fp16") or t.startswith("amp_fp16"):
        return "amp-fp16", None
    if t.startswith("amp-bf16") or t.startswith("amp_bf16"):
        return "amp-bf16", None
    if t.startswith("pure fp16") or t.startswith("fp16"):
        return "fp16", None
    if "bf16" in t:
        return "bf16", None
    return None, f"precision '{text}' not stated"


def _sharding(text: str, gpus: int) -> tuple[dict, str | None, str | None]:
    t = text.lower()
    if re.search(r"\btp\d|tp\d|\bpp\d|x tp|x pp|cp8|context parallel|pipeline|megatron", t):
        return {}, None, "tensor/pipeline/context parallelism not modelled"
    if "naive model split" in t:
        return {}, None, "naive model parallelism (device_map over GPUs, one GPU busy at a time) not modelled"
    if "sequence parallel sp" in t and not re.search(r"sp1\b", t):
        return {}, None, "DeepSpeed-Ulysses sequence parallelism (sp > 1) not modelled"
    if "hsdp" in t:
        return ({"sharding": "fsdp"}, "HSDP (shard within a node, replicate across) modelled as FSDP over all GPUs",
                None)
    offload = _offload(t)
    if "fsdp" in t:
        # FSDP's CPUOffload(offload_params=True) keeps the sharded parameters and gradients on the CPU and runs
        # the optimizer step there: both offloads at once (torch/distributed/fsdp/api.py CPUOffload)
        return {"sharding": "fsdp", "offload": "both" if offload != "none" else "none"}, None, None
    if t.startswith(("zero3", "deepspeed zero3")):
        return {"sharding": "zero3", "offload": offload}, None, None
    if t.startswith(("zero2", "deepspeed zero2")):
        return {"sharding": "zero2", "offload": offload}, None, None
    if t.startswith("deepspeed"):
        return ({"sharding": "zero3"}, "DeepSpeed stage not stated; ZeRO-3 assumed (XTuner's long-sequence configs)",
                None)
    if t.startswith("none"):
        return ({"sharding": "ddp"} if gpus > 1 else {}), None, None
    return {}, None, f"parallelism '{text}' not modelled"


def _offload(t: str) -> str:
    """The CPU offload a parallelism text names: DeepSpeed offload_optimizer / offload_param, FSDP cpu_offload."""
    opt, par = "offload_optimizer" in t, "offload_param" in t
    if "cpu_offload" in t or (opt and par):
        return "both"
    return "optimizer" if opt else "params" if par else "none"


# AWS instance sizes: each "xlarge" is 4 vCPUs (aws.amazon.com/ec2/instance-types/g5/, /g4/: g5.4xlarge 16,
# g5.12xlarge 48, g5.48xlarge 192, g4dn.4xlarge 16); GPUs per instance from the same tables.
AWS_GPUS = {"g5.xlarge": 1, "g5.2xlarge": 1, "g5.4xlarge": 1, "g5.8xlarge": 1, "g5.16xlarge": 1, "g5.12xlarge": 4,
            "g5.24xlarge": 4, "g5.48xlarge": 8, "g4dn.xlarge": 1, "g4dn.2xlarge": 1, "g4dn.4xlarge": 1,
            "g4dn.8xlarge": 1, "g4dn.16xlarge": 1, "g4dn.12xlarge": 4, "g4dn.metal": 8}


def _host_vcpus_per_gpu(text: str) -> tuple[float | None, str | None]:
    """(vCPUs per GPU, what it assumes) of the host a row ran on, where the source names it: an AWS instance
    type (the workers' where a head node differs), or host CPUs named in the text."""
    found = []
    for family, size, kind in re.findall(r"\b(g5|g4dn)\.(\d*)(xlarge|metal)\b", text):
        name = f"{family}.{size}{kind}"
        if name in AWS_GPUS:
            vcpus = 96 if kind == "metal" else 4 * int(size or 1)
            found.append((vcpus / AWS_GPUS[name], name, vcpus))
    if found:  # a synchronous step waits for the smallest host named (the workers, not a larger head node)
        per_gpu, name, vcpus = min(found)
        return per_gpu, f"host: {name}, {vcpus} vCPUs for {AWS_GPUS[name]} GPU(s) (AWS instance table)"
    if re.search(r"2 ?× ?AMD EPYC 7742|2xAMD EPYC 7742", text):  # 2 × 64 cores, 256 threads, for the GPUs in use
        return 256.0, "host: 2 × EPYC 7742 (256 hardware threads) shared by the GPUs the run used"
    return None, None


def _yes(text: str) -> bool:
    return text.strip().lower().startswith(("yes", "full", "selective"))


# Export variants of A100/H100: the same compute, NVLink cut to 400 GB/s in total, 200 per direction (A100: 600,
# https://aiwiki.ai/wiki/nvidia_a800; H100: 900, https://www.philisun.com/technical-analysis/
# nvidia-h800-vs-h100-a-technical-deep-dive-into-politically-defined-ai-chips/)
EXPORT_NVLINK_GB_S = 200.0
# PCIe 4.0 x8 or 3.0 x16: 8 GT/s × 16 lanes (or 16 × 8) × 128/130 ≈ 15.8 GB/s a direction (PCI-SIG base specs)
SLOW_LANES_GB_S = 16.0


def _gpu_assumptions(text: str, gpu: str, notes: str) -> list[str]:
    """What mapping the source's GPU onto the table's card assumes."""
    out = []
    if re.search(r"[AH]800", text):
        out.append(f"{text} modelled as {gpu} with its 400 GB/s NVLink ({EXPORT_NVLINK_GB_S:g} GB/s per direction)")
    if "500W" in notes or "500 W" in notes or "96 GB" in text:
        out.append("H100 96 GB at 500 W modelled as the 700 W H100 SXM (clocks lower under the cap)")
    return out


# Why the data's compiler rated a source's rows conf=low (SOURCES.md beside the CSV)
LOW_CONFIDENCE_WHY = {
    "ttreadme": "torchtune README's 'Runnable On' column is not the GPU the time was measured on",
    "vlm": "earlier vectorlm revision ~6x slower than the later table on the same hardware "
           "(SOURCES.md: a different software era, not to be pooled)",
    "xtuner": "LLaMA-Factory baseline row: micro-batch, accumulation and stage not given",
    "fmsacc": "Mixtral under transformers 4.45 loops over its experts in Python, each an nn.Linear "
              "(bitsandbytes-quantised under QLoRA); the time model follows transformers 5's grouped "
              "experts",
    "afqlora": "the dual-3090 batch-1 QLoRA table times (1,082 s, 1,564 s) are ~2x the text beside them "
               "('800 seconds vs 550')",
    "raygptj": "'~1280 seconds (including initialization time)': model loading inside the epoch time",
    "cyfgist": "the unit of 'Th.put' is not stated (total samples/s inferred); precision and code not given",
    "openllama": "accumulation not stated; ~47% MFU while offloading, above any other published A100 run",
    "hfaccds": "token count not published (derived from another guide's log of the same dataset)"}


def parse_published(r: dict[str, str]) -> TimeRow:
    rid = r["id"]
    row = TimeRow(id=rid, source=rid.split("-")[0], conf=parse_conf(r["notes"]), file="published_throughput.csv",
                  model_ref=r["model"])
    row.excluded = _map_published(row, r)
    return row


def _map_published(row: TimeRow, r: dict[str, str]) -> str | None:
    """Fill `row` from the CSV row, in order; the first reason the row is excluded, or None."""
    if row.conf == "low":
        why = LOW_CONFIDENCE_WHY.get(row.source, "")
        return "conf=low" + (f": {why}" if why else "")
    gpus = int(r["gpus"] or 1)
    why = _map_hardware(row, r, gpus)
    if why:
        return why
    if "gptq" in r["quant_bits"].lower():
        return "GPTQ int4 base weights are not bitsandbytes NF4 QLoRA"
    precision, why = _precision(r["precision"])
    if precision is None:
        return why or "precision not modelled"
    spec, assumption, why = resolve(r["model"])
    if spec is None:
        return why or "model not resolved"
    row.spec = spec
    if assumption:
        row.assumptions.append(assumption)
    fields, assumption, why = _sharding(r["parallelism"], gpus)
    if why:
        return why
    if assumption:
        row.assumptions.append(assumption)
    if not r["micro_batch"].strip():
        return "micro-batch not stated"
    seq_len, why = _published_seq_len(row, r)
    if seq_len is None:
        return why
    _map_host(row, r, gpus)
    stack_kw = _stack_fields(row, r, precision, gpus, fields)
    if stack_kw["method"] != "full":
        why = _lora_fields(row, r, stack_kw, precision)
        if why:
            return why
    return _build(row, r, stack_kw, precision, seq_len, gpus)


def _map_hardware(row: TimeRow, r: dict[str, str], gpus: int) -> str | None:
    """Nodes, the card, its network, links and power limit; why the row is excluded, or None."""
    text, notes = r["gpu_model"], r["notes"]
    nodes = int(r["nodes"]) if r["nodes"].strip() else max(1, gpus // 8) if gpus > 8 else 1
    row.nodes = nodes
    row.gpu = canonical_gpu(text, GPUS)
    if row.gpu is None:
        return f"GPU '{text}' not in the GPU table"
    m = re.search(r"(\d+)\s*Gbps", text) or re.search(r"'up to (\d+) Gbps'", notes)
    if m and nodes > 1:
        row.network_gbps = float(m.group(1))
    row.assumptions += _gpu_assumptions(text, row.gpu, notes)
    if re.search(r"[AH]800", text):
        row.link_gb_s = EXPORT_NVLINK_GB_S
    m = re.search(r"power-limited to (\d+) ?W", text)
    if m:
        row.power_w = float(m.group(1))
        row.assumptions.append(f"cards power-limited to {m.group(1)} W: sustained clock ∝ power^(1/3)")
    if "slow PCI lanes" in text:
        # 'older motherboard and slow PCI lanes' (lane width not stated): PCIe 4.0 x8 / 3.0 x16, 16 GB/s a direction
        row.link_gb_s = SLOW_LANES_GB_S
        row.assumptions.append(f"'slow PCI lanes' taken as {SLOW_LANES_GB_S:g} GB/s a direction (x8 Gen4 / x16 Gen3)")
    return None


def _published_seq_len(row: TimeRow, r: dict[str, str]) -> tuple[int | None, str | None]:
    """(the sequence length of a step, None) or (None, why it is not known)."""
    seq_text = r["seq_len"].strip()
    if re.fullmatch(r"\d+", seq_text):
        return int(seq_text), None
    m = re.search(r"~(\d+) tokens/sample", seq_text)
    if m and "padded" in r["packed"].lower():
        # peft MetaMathQA: BucketIterator groups samples of similar length (bucket of 20 batches), and
        # tokens/s counts the samples' own tokens + EOS: the work per step is ~ the average length
        seq_len = int(m.group(1)) + 1
        row.assumptions.append(f"length-bucketed batches: seq_len = average sample length {seq_len}")
        return seq_len, None
    return None, ("sequence length per step not stated (dynamic padding of variable-length examples; "
                  "tokens/s counts non-pad tokens, the padded length is not published)")


def _map_host(row: TimeRow, r: dict[str, str], gpus: int) -> None:
    """The host's vCPUs per GPU, where the GPU text or the notes name them."""
    vcpus, why_host = _host_vcpus_per_gpu(r["gpu_model"])
    if vcpus is None:
        vcpus, why_host = _host_vcpus_per_gpu(r["notes"])
    if vcpus:
        row.host_vcpus_per_gpu = vcpus / gpus if "shared by the GPUs" in (why_host or "") else vcpus
        row.assumptions.append(why_host)


def _stack_fields(row: TimeRow, r: dict[str, str], precision: str, gpus: int, fields: dict) -> dict:
    """The Stack's keywords from the optimizer, attention, checkpointing and kernel columns."""
    optimizer = "adamw"
    opt_text = r["optimizer"].lower()
    if "8bit" in opt_text or "8-bit" in opt_text:
        optimizer = "adamw-8bit"
    attention = r["attention"].lower()
    if attention.startswith("not stated"):
        # Llama in transformers before 4.36 had no SDPA path: eager unless the script asked for FA2 (unstated)
        attn = "eager"
        row.assumptions.append("attention not stated: eager (the transformers of the run's date had no SDPA Llama)")
    else:
        attn = ("eager" if attention.startswith("eager") else "sdpa" if attention.startswith("sdpa")
                else "flash" if "flash" in attention or "fa2" in attention else "sdpa")
    gc_text = r["grad_checkpointing"].strip().lower()
    # every published run computed its framework's loss on full logits (transformers' ForCausalLMLoss; TRL before
    # 1.x), or Liger's fused one (--liger): none ran TRL 1.16's fused LM head
    stack_kw: dict = dict(method=r["method"].strip(), precision=precision, optimizer=optimizer, gpus=gpus,
                          loss="standard", grad_checkpointing=_yes(gc_text) and gc_text != "selective op",
                          attention=attn, **fields)
    if gc_text == "selective op":
        # torchtitan's op-level selective AC saves the matmul outputs and recomputes only cheap ops
        row.assumptions.append("op-level selective activation checkpointing: no matmul recompute")
    elif "selective" in gc_text:
        # layer-level selective AC (every n-th layer) recomputes part of the forward; the Stack has only on/off
        row.assumptions.append("layer-level selective activation checkpointing modelled as full recompute "
                               "(an upper bound on the recompute)")
    if r["compile"].strip().lower().startswith("yes"):
        stack_kw["compile"] = True
    if r["liger"].strip().lower().startswith("yes"):
        stack_kw["liger"] = True
    if "fused layernorm/swiglu/xentropy/rope" in attention:
        stack_kw["liger"] = True
        row.assumptions.append("fused norm/SwiGLU/cross-entropy/RoPE kernels modelled as Liger's")
    return stack_kw


def _lora_fields(row: TimeRow, r: dict[str, str], stack_kw: dict, precision: str) -> str | None:
    """The adapter's keywords into `stack_kw`; why the row is excluded (targets not mapped), or None."""
    rank = r["lora_rank"].strip()
    stack_kw["lora_rank"] = int(rank) if rank.isdigit() else 8
    targets = r["lora_targets"].lower()
    head = targets.split(" (")[0].strip()
    if "all linear" in targets or "all-linear" in targets:
        stack_kw["lora_targets"] = "all-linear"
    elif re.fullmatch(r"[a-z_]+(,[a-z_]+)+", head):  # an explicit module list, before any substring of it
        stack_kw["lora_targets"] = head
    elif "peft default" in targets:
        stack_kw["lora_targets"] = "q_proj,v_proj"
    else:
        return f"LoRA targets '{r['lora_targets']}' not mapped"
    if "modules_to_save lm_head, embed_tokens" in targets:
        stack_kw["modules_to_save"] = "embed_tokens,lm_head"
    if "dora" in targets or "dora" in r["notes"].lower():
        stack_kw["dora"] = True
    if row.source == "afqlora":
        # fsdp_qlora wraps with FSDP1, whose flat parameters hold one dtype: the adapters are bf16 too
        stack_kw["adapter_dtype"] = "bf16"
        stack_kw["lora_dropout"] = 0.1  # train.py default
        row.assumptions.append("adapters in bf16 (FSDP1 flat parameters share the model's dtype)")
    elif precision in ("bf16", "fp16") and row.source in ("optb", "vlm", "nemoam"):
        # half-precision models wrapped by peft < 0.12 (or NeMo's own LoRA): adapters in the model dtype;
        # peft >= 0.12 upcasts them to fp32 (autocast_adapter_dtype=True), the Stack default
        stack_kw["adapter_dtype"] = "bf16"
        row.assumptions.append("adapters in the model's 16-bit dtype (peft before 0.12 / NeMo LoRA)")
    if row.source == "peftmmqa":
        stack_kw["lora_dropout"] = 0.0  # experiments/lora/*/adapter_config.json: "lora_dropout": 0.0
        row.assumptions.append("lora_dropout 0.0 (the experiment's adapter_config.json)")
    if stack_kw["method"] == "qlora":
        stack_kw["double_quant"] = "double" in r["quant_bits"].lower()
    if precision.startswith("amp-") and "torch_dtype bfloat16" in r["precision"]:
        # the frozen weights were loaded in bf16 (autocast on top): 16-bit weights, peft's fp32 adapters
        stack_kw["precision"] = precision[4:]
        row.assumptions.append("model loaded in bf16 under autocast: 16-bit frozen weights")
    return None


def _build(row: TimeRow, r: dict[str, str], stack_kw: dict, precision: str, seq_len: int, gpus: int) -> str | None:
    """The Stack, the Shape and the total tokens/s; why the settings are not representable, or None."""
    if precision == "amp-fp16" and stack_kw.get("sharding", "").startswith("zero"):
        stack_kw["precision"] = "fp16"
        row.assumptions.append("DeepSpeed fp16: 16-bit weights with fp32 master and Adam states")
    try:
        row.stack = Stack(**stack_kw)
        ga = int(r["grad_accum"]) if r["grad_accum"].strip() else 1
        row.shape = Shape(micro_batch=int(r["micro_batch"]), seq_len=seq_len, grad_accum=ga)
    except ValueError as exc:
        return f"settings not representable: {str(exc).splitlines()[0]}"
    value = float(r["tokens_per_sec"])
    row.tokens_per_sec = value * gpus if r["tokens_per_sec_scope"].startswith("per_gpu") else value
    return None


# ----------------------------------------------------------------------------- measured_memory.csv

def calibration_time_rows() -> list[TimeRow]:
    """The memory set's rows with a throughput: its own tokens/s, or one derived from a stated
    seconds-per-optimizer-step (Qwen README: 'bs1, GA8', tokens/s = 8 × seq × GPUs / s)."""
    from benchmarks.calibration_rows import MEASURED_CSV, parse_row

    out: list[TimeRow] = []
    with MEASURED_CSV.open(newline="") as f:
        raw = list(csv.DictReader(f))
    for r in raw:
        tps_text, wall = r["tokens_per_sec"].strip(), r["wall_time"].strip()
        step = re.match(r"([\d.]+) s per optimizer step", wall)
        if not tps_text and not step:
            continue
        emb = "LoRA(emb)" in r["notes"] and "modules_to_save" in r["notes"]
        if emb:  # the stack now models peft modules_to_save: parse the row without the memory set's exclusion
            r = dict(r, notes=r["notes"].replace("modules_to_save", "modules saved").replace("trains wte", "trains emb"))
        c = parse_row(r)
        row = TimeRow(id=c.id, source=c.id.split("-")[0], conf=c.conf, file="measured_memory.csv",
                      model_ref=r["model"], spec=c.spec, stack=c.stack, gpu=c.gpu,
                      assumptions=list(c.assumptions))
        out.append(row)
        if c.excluded:
            row.excluded = c.excluded
            continue
        if emb:
            row.stack = c.stack = c.stack.model_copy(update={"modules_to_save": "embed_tokens,lm_head"})
            row.assumptions.append("LoRA(emb): embed_tokens and lm_head trained in full (peft modules_to_save)")
        seq_text = r["seq_len"].strip()
        if not seq_text.isdigit():
            row.excluded = ("sequence length per step not stated (unpacked examples with dynamic padding; "
                            "tokens/s counts the examples' tokens, the padded length is not published)")
            continue
        if c.stack.gpus > 1 and "deepspeed (finetune_lora_ds" in r["parallelism"]:
            row.excluded = ("the README profiles this LoRA run on 2 nodes × 2 GPUs ('LoRA (multinode)'); the "
                            "rows do not say which are multi-node")
            continue
        if c.conf == "low":
            row.excluded = "conf=low: " + (r["notes"].split(";")[1].strip() if ";" in r["notes"] else "")
            continue
        if c.gpu is None:
            row.excluded = "GPU not stated"
            continue
        ga = c.grad_accum
        if tps_text:
            total = c.tokens_per_sec_total
        else:
            if "bs1, GA8" not in r["notes"]:
                row.excluded = "step time without the batch that makes it"
                continue
            total = 8 * c.shape.seq_len * c.stack.gpus / float(step.group(1))
            ga = 8
            row.assumptions.append("tokens/s = 8 × seq × GPUs / s per step (bs1, GA8)")
        row.shape = c.shape.model_copy(update={"grad_accum": ga})
        row.tokens_per_sec = total
    return out


# ----------------------------------------------------------------------------- benchmarks/gpu_measure.py

GPU_MEASURE_GLOB = "gpu_measure_*.csv"


def gpu_measure_rows(paths: list[Path] | None = None) -> list[TimeRow]:
    """Rows timed by our own CUDA harness (benchmarks/gpu_measure.py), a source of their own: each case's
    median step at one micro-batch per step, the harness's fused AdamW, no clipping or logging. CPU and
    --tiny runs, and cases that did not run, are kept as excluded."""
    from benchmarks.gpu_measure import Case

    if paths is None:
        paths = sorted((REPO / "benchmarks" / "results").glob(GPU_MEASURE_GLOB))
    out: list[TimeRow] = []
    for path in paths:
        with Path(path).open(newline="") as f:
            for r in csv.DictReader(f):
                row = TimeRow(id=f"gpumeasure-{r['date']}-{r['case']}", source="gpumeasure", conf="high",
                              file=Path(path).name, model_ref=r["model"], gpu=r["gpu"] or None)
                out.append(row)
                if not r["gpu"] or "tiny" in Path(path).name:
                    row.excluded = f"not a GPU measurement ({r['gpu_name'] or 'cpu'}; mechanics run)"
                    continue
                if r["status"] != "ok":
                    row.excluded = f"case did not run: {r['status']} {r['reason']}".strip()
                    continue
                spec, assumption, why = resolve(r["model"])
                if spec is None:
                    row.excluded = why
                    continue
                case = Case(r["model"], r["method"], r["grad_checkpointing"] == "True", r["attention"],
                            int(r["micro_batch"]), int(r["seq_len"]))
                row.spec, row.stack, row.shape = spec, case.stack(), case.shape()
                row.tokens_per_sec = float(r["tokens_per_sec"])
                row.assumptions.append(f"{r['torch']} / transformers {r['transformers']}; median of {r['steps']} steps")
    return out


def load_rows(published: Path | None = None, gpu_measure: list[Path] | None = None) -> list[TimeRow]:
    """Every row of the evidence files that states a throughput, parsed (excluded ones carry their
    reason): the published set, the memory set's throughput rows and our own harness's CUDA runs."""
    with (published or PUBLISHED_CSV).open(newline="") as f:
        rows = [parse_published(r) for r in csv.DictReader(f)]
    rows += calibration_time_rows() + gpu_measure_rows(gpu_measure)
    known = frameworks()
    for row in rows:
        if row.source not in known:
            row.excluded = row.excluded or f"source '{row.source}' has no framework in frameworks.csv"
            continue
        row.framework = known[row.source][0]
        if row.stack is not None:
            row.stack = row.stack.model_copy(update={"framework": row.framework})
    return rows
