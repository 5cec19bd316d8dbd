"""The approved plan: what a budget owner signed (a plan's digest, one candidate, its caps, the prices and their
dates, who and when), and the checks that hold a launch to it.

A plan file is data anyone can edit, so an approval names it by the sha256 of its canonical JSON (keys sorted, no
whitespace: the same plan written twice has one digest, any changed value another). The approval carries a digest
of its own fields too, so an edited cap is refused; it is tamper-evident, not a signature (a team that needs one
signs the approval file, e.g. in a reviewed commit). The caps are the plan's own figures: by default the cost at the
time model's p90 (hours_high, setup included), or a dollar cap the approver gives; the hours cap is what that cost
buys at the approved price, so a scheduler limit and the trainer's cost stop agree.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import BadInput
from advisor.results import Candidate

APPROVAL_SCHEMA = 1
# Where the trainer callback stops: early enough before the hours cap that the final checkpoint is written inside
# it (a scheduler limit at the cap itself would kill the save). The larger of 10% of the cap and 15 minutes, an
# assumption sized for a sharded 70B checkpoint on network storage; shorter caps stop at 90%.
SAVE_GRACE_HOURS = 0.25
SAVE_GRACE_SHARE = 0.10
WARN_SHARE = 0.80  # the callback warns once at 80% of the cost cap


def canonical_json(data: Any) -> str:
    """One text per value: sorted keys, no whitespace, UTF-8 kept (json.dumps refuses NaN here: plans have none)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(data: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


class Caps(BaseModel):
    """What the run may spend: dollars, wall hours (what the dollars buy at the approved price), and where the
    trainer callback stops to leave time for its checkpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    cost_usd: float = Field(gt=0, description="the approved cost cap, USD")
    hours: float = Field(gt=0, description="cost_usd / price_hour: the wall hours the cap buys")
    stop_hours: float = Field(gt=0, description="where the trainer callback checkpoints and stops")
    warn_share: float = WARN_SHARE
    basis: str = Field(description="'p90': the plan's cost at the time model's p90; 'usd': given by the approver")


class ApprovedPrice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    price_hour: float = Field(gt=0, description="USD per hour of all nodes at the tier the plan costed")
    spot: bool = False
    source: str
    date: str = Field(description="the day the source observed the price ('' undated)")


class Approval(BaseModel):
    """One signed candidate of one plan."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = APPROVAL_SCHEMA
    plan_digest: str
    plan_file: str = Field(description="the plan file's name (no folder: an approval is shared)")
    project: str
    rank: int = Field(ge=1)
    provider: str
    region: str
    instance_type: str
    gpu_model: str
    gpus: int = Field(ge=1)
    nodes: int = Field(ge=1)
    stack: str
    estimate_hours: float = Field(gt=0, description="the plan's ranked wall hours for this candidate")
    estimate_cost_usd: float = Field(gt=0, description="the plan's ranked cost for this candidate")
    estimate_p50_usd: float = Field(gt=0, description="the plan's cost at the time model's median")
    estimate_p90_usd: float = Field(gt=0, description="the plan's cost at the time model's p90 (hours_high)")
    risk_quantile: float
    price: ApprovedPrice
    caps: Caps
    approved_by: str
    approved_at: str
    record_digest: str = ""

    def body_digest(self) -> str:
        return digest(self.model_dump(mode="json", exclude={"record_digest"}))

    def sealed(self) -> Approval:
        return self.model_copy(update={"record_digest": self.body_digest()})


def caps_for(c: Candidate, cap: str) -> Caps:
    """The caps of `--cap p90` (default: the plan's cost at hours_high, setup included) or `--cap USD`."""
    price = c.cost.price_hour
    if cap == "p90":
        usd, basis = c.cost.usd_high or c.cost.usd, "p90"
    else:
        try:
            usd = float(cap.removeprefix("$").replace(",", ""))
        except ValueError:
            raise BadInput(f"--cap: 'p90' or a dollar amount like 1200 (got {cap[:40]!r}).") from None
        if not math.isfinite(usd) or usd <= 0 or usd > MAX_CAP_USD:
            raise BadInput(f"--cap: a dollar amount above 0 and at most ${MAX_CAP_USD:,.0f} (got {cap[:40]!r}).")
        basis = "usd"
    hours = usd / price
    grace = min(SAVE_GRACE_HOURS, SAVE_GRACE_SHARE * hours)
    return Caps(cost_usd=round(usd, 6), hours=hours, stop_hours=hours - grace, basis=basis)


MAX_CAP_USD = 10_000_000.0  # ten million dollars: above any fine-tuning run, below a typo's 1e12


def approve(plan_data: dict, plan_file: str, c: Candidate, *, by: str, cap: str, project: str,
            now: dt.datetime | None = None) -> Approval:
    """The sealed approval of candidate `c` (already checked by advisor.launch.plan_checks) of the plan whose parsed
    JSON is `plan_data`."""
    from advisor.results import ranked_cost, ranked_hours

    when = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    return Approval(
        plan_digest=digest(plan_data), plan_file=plan_file, project=project, rank=c.rank or 1,
        provider=c.offer.provider, region=c.offer.region, instance_type=c.offer.instance_type,
        gpu_model=c.offer.gpu_model, gpus=c.offer.gpu_count * c.nodes, nodes=c.nodes, stack=c.label,
        estimate_hours=ranked_hours(c), estimate_cost_usd=ranked_cost(c), estimate_p50_usd=c.cost.usd,
        estimate_p90_usd=c.cost.usd_high or c.cost.usd, risk_quantile=c.timing.risk_quantile,
        price=ApprovedPrice(price_hour=c.cost.price_hour, spot=c.cost.spot, source=c.offer.source,
                            date=c.offer.price_date),
        caps=caps_for(c, cap), approved_by=by, approved_at=when,
    ).sealed()


def check_against(approval: Approval, plan_data: dict, c: Candidate) -> None:
    """Refuse (one line) an approval that was edited, or that approved another plan or another candidate."""
    if approval.record_digest != approval.body_digest():
        raise BadInput("--approval: the approval was changed after it was written (its record digest does not "
                       "match its fields); approve the plan again.")
    if approval.plan_digest != digest(plan_data):
        raise BadInput(f"--approval: it approved another plan ({approval.plan_digest[:19]}…), not this one "
                       f"({digest(plan_data)[:19]}…): the plan file changed after approval; approve it again.")
    same = (c.offer.provider, c.offer.region, c.offer.instance_type, c.nodes, c.label)
    approved = (approval.provider, approval.region, approval.instance_type, approval.nodes, approval.stack)
    if same != approved:
        raise BadInput(f"--rank: candidate {c.rank} is not the one approved (rank {approval.rank}: "
                       f"{approval.provider} {approval.instance_type}); pass --rank {approval.rank}.")
