"""The plan's warnings in words, one per plan finding, in recorded order; and where two price sheets disagree."""

from __future__ import annotations

from collections.abc import Callable

from advisor.explain.notes import HOST_UNKNOWN_NOTE, candidate_notes, note
from advisor.results import Candidate
from advisor.results.facts import Finding, FindingKind as K, found
from advisor.units import money, tokens


def _where(f: Finding) -> str:
    return f"#{f['rank']} ({f['provider']} {f['instance_type']})"


def _few_steps(f: Finding) -> str:
    seqs, seq_len, steps, least = f["sequences_per_step"], f["seq_len"], f["steps"], f["min_steps"]
    per = seqs * seq_len
    return (f"Only {steps} optimizer steps: {tokens(f['train_tokens'], flag=True)} tokens at {per:,} tokens per step "
            f"({seqs} × {seq_len:,}); fewer than {least} steps "
            "rarely trains well. Take smaller steps with --global-batch-tokens (e.g. "
            f"--global-batch-tokens {tokens(max(seq_len, f['train_tokens'] / least), flag=True)}) "
            "or --global-batch, or train on more tokens or --epochs.")


def _closest(f: Finding, top: Candidate | None) -> str:
    notes = candidate_notes(top.findings) if top is not None else []
    return f"The closest, {f['provider']} {f['instance_type']}: " + "; ".join(notes[-2:]) + "."


def _crosses(f: Finding, top: Candidate | None) -> str:
    crossed = [note(x) for x in found(top.findings if top else [], K.BAND_CROSSES_BUDGET, K.BAND_CROSSES_DEADLINE)]
    return f"The top pick meets the constraints at {f['risk']}, but its " + "; its ".join(crossed) + "."


WORDS: dict[K, Callable[[Finding], str]] = {
    K.TOP_FP16: lambda f: (f"The top pick trains in fp16 ({f['gpu']} has no bf16) a model released in bf16: "
                           "fp16's narrower range can overflow activations of bf16-trained models (loss scaling "
                           "helps, not always); prefer a bf16 card."),
    K.RULED_OUT_BY_CONSTRAINT: lambda f: f"{f['count']:,} options ruled out: {f['reason']}.",
    K.ALL_STALE: lambda f: ("Every matching price is stale (undated, or older than the threshold): refresh "
                            "with `gpu-advisor prices refresh` or give your own sheet with --prices."),
    K.TOP_GLOBAL_BATCH: lambda f: (f"The top pick runs a global batch of {f['runs']} sequences, not {f['requested']}: "
                                   f"no run that keeps it fits ({f['gpus']} GPUs do not divide it); --global-batch "
                                   "sets one they do."),
    K.FEW_STEPS: _few_steps,
    K.SHOWN_HOST_UNKNOWN: lambda f: (f"{_where(f)}: {HOST_UNKNOWN_NOTE} — the source lists no host RAM or vCPUs, so "
                                     "the loading check could not run; check the host before renting."),
    K.PRICE_DISPUTED: lambda f: (f"{_where(f)}: the catalog's ${f['catalog_price_hour']:,.2f}/h is disputed by a dated "
                                 f"observation; priced at {money(f['price_hour'])}/h ({f['price_date']}, "
                                 f"{str(f['source'])[:60]})."),
    K.TOP_TIGHT: lambda f: "The top pick is within the estimator's measured error band of its GPU memory limit (tight).",
    K.NO_SPOT: lambda f: _no_spot(f),
}


def _no_spot(f: Finding) -> str:
    """--spot found no spot price to show: none at all, or only undated ones (left out of the spot line)."""
    undated = int(f.get("undated") or 0)
    if not undated:
        return "--spot: no spot price among the matching offers."
    return (f"--spot: no dated spot price among the matching offers; {undated:,} spot price{'s' if undated != 1 else ''} "
            "without an observation date of its own left out of the spot line and remedies (an undated spot price "
            "can be far from today's market).")


def near_miss(f: Finding) -> str:
    """'--deadline 13h: 64× H200 aws p5en.48xlarge, 12.1 h, $3,483.00 ($8,498.30 less in total than #1)'."""
    nodes = int(f["nodes"])
    what = (f"{f['gpus']}× {f['gpu_model']}" + (f" ({nodes} nodes)" if nodes > 1 else "")
            + f" {f['provider']} {f['instance_type']}" + (" on spot" if f["spot"] else ""))
    stale = " (a stale price)" if f["stale"] else ""
    total = "in total " if f["time_value"] else ""
    return (f"{f['flags']}: {what}{stale}, {f['hours']:,.1f} h, {money(f['usd'])} "
            f"({money(f['saving_usd'])} less {total}than #1)")


def near_misses(findings: list[Finding]) -> str:
    """The near misses, one line: 'Near misses (figures at p80): ...; ....' ('' when there are none)."""
    near = found(findings, K.NEAR_MISS)
    return (f"Near misses (figures at {near[0]['risk']}): " + "; ".join(near_miss(f) for f in near) + ".") if near else ""


def warning(f: Finding, top: Candidate | None = None) -> str:
    """One plan finding in words (`top`: the plan's #1, whose own findings two of them quote)."""
    if f.kind is K.CLOSEST:
        return _closest(f, top)
    if f.kind is K.TOP_BAND_CROSSES:
        return _crosses(f, top)
    return WORDS[f.kind](f)


def warnings(findings: list[Finding], candidates: list[Candidate]) -> list[str]:
    """The plan's own warnings, in recorded order; the near misses together, as one line where the first is."""
    top = candidates[0] if candidates else None
    out = []
    for i, f in enumerate(findings):
        if f.kind is K.NEAR_MISS:
            if not any(g.kind is K.NEAR_MISS for g in findings[:i]):
                out.append(near_misses(findings))
            continue
        out.append(warning(f, top))
    return out


def disagreeing(disagreements, candidates: list[Candidate]) -> list[str]:
    """Where two price sheets differ by more than the tolerance on an instance a shown candidate uses
    (pricing/agreement.py): both prices and dates (the newer dated one is used)."""
    shown = {(c.offer.provider, c.offer.region, c.offer.instance_type) for c in candidates}
    return [f"Price sources disagree: {d}." for d in disagreements
            if (d.provider, d.region, d.instance_type) in shown][:10]
