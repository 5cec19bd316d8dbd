"""Messages that name the right thing and print no secret (issue 38): a URL's password (HF_ENDPOINT's
included) never reaches a message; a device, a FIFO or a link to one where a model's config.json belongs is
"not a regular file", not "no such file"; a malformed HF_ENDPOINT is named as such; a name longer than a plan
holds is refused where it is read, under one limit; a date option is blamed, not PATH; and a plan works under
LC_ALL=C without UTF-8 mode (every file the project reads or writes says its encoding)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cr3t-PW-9"
CLOSED = f"http://user:{PASSWORD}@127.0.0.1:9"  # the discard port: nothing listens, the request fails at once


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)


# --------------------------------------------------------------------------- no URL password in any message
@pytest.fixture()
def tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    (tmp_path / "d.jsonl").write_text('{"text": "a a"}\n')
    return path


@pytest.mark.parametrize("args", [
    ("estimate", "someorg/some-model"),
    ("plan", "--model", "someorg/some-model", "--tokens", "1M"),
    ("tokens", "{data}", "--model", "someorg/some-model"),
    ("tokens", "{data}", "--tokenizer", "someorg/some-tokenizer"),
    ("launch", "--model", "someorg/some-model", "--tokens", "1M", "--out", "{out}"),
], ids=["estimate", "plan", "tokens-model", "tokens-tokenizer", "launch"])
def test_an_hf_endpoint_password_is_masked_in_every_message(capsys, monkeypatch, tmp_path, tokenizer_json, args):
    monkeypatch.setenv("HF_ENDPOINT", CLOSED)
    args = [a.format(data=tmp_path / "d.jsonl", out=tmp_path / "bundle") for a in args]
    code, out, err = gpu_advisor(capsys, *args)
    line = one_line_error(code, err)
    assert PASSWORD not in out + err
    assert "***@127.0.0.1:9" in line, line  # the endpoint is still named, its password masked


def test_a_library_message_quoting_a_url_password_is_masked_too(capsys, monkeypatch):
    """The one place errors become lines (cli._fail) masks every URL's credentials, whatever raised them."""
    from advisor.model import catalog

    def leaky(ref):
        raise RuntimeError(f"GET https://admin:{PASSWORD}@mirror.example/api failed")

    monkeypatch.setattr(catalog, "load_model", leaky)
    monkeypatch.setattr("cli.estimate.load_model", leaky, raising=False)
    code, out, err = gpu_advisor(capsys, "estimate", "llama-3.2-1b")
    assert code != 0 and PASSWORD not in out + err and "***@mirror.example" in err, err


def test_a_hub_model_fetched_through_a_password_endpoint_carries_no_password_in_its_source(monkeypatch, tmp_path):
    """The source a plan records for a Hub model names HF_ENDPOINT masked (the config comes from the cache)."""
    from advisor.model.catalog import _catalog, load_model

    cached = tmp_path / "cache" / "configs" / "someorg--some-model.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(next(e["config"] for e in _catalog()[0] if e["config"].get("model_type") == "llama")))
    monkeypatch.setenv("HF_ENDPOINT", CLOSED)
    spec = load_model("someorg/some-model")
    assert PASSWORD not in spec.source and spec.source.startswith("http://***@127.0.0.1:9/someorg/some-model")


@pytest.mark.parametrize("endpoint", ["not a url", "ftp://mirror.example", "http://[::1", "http://h:99999", "http://",
                                      "huggingface.co", f"http://user:{PASSWORD}@host name/"])
def test_a_malformed_hf_endpoint_is_named_as_such(capsys, monkeypatch, endpoint):
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    line = one_line_error(*gpu_advisor(capsys, "estimate", "someorg/some-model")[::2])
    assert line.startswith("error: HF_ENDPOINT:") and "URL" in line and PASSWORD not in line


