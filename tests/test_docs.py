"""The documentation is checked against the tool (sqlite-utils' tests/test_docs.py habit): every
command has its page in docs/usage/, and every option that `--help` shows is mentioned on that page
(or a usage page it links to); every real-output block is what the command prints now
(scripts/readme_examples.py regenerates them); every relative link leads to a file that exists and
every repository path the docs cite is there; the README stays short enough to read in five minutes
and no docs page grows past 20 KB."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in DOC_FILES)  # where a command or option may be documented
USAGE = ROOT / "docs" / "usage"  # one page per command: docs/usage/<command>.md; the group's options in README.md
README_MAX_BYTES = 15_000  # a newcomer's five minutes: the rest lives in docs/
PAGE_MAX_BYTES = 20_000  # a docs page a reader can hold in mind: split it, or link to the detail


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


def _mentioned(word: str, text: str = DOCS) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text) is not None


def _tree():
    from cli import cli

    return list(_commands(cli))


COMMANDS = _tree()


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS if p], ids=" ".join)
def test_every_command_is_documented(path):
    assert f"gpu-advisor {' '.join(path)}" in DOCS, \
        f"neither README.md nor docs/*.md mentions `gpu-advisor {' '.join(path)}`"


def _usage_page(path: tuple[str, ...]) -> Path:
    """Where a command is documented: docs/usage/<top-level command>.md (a subcommand on its group's
    page), the group itself in docs/usage/README.md."""
    return USAGE / f"{path[0]}.md" if path else USAGE / "README.md"


def _page_and_what_it_links(page: Path) -> str:
    """The page's text and that of every usage page it links to (`launch` takes every `plan` option
    and says so with a link, rather than repeating the list)."""
    text = page.read_text(encoding="utf-8")
    linked = {(page.parent / target.partition("#")[0]).resolve() for target in _relative_links(page)}
    return "\n".join([text, *(p.read_text(encoding="utf-8") for p in sorted(linked)
                              if p.parent == USAGE and p.suffix == ".md" and p != page)])


@pytest.mark.parametrize("name", [p[0] for p, _ in COMMANDS if len(p) == 1])
def test_every_command_has_its_usage_page(name):
    """docs/usage/<command>.md exists, opens with the command as its title, and the usage index and the
    README's command table link to it."""
    page = USAGE / f"{name}.md"
    assert page.is_file(), f"no docs/usage/{name}.md for `gpu-advisor {name}`"
    assert page.read_text(encoding="utf-8").startswith(f"# `gpu-advisor {name}`"), f"{page.name}'s title"
    assert f"{name}.md" in {t.partition("#")[0] for t in _relative_links(USAGE / "README.md")}
    assert f"docs/usage/{name}.md" in {t.partition("#")[0] for t in _relative_links(ROOT / "README.md")}


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "gpu-advisor" for p, _ in COMMANDS])
def test_every_option_of_every_command_is_on_its_usage_page(path, cmd):
    page = _usage_page(path)
    text = _page_and_what_it_links(page)
    missing = [o for o in _options(cmd) if not _mentioned(o, text)]
    assert not missing, (f"`gpu-advisor {' '.join(path)}` options missing from {page.relative_to(ROOT)} and the "
                         f"usage pages it links to: {', '.join(missing)}")


@pytest.mark.parametrize("doc", DOC_FILES[1:], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_docs_page_is_over_20_kb(doc):
    size = len(doc.read_bytes())
    assert size <= PAGE_MAX_BYTES, (f"{doc.relative_to(ROOT)} is {size:,} bytes (limit {PAGE_MAX_BYTES:,}): split it "
                                    "or link to the detail instead of repeating it")


def _cited_paths(text: str) -> set[str]:
    """Repository paths a page names in its prose (`advisor/workload/measurements.py`,
    benchmarks/results/accuracy.md): anything under one of the repository's top-level folders."""
    tops = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != ".git" and not p.name.startswith("__"))
    folders = "|".join(map(re.escape, tops))
    found = re.finditer(rf"(?<![\w/.-])((?:{folders})/[\w/.-]*\w)", text)
    return {m[1] for m in found}


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_the_docs_cite_exists(doc):
    """A file the docs send a reader to (a module, a script, a data file) is there: moving a module must
    move its mention too."""
    missing = sorted(p for p in _cited_paths(doc.read_text(encoding="utf-8")) if not (ROOT / p).exists())
    assert not missing, f"{doc.relative_to(ROOT)} cites paths that do not exist: {', '.join(missing)}"


def test_the_path_check_sees_paths():
    assert {"advisor/workload/measurements.py", "docs/usage/plan.md"} <= _cited_paths(
        "see `advisor/workload/measurements.py: apply` and docs/usage/plan.md.")
    assert "advisor/measurements.py" in _cited_paths("(advisor/measurements.py)")  # the check would catch it


def test_every_command_is_named_in_the_readme():
    """The README's table of what the tool answers names every top-level command (the details live in
    docs/usage/)."""
    missing = [name for (name, *rest), _ in COMMANDS[1:] if not rest and f"gpu-advisor {name}" not in README]
    assert not missing, f"README.md never names: {', '.join(missing)}"


