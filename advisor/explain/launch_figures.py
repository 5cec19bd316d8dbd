"""The launch bundle's estimate in words: the README's wall-time and cost rows and the one line the launcher headers
(slurm.sbatch, dstack.yml, sky.yaml) carry. Each prints the figure the decision card prints for the same candidate
(ranked_cost / ranked_hours at the ranking quantile, named), with the p10-p90 band beside it, so the bundle cannot
show a p50 figure under a plan that ranked at p80."""

from __future__ import annotations

from advisor.explain.card import cost_band, time_band
from advisor.results import Candidate, ranked_cost, ranked_hours
from advisor.units import duration, money


def quantile(c: Candidate) -> str:
    """'p80': the quantile the candidate was ranked and is shown at (timing.risk_quantile)."""
    return f"p{round(c.timing.risk_quantile * 100)}"


def estimate_line(c: Candidate) -> str:
    """'$20.22 and 37 min wall at p80 (cost p10–p90: $15.96 – $21.28; time p10–p90: 30 min – 42 min)', the card's
    figures and bands."""
    return (f"{money(ranked_cost(c))} and {duration(ranked_hours(c))} wall at {quantile(c)} (cost {cost_band(c)}; "
            f"time {time_band(c)})")


def wall_time_cell(c: Candidate) -> str:
    """The README's wall-time row (its label names the quantile): the card's figure, the band and where it is from, the hours to the
    hundredth and the training share."""
    t = c.timing
    text = (f"{duration(ranked_hours(c))} ({ranked_hours(c):.2f} h; p50 {t.hours:.2f} h, of it training "
            f"{t.train_hours:.2f} h")
    if t.hours_low is not None and t.hours_high is not None:
        source = f"the run {t.band_basis}" if t.band_basis.startswith("measured on") else "the time model's held-out error"
        text += f"; p10–p90 {t.hours_low:.2f} to {t.hours_high:.2f} h from {source}"
    return text + ")"


def cost_cell(c: Candidate) -> str:
    """The README's cost row (its label names the quantile): the card's figure, the band, and the price it was computed from."""
    return (f"{money(ranked_cost(c))} ({cost_band(c)}) at {money(c.cost.price_hour)}/instance-hour "
            f"({c.offer.source}, {c.offer.price_date})")
