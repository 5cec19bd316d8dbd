"""Hostile plan files for `gpu-advisor launch --from`: a plan from a colleague or a
ticket must be safe to launch.

Every plan-derived string either is refused on load (control characters, line breaks, escape
sequences, unknown GPUs, non-finite numbers: one line, exit 2, nothing written) or stays text:
the bundle's YAML files parse to exactly the keys a benign plan gives, with the hostile strings
as values; `launch.sh` is run with a stand-in `accelerate` on PATH and must run nothing but
`accelerate` with the expected argv and create no file; the README renders (CommonMark) with no
raw HTML, link or image.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.cli_run import gpu_advisor, one_line_error  # noqa: E402
from helpers.launch_fixtures import candidate, write_plan

BUNDLE_FILES = {"README.md", "accelerate_config.yaml", "chat_mask.py", "dstack.yml", "launch.sh", "requirements.txt",
                "sky.yaml", "slurm.sbatch", "smoke_config.json", "train.py", "training_args.yaml"}
# Printable, so allowed in a plan, and as hostile as text gets for shell, YAML, Markdown and jinja.
HOSTILE_TEXT = [
    "$(touch PWNED_SUBST)",
    "`touch PWNED_BACKTICK`",
    "x; touch PWNED_SEMI; #",
    "x' ; touch PWNED_QUOTE ; echo '",
    'x" && touch PWNED_DQUOTE && echo "',
    "${IFS}touch${IFS}PWNED_IFS",
    "main_process_ip: 203.0.113.66",
    "key: [a, {b: c}] # &anchor *alias !!python/object/apply:os.system",
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click](javascript:alert(1)) ![t](https://evil.example/t.png)",
    "# Heading ``` ~~~ | col | --- |",
    "{{ 7*7 }} {% raw %} {# c #}",
    "- item *bold* _it_ \\ escaped",
    "日本語 · ünïcödé · 🚀",
]
# Refused on load: (text, the code point the one-line error names)
CONTROL_TEXT = [
    ("x\ntouch PWNED_NL", "U+000A"),
    ("x\rmain_process_ip: 203.0.113.66", "U+000D"),
    ("\x1b[2J\x1b]0;title\x07", "U+001B"),
    ("x\x00y", "U+0000"),
    ("x\x85main_process_ip: 1.2.3.4", "U+0085"),
    ("x\u2028y", "U+2028"),
    ("abc\u202egnp.exe", "U+202E"),
    ("tab\there", "U+0009"),
    ("x\x7fy", "U+007F"),
]
TEXT_FIELDS = ["provider", "region", "instance_type", "price_source", "stack_label"]


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """No network (a Hub-id-shaped model name fails at once) and a private cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))






def plan_data(tmp_path: Path, nodes: int = 1, sharding: str = "none", gpu_count: int = 1) -> dict:
    c = candidate(nodes=nodes, sharding=sharding, gpu_count=gpu_count, method="lora", lora_rank=16,
                  precision="bf16", grad_checkpointing=True)
    path = write_plan(tmp_path / "benign.json", [c])
    return json.loads(path.read_text())


def hostile_plan(data: dict, text: str, fields=TEXT_FIELDS, model: bool = True) -> dict:
    data = copy.deepcopy(data)
    if model:
        data["model"]["name"] = "m " + text if text.startswith("-") else text  # a leading '-' is refused
    for c in data["candidates"] + data["others"]:  # every stored candidate (schema 4)
        for f in fields:
            c[f] = text  # flat keys win over the nested ones when a plan is loaded
    return data