def test_the_readme_is_short():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, (f"README.md is {size:,} bytes (limit {README_MAX_BYTES:,}): move detail into "
                                      "docs/ and link to it")


LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\[[^\]\n]+\]:\s*(\S+)", re.M)


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-',
    a repeated heading numbered -1, -2, ... (code blocks are not headings)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _relative_links(path: Path):
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    text = re.sub(r"`[^`]*`", "", text)  # code spans (which may wrap a line) are not links
    for m in LINK.finditer(text):
        target = m[1] or m[2]
        if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: are not checked here
            yield target


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_that_exists(doc):
    """Links in README.md and docs/*.md point at files (and headings) that exist, so moving a section
    or renaming a file cannot leave a reader at a dead end."""
    broken = []
    for target in _relative_links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: {'; '.join(broken)}"


def test_the_link_check_sees_links():
    """The link walk finds the README's links into docs/: a check that found nothing would pass anything."""
    targets = list(_relative_links(ROOT / "README.md"))
    assert "docs/usage/plan.md" in targets and any(t.startswith("docs/usage/estimate.md#") for t in targets)
    assert _anchors("# A `b` c/d\n## A `b` c/d\n```\n# not a heading\n```\n") == {"a-b-cd", "a-b-cd-1"}


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


@functools.cache
def _readme_examples():
    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_example_walk_covers_the_readme_and_every_docs_page_with_markers():
    examples = _readme_examples()
    files = examples.files()
    assert files[0] == ROOT / "README.md" and len(examples.examples(README)) >= 2  # estimate and plan at least
    with_markers = [p for p in DOC_FILES[1:] if examples.examples(p.read_text(encoding="utf-8"))]
    assert files[1:] == with_markers and with_markers, "docs pages with example markers are not all checked"
    assert USAGE / "prices.md" in with_markers and USAGE / "estimate.md" in with_markers  # pages in docs/usage/


@pytest.mark.parametrize("doc", _readme_examples().files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_output_block_in_the_docs_is_what_the_tool_prints_now(doc):
    """Regenerated in this process through CliRunner (scripts/readme_examples.py), not as a process per
    example: only a marker that says `own process` starts one."""
    examples = _readme_examples()
    asked = sum(len(examples.steps(ex.command)) for ex in examples.examples(doc.read_text(encoding="utf-8"))
                if ex.own_process)
    started = examples.STARTED["own process"]
    diff = examples.diff(doc)
    assert diff == "", (f"{doc.relative_to(ROOT)} output blocks are out of date; run "
                        f"`python scripts/readme_examples.py`:\n" + diff)
    assert examples.STARTED["own process"] - started <= asked


@pytest.mark.slow
def test_an_example_run_in_process_prints_what_its_own_process_prints():
    """The in-process run (CliRunner, the fixed environment as overrides) is the console script's
    output: one example, both ways, byte for byte."""
    examples = _readme_examples()
    models = (USAGE / "models.md").read_text(encoding="utf-8")
    [ex] = [e for e in examples.examples(models) if e.command.startswith("gpu-advisor models")]
    before = dict(examples.STARTED)
    assert examples.printed(ex.command) == examples.printed(ex.command, own_process=True)
    assert examples.STARTED["own process"] == before["own process"] + 1


def test_ci_runs_the_readmes_test_command_verbatim_and_pytest_prints_the_resolved_versions(pytestconfig):
    """`.ci/run` runs the README's test command exactly as written; pytest's header names every
    installed distribution with its version (tests/conftest.py), so each CI log says what it ran
    against; the GitHub workflow runs `.ci/run`."""
    [line] = [ln for ln in README.splitlines() if "python3 -m pytest" in ln and ln.startswith("python3 -m pip")]
    command = line.split("#")[0].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = [ln.strip() for ln in ci.splitlines() if ln.strip().startswith("python3 ")]
    assert steps == [command]
    # ... inside a new virtualenv, activated before it: the newest releases the index serves, as on a fresh machine
    assert ci.index("-m venv") < ci.index('. "$venv/bin/activate"') < ci.index(command)
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


def test_the_sample_measured_json_beside_the_calibrate_page_is_one_calibrate_accepts(tmp_path, monkeypatch):
    """docs/usage/measured.json is a real `launch.sh --benchmark` file (the tiny Llama of the tests, on a CPU):
    calibrate validates, compares and stores it, and the calibrate page names every field it holds."""
    import json

    from click.testing import CliRunner
    from helpers.launch_fixtures import write_tiny_llama

    from cli import cli

    sample = USAGE / "measured.json"
    page = (USAGE / "calibrate.md").read_text(encoding="utf-8")
    assert "measured.json" in {t.partition("#")[0] for t in _relative_links(USAGE / "calibrate.md")}
    fields = json.loads(sample.read_text(encoding="utf-8"))
    assert not [k for k in fields if f"`{k}`" not in page], "calibrate.md does not name every field of the sample"
    config = write_tiny_llama(tmp_path / "tiny")
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    done = CliRunner().invoke(cli, ["calibrate", str(sample), "--model", str(config), "--format", "json"])
    assert done.exit_code == 0, done.output
    assert len(list((tmp_path / "cache" / "measurements").glob("*.json"))) == 1
