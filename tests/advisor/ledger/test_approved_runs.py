"""The approved plan is enforced: approve -> launch --approval -> a run that stops itself at its cap with a
checkpoint -> track -> ledger, on SQLite and on a real PostgreSQL server; tampered plans and approvals, and absurd
plan values, are refused before any launcher is written."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from helpers.cli_run import gpu_advisor, one_line_error, saved_plan

from advisor.approval import Approval, digest

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


# The budget owners' page (docs/budget-owners.md) shows this loop's output: the same plan, approver, project and cap
PAGE = _script("budget_owner_example")


# --------------------------------------------------------------------------- a real PostgreSQL server


def _pg_bin(name: str) -> str | None:
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[-1:]), None)


@pytest.fixture(scope="module")
def postgres():
    """A private PostgreSQL cluster on a Unix socket (Debian's postgresql package, .ci/run installs it), started for
    this module and stopped after it. Yields a function that creates a fresh database and returns its URL."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not (initdb and pg_ctl):
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL's initdb/pg_ctl not found: .ci/run installs Debian's postgresql package")
        pytest.skip("PostgreSQL not installed (.ci/run installs it)")
    root = Path(tempfile.mkdtemp(prefix="advisor-pg-", dir="/tmp"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as Debian's postgres user
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, sock, port = root / "data", root, "54329"
    subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "-N"], check=True,
                   capture_output=True, timeout=120)
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-c listen_addresses='' -k {sock} -p {port} -c fsync=off", "start"], check=True,
                   capture_output=True, timeout=120)
    import psycopg

    made = []

    def new_database() -> str:
        name = f"ledger_{len(made)}"
        with psycopg.connect(host=str(sock), port=port, user="postgres", dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return f"postgresql://postgres@/{name}?host={sock}&port={port}"

    yield new_database
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=120)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'team' / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres")()


# --------------------------------------------------------------------------- a plan, an approval, a capped run


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    # the page's plan: its arguments (less "plan" and "--format json") on its pinned day (scripts/readme_examples.py)
    day = os.environ.get("GPU_ADVISOR_TODAY")
    os.environ["GPU_ADVISOR_TODAY"] = _script("readme_examples").TODAY
    try:
        return saved_plan(tmp_path_factory.mktemp("plan"), *PAGE.PLAN[1:-2])
    finally:
        if day is None:
            os.environ.pop("GPU_ADVISOR_TODAY")
        else:
            os.environ["GPU_ADVISOR_TODAY"] = day


@pytest.fixture(scope="module")
def capped_run(plan_file, tmp_path_factory) -> Path:
    """approve with a cap far below one CPU step, launch under it, and run the bundle's smoke training for real."""
    folder = tmp_path_factory.mktemp("run")
    run = lambda *a: subprocess.run([sys.executable, "-m", "advisor", *a], capture_output=True, text=True,  # noqa: E731
                                    env=ENV, cwd=folder, timeout=600)
    done = run("approve", str(plan_file), "--by", PAGE.BY, "--cap", PAGE.CAP, "--project", PAGE.PROJECT,
               "-o", "approval.json")
    assert done.returncode == 0, done.stderr
    done = run("launch", "--from", str(plan_file), "--approval", "approval.json", "--out", "run")
    assert done.returncode == 0, done.stderr
    bundle = folder / "run"
    smoke = subprocess.run(["bash", "launch.sh", "--smoke"], cwd=bundle, capture_output=True, text=True,
                           env=ENV, timeout=900)
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    (bundle / "smoke.log").write_text(smoke.stdout + smoke.stderr)
    return bundle


