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
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from advisor.data_file import first_problem, read_json
from advisor.errors import BadInput
from advisor.results import Candidate, ranked_cost, ranked_hours
from advisor.results.checks import NAME_CHARS, TEXT_CHARS, check_text
from advisor.text import plain

APPROVAL_SCHEMA = 1
# Where the trainer callback stops: early enough before the hours cap that the final checkpoint is written inside
# it (a scheduler limit at the cap itself would kill the save): 15 minutes before it, an assumption sized for a
# sharded 70B checkpoint on network storage, or 10% of the cap where that is shorter (a cap under 2.5 h stops at 90%).
SAVE_GRACE_HOURS = 0.25
SAVE_GRACE_SHARE = 0.10
WARN_SHARE = 0.80  # the callback warns once at 80% of the cost cap
MAX_CAP_USD = 10_000_000.0  # ten million dollars: above any fine-tuning run, below a typo's 1e12
MAX_APPROVAL_BYTES = 1_000_000  # an approval is about 2 KB
MAX_CAP_HOURS = 24 * 366  # one year of wall time, as advisor/launch/plan_checks.py MAX_RUN_HOURS


def canonical_json(data: Any) -> str:
    """One text per value: sorted keys, no whitespace, UTF-8 kept (json.dumps refuses NaN here: plans have none)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(data: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


class Caps(BaseModel):
    """What the run may spend: dollars, wall hours (what the dollars buy at the approved price), and where the
    trainer callback stops to leave time for its checkpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    cost_usd: float = Field(gt=0, le=MAX_CAP_USD, description="the approved cost cap, USD")
    hours: float = Field(gt=0, le=MAX_CAP_HOURS, description="cost_usd / price_hour: the wall hours the cap buys")
    stop_hours: float = Field(gt=0, description="where the trainer callback checkpoints and stops")
    warn_share: float = Field(WARN_SHARE, gt=0, lt=1)
    basis: str = Field(pattern="^(p90|usd)$",
                       description="'p90': the plan's cost at the time model's p90; 'usd': given by the approver")

    @model_validator(mode="after")
    def _stop_inside_the_cap(self) -> Caps:
        if self.stop_hours > self.hours:
            raise ValueError(f"caps.stop_hours ({self.stop_hours:g}) is after caps.hours ({self.hours:g})")
        return self


class ApprovedPrice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    price_hour: float = Field(gt=0, description="USD per hour of all nodes at the tier the plan costed")
    spot: bool = False
    source: str
    date: str = Field(description="the day the source observed the price ('' undated)")

    @field_validator("source", "date")
    @classmethod
    def _printable(cls, value: str, info) -> str:
        return check_text(value, f"price.{info.field_name}", TEXT_CHARS)


