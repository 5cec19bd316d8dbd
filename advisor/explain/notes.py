"""Each candidate's notes (what it trades away) in words, one sentence per finding, in recorded order."""

from __future__ import annotations

from collections.abc import Callable

from advisor.results.facts import Finding, FindingKind as K
from advisor.units import MILLION, gb, money, tokens

# How the note of a candidate promoted by the near-tie rule starts
NEAR_TIE_NOTE = "preferred in a near-tie"
HOST_UNKNOWN_NOTE = "host RAM unknown"
ONLY_8BIT_NOTE = "fits only with 8-bit AdamW: no standard-AdamW stack of this method fits this hardware"
SPOT_SUSPECT_NOTE = ("spot price looks like a placeholder (a fixed fraction of on-demand across many instance "
                     "types, or flagged spot_suspect): check availability before planning on it")


def _pure(f: Finding) -> str:
    p = f["precision"]
    return (f"pure {p} weights (no fp32 master copy): an update smaller than about 1/256 of a "
            f"weight ({'8' if p == 'bf16' else '11'} significand bits) rounds away, so with learning "
            "rates near 1e-5 many updates are lost; mixed precision (--precision amp-bf16) avoids it")


def _gpus(n, nodes) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}" + (f" on {nodes} nodes" if nodes > 1 else "")


# the tie rule in words, with the two candidates' values where they say more than the name
_TIE_WORDS = {"requested global batch kept": "keeps the requested global batch exactly",
              "clear of the memory limit": "clear of the memory limit (the cheaper one is tight)",
              "calibrated": "a calibrated time model", "no stack caveat": "no software-stack caveat",
              "non-marketplace": "not a marketplace host",
              "known host": "a known host (its RAM listed)", "dated price": "a dated price",
              "bf16": "bf16", "unquantized": "unquantized base weights"}


def tie_words(f: Finding) -> str:
    rule = str(f["rule"])
    if rule == "fewer GPUs and nodes":
        return (f"fewer GPUs and nodes ({_gpus(f['gpus'], f['nodes'])} against "
                f"{_gpus(f['beaten_gpus'], f['beaten_nodes'])})")
    return _TIE_WORDS.get(rule, rule)


def _near_tie(f: Finding) -> str:
    return (f"{NEAR_TIE_NOTE} (within {f['within_pct']:g}% of a {f['what']} option, "
            f"{f['here_pct']:.1f}% here) for: {tie_words(f)}")


def _safe_over_risky(f: Finding) -> str:
    """A safe row placed above a cheaper risky one by the risk margin (ranking.RISK_MARGIN_PCT)."""
    what = ", ".join(name for name, key in (("tight", "tight"), ("uncalibrated", "uncalibrated"),
                                             ("stack caveat", "stack_caveat")) if f.get(key)) or "risky"
    return (f"{NEAR_TIE_NOTE} (within the {f['margin_pct']:g}% risk margin of a cheaper option that is {what}, "
            f"{max(f['here_pct'], 0.0):.1f}% dearer here) for: a safe row (calibrated, clear of the memory limit, no "
            "stack caveat)")


# One software-stack caveat (ranking.STACK_CAVEATS) in words, with its source
_CAVEAT_WORDS = {
    "rocm-bitsandbytes": "ROCm: bitsandbytes (QLoRA's NF4 weights, 8-bit optimizers) supports AMD GPUs only "
                         "experimentally (huggingface.co/docs/bitsandbytes installation)",
    "aarch64-host": "aarch64 host: {gpu}'s Grace CPU is ARM; flash-attn has no prebuilt aarch64 wheel (builds from "
                    "source, Dao-AILab/flash-attention#1866), and bitsandbytes' and vLLM's aarch64 wheels differ from "
                    "x86_64's",
}


# What a ROCm host needs instead of each CUDA build the bundle installs (ranking.ROCM_CUDA_PIECES, sources there)
_ROCM_PIECES = {"torch": "torch (the PyPI pin is a CUDA build; install PyTorch's ROCm wheels)",
                "flash-attn": "flash-attn (pip builds its CUDA kernels; ROCm's FlashAttention-2 is built from "
                              "ROCm/flash-attention, GPU_ARCHS=gfx942 for MI300, or its Triton backend)"}


def _rocm_host(f: Finding) -> str:
    pieces = [p for p in str(f.get("pieces") or "torch").split(",") if p]
    return (f"ROCm host: {f.get('gpu') or 'this GPU'} runs ROCm, and the bundle installs CUDA builds of "
            + "; ".join(_ROCM_PIECES.get(p, p) for p in pieces)
            + " (rocm.docs.amd.com; Liger's Triton kernels run on ROCm)")


def _caveat(f: Finding) -> str:
    if str(f["caveat"]) == "rocm-host":
        return f"stack caveat: {_rocm_host(f)}; loses to a safe row up to {f['margin_pct']:g}% dearer"
    words = _CAVEAT_WORDS.get(str(f["caveat"]), str(f["caveat"])).replace("{gpu}", str(f.get("gpu") or "this GPU"))
    return f"stack caveat: {words}; loses to a safe row up to {f['margin_pct']:g}% dearer"


def _listed_only(f: Finding) -> str:
    return (f"region listed, availability unknown: the sheet lists this instance in every region whatever its "
            f"capacity ({f['tag']}); no row with known availability in --regions {f['regions']} "
            "remained, so check capacity there before planning on it")


def _dpo(f: Finding) -> str:
    ref = f["reference"]
    return f"DPO: reference model {ref}" + ("" if ref != "copy" else f" ({'sharded' if f['sharded'] else 'replicated'})")