def test_the_run_stops_itself_at_the_cap_with_a_checkpoint_and_says_so(capped_run):
    log = (capped_run / "smoke.log").read_text()
    approval = Approval.model_validate_json((capped_run / "approval.json").read_text())
    [stop] = [ln for ln in log.splitlines() if ln.startswith("budget cap: stopping")]
    assert approval.record_digest[:19] in stop and "with a checkpoint" in stop
    assert f"the ${PAGE.CAP} cap approved" in stop  # the cap `approve --cap 0.00001` wrote, not "$0.00"
    events = [json.loads(ln) for ln in (capped_run / "budget_cap.log.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.index("warn") < kinds.index("stop")
    stopped = next(e for e in events if e["event"] == "stop")
    assert stopped["step"] < stopped["max_steps"]  # it stopped before the planned end
    assert (capped_run / "smoke-output" / f"checkpoint-{stopped['step']}" / "trainer_state.json").is_file()


def test_track_then_ledger_shows_the_run_approved_and_actual(capped_run, ledger_url, capsys):
    code, out, err = gpu_advisor(capsys, "track", capped_run, "--ledger", ledger_url)
    assert code == 0, err
    code, out, err = gpu_advisor(capsys, "ledger", "--ledger", ledger_url, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    approval = Approval.model_validate_json((capped_run / "approval.json").read_text())
    [line] = data["runs"]
    stop = next(json.loads(ln) for ln in (capped_run / "budget_cap.log.jsonl").read_text().splitlines()
                if '"stop"' in ln)
    assert line["status"] == "stopped at cap" and line["approved_by"] == PAGE.BY
    assert line["cap_usd"] == approval.caps.cost_usd and line["steps"] == stop["step"] < line["max_steps"]
    assert line["spent_usd"] >= stop["cost_usd"] > 0 and line["remaining_p50_usd"] == 0.0
    [project] = data["projects"]
    for row in (line, project):  # sums print without binary noise (0.194, not 0.19399999999999998)
        assert all(float(f"{v:.12g}") == v for v in row.values() if isinstance(v, float)), row
    assert project["project"] == PAGE.PROJECT and project["spent_usd"] == line["spent_usd"]
    assert project["headroom_p90_usd"] == pytest.approx(project["approved_usd"] - project["spent_usd"])


def test_two_track_processes_on_one_ledger_lose_nothing(capped_run, ledger_url):
    procs = [subprocess.Popen([sys.executable, "-m", "advisor", "track", str(capped_run), "--ledger", ledger_url],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert all(code == 0 for _, _, code in results), results
    from advisor.ledger.store import open_ledger

    book = open_ledger(ledger_url)
    assert len(book.runs()) == 4 and len(book.approvals()) == 1  # every observation kept, the approval once


def _shape(line: str) -> str:
    """A line with its figures, digests and times masked: what stays the same from one run to the next."""
    line = re.sub(r"sha256:[0-9a-f]+", "sha256:#", line)
    return re.sub(r"\d[\d,]*(\.\d+)?(e[-+]?\d+)?", "#", line)


def _after(lines: list[str], command: str) -> list[str]:
    """The output lines after `$ command` up to the next `$ ` line, in the page's transcript."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"$ {command}"))
    end = next((i for i, ln in enumerate(lines) if i > start and ln.startswith("$ ")), len(lines))
    return lines[start + 1:end]


def test_the_budget_owners_page_shows_what_the_loop_prints_now(capped_run, plan_file, tmp_path, capsys):
    """docs/budget-owners.md's smoke-run transcript (scripts/budget_owner_example.py) against this fresh run of the
    same commands, figures masked: the callback's lines, track's line, the ledger's JSON fields and the report's
    approval block. A change to any of them fails here until the page is regenerated."""
    page = PAGE.block(PAGE.PAGE.read_text(encoding="utf-8")).splitlines()
    smoke = [ln for ln in (capped_run / "smoke.log").read_text().splitlines() if ln.startswith("budget cap:")]
    assert [_shape(ln) for ln in _after(page, "bash run/launch.sh --smoke")] == [_shape(ln) for ln in smoke]
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    code, out, err = gpu_advisor(capsys, "track", capped_run, "--ledger", url)
    assert code == 0, err
    assert [_shape(ln) for ln in _after(page, "gpu-advisor track run")] == [_shape(out.strip())]
    code, out, err = gpu_advisor(capsys, "ledger", "--ledger", url, "--format", "json")
    documented = json.loads("\n".join(_after(page, "gpu-advisor ledger --format json")))
    fresh = json.loads(out)
    assert [sorted(r) for r in documented["runs"]] == [sorted(r) for r in fresh["runs"]]
    assert [sorted(p) for p in documented["projects"]] == [sorted(p) for p in fresh["projects"]]
    assert documented["runs"][0]["status"] == fresh["runs"][0]["status"] == "stopped at cap"
    report = tmp_path / "report.md"
    code, _, err = gpu_advisor(capsys, "report", plan_file, "--approval", capped_run / "approval.json", "-o", report)
    assert code == 0, err
    block = PAGE.approval_section(report.read_text()).splitlines()
    assert [_shape(ln) for ln in _after(page, "gpu-advisor report")] == [_shape(ln) for ln in block]


# --------------------------------------------------------------------------- what is refused, in one line


def _edited(plan_file: Path, folder: Path, edit) -> Path:
    data = json.loads(plan_file.read_text())
    edit(data["candidates"][0])
    out = folder / "edited.json"
    out.write_text(json.dumps(data))
    return out


def test_a_plan_changed_after_approval_is_refused(plan_file, tmp_path, capsys):
    approval = tmp_path / "approval.json"
    assert gpu_advisor(capsys, "approve", plan_file, "--by", "Ana", "-o", approval)[0] == 0
    cheaper = _edited(plan_file, tmp_path, lambda c: c["cost"].update(usd=c["cost"]["usd"] / 2))
    line = one_line_error(*gpu_advisor(capsys, "launch", "--from", cheaper, "--approval", approval, "--out",
                                       tmp_path / "b")[::2])
    assert "another plan" in line and not (tmp_path / "b").exists()


def test_an_edited_approval_is_refused(plan_file, tmp_path, capsys):
    approval = tmp_path / "approval.json"
    assert gpu_advisor(capsys, "approve", plan_file, "--by", "Ana", "-o", approval)[0] == 0
    data = json.loads(approval.read_text())
    for key in ("cost_usd", "hours", "stop_hours"):  # a larger cap, consistent with the price: only the seal shows it
        data["caps"][key] *= 2
    approval.write_text(json.dumps(data))
    line = one_line_error(*gpu_advisor(capsys, "launch", "--from", plan_file, "--approval", approval, "--out",
                                       tmp_path / "b")[::2])
    assert "changed after it was written" in line and not (tmp_path / "b").exists()


def test_launch_under_an_approval_refuses_another_rank_and_a_missing_plan(plan_file, tmp_path, capsys):
    approval = tmp_path / "approval.json"
    assert gpu_advisor(capsys, "approve", plan_file, "--by", "Ana", "-o", approval)[0] == 0
    line = one_line_error(*gpu_advisor(capsys, "launch", "--from", plan_file, "--approval", approval, "--rank", "2",
                                       "--out", tmp_path / "b")[::2])
    assert line.startswith("error: --rank:") and "--rank 1" in line and not (tmp_path / "b").exists()
    line = one_line_error(*gpu_advisor(capsys, "launch", "--model", "llama-3.1-8b", "--approval", approval,
                                       "--out", tmp_path / "b")[::2])
    assert "--from" in line and not (tmp_path / "b").exists()
    line = one_line_error(*gpu_advisor(capsys, "launch", "--from", plan_file, "--approval", tmp_path / "none.json",
                                       "--out", tmp_path / "b")[::2])
    assert "none.json does not exist" in line and not (tmp_path / "b").exists()


ABSURD = {
    "hours 1e12": (lambda c: c["timing"].update(hours=1e12), "timing.hours"),
    "price 1e12": (lambda c: (c["cost"].update(price_hour=1e12), c["offer"].update(price_hour=1e12)), "price_hour"),
    "peak 1e30": (lambda c: c["fit"].update(peak_bytes=10**30), "fit.peak_bytes"),
    "peak 1 GB above the card": (lambda c: c["fit"].update(peak_bytes=c["fit"]["usable_bytes"] + 10**9),
                                 "fit.peak_bytes"),
    "hours_high below hours": (lambda c: c["timing"].update(hours_high=c["timing"]["hours"] / 2), "hours_high"),
    "hours_high 0": (lambda c: c["timing"].update(hours_high=0.0), "hours_high"),
    "tokens/s 1e-300": (lambda c: c["timing"].update(tokens_per_sec=1e-300), "tokens_per_sec"),
    "price_date yesterday": (lambda c: c["offer"].update(price_date="yesterday"), "price_date"),
}


@pytest.mark.parametrize("case", ABSURD)
@pytest.mark.parametrize("command", ["launch", "approve"])
def test_absurd_plan_values_are_refused_before_any_launcher_is_written(plan_file, tmp_path, capsys, case, command):
    edit, field = ABSURD[case]
    bad = _edited(plan_file, tmp_path, edit)
    args = (["launch", "--from", bad, "--out", tmp_path / "b"] if command == "launch"
            else ["approve", bad, "--by", "Ana", "-o", tmp_path / "a.json"])
    code, _, err = gpu_advisor(capsys, *args)
    assert field in one_line_error(code, err)
    assert not (tmp_path / "b").exists() and not (tmp_path / "a.json").exists()


def test_track_refuses_an_edited_approval_in_the_run_folder(capped_bundle, tmp_path, capsys):
    bundle, _, _ = capped_bundle
    run = tmp_path / "run"
    shutil.copytree(bundle, run)
    data = json.loads((run / "approval.json").read_text())
    data["approved_by"] = "someone else"
    (run / "approval.json").write_text(json.dumps(data))
    ledger = tmp_path / "ledger.sqlite"
    line = one_line_error(*gpu_advisor(capsys, "track", run, "--ledger", f"sqlite:///{ledger}")[::2])
    assert line.startswith("error: RUN_DIR:") and "changed after it was written" in line
    assert not ledger.exists()  # refused before the ledger is opened


# --------------------------------------------------------------------------- the caps, in each launcher's terms


@pytest.fixture(scope="module")
def capped_bundle(plan_file, tmp_path_factory):
    folder = tmp_path_factory.mktemp("capped")
    run = lambda *a: subprocess.run([sys.executable, "-m", "advisor", *a], capture_output=True, text=True,  # noqa: E731
                                    env=ENV, cwd=folder, timeout=600)
    assert run("approve", str(plan_file), "--by", "Ana", "--cap", "1200", "-o", "approval.json").returncode == 0
    done = run("launch", "--from", str(plan_file), "--approval", "approval.json", "--out", "bundle")
    assert done.returncode == 0, done.stderr
    return folder / "bundle", Approval.model_validate_json((folder / "approval.json").read_text()), done.stdout


def test_the_caps_reach_slurm_dstack_skypilot_and_the_trainer(capped_bundle):
    bundle, approval, printed = capped_bundle
    assert approval.caps.hours == pytest.approx(1200 / approval.price.price_hour)
    minutes = -(-approval.caps.hours * 60 // 1)
    sbatch = (bundle / "slurm.sbatch").read_text()
    days, rest = divmod(int(minutes), 24 * 60)
    assert f"#SBATCH --time={days}-{rest // 60:02d}:{rest % 60:02d}:00" in sbatch
    task = yaml.safe_load((bundle / "dstack.yml").read_text())
    assert task["max_duration"] == f"{int(minutes)}m" and task["max_price"] == pytest.approx(approval.price.price_hour)
    cap = json.loads((bundle / "budget_cap.json").read_text())
    assert cap["cost_usd"] == 1200 and cap["stop_hours"] < cap["hours"] and cap["approval"] == approval.record_digest
    assert "sky launch sky.yaml -i 5 --down" in printed
    assert "## Approved budget" in (bundle / "README.md").read_text()


def test_skypilots_own_cli_accepts_the_autostop_teardown_flags():
    """The run line's flags parse with SkyPilot's own click command (`sky launch`, skypilot 0.9.2's
    sky/client/cli.py), nothing launched."""
    from advisor.launch.caps import SKY_AUTOSTOP

    cli = pytest.importorskip("sky.client.cli")
    ctx = cli.launch.make_context("launch", ["sky.yaml", *SKY_AUTOSTOP], resilient_parsing=False)
    assert ctx.params["idle_minutes_to_autostop"] == 5 and ctx.params["down"] is True


def test_dstack_loads_the_capped_task(capped_bundle, monkeypatch):
    pytest.importorskip("dstack")
    from dstack._internal.cli.services.configurators import load_apply_configuration

    monkeypatch.chdir(capped_bundle[0])
    _, task = load_apply_configuration("dstack.yml")
    assert task.max_duration == int(-(-capped_bundle[1].caps.hours * 60 // 1)) * 60  # seconds
    assert task.max_price == pytest.approx(capped_bundle[1].price.price_hour)  # USD per instance-hour


# --------------------------------------------------------------------------- the callback and the ledger's sums


def _state(step: int, max_steps: int = 10):
    from transformers import TrainerControl, TrainerState

    s = TrainerState()
    s.global_step, s.max_steps = step, max_steps
    return s, TrainerControl()


def test_the_budget_callback_warns_at_80_percent_stops_at_its_mark_and_counts_earlier_segments(tmp_path):
    sys.path.insert(0, str(ROOT / "advisor" / "launch" / "templates"))
    try:
        from budget_cap import BudgetCap
    finally:
        sys.path.pop(0)
    now = [0.0]
    cap = {"cost_usd": 10.0, "price_hour": 10.0, "stop_hours": 0.9, "approval": "sha256:x"}
    log = tmp_path / "budget_cap.log.jsonl"
    cb = BudgetCap(cap, log=log, clock=lambda: now[0], started=0.0)
    state, control = _state(1)
    now[0] = 0.5 * 3600
    cb.on_step_end(None, state, control)
    assert not control.should_training_stop and not cb.warned
    now[0] = 0.85 * 3600
    cb.on_step_end(None, state, control)
    assert cb.warned and not control.should_training_stop
    again = BudgetCap(cap, log=log, clock=lambda: now[0], started=now[0])  # a restart after a reclaim
    assert again.hours() == pytest.approx(0.85)
    now[0] += 0.05 * 3600
    again.on_step_end(None, state, control)
    assert control.should_training_stop and control.should_save


def test_the_ledger_sums_one_cap_per_approval_and_projects_what_remains():
    from advisor.ledger.schema import ApprovalRow, RunRow
    from advisor.ledger.summary import project_lines, run_lines

    a = ApprovalRow(digest="sha256:a", project="p", plan_digest="sha256:p", candidate="x", approved_by="Ana",
                    approved_at="2026-12-01T00:00:00+00:00", price_hour=10.0, price_source="s", price_date="",
                    cap_usd=300.0, cap_hours=30.0, estimate_usd=200.0, estimate_hours=20.0, estimate_p50_usd=180.0,
                    estimate_p90_usd=270.0)
    r = lambda at, steps, cost: RunRow(approval="sha256:a", run="r1", observed_at=at, observer="o",  # noqa: E731
                                       status="running or killed", hours=cost / 10, cost_usd=cost, steps=steps,
                                       max_steps=100, tokens_per_sec=None)
    lines = run_lines([a], [r("1", 10, 20.0), r("2", 25, 50.0)])
    [line] = lines  # the newest observation of the run
    assert line.spent_usd == 50.0 and line.remaining_p50_usd == pytest.approx(2.0 * 75)
    assert line.remaining_p90_usd == pytest.approx(150.0 * 270 / 180)
    [project] = project_lines(lines)
    assert project.approved_usd == 300.0 and project.headroom_p90_usd == pytest.approx(300 - 50 - 225)


def test_an_approval_digest_is_the_plans_canonical_json():
    assert digest({"b": 1, "a": [1, 2]}) == digest(json.loads('{"a": [1, 2],   "b": 1}'))
    assert digest({"a": 1}) != digest({"a": 2})


def test_slurm_accepts_the_capped_script_where_the_partition_allows_the_cap_and_refuses_a_minute_less(
        capped_bundle, slurm):  # noqa: F811 - the fixture imported above
    bundle, approval, _ = capped_bundle
    write_conf, test_only = slurm
    script = bundle / "slurm.sbatch"
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", script.read_text(), re.M))
    minutes = int(-(-approval.caps.hours * 60 // 1))
    write_conf(int(directives["nodes"]), int(directives["gpus-per-node"]), int(directives["cpus-per-task"]) * 2,
               int(directives["mem"].rstrip("G")) * 1024, max_minutes=minutes)
    ok = test_only(script, "capped")
    assert ok.returncode == 0, ok.stderr
    assert test_only(script, "below").returncode != 0