# --------------------------------------------------------------------------- a model path that is no config.json
@pytest.mark.parametrize("make,words", [
    ("dev", ("character device", "not a regular file")),
    ("fifo", ("FIFO", "not a regular file")),
    ("link", ("config.json", "character device")),
    ("loop", ("config.json", "symbolic link loop")),
    ("folder-fifo", ("config.json", "FIFO")),
])
def test_a_model_path_that_is_not_a_regular_file_is_named(capsys, tmp_path, make, words):
    from pricing import files

    if make == "dev":
        ref = "/dev/zero"
    elif make == "fifo":
        ref = tmp_path / "config.json"
        os.mkfifo(ref)
    else:
        ref = tmp_path / "model"
        ref.mkdir()
        cfg = ref / "config.json"
        {"link": lambda: cfg.symlink_to("/dev/zero"), "loop": lambda: cfg.symlink_to(cfg),
         "folder-fifo": lambda: os.mkfifo(cfg)}[make]()
    before = files.BYTES_READ[0]
    line = one_line_error(*gpu_advisor(capsys, "estimate", "--", ref)[::2])
    assert all(w in line for w in words), line
    assert "no such file" not in line and "holds no config.json" not in line
    assert files.BYTES_READ[0] == before


# --------------------------------------------------------------------------- one limit, one message
def test_a_900_character_region_is_dropped_by_the_sheet_not_blamed_on_region(capsys, tmp_path):
    sheet = tmp_path / "mine.csv"
    head = "provider,region,instance_type,gpu_model,gpu_count,price_hour,observed_at\n"
    sheet.write_text(head + f"aws,{'r' * 900},g6.xlarge,L4,1,0.8,2026-11-30\n")
    code, out, err = gpu_advisor(capsys, "plan", "--model", "llama-3.2-1b", "--tokens", "1M", "--prices", sheet,
                                 "--gpu", "L4")
    line = one_line_error(code, err)
    assert "--prices" in line and "region" in line and "512 characters" in line and "--region" not in line
    sheet.write_text(head + f"aws,{'r' * 900},g6.xlarge,L4,1,0.8,2026-11-30\naws,us-east-1,g6.xlarge,L4,1,0.8,"
                            "2026-11-30\n")
    code, out, err = gpu_advisor(capsys, "plan", "--model", "llama-3.2-1b", "--tokens", "1M", "--prices", sheet,
                                 "--gpu", "L4", "--skip-bad-rows", "--format", "json")
    assert code == 0, err
    assert "row 2" in err and "512 characters" in err
    regions = {c["offer"]["region"] for c in json.loads(out)["candidates"]}  # the good row plans, the bad one never
    assert "us-east-1" in regions and all(len(r) <= 512 for r in regions)


@pytest.mark.parametrize("date", ["0001-01-01", "1999-12-31"])
def test_an_observed_at_before_any_cloud_gpu_names_the_option(capsys, tmp_path, date):
    sheet = tmp_path / "mine.csv"
    sheet.write_text("provider,region,instance_type,gpu_model,gpu_count,price_hour\naws,us-east-1,p5.48xlarge,H100,8,"
                     "55.04\n")
    line = one_line_error(*gpu_advisor(capsys, "prices", "import", sheet, "--observed-at", date)[::2])
    assert line.startswith("error: --observed-at:") and "PATH" not in line


# --------------------------------------------------------------------------- LC_ALL=C
def test_every_file_the_project_opens_as_text_names_its_encoding():
    """open(), Path.open(), read_text() and write_text() in text mode without encoding= read the locale's
    encoding: ASCII under LC_ALL=C, where the bundled UTF-8 tables failed ('ascii' codec can't decode)."""
    bad = []
    for package in ("advisor", "cli", "pricing", "reports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if _opens_text_without_encoding(node):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"text opened without an encoding: {bad}"


def _opens_text_without_encoding(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    owner = getattr(getattr(f, "value", None), "id", None)
    if name in ("read_text", "write_text") and isinstance(f, ast.Attribute) and owner != "files" \
            and len(node.args) <= (name == "write_text"):
        return True
    if name == "open" and owner not in ("os", "z", "zipfile", "webbrowser", "tarfile", "gzip"):
        modes = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
        return not any("b" in m for m in modes if m in ("r", "w", "a", "rb", "wb", "ab", "x", "xb", "r+", "rb+"))
    return False


@pytest.mark.parametrize("args", [("plan", "--model", "llama-3.2-1b", "--tokens", "1e8", "--top", "3"),
                                  ("plan", "--model", "llama-3.2-1b", "--tokens", "1e8", "--top", "3", "--format",
                                   "json"),
                                  ("estimate", "llama-3.2-1b")])
def test_a_plan_runs_under_the_c_locale_without_utf8_mode(tmp_path, args):
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "",
           "GPU_ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    assert b"codec" not in done.stderr and done.stdout.strip()
    if "json" in args:
        assert json.loads(done.stdout)["candidates"]