def write(tmp_path: Path, data: dict, name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def keys(tree) -> object:
    """The key structure of parsed YAML (values dropped), to compare a hostile bundle with a benign one."""
    if isinstance(tree, dict):
        return {k: keys(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [keys(v) for v in tree]
    return type(tree).__name__


def parse_yaml_files(bundle: Path) -> dict[str, dict]:
    parsed = {}
    for name in ("accelerate_config.yaml", "training_args.yaml", "sky.yaml", "dstack.yml"):
        text = (bundle / name).read_text(encoding="utf-8")
        body = text.split("\n")
        header = [line for line in body if line.startswith("#")]
        # comments only at the top; each is a single line
        assert body[: len(header)] == header, f"{name}: a comment line is not at the top"
        parsed[name] = yaml.safe_load(text)
    return parsed


# --------------------------------------------------------------------------- the stand-in launcher

FAKE_ACCELERATE = """#!/bin/sh
# Stand-in for `accelerate`: record argv (NUL-separated) and the working folder, run nothing.
printf '%s\\0' "$@" > "$ARGV_OUT"
"""
LOGGED = """#!/bin/sh
# Log that {name} ran, then run the real one.
printf '%s\\n' {name} >> "$CMD_LOG"
exec {real} "$@"
"""


def run_launch_sh(bundle: Path, tmp_path: Path, env_extra: dict | None = None) -> tuple[list[str], list[str]]:
    """bash launch.sh with PATH holding only a recording `accelerate` and logging wrappers for the few
    external commands launch.sh uses (dirname, head). Returns (accelerate argv, external commands run)."""
    import shutil

    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "accelerate").write_text(FAKE_ACCELERATE)
    for name in ("dirname", "head"):
        (fake / name).write_text(LOGGED.format(name=name, real=shutil.which(name)))
    for p in fake.iterdir():
        p.chmod(0o755)
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    record, log = tmp_path / "argv.bin", tmp_path / "commands.log"
    before = files_under(tmp_path)
    env = {"PATH": str(fake), "ARGV_OUT": str(record), "CMD_LOG": str(log), "HOME": str(work),
           **(env_extra or {})}
    proc = subprocess.run([shutil.which("bash"), str(bundle / "launch.sh")], cwd=work, env=env,
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == "", (proc.stdout, proc.stderr)
    created = files_under(tmp_path) - before
    assert created <= {"argv.bin", "commands.log"}, f"launch.sh created {created - {'argv.bin', 'commands.log'}}"
    argv = record.read_bytes().decode().split("\0")[:-1]
    commands = log.read_text().split() if log.exists() else []
    return argv, commands


def expected_argv(bundle: Path, multi_node: bool = False) -> list[str]:
    b = str(bundle.resolve())
    argv = ["launch", "--config_file", f"{b}/accelerate_config.yaml"]
    if multi_node:
        argv += ["--machine_rank", "1", "--main_process_ip", "10.0.0.7", "--main_process_port", "29500"]
    return argv + [f"{b}/train.py", "--config", f"{b}/training_args.yaml"]


@pytest.fixture
def benign(tmp_path, capsys):
    """The bundle of the same plan without hostile text: what every hostile bundle is compared with."""
    data = plan_data(tmp_path)
    for c in data["candidates"] + data["others"]:
        # A provider SkyPilot has no cloud for, as every hostile provider name is: both bundles carry that caveat.
        c["provider"] = "hyperstack"
    code, _, err = gpu_advisor(capsys, "launch", "--from", write(tmp_path, data, "b.json"), "--out",
                               tmp_path / "benign")
    assert code == 0, err
    return data, tmp_path / "benign"


# --------------------------------------------------------------------------- text that stays text

@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_hostile_text_in_a_plan_stays_text_in_every_bundle_file(tmp_path, capsys, benign, text):
    data, benign_dir = benign
    out = tmp_path / "bundle"
    code, stdout, err = gpu_advisor(capsys, "launch", "--from", write(tmp_path, hostile_plan(data, text)),
                                    "--out", out)
    assert code == 0, err
    assert set(os.listdir(out)) == BUNDLE_FILES
    assert all("\x1b" not in s for s in (stdout, err))

    _assert_yaml_holds_the_text_as_values(out, benign_dir, text)
    _assert_scripts_run_the_benign_commands(out, benign_dir, tmp_path)
    # README: text only (no HTML, link, image or extra heading), the hostile value visible.
    assert_markdown_is_inert(out / "README.md", benign_dir / "README.md")


def _assert_yaml_holds_the_text_as_values(out: Path, benign_dir: Path, text: str) -> None:
    """YAML: the same key tree as the benign bundle; the hostile strings are values, byte for byte."""
    ours, base = parse_yaml_files(out), parse_yaml_files(benign_dir)
    for tree in (ours["dstack.yml"], base["dstack.yml"]):  # memory: only where the model's size is known
        tree["resources"].pop("memory", None)
    for name in ours:
        assert keys(ours[name]) == keys(base[name]), name
    acc = ours["accelerate_config.yaml"]
    assert "main_process_ip" not in acc and acc["num_machines"] == 1 and acc["distributed_type"] == "NO"
    assert ours["training_args.yaml"]["model"]["name_or_path"].endswith(text)
    assert ours["training_args.yaml"]["estimate"]["stack"] == text
    assert ours["sky.yaml"]["resources"]["region"] == text
    assert ours["sky.yaml"]["resources"]["instance_type"] == text
    assert ours["sky.yaml"]["run"] == "bash launch.sh\n"


def _assert_scripts_run_the_benign_commands(out: Path, benign_dir: Path, tmp_path: Path) -> None:
    # launch.sh: the commands are exactly the benign bundle's; plan text appears in comments only.
    script = (out / "launch.sh").read_text().splitlines()
    code_lines = [line for line in script if not line.lstrip().startswith("#")]
    assert code_lines == [line for line in (benign_dir / "launch.sh").read_text().splitlines()
                          if not line.lstrip().startswith("#")]
    argv, commands = run_launch_sh(out, tmp_path)
    assert argv == expected_argv(out)
    assert set(commands) <= {"dirname"}
    assert not list(tmp_path.rglob("PWNED*"))
    # slurm.sbatch: the commands and #SBATCH directives are the benign bundle's (the job name is an ASCII slug)
    def directives(folder: Path) -> list[str]:
        return [line for line in (folder / "slurm.sbatch").read_text().splitlines()
                if (not line.startswith("#") or line.startswith("#SBATCH")) and not re.search("--(job-name|mem)=", line)]
    assert directives(out) == directives(benign_dir)
    lines = (out / "slurm.sbatch").read_text().splitlines()
    job = next(line for line in lines if "--job-name=" in line)
    assert re.fullmatch(r"#SBATCH --job-name=[a-z0-9-]+", job), job
    assert re.fullmatch(r"#SBATCH --mem=(\d+G|0)", next(line for line in lines if line.startswith("#SBATCH --mem=")))


def assert_markdown_is_inert(path: Path, benign: Path) -> None:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table").enable("strikethrough")

    def walk(tokens):
        for t in tokens:
            yield t
            yield from walk(t.children or [])

    def shape(text: str):
        toks = list(walk(md.parse(text)))
        kinds = [t.type for t in toks if t.type in ("heading_open", "fence", "code_block", "table_open", "tr_open",
                                                       "th_open", "td_open", "bullet_list_open", "list_item_open")]
        return toks, kinds

    toks, kinds = shape(path.read_text(encoding="utf-8"))
    bad = [t.type for t in toks if t.type in ("html_block", "html_inline", "link_open", "image")]
    assert not bad, bad
    _, benign_kinds = shape(benign.read_text(encoding="utf-8"))
    assert kinds == benign_kinds  # same headings, fences, tables, rows, cells and list items


def test_multi_node_launch_sh_passes_only_rank_and_head_ip(tmp_path, capsys):
    data = plan_data(tmp_path, nodes=2, sharding="fsdp", gpu_count=8)
    out = tmp_path / "bundle"
    code, _, err = gpu_advisor(capsys, "launch", "--from", write(tmp_path, hostile_plan(data, HOSTILE_TEXT[0])),
                               "--out", out)
    assert code == 0, err
    acc = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert acc["main_process_ip"] == "HEAD_NODE_IP" and acc["num_machines"] == 2
    argv, commands = run_launch_sh(out, tmp_path, {"MACHINE_RANK": "1", "MAIN_PROCESS_IP": "10.0.0.7"})
    assert argv == expected_argv(out, multi_node=True)
    assert set(commands) <= {"dirname", "head"}


def test_hostile_dataset_path_stays_a_yaml_value_and_a_readme_text(tmp_path, capsys, benign):
    data, benign_dir = benign
    out = tmp_path / "bundle"
    dataset = "data/$(touch PWNED).jsonl\n#: injected: true"
    code, _, err = gpu_advisor(capsys, "launch", "--from", write(tmp_path, data), "--out", out,
                               "--dataset", dataset)
    assert code == 0, err
    args = yaml.safe_load((out / "training_args.yaml").read_text())
    assert args["data"]["path"] == dataset and "injected" not in args
    assert_markdown_is_inert(out / "README.md", benign_dir / "README.md")
    argv, _ = run_launch_sh(out, tmp_path)
    assert argv == expected_argv(out)


# --------------------------------------------------------------------------- refused on load

@pytest.mark.parametrize("field", ["model", *TEXT_FIELDS, "gpu_model"])
@pytest.mark.parametrize("text, codepoint", CONTROL_TEXT)
def test_control_characters_in_any_plan_field_are_refused_with_one_line(tmp_path, capsys, field, text, codepoint):
    data = plan_data(tmp_path)
    bad = hostile_plan(data, text, fields=[] if field == "model" else [field], model=field == "model")
    out = tmp_path / "bundle"
    code, stdout, err = gpu_advisor(capsys, "launch", "--from", write(tmp_path, bad), "--out", out)
    line = one_line_error(code, err)
    assert line.startswith("error: --from:") and codepoint in line
    assert stdout == "" and not out.exists()


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["candidates"][0].update(gpu_model="H100-TURBO-9000"), "not in the GPU table"),
    (lambda d: d["candidates"][0].update(gpu_model="$(reboot)"), "not in the GPU table"),
    (lambda d: d["model"].update(name="-rf"), "starts with '-'"),
    (lambda d: d["model"].update(name="x" * 600), "longer than 512"),
    (lambda d: d["model"].update(family="llama\nmain_process_ip: 1.2.3.4"), "model_type"),
    (lambda d: d["model"].update(family="../../etc"), "model_type"),
    (lambda d: d["candidates"][0].update(cost_usd=float("nan")), "finite"),
    (lambda d: d["candidates"][0].update(hours=float("inf")), "finite"),
    (lambda d: d["candidates"][0].update(hours=-0.1), ">= 0"),
    (lambda d: d["candidates"][0].update(price_hour=-5), ">= 0"),
    (lambda d: d["candidates"][0].update(nodes=10**9), "nodes"),
    (lambda d: d["candidates"][0].update(gpu_count=0), "gpu_count"),
    (lambda d: d["candidates"][0].update(micro_batch=-1), "micro_batch"),
    (lambda d: d["candidates"][0].update(method="rm -rf"), "method"),
    (lambda d: d["candidates"][0].update(precision="bf16; reboot"), "precision"),
    (lambda d: d.update(command="gpu-advisor plan\n\x1b[2J"), "U+000A"),
    (lambda d: d.update(warnings=["ok", "bad\x1b]0;x\x07"]), "U+001B"),
    (lambda d: d.update(notice="a\u202eb"), "U+202E"),
    (lambda d: d["workload"].update({"tokens\n": 1}), "U+000A"),
    (lambda d: d["workload"].update(tokens=float("nan")), "workload.tokens"),
    (lambda d: d.update(stale_days=float("nan")), "finite"),
    (lambda d: d.update(rejected=[{"reason": "x\ny", "count": 1}]), "U+000A"),
])
def test_invalid_plan_fields_are_refused_before_anything_is_written(tmp_path, capsys, mutate, expect):
    data = plan_data(tmp_path)
    mutate(data)
    out = tmp_path / "bundle"
    code, _, err = gpu_advisor(capsys, "launch", "--from", write(tmp_path, data), "--out", out)
    line = one_line_error(code, err)
    assert expect in line and not out.exists()


