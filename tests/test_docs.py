"""The README is checked against the tool (sqlite-utils' tests/test_docs.py habit): every command
and every option that `--help` shows is mentioned, and every real-output block is what the
command prints now (scripts/readme_examples.py regenerates them)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands(cmd: click.Command, path: tuple[str, ...] = ()):
    """(path, command) for the group and every command under it, as `--help` lists them."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), path + (name,))


def _options(cmd: click.Command) -> list[str]:
    """The option names a user types, as `--help` shows them: every long form (`--liger`; the
    `--no-liger` of an on/off flag is its other half and is not required), or the short form of an
    option that has no long one. `--help` itself is on every command and is left out."""
    names = []
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden and "--help" not in p.opts:
            names += [o for o in p.opts if o.startswith("--")] or list(p.opts)
    return names


def _mentioned(word: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", README) is not None


def _tree():
    from cli import cli

    return list(_commands(cli))


COMMANDS = _tree()


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS if p], ids=" ".join)
def test_every_command_is_in_the_readme(path):
    assert f"gpu-advisor {' '.join(path)}" in README, f"README.md never mentions `gpu-advisor {' '.join(path)}`"


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "gpu-advisor" for p, _ in COMMANDS])
def test_every_option_of_every_command_is_in_the_readme(path, cmd):
    missing = [o for o in _options(cmd) if not _mentioned(o)]
    assert not missing, f"`gpu-advisor {' '.join(path)}` options missing from README.md: {', '.join(missing)}"


def test_the_option_walk_sees_what_help_shows():
    """The walk is the help text's own list: a check that found nothing would pass anything."""
    from click.testing import CliRunner

    from cli import cli

    by_path = dict(COMMANDS)
    for path in (("estimate",), ("plan",), ("prices", "refresh")):
        help_text = CliRunner().invoke(cli, [*path, "--help"]).output
        heads = [m[1] for m in re.finditer(r"^  (-[\w-]+(?:, -[\w-]+)*(?: / -[\w-]+)?)", help_text, re.M)]
        shown = {o for head in heads for o in re.findall(r"--[\w-]+", head)} - {"--help"}
        params = [p for p in by_path[path].params if isinstance(p, click.Option)]
        other_halves = {o for p in params for o in p.secondary_opts}
        assert shown and set(_options(by_path[path])) <= shown <= set(_options(by_path[path])) | other_halves


def _readme_examples():
    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_every_output_block_in_the_readme_is_what_the_tool_prints_now():
    examples = _readme_examples()
    assert len(examples.examples(README)) >= 2  # the estimate and the plan blocks are marked
    diff = examples.diff(ROOT / "README.md")
    assert diff == "", "README.md output blocks are out of date; run `python scripts/readme_examples.py`:\n" + diff


def test_ci_runs_the_readmes_test_command_verbatim_and_pytest_prints_the_resolved_versions(pytestconfig):
    """`.ci/run` runs the README's test command exactly as written; pytest's header names every
    installed distribution with its version (tests/conftest.py), so each CI log says what it ran
    against; the GitHub workflow runs `.ci/run`."""
    [line] = [ln for ln in README.splitlines() if "python3 -m pytest" in ln and ln.startswith("python3 -m pip")]
    command = line.split("#")[0].strip()
    steps = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if ln.strip().startswith("python3 ")]
    assert steps == [command]
    assert "bash .ci/run" in (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    lines = pytestconfig.hook.pytest_report_header(config=pytestconfig, start_path=ROOT, startdir=ROOT)
    [ours] = [ln for part in lines for ln in ([part] if isinstance(part, str) else part)
              if ln.startswith("resolved versions: ")]
    from importlib.metadata import version

    assert {f"pydantic=={version('pydantic')}", f"torch=={version('torch')}"} <= set(ours.split())


def test_the_readme_speed_figures_are_the_benchmarks_own_output_with_date_and_bare_imports():
    """The speed block is pasted from `python benchmarks/bench_planner.py` (not re-run here: wall time
    lives in benchmarks/): it opens with the benchmark's own header line (date, CPUs, runs) and
    carries the bare-import figure and the ratio measured in the same run."""
    m = re.search(r"^<!-- bench: python benchmarks/bench_planner\.py --repeat (\d+) -->\n```\n(.*?)^```$", README,
                  re.M | re.S)
    assert m, "README.md has no '<!-- bench: python benchmarks/bench_planner.py --repeat N -->' block"
    from benchmarks.bench_planner import header

    repeat, lines = int(m[1]), m[2].splitlines()
    head = rf"bench_planner \d{{4}}-\d\d-\d\d \d\d:\d\d UTC; \d+ CPUs, Python [\d.]+, \S+; {repeat} interleaved runs each"
    assert re.fullmatch(head, header(repeat)), "the pattern no longer matches what the benchmark prints"
    assert re.fullmatch(head, lines[0]), lines[0]
    assert re.search(r"bare imports \(.*\): best [\d.]+ s, median [\d.]+ s; ratio [\d.]+x best", lines[1]), lines[1]
