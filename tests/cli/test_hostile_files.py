"""Hostile files: FIFOs, devices, folders and files built to take minutes are
refused with one line before they are read past the first limit. Work is bounded by counting
the bytes read (pricing.files.BYTES_READ), never by a stopwatch."""

from __future__ import annotations

import os
import sys

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing import files, loader
from pricing.errors import PriceInputError

HEADER = "provider,region,instance_type,gpu_model,gpu_count,price_hour,notes\n"
FIRST_LIMIT = files.MAX_CSV_FIELD + 2 * 65_536  # the limit, plus one read buffer of slack either side

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")


@pytest.fixture()
def counted():
    """Bytes read through pricing.files while the test runs."""
    start = files.BYTES_READ[0]
    return lambda: files.BYTES_READ[0] - start


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def fifo(tmp_path, name: str):
    path = tmp_path / name
    os.mkfifo(path)
    return path


# --------------------------------------------------------------------------- files built to take minutes
def test_a_48_mb_quoted_cell_is_refused_at_the_field_limit(tmp_path, counted):
    path = tmp_path / "quoted.csv"
    with path.open("w") as f:  # within the 50 MB size limit; one quoted field of "A\n" x 24,000,000
        f.write(HEADER + 'aws,us,x,H100,1,2.0,"')
        chunk = "A\n" * 1_000_000
        for _ in range(24):
            f.write(chunk)
        f.write('"\n')
    assert 48_000_000 < path.stat().st_size < files.MAX_SHEET_BYTES
    with pytest.raises(PriceInputError) as err:
        loader.read_sheet(path)
    assert "row 2: a field is longer than 65,536 characters" in str(err.value) and err.value.exit_code == 2
    assert counted() < FIRST_LIMIT  # 48 MB on disk, a few hundred kB read


def test_a_10_mb_header_is_refused_at_the_header_limit(tmp_path, counted):
    path = tmp_path / "header.csv"
    path.write_text("a," * 5_000_000 + "\n1\n")
    with pytest.raises(PriceInputError) as err:
        loader.read_sheet(path)
    assert "header line is longer than 65,536 characters" in str(err.value)
    assert counted() < loader.MAX_HEADER_CHARS + 2 * 65_536


def test_the_size_limit_is_checked_before_one_byte_is_read(tmp_path, counted, monkeypatch):
    monkeypatch.setattr(files, "MAX_SHEET_BYTES", 1_000)
    path = tmp_path / "big.csv"
    path.write_text(HEADER + "aws,us,x,H100,1,2.0,\n" * 100)
    with pytest.raises(PriceInputError) as err:
        loader.read_sheet(path)
    assert "larger than the 1,000 bytes limit" in str(err.value) and counted() == 0


def test_quoted_cells_under_the_limit_are_read_and_judged_as_data(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text(HEADER + 'aws,us,x,H100,1,2.0,"spot, reclaimable"\n'
                    + 'aws,us,y,H100,1,2.0,"' + "n" * 60_000 + '"\n')
    good, problems = loader.read_sheet(path)  # the 60,000-character field is under the CSV limit: no refusal
    assert list(good.notes) == ["spot, reclaimable"]
    assert [(p.row, p.column) for p in problems] == [(3, "notes")] and "1,000 characters" in problems[0].message


# --------------------------------------------------------------------------- FIFOs, devices, folders
@pytest.mark.parametrize("reader", ["read_sheet", "read_text", "read_regular_file"])
def test_a_fifo_is_refused_without_blocking(tmp_path, counted, reader):
    path = fifo(tmp_path, "prices.csv")  # no writer: an open() in blocking mode would wait forever
    with pytest.raises(PriceInputError) as err:
        {"read_sheet": lambda: loader.read_sheet(path), "read_text": lambda: files.read_text(path, "x"),
         "read_regular_file": lambda: files.read_regular_file(path, 100, "x")}[reader]()
    assert "FIFO" in str(err.value) and "not a regular file" in str(err.value) and counted() == 0


def test_a_symlink_to_dev_zero_is_refused_as_a_device(tmp_path, counted):
    path = tmp_path / "zero.csv"
    path.symlink_to("/dev/zero")
    with pytest.raises(PriceInputError) as err:
        loader.read_sheet(path)
    assert "character device" in str(err.value) and counted() == 0


@pytest.mark.parametrize("args", [
    lambda p, t: ["report", p, "-o", t / "r.html"],
    lambda p, t: ["launch", "--from", p, "--out", t / "bundle"],
    lambda p, t: ["plan", "-f", p],
    lambda p, t: ["prices", "list", "--prices", p],
    lambda p, t: ["prices", "import", p],
], ids=["report", "launch --from", "plan -f", "prices list --prices", "prices import"])
def test_every_command_refuses_a_fifo_in_one_line(tmp_path, capsys, args):
    path = fifo(tmp_path, "plan.json")
    code, out, err = gpu_advisor(capsys, *args(path, tmp_path))
    line = one_line_error(code, err)
    assert "FIFO" in line or "regular file" in line or "not a file" in line or "is not a file" in line.lower()


def test_a_fifo_named_by_a_plan_file_prices_entry_is_refused(tmp_path, capsys):
    pipe = fifo(tmp_path, "p.csv")
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"model: qwen2.5-0.5b\ntokens: 1M\nprices: [{pipe}]\n")
    code, out, err = gpu_advisor(capsys, "plan", "-f", plan)
    assert "FIFO" in one_line_error(code, err)


def test_a_cached_sheet_that_is_a_fifo_or_dev_zero_is_skipped_with_a_warning(tmp_path, capsys):
    sheets = tmp_path / "cache" / "sheets"
    sheets.mkdir(parents=True)
    os.mkfifo(sheets / "lambda.csv")
    (sheets / "vast.csv").symlink_to("/dev/zero")
    df, problems = loader.load(include_bundled=True)
    text = " ".join(str(p) for p in problems)
    assert "FIFO" in text and "character device" in text and len(df) > 1_000  # the bundled rows still load
    code, out, err = gpu_advisor(capsys, "prices", "sources")
    assert code == 0


def test_a_sheet_that_is_a_folder_is_one_line(tmp_path, capsys):
    folder = tmp_path / "sheet.csv"
    folder.mkdir()
    code, out, err = gpu_advisor(capsys, "prices", "list", "--prices", folder)
    assert "folder" in one_line_error(code, err) and "IsADirectoryError" not in err


def test_a_plan_json_over_the_documented_limit_is_refused_before_parsing(tmp_path, capsys, builds):
    """README: JSON files are limited to 5 MB; `report` and `launch --from` hold to it."""
    from cli.report import MAX_PLAN_BYTES

    assert MAX_PLAN_BYTES == 5_000_000
    path = tmp_path / "plan.json"
    path.write_text('{"candidates": [' + ",".join(['{"a": 1}'] * 700_000) + "]}")
    assert path.stat().st_size > MAX_PLAN_BYTES
    for args in (["report", path, "-o", tmp_path / "r.html"], ["launch", "--from", path, "--out", tmp_path / "b"]):
        code, out, err = gpu_advisor(capsys, *args)
        assert "5 MB limit" in one_line_error(code, err)
    assert builds["json.loads"] == 0