class Approval(BaseModel):
    """One signed candidate of one plan."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
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

    @field_validator("plan_digest", "plan_file", "project", "provider", "region", "instance_type", "gpu_model",
                     "stack", "approved_by", "approved_at", "record_digest")
    @classmethod
    def _printable(cls, value: str, info) -> str:
        """Its text reaches the bundle's README, a terminal and the report: printable, bounded (as a plan's)."""
        return check_text(value, info.field_name, NAME_CHARS)

    @model_validator(mode="after")
    def _caps_are_what_the_price_buys(self) -> Approval:
        """The hours cap is the cost cap at the approved price (caps_for): an approval whose two disagree would
        give the scheduler one limit and the trainer another."""
        bought = self.caps.cost_usd / self.price.price_hour
        if not math.isclose(self.caps.hours, bought, rel_tol=1e-6):
            raise ValueError(f"caps.hours ({self.caps.hours:g}) is not caps.cost_usd / price.price_hour "
                             f"({bought:g})")
        return self

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
        if not math.isfinite(usd) or round(usd, 6) <= 0 or usd > MAX_CAP_USD:
            raise BadInput(f"--cap: a dollar amount of at least $0.000001 and at most ${MAX_CAP_USD:,.0f} (got "
                           f"{cap[:40]!r}).")
        basis = "usd"
    usd = round(usd, 6)  # what the approval records, and what the hours cap is computed from
    if usd <= 0:
        raise BadInput("--cap: the plan's p90 cost rounds to $0.000000; approve a dollar amount with --cap USD.")
    if usd > MAX_CAP_USD:
        raise BadInput(f"--cap: the plan's p90 cost ${usd:,.0f} is above the ${MAX_CAP_USD:,.0f} an approval may "
                       "cap; approve a dollar amount with --cap USD.")
    hours = usd / price
    if hours > MAX_CAP_HOURS:
        raise BadInput(f"--cap: ${usd:,.2f} buys {hours:,.0f} h at ${price:,.2f}/h, more than a year "
                       f"({MAX_CAP_HOURS:,} h) of wall time; approve a smaller cap.")
    grace = min(SAVE_GRACE_HOURS, SAVE_GRACE_SHARE * hours)
    return Caps(cost_usd=usd, hours=hours, stop_hours=hours - grace, basis=basis)


def approve(plan_data: dict, plan_file: str, c: Candidate, *, by: str, cap: str, project: str,
            now: dt.datetime | None = None) -> Approval:
    """The sealed approval of candidate `c` (already checked by advisor.launch.plan_checks) of the plan whose parsed
    JSON is `plan_data`."""
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


def load(path: Path, what: str = "--approval") -> Approval:
    """An approval file, as `launch --approval`, `report --approval` and `track RUN_DIR` read it: size and nesting
    limited (pricing.files), every field validated (finite numbers, printable text, caps that agree with the
    price), and refused when it was edited after `approve` sealed it. Any problem is one BadInput line naming
    `what` (the option or argument), the file and the field."""
    name = plain(path)
    data = read_json(path, what, MAX_APPROVAL_BYTES, "the approval.json `gpu-advisor approve` wrote")
    try:
        approval = Approval.model_validate(data, strict=True)  # a file: no "2" where a number goes
    except ValidationError as exc:
        field, msg = first_problem(exc)
        raise BadInput(f"{what}: {name} is not an approval from `gpu-advisor approve`: field {field[:80]}: "
                       f"{msg[:200]}.") from None
    check_sealed(approval, f"{what}: {name}")
    return approval


def check_sealed(approval: Approval, what: str = "--approval") -> None:
    """Refuse (one line) an approval whose fields were changed after `approve` sealed them."""
    if approval.record_digest != approval.body_digest():
        raise BadInput(f"{what}: the approval was changed after it was written (its record digest does not "
                       "match its fields); approve the plan again.")


def matches_plan(approval: Approval, plan_data: dict) -> bool:
    return approval.plan_digest == digest(plan_data)


def check_against(approval: Approval, plan_data: dict, c: Candidate, rank_option: str | None = "--rank") -> None:
    """Refuse (one line) an approval that was edited, or that approved another plan or another candidate (chosen by
    `rank_option`; None: the approval's own rank picked it)."""
    check_sealed(approval)
    if not matches_plan(approval, plan_data):
        raise BadInput(f"--approval: it approved another plan ({approval.plan_digest[:19]}…), not this one "
                       f"({digest(plan_data)[:19]}…): the plan file changed after approval; approve it again.")
    same = (c.offer.provider, c.offer.region, c.offer.instance_type, c.nodes, c.label)
    approved = (approval.provider, approval.region, approval.instance_type, approval.nodes, approval.stack)
    if same != approved and rank_option is None:
        raise BadInput(f"--approval: rank {approval.rank} of this plan is {c.offer.provider} {c.offer.instance_type}, "
                       f"not the {approval.provider} {approval.instance_type} it approved; it is not this plan's "
                       "approval.")
    if same != approved:
        raise BadInput(f"{rank_option}: candidate {c.rank} is not the one approved (rank {approval.rank}: "
                       f"{approval.provider} {approval.instance_type}); pass {rank_option} {approval.rank}.")
    if not math.isclose(approval.price.price_hour, c.cost.price_hour, rel_tol=1e-9):
        raise BadInput(f"--approval: it approved ${approval.price.price_hour:,.4f}/h, and this plan prices the "
                       f"candidate at ${c.cost.price_hour:,.4f}/h; it is not this plan's approval.")