@pytest.mark.parametrize("content, expect", [
    ("[" * 100_000 + "]" * 100_000, "nested more than"),
    ('{"model": ' * 5_000 + "1" + "}" * 5_000, "nested more than"),
    ("{not json", "not valid JSON"),
    ('{"x": 1' + "9" * 10_000 + "}", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ("", "not valid JSON"),
    ("\ufeff{}", "field"),
    (b"\xff\xfe\x00\x00garbage", "not"),
    (b"\x80\x81 not utf-8", "UTF-8"),
], ids=["deep-list", "deep-object", "syntax", "huge-int", "list", "empty", "bom", "utf16-garbage", "not-utf8"])
def test_malformed_plan_json_is_refused_fast(tmp_path, capsys, content, expect):
    path = tmp_path / "plan.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    assert expect in one_line_error(code, err)
    assert not (tmp_path / "b").exists()


def test_oversized_plan_file_is_refused_before_it_is_parsed(tmp_path, capsys, monkeypatch):
    import cli.report

    monkeypatch.setattr(cli.report, "MAX_PLAN_BYTES", 10_000)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"pad": "x" * 20_000}))
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    assert "larger than" in one_line_error(code, err)


@pytest.mark.parametrize("target", ["missing.json", "folder"])
def test_missing_or_folder_plan_file(tmp_path, capsys, target):
    (tmp_path / "folder").mkdir()
    code, _, err = gpu_advisor(capsys, "launch", "--from", tmp_path / target, "--out", tmp_path / "b")
    one_line_error(code, err)


