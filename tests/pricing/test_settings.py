"""Every environment variable the tool reads is read by one module (pricing/settings.py), documented in one
table (docs/settings.md), and validated: a wrong value is one line naming the variable and what it accepts,
exit 2, instead of a silent default (GPU_ADVISOR_STALE_DAYS=nan made a 60-day-old price fresh)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing import cache, crosscheck, http, settings
from pricing.settings import SettingError

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
CODE = [p for d in ("advisor", "pricing", "reports", "cli", "scripts", "benchmarks") for p in (ROOT / d).rglob("*.py")]
# the launch bundle's scripts run on the rented machine, under accelerate/torchrun, and read what those set
REMOTE = ROOT / "advisor" / "launch" / "templates"
NAME = re.compile(r"\bGPU_ADVISOR_[A-Z0-9_]+\b(?![*<{])")  # not a pattern: GPU_ADVISOR_HTTP_*, _<SOURCE>_, f"_{x}"


def test_every_variable_the_code_names_is_in_the_settings_module_and_the_docs_table():
    named = {m for p in CODE for m in NAME.findall(p.read_text(encoding="utf-8"))}
    assert len(named) >= 15, sorted(named)  # the grep itself works
    table = DOC.split("<!-- settings table")[1].split("<!-- end of settings table")[0]
    unknown = named - set(settings.VARIABLES)
    assert not unknown, f"read but not in pricing/settings.py: {unknown}"
    missing = [v for v in settings.VARIABLES if f"`{v}`" not in table]
    assert not missing, f"not in docs/settings.md's table: {missing}"


def test_the_docs_table_is_the_one_the_settings_module_prints():
    assert settings.markdown_table() in DOC, ("docs/settings.md's table is out of date: replace it with "
                                              "`python3 -c 'from pricing.settings import markdown_table; "
                                              "print(markdown_table())'`")


def _reads_environment(path: Path) -> list[int]:
    """Lines where a module reads the environment: os.environ, os.getenv, `from os import environ/getenv`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                {a.name for a in node.names} & {"environ", "getenv", "environb"}:
            lines.append(node.lineno)
    return lines


def test_no_other_module_of_the_tool_reads_the_environment():
    package = [p for d in ("advisor", "pricing", "reports", "cli") for p in (ROOT / d).rglob("*.py")
               if REMOTE not in p.parents and p != ROOT / "pricing" / "settings.py"]
    readers = {str(p.relative_to(ROOT)): lines for p in package if (lines := _reads_environment(p))}
    assert not readers, f"read os.environ outside pricing/settings.py: {readers}"
    assert _reads_environment(ROOT / "pricing" / "settings.py")  # the check sees a real reader


NUMBERS = [v.name for v in settings.VARIABLES.values() if v.kind in ("number", "integer")]


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "-1", "abc", "1e30", "true"])
def test_a_number_that_is_not_in_range_is_refused_naming_the_variable(monkeypatch, name, bad):
    monkeypatch.setenv(name, bad)
    with pytest.raises(SettingError, match=rf"^{name}: expected a (whole )?number >=? .* \(got '{re.escape(bad)}'\)"):
        settings.number(name)


@pytest.mark.parametrize("name", [v.name for v in settings.VARIABLES.values() if v.kind == "integer"])
def test_a_count_must_be_a_whole_number(monkeypatch, name):
    monkeypatch.setenv(name, "2.5")
    with pytest.raises(SettingError, match="whole number"):
        settings.number(name)
    monkeypatch.setenv(name, "3")
    assert settings.number(name) == 3 and isinstance(settings.number(name), int)


def test_values_are_read_when_used_not_when_imported(monkeypatch):
    monkeypatch.delenv("GPU_ADVISOR_STALE_DAYS", raising=False)
    assert cache.stale_days() == 60.0
    monkeypatch.setenv("GPU_ADVISOR_STALE_DAYS", "7.5")
    assert cache.stale_days() == 7.5
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "0")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MAX_BYTES", " ")  # empty: the default
    assert http.settings()["retries"] == 0 and http.settings()["max_bytes"] == 64 * 2**20
    monkeypatch.setenv("GPU_ADVISOR_OBSERVATION_TOLERANCE", "0")  # 0 is a tolerance (exact match), not unset
    assert crosscheck.tolerance() == 0.0


@pytest.mark.parametrize("bad", ["nan", "-1"])
def test_a_stale_days_that_would_make_old_prices_fresh_or_new_ones_stale_stops_the_command(
        tmp_path, monkeypatch, capsys, bad):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_STALE_DAYS", bad)
    code, out, err = gpu_advisor(capsys, "prices", "list", "--gpu", "H100")
    line = one_line_error(code, err)
    assert "GPU_ADVISOR_STALE_DAYS" in line and "days" in line and out == ""


def test_a_wrong_http_limit_stops_a_refresh_before_any_request(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_TIMEOUT", "0")
    monkeypatch.setenv("GPU_ADVISOR_AZURE_URL", "http://127.0.0.1:9/never-asked")
    code, out, err = gpu_advisor(capsys, "prices", "refresh", "--source", "azure")
    assert "GPU_ADVISOR_HTTP_TIMEOUT: expected a number > 0 s" in one_line_error(code, err)
    assert "fetching" not in out + err


@pytest.mark.parametrize("name, value", [("GPU_ADVISOR_AZURE_URL", "ftp://user:s3cret@example.com/x"),
                                         ("GPU_ADVISOR_LAMBDA_URL", "http://user:s3cret@[::1"),
                                         ("HF_ENDPOINT", "user:s3cret@example.com")])
def test_a_malformed_url_is_refused_without_showing_it(tmp_path, monkeypatch, capsys, name, value):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(name, value)
    args = ("estimate", "someorg/some-model") if name == "HF_ENDPOINT" else ("prices", "sources")
    code, out, err = gpu_advisor(capsys, *args)
    line = one_line_error(code, err)
    assert line.startswith(f"error: {name}: expected an http:// or https:// URL") and "s3cret" not in out + err


@pytest.mark.parametrize("value", ["has space", "line\nbreak", "x" * 5000])
def test_a_key_that_cannot_be_a_header_is_refused_without_showing_it(monkeypatch, value):
    monkeypatch.setenv("LAMBDA_API_KEY", value)
    with pytest.raises(SettingError, match="^LAMBDA_API_KEY: expected printable") as refused:
        settings.api_key("LAMBDA_API_KEY")
    assert value[:4] not in str(refused.value)


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("ON", True), ("yes", True), ("0", False),
                                       ("false", False), ("", False)])
def test_the_offline_flags_read_as_huggingface_hub_reads_them(monkeypatch, value, on):
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert settings.hf_offline() is on


def test_a_pinned_day_outside_the_years_the_tool_can_mean_is_refused(monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_TODAY", "0001-01-01")
    with pytest.raises(SettingError, match="GPU_ADVISOR_TODAY"):
        settings.today()
