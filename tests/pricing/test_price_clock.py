"""GPU_ADVISOR_TODAY pins the day price ages and staleness are measured on (pricing.clock, the one place
that reads it), so the README examples and the reference-plan snapshots do not change as the calendar
moves; the staleness threshold is 60 days (OBSERVATIONS.md says why)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from pricing import cache, clock

ROOT = Path(__file__).resolve().parents[2]


def sheet(tmp_path, observed: str) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text("provider,instance_type,gpu_model,gpu_count,price_hour,observed_at\n"
                    f"acme,box,H100,1,2.5,{observed}\n")
    return path


@pytest.mark.parametrize("today, age, stale", [("2026-12-01", 30.0, False), ("2026-12-31", 60.0, False),
                                               ("2027-01-01", 61.0, True)])
def test_ages_and_staleness_are_measured_on_the_pinned_day(tmp_path, monkeypatch, today, age, stale):
    from pricing.loader import load

    monkeypatch.setenv("GPU_ADVISOR_TODAY", today)
    monkeypatch.delenv("GPU_ADVISOR_STALE_DAYS", raising=False)
    df, _ = load([sheet(tmp_path, "2026-11-01")], include_cache=False, include_bundled=False)
    assert (df.age_days.iloc[0], bool(df.stale.iloc[0])) == (age, stale)
    assert cache.age_days("2026-11-01T00:00:00Z") == age  # `prices sources` ages sheets on the same day


def test_a_report_ages_prices_on_the_day_the_plan_measured_them(monkeypatch):
    from helpers import plan_factory as pf

    from advisor.explain.price_age import price_age_days
    from advisor.planner.assemble import _pinned_day

    plan = pf.single_gpu_plan()
    c = plan.candidates[0].model_copy(update={"offer": plan.candidates[0].offer.model_copy(
        update={"price_date": "2026-11-01"})})
    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2026-12-01")
    pinned = plan.model_copy(update={"generated_at": "2027-06-01T00:00:00+00:00", "prices_as_of": _pinned_day()})
    assert price_age_days(c, pinned) == 30  # the plan's table aged it on the pinned day, not 212 days on
    monkeypatch.delenv("GPU_ADVISOR_TODAY")
    assert _pinned_day() == ""
    assert price_age_days(c, pinned.model_copy(update={"prices_as_of": ""})) == 212  # unpinned: when generated


def test_without_the_variable_the_clock_is_the_real_one(monkeypatch):
    monkeypatch.delenv("GPU_ADVISOR_TODAY", raising=False)
    assert abs((clock.now() - dt.datetime.now(dt.UTC)).total_seconds()) < 60
    assert cache.STALE_DAYS == 60


@pytest.mark.parametrize("bad", ["tomorrow", "2026-13-01", "2026-12-01T10:00", "01/12/2026"])
def test_a_pinned_day_that_is_not_a_date_is_refused_in_one_line(tmp_path, monkeypatch, capsys, bad):
    from helpers.cli_run import gpu_advisor, one_line_error

    monkeypatch.setenv("GPU_ADVISOR_TODAY", bad)
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = gpu_advisor(capsys, "prices", "list", "--gpu", "H100")
    assert "GPU_ADVISOR_TODAY" in one_line_error(code, err) and "YYYY-MM-DD" in err


def test_future_dates_are_judged_by_the_real_clock_not_the_pinned_day(tmp_path, monkeypatch):
    from pricing.loader import load

    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2020-01-01")  # a pinned past day does not make today's prices "future"
    df, problems = load([sheet(tmp_path, dt.date.today().isoformat())], include_cache=False, include_bundled=False)
    assert len(df) == 1 and problems == []


def test_the_readme_examples_and_plan_snapshots_run_on_a_pinned_day():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from readme_examples import TODAY, environment
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert environment(Path("/tmp"))["GPU_ADVISOR_TODAY"] == TODAY == "2026-12-01"
    assert "from readme_examples import environment" in (ROOT / "scripts" / "plan_snapshots.py").read_text()
