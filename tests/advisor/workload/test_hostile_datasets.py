"""Hostile and awkward datasets, tokenizer files and --lengths files (issue 38): FIFOs, devices, symlink
loops and sparse files are refused before they are read past a limit; nesting that crashed pyarrow is
refused before pyarrow sees it; a tokenizer regex that makes the Rust library panic is one line; and
valid data that was miscounted (multi-line CSV cells, 4-8 MB rows) is counted exactly.

Each case ends in a correct count or one line naming the input (exit 2). The work done is counted, never
timed: bytes through pricing.files.BYTES_READ and rows handed to a parser
(advisor.workload.dataset_files.ROWS_PARSED)."""

from __future__ import annotations

import gzip
import json
import os
import sys

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing import files

pytest.importorskip("pyarrow")
pytest.importorskip("tokenizers")
from advisor.workload import dataset_files  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, /dev/zero and sparse files are POSIX")
MIB = 1 << 20
WORDS = "the quick brown fox jumps over a lazy dog".split()


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """A word-level tokenizer.json (every word one token, <s> first): counts are easy to check by hand."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}},
                                     unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture()
def counted():
    """(bytes read through pricing.files, rows handed to a parser) while the test runs."""
    start = files.BYTES_READ[0], dataset_files.ROWS_PARSED[0]
    return lambda: (files.BYTES_READ[0] - start[0], dataset_files.ROWS_PARSED[0] - start[1])


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def tokens(capsys, tok, path, *args):
    return gpu_advisor(capsys, "tokens", path, "--tokenizer", tok, *args)


def refused(capsys, tok, path, *words, args=()) -> str:
    code, _, err = tokens(capsys, tok, path, *args)
    line = one_line_error(code, err)
    assert str(path) in line, line
    for w in words:
        assert w in line, line
    return line


def counts(capsys, tok, path, *args) -> dict:
    code, out, err = tokens(capsys, tok, path, *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)["stats"]


def jsonl(path, texts) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))


# --------------------------------------------------------------------------- not a regular file
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet", ".arrow"])
def test_a_fifo_dataset_of_every_format_is_refused_before_it_is_opened(capsys, tok, tmp_path, counted, suffix):
    fifo = tmp_path / f"data{suffix}"
    os.mkfifo(fifo)  # no writer: opening it blocking would hang the test
    refused(capsys, tok, fifo, "FIFO", "not a regular file")
    assert counted() == (0, 0)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_under_a_dataset_name_is_refused_before_a_byte_is_read(capsys, tok, tmp_path, counted, device):
    link = tmp_path / "data.jsonl"
    link.symlink_to(device)
    refused(capsys, tok, link, "character device", "not a regular file")
    refused(capsys, tok, device, "character device", "not a regular file")  # named directly: no pyarrow error
    assert counted() == (0, 0)


def test_a_symlink_loop_is_named_as_one(capsys, tok, tmp_path, counted):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.symlink_to(b)
    b.symlink_to(a)
    refused(capsys, tok, a, "symbolic link loop", "not a regular file")
    assert counted() == (0, 0)


@pytest.fixture()
def saved(tmp_path):
    """A real `datasets` save_to_disk folder of four rows."""
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": ["the fox", "a dog", "the lazy dog", "fox"]}).save_to_disk(str(folder))
    [shard] = folder.glob("*.arrow")
    return folder, shard


def test_a_save_to_disk_folder_is_counted(capsys, tok, saved):
    folder, _ = saved
    assert counts(capsys, tok, folder)["total_tokens"] == 4 + 2 + 2 + 3 + 1


@pytest.mark.parametrize("swap,words", [
    ("fifo", ("FIFO", "not a regular file")), ("zero", ("character device", "not a regular file")),
    ("folder", ("folder", "not a regular file")), ("loop", ("symbolic link loop",))])
def test_a_shard_of_a_save_to_disk_folder_that_is_not_a_regular_file_is_named(capsys, tok, saved, counted, swap,
                                                                               words):
    folder, shard = saved
    shard.unlink()
    if swap == "fifo":
        os.mkfifo(shard)
    elif swap == "zero":
        shard.symlink_to("/dev/zero")
    elif swap == "folder":
        shard.mkdir()
    else:
        shard.symlink_to(shard)
    line = refused(capsys, tok, folder, shard.name, *words)
    assert "internal error" not in line
    assert counted()[1] == 0  # datasets never opened it


def test_a_state_json_naming_a_file_outside_the_folder_is_refused(capsys, tok, saved, tmp_path):
    folder, shard = saved
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": "../../etc/passwd"}]
    (folder / "state.json").write_text(json.dumps(state))
    refused(capsys, tok, folder, "not a file of the folder")


def test_a_state_json_that_is_a_fifo_is_refused(capsys, tok, saved):
    folder, _ = saved
    (folder / "state.json").unlink()
    os.mkfifo(folder / "state.json")
    refused(capsys, tok, folder, "state.json", "FIFO")


def test_a_folder_that_is_no_dataset_says_so(capsys, tok, tmp_path):
    (tmp_path / "nothing").mkdir()
    refused(capsys, tok, tmp_path / "nothing", "not a dataset written by datasets' save_to_disk")


# --------------------------------------------------------------------------- sparse and endless files
def test_a_20_gb_sparse_jsonl_is_refused_after_one_row_limit_of_reading(capsys, tok, tmp_path, counted):
    path = tmp_path / "sparse.jsonl"
    jsonl(path, ["the fox"] * 10_000)  # 180 kB of real rows, then zeros to 20 GB (a hole: no disk used)
    os.truncate(path, 20 * 10**9)
    refused(capsys, tok, path, "row 10001", "64 MiB limit")
    read, parsed = counted()
    assert read <= dataset_files.MAX_ROW_BYTES + 3 * dataset_files.BLOCK  # 64 MiB of 20 GB
    assert parsed == 0


def test_a_sparse_file_of_nothing_but_zeros_is_refused_from_its_first_bytes(capsys, tok, tmp_path, counted):
    for name, size in (("zeros.jsonl", 20 * 10**9), ("zeros.json", 12 * 10**9), ("zeros.csv", 10**9)):
        path = tmp_path / name
        path.touch()
        os.truncate(path, size)
        refused(capsys, tok, path, "NUL bytes")
    assert counted()[0] <= 3 * (65_536 + 2 * dataset_files.BLOCK)


@pytest.mark.parametrize("suffix", [".csv", ".arrow", ".json"])
def test_a_file_read_whole_is_refused_by_its_size_before_reading(capsys, tok, tmp_path, counted, suffix):
    path = tmp_path / f"big{suffix}"
    path.write_bytes(b"[" if suffix == ".json" else b"text\n")
    os.truncate(path, dataset_files.MAX_WHOLE_BYTES + 1)
    line = refused(capsys, tok, path, "2 GiB limit")
    assert "JSON lines, which are streamed" in line
    assert counted()[0] <= 65_536 * 2  # the first bytes, looked at to tell a JSON array from JSON lines


# --------------------------------------------------------------------------- nesting, rows, encodings
def test_a_jsonl_row_nested_100000_deep_is_refused_before_pyarrow_sees_it(capsys, tok, tmp_path, counted):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "the fox"}\n' + '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    refused(capsys, tok, path, "row 2", "nested more than 100 levels")
    assert counted()[1] == 0  # nothing reached the parser that crashed (exit -11)


def test_nesting_is_counted_per_row_and_brackets_inside_strings_do_not_count(capsys, tok, tmp_path):
    path = tmp_path / "ok.jsonl"
    rows = [{"text": "the fox " + "[" * 500, "meta": {"a": [[[[1]]]]}} for _ in range(200)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert counts(capsys, tok, path)["rows"] == 200


def test_a_json_array_nested_too_deep_is_refused(capsys, tok, tmp_path, counted):
    path = tmp_path / "deep.json"
    path.write_text('[{"text": ' + "[" * 5_000 + "]" * 5_000 + "}]")
    refused(capsys, tok, path, "nested more than 100 levels")
    assert counted()[1] == 0


@pytest.mark.parametrize("megabytes", [4, 8])
def test_rows_of_4_and_8_mb_are_accepted_and_counted_exactly(capsys, tok, tmp_path, megabytes):
    path = tmp_path / "long.jsonl"
    words = megabytes * MIB // 4  # "fox " is 4 bytes
    jsonl(path, ["the dog", "fox " * words, "a"])
    s = counts(capsys, tok, path)
    assert s["rows"] == 3 and s["total_tokens"] == (2 + 1) + (words + 1) + (1 + 1)


def test_a_row_over_the_limit_is_refused_naming_the_limit(capsys, tok, tmp_path, monkeypatch, counted):
    monkeypatch.setattr(dataset_files, "MAX_ROW_BYTES", 2 * MIB)
    path = tmp_path / "long.jsonl"
    jsonl(path, ["the dog", "fox " * MIB, "a"])
    refused(capsys, tok, path, "row 2", "2 MiB limit for one row")
    assert counted()[1] == 0


def _trained(kind: str, corpus: list[str]):
    """A small tokenizer of each family of pre-tokenization in use: byte-level BPE (GPT-2, Llama 3, Qwen),
    a SentencePiece-style normalizer that prepends '▁' (Llama 2, Mistral), and Metaspace."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "byte-level":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        return tok
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=kind == "prepend"))
    if kind == "prepend":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>"]))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


