"""What a candidate read from a plan file must hold before any launcher is written from it.

A plan file passes the result schema when its numbers are finite and non-negative and its text printable
(advisor/results/checks.py); a launcher needs more: the hours and price it turns into `#SBATCH --time`, dstack's
max_duration and max_price and the trainer's cost cap must be positive, within what any fine-tuning run needs, and
consistent with each other, and the memory it promises must fit the card it names. Each problem is one line naming
the field, so a hand-edited or corrupted plan never becomes `--time=52083333333-08:30:00`.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from advisor.errors import BadInput
from advisor.planner.offers import DATE_UNKNOWN
from advisor.results import Candidate
from pricing.gpus import get_gpu

# Bounds a launcher accepts (each far above any real run, far below a typo's 1e12):
MAX_RUN_HOURS = 24 * 366  # one year of wall time: the longest job any scheduler here is asked for
MAX_GPU_HOUR_USD = 100.0  # USD per GPU-hour: the dearest public on-demand GPU-hour in the bundled sheet is ~$15
MIN_TOKENS_PER_SEC = 1.0  # below one token per second a run of any size takes longer than MAX_RUN_HOURS
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _positive(value: float | None, field: str, high: float) -> float:
    if value is None or not math.isfinite(value) or value <= 0 or value > high:
        raise BadInput(f"{field}: must be a number above 0 and at most {high:,.0f} for a launch (got {value}).")
    return value


def check_consistent(c: Candidate, where: str) -> None:
    """What any reader of a plan file needs (report, approve, launch): the band brackets its estimate, the rate is
    a real rate, the price is dated as a day (or undated) and the memory fits the card named. One BadInput naming
    `where` and the field, or nothing."""
    t, cost = c.timing, c.cost
    if t.hours_high is not None and t.hours_high < t.hours:
        raise BadInput(f"{where}: timing.hours_high ({t.hours_high:g}) is below timing.hours ({t.hours:g}); the band's "
                       "slow end cannot be faster than its estimate.")
    if t.hours_low is not None and t.hours_low > t.hours:
        raise BadInput(f"{where}: timing.hours_low ({t.hours_low:g}) is above timing.hours ({t.hours:g}).")
    if t.tokens_per_sec < MIN_TOKENS_PER_SEC or not math.isfinite(t.tokens_per_sec):
        raise BadInput(f"{where}: timing.tokens_per_sec must be at least {MIN_TOKENS_PER_SEC:g} (got "
                       f"{t.tokens_per_sec:g}).")
    if cost.usd_high is not None and cost.usd_high < cost.usd:
        raise BadInput(f"{where}: cost.usd_high ({cost.usd_high:g}) is below cost.usd ({cost.usd:g}).")
    listed = c.offer.spot_price_hour if cost.spot else c.offer.price_hour
    if listed and not math.isclose(listed * c.nodes, cost.price_hour, rel_tol=0.01):
        raise BadInput(f"{where}: offer.{'spot_price_hour' if cost.spot else 'price_hour'} ({listed:g}) × "
                       f"{c.nodes} node(s) is not cost.price_hour ({cost.price_hour:g}): the cost was not priced at "
                       "this offer.")
    _check_date(c.offer.price_date, f"{where}: offer.price_date")
    card = get_gpu(c.offer.gpu_model)
    if c.fit.peak_bytes > card.usable_bytes:
        raise BadInput(f"{where}: fit.peak_bytes ({c.fit.peak_bytes / 1e9:,.1f} GB) is more than the "
                       f"{card.name}'s {card.usable_bytes / 1e9:.1f} GB usable: this candidate does not fit its GPU.")
    if c.fit.usable_bytes > card.usable_bytes * 1.01 or c.fit.usable_bytes <= 0:
        raise BadInput(f"{where}: fit.usable_bytes ({c.fit.usable_bytes / 1e9:,.1f} GB) is not the "
                       f"{card.name}'s {card.usable_bytes / 1e9:.1f} GB usable.")


def check_launchable(c: Candidate, where: str) -> None:
    """check_consistent, and the bounds a launcher's caps need: positive hours, prices and cost, each within what
    any fine-tuning run needs. One BadInput naming `where` (the option that named the plan file) and the field."""
    t, cost = c.timing, c.cost
    _positive(t.hours, f"{where}: timing.hours", MAX_RUN_HOURS)
    for name in ("hours_high", "hours_at_risk"):
        value = getattr(t, name)
        if value is not None:
            _positive(value, f"{where}: timing.{name}", MAX_RUN_HOURS)
    check_consistent(c, where)
    gpus = c.offer.gpu_count * c.nodes
    _positive(cost.price_hour, f"{where}: cost.price_hour", MAX_GPU_HOUR_USD * gpus)
    if c.offer.price_hour:
        _positive(c.offer.price_hour, f"{where}: offer.price_hour", MAX_GPU_HOUR_USD * c.offer.gpu_count)
    if c.offer.spot_price_hour is not None:
        _positive(c.offer.spot_price_hour, f"{where}: offer.spot_price_hour", MAX_GPU_HOUR_USD * c.offer.gpu_count)
    _positive(cost.usd, f"{where}: cost.usd", MAX_GPU_HOUR_USD * gpus * MAX_RUN_HOURS)


def _check_date(text: str, field: str) -> None:
    """'' or 'date unknown' (undated: advisor/planner/offers.py DATE_UNKNOWN) or a real YYYY-MM-DD day that has
    happened."""
    if not text or text == DATE_UNKNOWN:
        return
    try:
        if not _DAY.fullmatch(text):
            raise ValueError
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise BadInput(f"{field}: a date like 2026-11-30 (YYYY-MM-DD) or '{DATE_UNKNOWN}' (got {text[:40]!r}).") \
            from None
    if day > dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1):
        raise BadInput(f"{field}: {text} is in the future.")
