"""The candidate table's columns, defined once: each column's header, the function that computes its value from a
`Candidate`, and how a cell shows it. The terminal table (cli/plan.py), the HTML / Markdown report and the web page
(reports/render.py) and CSV read these specs, so two surfaces cannot print different figures for one row.

Every cost and hours column reads the ranked figure (`ranked_cost` / `ranked_hours`: the plan's risk quantile, the
figure the ranking, the budget and the deadline used), and its header names that quantile ("{q}" in a header).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.results.candidate import Candidate, ranked_cost, ranked_hours
from advisor.units import GB, duration, gb, money

TIE_MARK = "*"  # a row ranked above a cheaper (or faster) one by a near-tie rule


@dataclass(frozen=True)
class Column:
    """One column: `header` ("{q}" stands for the plan's ranking quantile), `value` (the figure, from the candidate)
    and `show` (the figure as a cell; default str)."""

    key: str
    header: str
    value: Callable[[Candidate], Any]
    show: Callable[[Any], str] = str
    right: bool = False

    def title(self, quantile: str) -> str:
        return self.header.replace("{q}", quantile)

    def cell(self, c: Candidate) -> str:
        return self.show(self.value(c))


def _band(value: float, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return f"{value:,.1f}"
    return f"{value:,.1f} ({low:,.1f}-{high:,.1f})"


def _money_band(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{money(low)}-{money(high)}"


def gpus_total(c: Candidate) -> str:
    """'2× A100-80GB', '16× H100 (2 nodes)': every GPU of the run."""
    return f"{c.offer.gpu_count * c.nodes}× {c.offer.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else "")


def hours_cell(h: float) -> str:
    """Wall time in a report cell that never wraps: hours alone past two days (the card says days)."""
    return duration(h) if h < 48 else f"{h:,.1f} h"


def _identity(c: Candidate) -> Candidate:
    return c


def _instance(c: Candidate) -> str:
    return (f"{c.offer.provider} {c.offer.instance_type}"
            + (f" (+{len(c.offer.also_named)} names)" if c.offer.also_named else "")
            + (" (spot)" if c.cost.spot else "") + (" TIGHT" if c.fit.tight else "")
            + (" HOST?" if not c.offer.host_known else ""))


def _peak(c: Candidate) -> str:
    return f"{c.fit.peak_bytes / GB:.1f}" + (f"/{c.fit.limit_bytes / GB:.1f}" if c.fit.limit_bytes else "")


def _rank(c: Candidate) -> str:
    return str(c.rank) + (TIE_MARK if c.tie_rule else "")


# The terminal table (cli/plan.py), most important first
TERMINAL: dict[str, Column] = {col.key: col for col in (
    Column("#", "#", _rank),
    Column("cost", "cost {q}", ranked_cost, money, right=True),
    Column("cost band", "p10-p90", lambda c: (c.cost.usd_low, c.cost.usd_high), lambda b: _money_band(*b), right=True),
    Column("hours", "hours {q}", lambda c: (ranked_hours(c), c.timing.hours_low, c.timing.hours_high),
           lambda b: _band(*b), right=True),
    Column("$/h", "$/h", lambda c: c.cost.price_hour, money, right=True),
    Column("on-demand", "on-demand", lambda c: c.cost.on_demand_usd, money, right=True),
    Column("spot", "spot", lambda c: c.cost.spot_usd, money, right=True),
    Column("GPUs", "GPUs", gpus_total),
    Column("instance", "instance", _instance),
    Column("stack", "stack", lambda c: c.label),
    Column("region", "region", lambda c: c.offer.region + (f" +{len(c.offer.also_in)}" if c.offer.also_in else "")),
    Column("mb×acc", "mb×acc", lambda c: f"{c.shape.micro_batch}×{c.shape.grad_accum}"),
    Column("GB peak/limit", "GB peak/limit", _peak, right=True),
    Column("$/M tok", "$/M tok", lambda c: c.cost.usd_per_m_tokens, lambda v: f"{v:.3f}", right=True),
    Column("price source, date", "price source, date",
           lambda c: f"{c.offer.source[:28]} {c.offer.price_date}" + (" STALE" if c.offer.stale else "")),
)}


def ranked_time_value(ranking: Any) -> float:
    """The time value the rows were ranked with (the plan's `ranking` record; 0: on cost alone, or ordered by how far
    they miss)."""
    stated = ranking or {}
    tv = stated.get("time_value_usd_per_hour")
    by_total = stated.get("key") == "total" and stated.get("order") != "miss"
    return float(tv) if by_total and isinstance(tv, (int, float)) else 0.0


def total_column(time_value: float) -> Column:
    """The figure rows rank on with a time value: cost + hours x time value, both at the ranking quantile."""
    return Column("total", "total {q}", lambda c: ranked_cost(c) + ranked_hours(c) * time_value, money, right=True)


# The report's tables (reports/render.py): the same ranked figures, as a reader of a page wants them
REPORT_COST = Column("cost", "Cost {q}", ranked_cost, money)
REPORT_HOURS = Column("hours", "Wall time {q}", ranked_hours, hours_cell)
REPORT_SHORT_HOURS = Column("hours", "Wall time {q}", ranked_hours, duration)
REPORT_BAND = Column("band", "Band p10–p90", _identity, lambda c: (
    f"{duration(c.timing.hours_low)} – {duration(c.timing.hours_high)} · {money(c.cost.usd_low)} – "
    f"{money(c.cost.usd_high)}" if c.timing.hours_low is not None and c.cost.usd_low is not None else "n/a"))
REPORT_MEMORY = Column("memory", "Memory per GPU (peak / limit)", _identity, lambda c: (
    f"{gb(c.fit.peak_bytes)} / {gb(c.fit.limit_bytes)}" + (" (tight)" if c.fit.tight else "")))
# CSV: the ranked figures first after the rank (money in cents, hours to the thousandth)
CSV_RANKED = (Column("cost", "cost_{q}_usd", lambda c: round(ranked_cost(c), 2)),
              Column("hours", "hours_{q}", lambda c: round(ranked_hours(c), 3)))
