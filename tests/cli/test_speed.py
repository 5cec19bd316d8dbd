"""Speed, by counting work (issue 51): what `plan` imports for a terminal table, how often the cross-check's
join runs for the same sheets, and how often `serve` renders a warm plan's page. Never a stopwatch: the
figures in seconds are benchmarks/bench_planner.py's and benchmarks/bench_serve.py's, as ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import plan_factory as pf  # noqa: E402
from helpers.serve_helpers import LLAMA, q, serving  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# modules a terminal table never needs: the report renderer and its templates, the dataset counter
# (only --dataset), the charts
OFF_THE_PLAN_PATH = ("reports", "jinja2", "matplotlib", "cli.tokens", "advisor.workload.dataset_tokens")
LOADED = ("import json, sys\nsys.argv = ['gpu-advisor', *sys.argv[1:]]\nfrom cli import run\n"
          "try:\n    run()\nexcept SystemExit as exc:\n    code = exc.code\n"
          "print(json.dumps({'code': code, 'modules': sorted(sys.modules)}), file=sys.stderr)\n")


def _loaded(*args: str) -> tuple[int, set[str]]:
    r = subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)
    report = json.loads(r.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


def _under(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_a_terminal_table_plan_imports_neither_the_reports_nor_jinja2_nor_the_dataset_counter():
    code, modules = _loaded("plan", "--model", LLAMA, "--tokens", "100M")
    assert code in (None, 0)
    assert "advisor.planner" in modules and "pricing.crosscheck" in modules  # it did plan
    for package in OFF_THE_PLAN_PATH:
        assert _under(modules, package) == [], package


def test_the_report_option_still_loads_the_renderer_when_it_is_asked_for(tmp_path):
    code, modules = _loaded("plan", "--model", LLAMA, "--tokens", "100M", "--top", "3",
                            "--report", str(tmp_path / "r.md"))
    assert code in (None, 0) and (tmp_path / "r.md").stat().st_size > 0
    assert "reports.render" in modules and "cli.tokens" not in modules


# --------------------------------------------------------------------------- the cross-check's join, once
def test_the_cross_check_runs_once_for_the_same_sheets_and_again_when_a_cell_changes(monkeypatch):
    from pricing import crosscheck, loader

    seen = []
    real = crosscheck.apply
    monkeypatch.setattr(crosscheck, "apply", lambda df, obs, **kw: seen.append((df, obs)) or real(df, obs, **kw))
    first, _ = loader.load(include_cache=False)
    runs = dict(crosscheck.RUNS)
    again, _ = loader.load(include_cache=False)
    assert crosscheck.RUNS["rule"] == runs["rule"] and crosscheck.RUNS["hits"] == runs["hits"] + 1
    assert again.equals(first) and again is not first

    df, obs = seen[-1]
    one = real(df, obs, origin=loader.ORIGIN)
    rule = crosscheck.RUNS["rule"]
    one.loc[0, "price_hour"] = -1.0  # a caller writing into its copy changes nothing kept
    assert real(df, obs, origin=loader.ORIGIN).loc[0, "price_hour"] != -1.0
    assert crosscheck.RUNS["rule"] == rule  # the same frames: a kept copy
    changed = df.copy()
    changed.loc[0, "price_hour"] = float(changed.loc[0, "price_hour"]) * 2
    real(changed, obs, origin=loader.ORIGIN)
    assert crosscheck.RUNS["rule"] == rule + 1  # one cell differs: the rule runs
    real(df, obs, tol=0.5, origin=loader.ORIGIN)
    assert crosscheck.RUNS["rule"] == rule + 2  # another tolerance: the rule runs
    assert len(crosscheck._JOINS) <= crosscheck.JOIN_CACHE


# --------------------------------------------------------------------------- serve: a warm page rendered once
def test_a_warm_plan_page_is_rendered_once_for_many_requests_and_the_pages_kept_are_bounded(monkeypatch):
    import cli.serve_app as app_module
    from cli.serve_cache import Pages

    contexts = []
    real = app_module.plan_context
    monkeypatch.setattr(app_module, "plan_context", lambda plan: contexts.append(1) or real(plan))
    plans = []

    def compute(options):
        plans.append(options)
        return pf.single_gpu_plan()

    with serving(compute, sheets=[]) as s:
        s.app.pages = Pages(size=3)
        base = q(model=LLAMA, tokens="100M")
        bodies = {s.get(f"/plan?{base}").body for _ in range(10)}
        assert len(bodies) == 1 and len(contexts) == 1 and s.app.pages.rendered == 1 and s.app.pages.served == 9
        assert s.get(f"/plan.json?{base}").status == 200 and s.get(f"/plan.json?{base}").status == 200
        assert len(plans) == 1 and s.app.pages.rendered == 2  # one plan for both routes; the JSON made once
        for tokens in ("1M", "2M"):  # two more pages: the cache holds 3, so the oldest (/plan) leaves
            assert s.get("/plan?" + q(model=LLAMA, tokens=tokens)).status == 200
        assert len(s.app.pages) == 3 and len(contexts) == 3
        assert s.get(f"/plan?{base}").body in bodies and len(contexts) == 4  # evicted: rendered again
        assert len(plans) == 3  # the plans themselves stayed in the planner's cache


def test_a_page_is_rendered_again_when_its_plan_was_made_again():
    from cli.serve_cache import Pages

    pages, made = Pages(size=2), []
    first, second = object(), object()
    assert pages.get("/plan", "a", first, lambda: made.append(1) or b"one") == b"one"
    assert pages.get("/plan", "a", first, lambda: made.append(1) or b"two") == b"one"
    assert pages.get("/plan", "a", second, lambda: made.append(1) or b"two") == b"two"  # a new outcome
    assert made == [1, 1] and pages.rendered == 2 and pages.served == 1


def test_a_frame_over_the_row_bound_is_judged_afresh_and_never_kept(monkeypatch):
    from pricing import crosscheck, loader

    seen = []
    real = crosscheck.apply
    monkeypatch.setattr(crosscheck, "apply", lambda df, obs, **kw: seen.append((df, obs)) or real(df, obs, **kw))
    loader.load(include_cache=False)
    df, obs = seen[-1]
    monkeypatch.setattr(crosscheck, "JOIN_CACHE_ROWS", len(df) - 1)
    kept, rule = dict(crosscheck._JOINS), crosscheck.RUNS["rule"]
    real(df, obs, origin=loader.ORIGIN)
    real(df, obs, origin=loader.ORIGIN)
    assert crosscheck.RUNS["rule"] == rule + 2 and crosscheck._JOINS.keys() == kept.keys()