@pytest.mark.parametrize("kind", ["byte-level", "prepend", "metaspace"])
def test_a_long_text_is_counted_in_pieces_to_the_same_total_as_whole(kind):
    """Tokenizer.lengths cuts a text over PIECE_CHARS before a space and corrects each cut by a window around it:
    the count equals encoding the text whole, for every family of pre-tokenization."""
    import random

    from advisor.workload.dataset_tokens import PIECE_CHARS, Tokenizer as Ours, _cuts

    rng = random.Random(1)
    words = "the quick brown fox, jumps over: a lazy dog 123 4567! while birds sing".split()
    tok = _trained(kind, [" ".join(rng.choice(words) for _ in range(50)) for _ in range(200)])
    text = " ".join(rng.choice(words) for _ in range(3 * PIECE_CHARS // 5)).replace("dog ", "dog\n  ")
    assert len(_cuts(text)) >= 2
    assert Ours(kind, tok).lengths([text, "the fox"]).tolist() == [len(tok.encode(text).ids),
                                                                   len(tok.encode("the fox").ids)]


@pytest.mark.parametrize("bad,why", [
    (b"\xc0\x80", "invalid start byte"),  # an overlong NUL
    (b"\xed\xa0\x80", "invalid continuation byte"),  # a UTF-16 surrogate encoded as UTF-8
    (b"\xff", "invalid start byte"),
    (b"\xe2\x82", "invalid continuation byte"),  # a cut-off character
])
def test_invalid_utf8_inside_a_jsonl_string_names_the_row(capsys, tok, tmp_path, bad, why):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "the fox"}\n\n{"text": "a ' + bad + b' dog"}\n')
    refused(capsys, tok, path, "row 2 is not UTF-8", why, "save the file as UTF-8")


def test_a_lone_surrogate_escape_names_the_row(capsys, tok, tmp_path):
    path = tmp_path / "escape.jsonl"
    path.write_text('{"text": "the fox"}\n{"text": "a \\ud800 dog"}\n')
    refused(capsys, tok, path, "row 2")


def test_a_row_that_is_not_an_object_names_the_row(capsys, tok, tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text('{"text": "the fox"}\n["the", "fox"]\n')
    refused(capsys, tok, path, "row 2 is not a JSON object")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])
