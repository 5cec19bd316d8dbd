"""Billing terms: how many hours a provider charges for a run of a given length.

A sheet row may state `min_billed_hours` (a minimum reservation: a weekly-billed cluster costs at
least 168 h) and `billing_increment_hours` (the unit time is rounded up to: 1/60 for per-minute
billing, 168 for weekly). Empty means billed as used, no minimum. The planner multiplies the
billed hours, not the run's hours, by the hourly price.
"""

from __future__ import annotations

import math


def billed_hours(hours, min_billed_hours=None, billing_increment_hours=None):
    """Hours charged for a run of `hours` (scalars or numpy arrays; NaN/None terms = none).

    max(hours, minimum), rounded up to whole increments. A tiny tolerance keeps 2.0000000001 h from
    becoming a third hour of an hourly increment."""
    import numpy as np

    h = np.asarray(hours, dtype=float)
    minimum = np.nan_to_num(np.asarray(min_billed_hours if min_billed_hours is not None else np.nan,
                                       dtype=float), nan=0.0)
    step = np.asarray(billing_increment_hours if billing_increment_hours is not None else np.nan, dtype=float)
    out = np.maximum(h, minimum)
    has_step = np.isfinite(step) & (step > 0)
    safe = np.where(has_step, step, 1.0)
    rounded = np.ceil(out / safe - 1e-9) * safe
    out = np.where(has_step, rounded, out)
    return float(out) if np.ndim(out) == 0 else out


def describe(min_billed_hours=None, billing_increment_hours=None) -> str | None:
    """'billed per week, at least 168 h' style text for a row's terms, or None for pay-as-used."""
    def known(v):
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    parts = []
    if known(billing_increment_hours) and billing_increment_hours > 0:
        step = billing_increment_hours
        unit = ("minute" if abs(step - 1 / 60) < 1e-6 else "second" if abs(step - 1 / 3600) < 1e-9
                else "hour" if step == 1 else "day" if step == 24 else "week" if step == 168 else f"{step:g} h")
        parts.append(f"billed per {unit}")
    if known(min_billed_hours) and min_billed_hours > 0:
        parts.append(f"at least {min_billed_hours:g} h")
    return ", ".join(parts) or None
