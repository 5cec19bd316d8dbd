"""The report's approval block, in words: who approved which candidate of which plan, when, its cost and hours caps,
the plan digest and whether it is this plan's, and the approved price with its source and date.

`gpu-advisor report --approval` refuses an approval of another plan before anything is rendered (cli/report.py);
a library caller who renders one anyway gets a block that says loudly that it does not approve this plan, never one
that reads as valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.approval import Approval
from advisor.explain.price_age import is_stale, price_age_days
from advisor.results import Plan
from advisor.units import money

DIGEST_SHOWN = 19  # "sha256:" and the first 12 hex digits: what the trainer's log line and `ledger` show


@dataclass(frozen=True)
class ApprovalBlock:
    """What both report templates lay out: a title, one sentence, and (label, value) rows."""

    valid: bool
    title: str
    lede: str
    rows: tuple[tuple[str, str], ...]


def _when(stamp: str) -> str:
    """2026-12-03T17:40:00+00:00 -> 2026-12-03 17:40 UTC (the approval is written in UTC)."""
    day, _, time = stamp.partition("T")
    if time.endswith("+00:00") and len(time) >= 5:
        return f"{day} {time[:5]} UTC"
    return stamp


def usd(x: float) -> str:
    """$1,234.56; an amount below a cent with its own digits ($0.00001), so a tiny cap never reads as "$0.00"."""
    if x == 0 or abs(x) >= 0.01:
        return money(x)
    return ("-" if x < 0 else "") + "$" + (f"{abs(x):.6f}".rstrip("0").rstrip(".") or "0")


def hours(h: float) -> str:
    """1,000.00 h; under 36 s in seconds (0.03 s), so a tiny cap never reads as "0.00 h"."""
    return f"{h:,.2f} h" if h >= 0.01 else f"{h * 3600:.2g} s"


def _price(a: Approval, plan: Plan) -> str:
    p = a.price
    tier = "spot" if p.spot else "on-demand"
    date = f"observed {p.date}" if p.date else "undated"
    nodes = "the node" if a.nodes == 1 else f"all {a.nodes} nodes"
    text = f"{money(p.price_hour)}/h {tier} for {nodes}, from {p.source}, {date}"
    c = _candidate(a, plan)
    if c is not None and is_stale(c, plan):
        age = price_age_days(c, plan)
        text += (f" — stale ({'age unknown' if age is None else f'{age:,} days old'} when planned): check it before "
                 "launch")
    return text


def _candidate(a: Approval, plan: Plan):
    return plan.candidates[a.rank - 1] if 1 <= a.rank <= len(plan.candidates) else None


def approval_block(a: Approval, plan: Plan, plan_digest: str, plan_file: str) -> ApprovalBlock:
    """The block for approval `a` shown in the report of `plan`, whose file's digest is `plan_digest`."""
    valid = a.plan_digest == plan_digest and a.record_digest == a.body_digest()
    cap = a.caps
    basis = ("the plan's p90 cost, setup included" if cap.basis == "p90" else "a cap given by the approver")
    rows = [
        ("Approved by", a.approved_by),
        ("Approved at", _when(a.approved_at)),
        ("Project", a.project),
        ("Candidate", f"rank {a.rank}: {a.provider} {a.instance_type} · {a.region} · {a.gpus}× {a.gpu_model} · "
                      f"{a.stack}"),
        ("Cost cap", f"{usd(cap.cost_usd)} ({basis})"),
        ("Hours cap", f"{hours(cap.hours)} of wall time at the approved price; the trainer saves a checkpoint and "
                      f"stops at {hours(cap.stop_hours)} and warns at {cap.warn_share:.0%} of the cost cap"),
        ("Plan's estimate", f"{money(a.estimate_cost_usd)} and {hours(a.estimate_hours)} at the plan's risk "
                            f"quantile (p{a.risk_quantile * 100:g}); {money(a.estimate_p50_usd)} at p50, "
                            f"{money(a.estimate_p90_usd)} at p90"),
        ("Price", _price(a, plan)),
        ("Plan digest", f"{a.plan_digest[:DIGEST_SHOWN]}… " + (
            f"matches this plan ({plan_file})" if a.plan_digest == plan_digest else
            f"does NOT match this plan ({plan_file} is {plan_digest[:DIGEST_SHOWN]}…)")),
        ("Approval digest", f"{a.record_digest[:DIGEST_SHOWN]}… " + (
            "its fields are unchanged since approval" if a.record_digest == a.body_digest() else
            "does NOT match its fields: the approval was edited after it was written")),
    ]
    if valid:
        return ApprovalBlock(True, "Approved budget",
                             f"{a.approved_by} approved rank {a.rank} of this plan on {_when(a.approved_at)}: "
                             f"at most {usd(cap.cost_usd)} ({hours(cap.hours)}) for project {a.project}.",
                             tuple(rows))
    return ApprovalBlock(False, "NOT APPROVED: this approval is not valid for this plan",
                         "The approval below was written for another plan, or edited after it was written; nothing "
                         "in it approves this plan. Approve this plan again with gpu-advisor approve.", tuple(rows))