def test_a_utf16_csv_is_named_as_utf16(capsys, tok, tmp_path, encoding):
    path = tmp_path / "u16.csv"
    path.write_bytes("text\nthe fox\na dog\n".encode(encoding))
    refused(capsys, tok, path, "UTF-16", "save it as UTF-8")


def test_invalid_utf8_in_a_csv_names_the_line(capsys, tok, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"text\nthe fox\n\"a \xc0\x80 dog\"\n")
    refused(capsys, tok, path, "line 3 is not UTF-8")


def test_duplicate_csv_columns_are_named(capsys, tok, tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("text,id,text\nthe fox,1,a dog\n")
    refused(capsys, tok, path, "column 'text' appears more than once")


@pytest.mark.parametrize("name,data,kind", [
    ("data.jsonl", gzip.compress(b'{"text": "the fox"}\n'), "a gzip file"),
    ("data.csv", b"PK\x03\x04" + bytes(100), "a zip archive"),
])
def test_a_compressed_file_under_a_text_name_is_named(capsys, tok, tmp_path, name, data, kind):
    path = tmp_path / name
    path.write_bytes(data)
    refused(capsys, tok, path, kind)


# --------------------------------------------------------------------------- valid CSV read right
def test_a_10_mb_quoted_cell_with_line_breaks_is_one_row(capsys, tok, tmp_path):
    path = tmp_path / "cell.csv"
    lines = 1_300_000
    path.write_text('text,id\n"' + "the fox\n" * lines + '",1\n"a dog",2\n')
    assert path.stat().st_size > 10 * 10**6
    s = counts(capsys, tok, path, "--exact")
    assert s["rows"] == 2 and s["total_tokens"] == (2 * lines + 1) + 3


def test_a_csv_with_a_line_break_in_every_quoted_cell_is_read(capsys, tok, tmp_path):
    path = tmp_path / "multi.csv"
    n = 130_000
    path.write_text("text,id\n" + "".join(f'"the fox\nthe dog {i}",{i}\n' for i in range(n)))
    assert path.stat().st_size > 3.5 * 10**6
    s = counts(capsys, tok, path, "--exact")
    assert s["rows"] == n and s["total_tokens"] == n * (1 + 5)  # "<s> the fox the dog [UNK]"


# --------------------------------------------------------------------------- sampling reads only its sample
def test_a_big_jsonl_parses_only_its_sampled_rows(capsys, tok, tmp_path, counted):
    path = tmp_path / "big.jsonl"
    jsonl(path, ["the fox " * (1 + i % 7) for i in range(30_000)])
    s = counts(capsys, tok, path, "--sample", "500")
    assert s["rows"] == 30_000 and s["counted_rows"] == 500
    read, parsed = counted()
    # one pass to count, one to pick (plus the first 64 kB, looked at to tell the format)
    assert parsed == 500 and read <= 2 * path.stat().st_size + 2 * 65_536


# --------------------------------------------------------------------------- --lengths files
def estimate_lengths(capsys, arg):
    return gpu_advisor(capsys, "estimate", "llama-3.2-1b", "--lengths", arg)


@pytest.mark.parametrize("make,words", [
    ("zero", ("character device", "not a regular file")), ("fifo", ("FIFO", "not a regular file")),
    ("sparse", ("larger than",)), ("deep", ("nested more than 100 levels",)), ("folder", ("folder",))])
def test_a_lengths_file_that_is_not_a_histogram_is_named_before_it_is_read(capsys, tmp_path, counted, make,
                                                                           words):
    path = {"zero": "/dev/zero"}.get(make, str(tmp_path / "lengths.json"))
    if make == "fifo":
        os.mkfifo(path)
    elif make == "sparse":
        open(path, "wb").close()
        os.truncate(path, 3 * 10**9)
    elif make == "deep":
        open(path, "w").write('{"histogram": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif make == "folder":
        os.mkdir(path)
    line = one_line_error(*estimate_lengths(capsys, path)[::2])
    assert f"--lengths {path}" in line, line
    for w in words:
        assert w in line, line
    assert counted()[0] <= (400_000 if make == "deep" else 0)


# --------------------------------------------------------------------------- tokenizer files
def test_a_tokenizer_regex_past_the_librarys_backtracking_limit_is_one_line(capfd, tok, tmp_path):
    """`(a+)+$` on a long run of a's: Oniguruma stops at its retry limit and the Rust code panics; the
    panic is one line naming the tokenizer, and its backtrace never reaches the terminal (fd 2)."""
    from cli import main

    evil = json.loads(tok.read_text())
    evil["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated",
                             "invert": False}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(evil))
    data = tmp_path / "a.jsonl"
    jsonl(data, ["a" * 40 + "b"])
    with pytest.raises(SystemExit) as done:
        main(["tokens", str(data), "--tokenizer", str(path)])
    _, err = capfd.readouterr()
    line = one_line_error(done.value.code, err)
    assert str(path) in line and "panicked" not in err and "Traceback" not in err


@pytest.mark.parametrize("make,words", [
    ("fifo", ("FIFO",)), ("sparse", ("larger than", "limit")), ("deep", ("nested more than 100",)),
    ("zero", ("character device",))])
def test_a_tokenizer_json_that_is_no_tokenizer_is_named_before_it_is_read(capsys, tmp_path, counted, make, words):
    folder = tmp_path / "tok"
    folder.mkdir()
    path = folder / "tokenizer.json"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "sparse":
        path.touch()
        os.truncate(path, 3 * 10**9)
    elif make == "deep":
        path.write_text('{"model": ' + "[" * 50_000 + "]" * 50_000 + "}")
    else:
        path.symlink_to("/dev/zero")
    data = tmp_path / "a.jsonl"
    jsonl(data, ["the fox"])
    for ref in (path, folder):  # the file itself, and the folder holding it
        line = one_line_error(*gpu_advisor(capsys, "tokens", data, "--tokenizer", ref)[::2])
        assert "tokenizer.json" in line and all(w in line for w in words), line
    assert counted()[0] <= (2 * path.stat().st_size if make == "deep" else 0)  # the file read once per ref


def test_a_tokenizer_folder_with_a_config_linked_to_dev_zero_is_refused(capsys, tok, tmp_path, counted):
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(tok.read_bytes())
    (folder / "tokenizer_config.json").symlink_to("/dev/zero")
    data = tmp_path / "a.jsonl"
    jsonl(data, ["the fox"])
    line = one_line_error(*gpu_advisor(capsys, "tokens", data, "--tokenizer", folder)[::2])
    assert "tokenizer_config.json" in line and "character device" in line
