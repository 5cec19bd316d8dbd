"""The scheduled price refresh: its workflow runs the real commands of this repository, and the snapshot
rebuild it runs takes the fetched, dated prices over the catalog's undated ones."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "refresh-prices.yml"
REC = ROOT / "tests" / "data" / "recorded"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def test_the_workflow_is_scheduled_and_opens_a_pull_request_with_a_pinned_action():
    wf = workflow()
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as true
    [cron] = [c["cron"] for c in triggers["schedule"]]
    assert len(cron.split()) == 5 and "workflow_dispatch" in triggers
    steps = wf["jobs"]["refresh"]["steps"]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", u) for u in uses), uses  # pinned by major version
    assert any(u.startswith("peter-evans/create-pull-request@") for u in uses)
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_the_workflow_runs_commands_and_scripts_that_exist():
    from click.testing import CliRunner

    from cli import cli

    runs = [s["run"] for s in workflow()["jobs"]["refresh"]["steps"] if "run" in s]
    assert any("gpu-advisor prices refresh" in r for r in runs)
    res = CliRunner().invoke(cli, ["prices", "refresh", "--help"])  # the subcommand the workflow calls
    assert res.exit_code == 0 and "--offline" in res.output
    scripts = [w for r in runs for w in shlex.split(r.split("||")[0]) if w.startswith("scripts/")]
    assert {"scripts/build_snapshot.py", "scripts/check_observations.py"} <= set(scripts)
    assert all((ROOT / s).is_file() for s in scripts), scripts
    [rebuild] = [r for r in runs if "build_snapshot.py" in r]
    assert "--with-cache" in rebuild
    r = subprocess.run([sys.executable, "scripts/build_snapshot.py", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "--with-cache" in r.stdout and "--date" in r.stdout


def test_rebuilt_snapshot_takes_the_fetched_dated_price_over_the_catalogs(tmp_path, monkeypatch, httpserver):
    from pricing.refresh import refresh

    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(cache_dir))
    httpserver.expect_request("/offers/v1.0/aws/AmazonEC2/current/ap-northeast-1/index.csv").respond_with_data(
        (REC / "aws_offer_ap-northeast-1.csv").read_text(), content_type="text/csv")
    [out] = refresh(["aws"], ["ap-northeast-1"], endpoint=httpserver.url_for("/"))
    assert out.status == "ok", out.message
    before = pd.read_csv(ROOT / "pricing" / "data" / "snapshot.csv")
    key = (before.provider == "aws") & (before.region == "ap-northeast-1") & (before.instance_type == "p5en.48xlarge")
    assert key.sum() == 1 and pd.isna(before.loc[key, "observed_at"]).all()  # the catalog's row is undated
    snap = tmp_path / "snapshot.csv"
    r = subprocess.run([sys.executable, "scripts/build_snapshot.py", "--with-cache", str(cache_dir), "--out", str(snap)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    after = pd.read_csv(snap)
    row = after[(after.provider == "aws") & (after.region == "ap-northeast-1") & (after.instance_type == "p5en.48xlarge")]
    assert len(row) == 1 and row.price_hour.iloc[0] == 79.12
    assert row.observed_at.iloc[0] == "2026-11-28T21:14:03Z"  # the offer file's publication date
    assert len(after) == len(before)  # one row per instance, the fetched one in place of the catalog's


def test_rebuild_refuses_a_cache_folder_without_sheets(tmp_path):
    r = subprocess.run([sys.executable, "scripts/build_snapshot.py", "--with-cache", str(tmp_path),
                        "--out", str(tmp_path / "s.csv")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--with-cache" in r.stderr