# --------------------------------------------------------------------------- output folders

def test_dangling_symlink_out_is_one_plain_line_exit_1(tmp_path, capsys):
    path = write(tmp_path, plan_data(tmp_path))
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere" / "deeper")
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", link)
    line = one_line_error(code, err, expected_code=1)
    assert "symbolic link" in line and "nowhere" in line
    assert not (tmp_path / "nowhere").exists()


def test_out_below_a_file_is_one_plain_line_exit_1(tmp_path, capsys):
    path = write(tmp_path, plan_data(tmp_path))
    (tmp_path / "file").write_text("x")
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "file" / "bundle")
    line = one_line_error(code, err, expected_code=1)
    assert "not a folder" in line


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    path = write(tmp_path, plan_data(tmp_path))
    (tmp_path / "file").write_text("keep")
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "file")
    one_line_error(code, err, expected_code=2)
    assert (tmp_path / "file").read_text() == "keep"


@pytest.mark.parametrize("errno_, words", [(13, "permission"), (28, "space"), (30, "read-only")])
def test_write_failures_are_plain_words_exit_1(tmp_path, capsys, monkeypatch, errno_, words):
    import advisor.launch.bundle

    def fail(path, *a, **k):
        raise OSError(errno_, os.strerror(errno_), str(path))

    monkeypatch.setattr(advisor.launch.bundle, "atomic_write", fail)
    path = write(tmp_path, plan_data(tmp_path))
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", tmp_path / "b")
    line = one_line_error(code, err, expected_code=1)
    assert words in line.lower() and "OSError" not in line and "Errno" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_parent_folder_exit_1(tmp_path, capsys):
    path = write(tmp_path, plan_data(tmp_path))
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--out", parent / "b")
    finally:
        parent.chmod(0o755)
    assert "permission" in one_line_error(code, err, expected_code=1).lower()


def test_hostile_out_folder_name_is_printed_on_one_line(tmp_path, capsys):
    path = write(tmp_path, plan_data(tmp_path))
    out = tmp_path / "b\x1b[2J\nx"
    code, stdout, err = gpu_advisor(capsys, "launch", "--from", path, "--out", out)
    assert code == 0, err
    assert "\x1b" not in stdout and len(stdout.strip().splitlines()) == 2
    assert set(os.listdir(out)) == BUNDLE_FILES
