"""The plan's warnings in words, one per plan finding, in recorded order; where two price sheets disagree; and the
decision card's risks line, read from the same facts (the top pick's findings, the warnings naming it, its price's
age and its bundle's caveats)."""

from __future__ import annotations

import re
from collections.abc import Callable

from advisor.explain.notes import HOST_UNKNOWN_NOTE, candidate_notes, note
from advisor.explain.price_age import days_to_stale, is_ageing, is_stale, price_age_days
from advisor.launch.caveats import caveats
from advisor.results import Candidate, Plan
from advisor.results.facts import Finding, FindingKind as K, found
from advisor.units import gb, money, tokens

# Fewer held-out rows than this behind a band: said as a risk (one row is an anecdote, not an error band).
FEW_CALIBRATION_ROWS = 3


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
    K.PRICE_DISPUTED: lambda f: _disputed_price(f),
    K.TOP_TIGHT: lambda f: "The top pick is within the estimator's measured error band of its GPU memory limit (tight).",
    K.NO_SPOT: lambda f: _no_spot(f),
}


def _disputed_price(f: Finding) -> str:
    """A dated observation replaced the catalog's price; or a marketplace median disputes the listed price it kept."""
    if f.get("by") == "market":
        return (f"{_where(f)}: its listed {money(f['price_hour'])}/h is disputed by the marketplace median for this GPU, "
                f"{money(f['market_price_hour'])}/h ({f['market_date']}, an aggregate of other hosts' listings); "
                "priced at the listing, which may not be on offer at that price.")
    return (f"{_where(f)}: the catalog's ${f['catalog_price_hour']:,.2f}/h is disputed by a dated "
            f"observation; priced at {money(f['price_hour'])}/h ({f['price_date']}, {str(f['source'])[:60]}).")


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


# The top pick's own findings that are risks to its three numbers or to launching it as written, said in the risks
# line with the candidate's own note (the rest say what it trades away, where it runs, or why it ranks where it does).
RISK_KINDS = (K.STACK_CAVEAT, K.LISTED_ONLY, K.SPOT_SUSPECT, K.FP16_NO_BF16, K.GLOBAL_BATCH_CHANGED)


def _price_risk(plan: Plan, c: Candidate) -> tuple[str, str] | None:
    """The top pick's price age as a risk: undated, stale, or near the staleness limit (price_age.is_ageing)."""
    age = price_age_days(c, plan)
    if age is None:  # no date, or the planner's "date unknown"
        return ("undated_price", f"Undated price: {money(c.cost.price_hour)}/h from {c.offer.source or 'an unnamed source'} "
                "has no observation date" + (" and its sheet marks it stale" if c.offer.stale else "")
                + "; check it with the provider before you buy.")
    if is_stale(c, plan):
        why_stale = (f"is {age:,} day{'s' if age != 1 else ''} old" if age > plan.stale_days
                     else "is marked stale by its sheet (an old catalog generation)")
        return ("stale_price", f"Stale price: {money(c.cost.price_hour)}/h from {c.offer.source} ({c.offer.price_date}) "
                f"{why_stale}; check it with the provider before you buy.")
    if is_ageing(c, plan):
        left = days_to_stale(c, plan)
        return ("ageing_price", f"Ageing price: {money(c.cost.price_hour)}/h from {c.offer.source} ({c.offer.price_date}) "
                f"is {age:,} days old, {left:,} day{'s' if left != 1 else ''} from the {plan.stale_days:g}-day "
                "staleness limit; check it with the provider before you buy.")
    return None


def _disputed(plan: Plan) -> list[tuple[str, str]]:
    """The plan's warning that a dated observation disputes the top pick's catalog price, as a risk."""
    return [(K.PRICE_DISPUTED.value, _disputed_risk(f)) for f in found(plan.findings, K.PRICE_DISPUTED)
            if f.get("rank") == 1]


def _disputed_risk(f: Finding) -> str:
    if f.get("by") == "market":
        return (f"Disputed price: the listing's {money(f['price_hour'])}/h against a marketplace median of "
                f"{money(f['market_price_hour'])}/h for this GPU ({f['market_date']}); priced at the listing, which "
                "may not be on offer at that price: check it before you buy.")
    return (f"Disputed price: the catalog says ${f['catalog_price_hour']:,.2f}/h, a dated observation "
            f"{money(f['price_hour'])}/h ({f['price_date']}); priced at the observation, check it with the provider "
            "before you buy.")


def risk_items(plan: Plan, c: Candidate) -> list[tuple[str, str]]:
    """(what, words) for everything that could make the three numbers wrong or the run not launch as written, most
    serious first; `what` is the finding kind (or the price-age state, or `launch_caveat`) each line says."""
    out: list[tuple[str, str]] = []
    t = c.timing
    if not t.calibrated:
        out.append((K.UNCALIBRATED.value, "Uncalibrated hardware: the time model has no published measurements for "
                    f"this GPU class and method ({t.band_basis or 'no segment'}); its band is wider, and hours and cost "
                    "may be further off than it."))
    else:
        rows = re.search(r"(\d+) held-out", t.band_basis)
        if rows and int(rows.group(1)) < FEW_CALIBRATION_ROWS:
            out.append(("thin_calibration", f"Thin calibration: the time band rests on {rows.group(1)} published "
                        f"measurement(s) ({t.band_basis})."))
    if c.fit.tight:
        out.append((K.TIGHT.value, f"Tight memory: {gb(c.fit.peak_bytes)} per GPU against a limit of "
                    f"{gb(c.fit.limit_bytes)} is within the estimator's error of the limit; it may run out of memory. "
                    "Run `launch.sh --benchmark` first."))
    price = _price_risk(plan, c)
    out += [price] if price else []
    out += _disputed(plan)
    out += [(f.kind.value, f"The band crosses a constraint: {note(f).removeprefix('band crosses ')}.")
            for f in found(c.findings, K.BAND_CROSSES_BUDGET, K.BAND_CROSSES_DEADLINE)]
    out += [(f.kind.value, f"{note(f)[0].upper()}{note(f)[1:]}.") for f in found(c.findings, *RISK_KINDS)]
    if not c.offer.host_known:
        out.append((K.HOST_UNKNOWN.value, "Host unknown: the price source lists no host RAM or vCPUs, so the loading "
                    "check could not run; check the host before renting."))
    moe = plan.model.params_active < plan.model.params_total
    out += [("launch_caveat", f"Launch caveat: {words}") for words in caveats(c, plan.model.family, moe)]
    return out


def risks(plan: Plan, c: Candidate) -> list[str]:
    """What could make the three numbers wrong, in plain words, most serious first."""
    return [words for _, words in risk_items(plan, c)]