def _grpo(f: Finding) -> str:
    mode, gpus, total = f["vllm"], f["train_gpus"], f["total_gpus"]
    if mode == "server":
        return (f"GRPO: {f['server_gpus']} of the {total} GPUs serve vLLM (gpu_memory_utilization "
                f"{f['utilization']:g}); {gpus} train")
    if mode == "colocate":
        where = "the training GPU" if gpus == 1 else f"each of the {gpus} training GPUs"
        return (f"GRPO: vLLM colocated in {where} at gpu_memory_utilization {f['utilization']:g}"
                + (" with sleep mode" if f["sleep"] else ""))
    return f"GRPO: transformers generate on the {'training GPU' if gpus == 1 else f'{gpus} training GPUs'}, no vLLM"


def misses_budget(f: Finding) -> str:
    budget, cost = f["budget"], f["usd"]
    return f"misses the budget of ${budget:,.0f} by ${cost - budget:,.0f} (+{cost / budget - 1:.0%})"


def misses_deadline(f: Finding) -> str:
    deadline, hours = f["deadline_hours"], f["hours"]
    return f"misses the deadline of {deadline:g} h by {hours - deadline:,.1f} h (+{hours / deadline - 1:.0%})"


def crosses_budget(f: Finding) -> str:
    return (f"band crosses the budget: {money(f['usd_p90'])} at p90 against ${f['budget']:,.0f} "
            f"(met at {f['risk']}: {money(f['usd'])})")


def crosses_deadline(f: Finding) -> str:
    return (f"band crosses the deadline: {f['hours_p90']:,.1f} h at p90 against "
            f"{f['deadline_hours']:g} h (met at {f['risk']}: {f['hours']:,.1f} h)")


NOTES: dict[K, Callable[[Finding], str]] = {
    K.PURE_LOW_PRECISION: _pure,
    K.FP16_NO_BF16: lambda f: (f"fp16: {f['gpu']} has no bf16, and the model was released in bf16 (overflow risk; "
                               "loss scaling needed)"),
    K.ONLY_8BIT: lambda f: ONLY_8BIT_NOTE,
    K.UNCALIBRATED: lambda f: (f"uncalibrated: the time model has fewer than {f['min_rows']} held-out rows for this "
                               "GPU class and method (the band of held-out GPU classes, wider; ranked at its quantile)"),
    K.TIGHT: lambda f: (f"tight: peak within {f['fraction']:.0%} of the memory limit, the estimator's measured error "
                        f"band; loses to a safe row up to {f['margin_pct']:g}% dearer"),
    K.STACK_CAVEAT: _caveat,
    K.LISTED_ONLY: _listed_only,
    K.PADDED: lambda f: (f"padded batches of {f['micro_batch']} rows compute {f['factor']:.3f}× the kept tokens (the "
                         "dataset's lengths; --packed computes only the kept tokens)"),
    K.GLOBAL_BATCH_CHANGED: lambda f: (f"runs a global batch of {f['runs']} sequences instead of {f['requested']} "
                                       f"({f['gpus']} GPUs do not divide it; no run that keeps it fits)"),
    K.DPO_REFERENCE: _dpo,
    K.GRPO_GENERATION: _grpo,
    K.NEAR_TIE: _near_tie,
    K.SAFE_OVER_RISKY: _safe_over_risky,
    K.FRESH_FIRST: lambda f: ("a fresh price heads the plan: the cheaper rows above it are priced past the "
                              "staleness limit"),  # the limit in days is the finding's stale_days
    K.SPOT_SUSPECT: lambda f: SPOT_SUSPECT_NOTE,
    K.HOST_UNKNOWN: lambda f: (f"{HOST_UNKNOWN_NOTE}: this run needs about {gb(f['ram_need_bytes'])} of host RAM per "
                               "node to load and feed it (advisor/planner/host.py); check the host before renting"),
    K.MISSES_BUDGET: misses_budget,
    K.MISSES_DEADLINE: misses_deadline,
    K.BAND_CROSSES_BUDGET: crosses_budget,
    K.BAND_CROSSES_DEADLINE: crosses_deadline,
}


def note(f: Finding) -> str:
    """One candidate finding in words."""
    return NOTES[f.kind](f)


def candidate_notes(findings: list[Finding]) -> list[str]:
    """A candidate's notes: one sentence per candidate finding, in recorded order."""
    return [note(f) for f in findings if f.kind in NOTES]


def notes_of(c) -> list[str]:
    """A candidate's notes to show: written from its findings; a plan file saved before findings were recorded
    keeps the words it stored."""
    return candidate_notes(c.findings) if c.findings else list(c.notes)


def misses_constraint(c) -> bool:
    """The candidate misses --budget or --deadline at the ranking quantile (the tables' ✗)."""
    return any(f.kind in (K.MISSES_BUDGET, K.MISSES_DEADLINE) for f in c.findings)


def job_tokens(workload) -> str:
    """The job's token count, as the workload line and the managed line both say it: every epoch's tokens through
    the model being trained (for DPO, the policy: each pair's chosen and rejected rows, the prompt in both)."""
    through = " through the policy" if workload.get("objective") == "dpo" else ""
    return f"{int(workload['train_tokens']):,} training tokens{through}"


def managed_tokens(workload, billed_m_tokens: float) -> str:
    """What a managed service is priced for: the same job's tokens; for DPO, the one count (tokens through the
    policy) and what the service bills for it, the pairs' file tokens (prompt + chosen + rejected), named as such."""
    if workload.get("objective") != "dpo" or workload.get("train_tokens") is None:
        return f"the same {tokens(billed_m_tokens * MILLION)} tokens"
    return (f"the same {job_tokens(workload)}, which it bills as {tokens(billed_m_tokens * MILLION)} file tokens: "
            "prompt + chosen + rejected per pair")
