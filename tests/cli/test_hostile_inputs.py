"""Hostile and impossible inputs: model configs, model references, numeric flags, YAML
plan files, terminal output and the error style.

Physically impossible values are refused when they are parsed, with one line that names the
option or file and gives the bound (advisor.model.spec MAX_*), exit 2; text from configs and
files never reaches the terminal with escape sequences or line breaks; environment failures are
exit 1 in plain words; no message carries a Python exception class name. Every case ends with
a one-line error or a correct result; bombs and deep documents are refused before any object is
built (counted, not timed: wall time lives in benchmarks/).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error  # noqa: E402

from advisor.model import spec as modelspec

LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "max_position_embeddings": 4096}
QWEN3_MOE = {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
             "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "max_position_embeddings": 32768, "num_experts": 128, "num_experts_per_tok": 8,
             "moe_intermediate_size": 768}
QWEN2_MOE = {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
             "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
             "max_position_embeddings": 8192, "num_experts": 60, "num_experts_per_tok": 4,
             "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}
GEMMA3 = {"model_type": "gemma3", "text_config": {"hidden_size": 2560, "num_hidden_layers": 34,
                                                  "num_attention_heads": 8, "num_key_value_heads": 4,
                                                  "head_dim": 256, "intermediate_size": 10240,
                                                  "vocab_size": 262208}}


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def refused(capsys, *args, code: int = 2) -> str:
    """Run, expect exactly one `error:` line (no traceback, class name or escape sequence), return it."""
    got, out, err = gpu_advisor(capsys, *args)
    lines = err.strip().splitlines()
    assert got == code, (got, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "\x1b" not in err and "\r" not in err
    assert not any(w in lines[0] for w in ("Error:", "Exception:", "Errno")), lines[0]
    return lines[0]


def config(tmp_path: Path, cfg: dict | str, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg), encoding="utf-8")
    return folder


# --------------------------------------------------------------------------- model configs

BAD_CONFIGS = {
    "layers 10^6": (dict(LLAMA, num_hidden_layers=10**6), "num_hidden_layers must be between 1 and 1,000"),
    "layers 10^8": (dict(LLAMA, num_hidden_layers=10**8), "num_hidden_layers must be between 1 and 1,000"),
    "layers 0": (dict(LLAMA, num_hidden_layers=0), "num_hidden_layers"),
    "layers -3": (dict(LLAMA, num_hidden_layers=-3), "num_hidden_layers"),
    "hidden 10^7": (dict(LLAMA, hidden_size=10**7), "hidden_size must be between 1 and 131,072"),
    "intermediate 10^9": (dict(LLAMA, intermediate_size=10**9), "intermediate_size must be between 1 and 1,048,576"),
    "vocab 10^10": (dict(LLAMA, vocab_size=10**10), "vocab_size must be between 1 and 4,194,304"),
    "heads 10^6": (dict(LLAMA, num_attention_heads=10**6, num_key_value_heads=10**6), "num_attention_heads must be"),
    "kv heads > heads": (dict(LLAMA, num_key_value_heads=64), "num_key_value_heads"),
    "head_dim 10^6": (dict(LLAMA, head_dim=10**6), "head_dim must be between 1 and 4,096"),
    "positions 10^12": (dict(LLAMA, max_position_embeddings=10**12), "max_position_embeddings"),
    "hidden Infinity": ('{"model_type": "llama", "hidden_size": Infinity, "num_attention_heads": 32}', "hidden_size"),
    "hidden NaN": ('{"model_type": "llama", "hidden_size": NaN, "num_attention_heads": 32}', "hidden_size"),
    "hidden 2.5": (dict(LLAMA, hidden_size=4096.5), "hidden_size"),
    "layers true": (dict(LLAMA, num_hidden_layers=True), "num_hidden_layers"),
    "layers 'many'": (dict(LLAMA, num_hidden_layers="many"), "num_hidden_layers"),
    "layers list": (dict(LLAMA, num_hidden_layers=[32]), "num_hidden_layers"),
    "moe size -768": (dict(QWEN3_MOE, moe_intermediate_size=-768), "moe_intermediate_size must be between 0"),
    "experts 10^6": (dict(QWEN3_MOE, num_experts=10**6), "num_experts must be between 0 and 4,096"),
    "top-k > experts": (dict(QWEN3_MOE, num_experts_per_tok=1000), "num_experts_per_tok must be between 0 and 128"),
    "experts -1": (dict(QWEN3_MOE, num_experts=-1), "num_experts"),
    "shared expert -1": (dict(QWEN2_MOE, shared_expert_intermediate_size=-1), "shared_expert_intermediate_size"),
    "mlp_only_layers 10^9": (dict(QWEN2_MOE, mlp_only_layers=[10**9]), "mlp_only_layers"),
    "mlp_only_layers x": (dict(QWEN2_MOE, mlp_only_layers=["x"]), "mlp_only_layers[0] must be a whole number"),
    "sliding window -5": (dict(LLAMA, model_type="mistral", sliding_window=-5), "sliding_window"),
    "vision image 10^6": (dict(GEMMA3, vision_config={"image_size": 10**6, "patch_size": 1}), "image_size"),
    "vision patch > image": (dict(GEMMA3, vision_config={"image_size": 224, "patch_size": 10**4}), "patch_size"),
    "total 481T params": (dict(LLAMA, num_hidden_layers=1000, hidden_size=131072, intermediate_size=1048576,
                               num_attention_heads=1024, num_key_value_heads=1024), "at most 100T"),
    "nested 10^5": ("[" * 100_000 + "]" * 100_000, "nested more than"),
    "10,000-digit int": ('{"model_type": "llama", "hidden_size": ' + "9" * 10_000 + "}", "not valid JSON"),
    "not an object": ("[1, 2]", "not a config.json object"),
    "not JSON": ("{model_type: llama", "cannot read"),
    "not UTF-8": ("\udcff", "cannot read"),
    "model_type ANSI": (dict(LLAMA, model_type="\x1b[2J\x1b]0;pwned\x07llama"), "is not supported"),
    "model_type newline": (dict(LLAMA, model_type="llama\nfake: line"), "is not supported"),
    "model_type object": (dict(LLAMA, model_type={"a": 1}), "is not supported"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_impossible_config_json_is_refused_with_the_bound(tmp_path, capsys, case):
    cfg, expect = BAD_CONFIGS[case]
    folder = tmp_path / "model"
    folder.mkdir()
    if cfg == "\udcff":
        (folder / "config.json").write_bytes(b"\xff\xfe\xfd")
    else:
        (folder / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    line = refused(capsys, "estimate", folder, "--gpu", "H100")
    assert expect in line and line.startswith("error: model"), line


def test_impossible_config_is_refused_by_plan_too(tmp_path, capsys):
    folder = config(tmp_path, dict(QWEN3_MOE, moe_intermediate_size=-768))
    line = refused(capsys, "plan", "--model", folder, "--tokens", "10M")
    assert "moe_intermediate_size" in line and "-9.33B" not in line


def test_oversized_config_json_is_refused_before_reading(tmp_path, capsys):
    folder = tmp_path / "big"
    folder.mkdir()
    with open(folder / "config.json", "wb") as f:
        f.truncate(64_000_000)  # sparse: no time spent writing it
    assert "larger than" in refused(capsys, "estimate", folder)


def test_the_largest_accepted_shapes_estimate_in_seconds(tmp_path, capsys):
    cfg = dict(LLAMA, num_hidden_layers=modelspec.MAX_LAYERS, hidden_size=512, intermediate_size=1024,
               num_attention_heads=4, num_key_value_heads=4, vocab_size=modelspec.MAX_VOCAB,
               max_position_embeddings=modelspec.MAX_POSITIONS)
    code, out, err = gpu_advisor(capsys, "estimate", config(tmp_path, cfg), "--gpu", "H100", "--format", "json")
    assert code == 0, err
    est = json.loads(out)
    assert est["breakdown"]["total"] > 0 and est["model"]["params_total"] > 0
    moe = dict(QWEN3_MOE, num_experts=modelspec.MAX_EXPERTS, num_experts_per_tok=modelspec.MAX_EXPERTS)
    code, out, err = gpu_advisor(capsys, "estimate", config(tmp_path, moe, "moe"), "--method", "lora", "--gpu", "B200",
                                 "--format", "json")
    assert code == 0, err and json.loads(out)["model"]["params_total"] > 0


# --------------------------------------------------------------------------- model references

@pytest.mark.parametrize("ref, expect", [
    ("\x1b[2J\x1b]0;pwned\x07meta-llama/Llama-3.1-8B", "U+001B"),
    ("meta-llama/Llama-3.1-8B\n--tokens 1", "U+000A"),
    ("llama-3.1-8b\rx", "U+000D"),
    ("a\u202eb", "U+202E"),
    ("-rf", "starts with '-'"),
    ("x" * 1000, "longer than 512"),
    ("no/such/path/config.json", "no such file"),
    ("certainly-not-a-model", "unknown model"),
])
def test_bad_model_references_are_one_line(capsys, ref, expect):
    assert expect in refused(capsys, "estimate", "--", ref)
    assert expect in refused(capsys, "plan", f"--model={ref}", "--tokens", "1M")


def test_escape_sequences_in_a_config_folder_name_never_reach_the_terminal(tmp_path, capsys):
    """A path is a model reference too: control characters in it are refused like in any name;
    markup in it is escaped in Markdown output."""
    cfg = dict(LLAMA, num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4,
               num_key_value_heads=4)
    folder = config(tmp_path, cfg, name="m\x1b]0;pwned\x07\x1b[2Jx")
    assert "U+001B" in refused(capsys, "estimate", folder, "--gpu", "T4")
    ok = config(tmp_path, cfg, name="<b>[x](y)<\\b> $(id)")
    code, out, err = gpu_advisor(capsys, "estimate", ok, "--gpu", "T4", "--format", "md")
    assert code == 0, err
    assert out.startswith("### &lt;b&gt;\\[x\\](y)&lt;\\\\b&gt; \\$(id):"), out.splitlines()[0]


# --------------------------------------------------------------------------- numeric flags

ESTIMATE_FLAGS = [
    (["--params", "1e30"], "at most 1e14"),
    (["--params", "1e15"], "at most 1e14"),
    (["--params", "1e999"], "at most 1e14"),
    (["--params", "nan"], "--params"),
    (["--params", "inf"], "--params"),
    (["--params", "-5B"], "--params"),
    (["--params", "0"], "--params"),
    (["--params", "7 billion"], "--params"),
    (["--params", "9" * 5000], "at most 1e14"),
    (["--params", "7B", "--seq-len", "1000000000"], "16777216"),
    (["--params", "7B", "--batch-size", "10000000000"], "1048576"),
    (["--params", "7B", "--gpus", "1000000000"], "1048576"),
    (["--params", "7B", "--grad-accum", "1000000000"], "1048576"),
    (["--params", "7B", "--nodes", "100000"], "16384"),
    (["--params", "7B", "--gpus", "0"], "--gpus"),
    (["--params", "7B", "--mfu", "nan"], "finite"),
    (["--params", "7B", "--mfu", "inf"], "--mfu"),
    (["--params", "7B", "--headroom", "nan"], "finite"),
    (["--params", "7B", "--internode-gbps", "nan"], "finite"),
    (["--params", "7B", "--internode-gbps", "1e300"], "--internode-gbps"),
    (["--params", "7B", "--seq-len", "nan"], "--seq-len"),
]


@pytest.mark.parametrize("args, expect", ESTIMATE_FLAGS)
def test_estimate_refuses_impossible_numbers(capsys, args, expect):
    assert expect in refused(capsys, "estimate", *args)


PLAN_FLAGS = [
    (["--tokens", "1e30"], "at most 1e15"),
    (["--tokens", "nan"], "--tokens"),
    (["--tokens", "-1M"], "--tokens"),
    (["--tokens", "0"], "--tokens"),
    (["--tokens", "lots"], "--tokens"),
    (["--examples", "1e12", "--avg-tokens", "1e12", "--tokens", ""], "at most 1e15"),
    (["--epochs", "nan"], "finite"),
    (["--epochs", "inf"], "finite"),
    (["--epochs", "-1"], "--epochs"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "1e9"], "at most 10,000"),
    (["--setup-hours", "nan"], "finite"),
    (["--setup-hours", "inf"], "--setup-hours"),
    (["--setup-hours", "-1"], "--setup-hours"),
    (["--setup-hours", "1e12"], "at most 1,000,000"),
    (["--budget", "nan"], "finite"),
    (["--budget", "inf"], "finite"),
    (["--budget", "-5"], "positive"),
    (["--budget", "0"], "positive"),
    (["--budget", "1e30"], "at most"),
    (["--deadline", "nan"], "--deadline"),
    (["--deadline", "inf"], "--deadline"),
    (["--deadline", "-2d"], "--deadline"),
    (["--deadline", "1e300w"], "--deadline"),
    (["--deadline", "soon"], "--deadline"),
    (["--max-nodes", "1000000000"], "16384"),
    (["--max-nodes", "0"], "--max-nodes"),
    (["--max-gpus", "1000000000"], "1048576"),
    (["--seq-len", "1000000000"], "16777216"),
    (["--global-batch", "1000000000"], "1048576"),
    (["--global-batch-tokens", "1e30"], "--global-batch-tokens"),
    (["--top", "-1"], "--top"),
    (["--top", "0"], "--top"),
    (["--top", "1000000000"], "10000"),
    (["--mfu", "nan"], "finite"),
    (["--headroom", "nan"], "finite"),
    (["--checkpoint-every", "nan"], "finite"),
    (["--checkpoint-every", "inf"], "finite"),
    (["--checkpoint-every", "0"], "--checkpoint-every"),
]


@pytest.mark.parametrize("args, expect", PLAN_FLAGS)
def test_plan_refuses_impossible_numbers_before_planning(capsys, args, expect):
    base = ["plan", "--model", "llama-3.1-8b"] + ([] if "--tokens" in args else ["--tokens", "10M"])
    assert expect in refused(capsys, *base, *args)


# --------------------------------------------------------------------------- YAML plan files

ALIAS_BOMB = "\n".join(
    [f'{chr(97 + i)}: &{chr(97 + i)} [' + ",".join([f"*{chr(96 + i)}"] * 9 if i else ['"x"'] * 9) + "]"
     for i in range(10)])
YAML_FILES = {
    "epochs: many": ("epochs: many\n", "--epochs: expected a number"),
    "epochs: .nan": ("epochs: .nan\n", "finite"),
    "epochs: .inf": ("epochs: .inf\n", "finite"),
    "epochs: [1]": ("epochs: [1]\n", "--epochs"),
    "spot: 'no'": ("spot: 'no'\n", "--spot: expected true or false"),
    "spot: 'yes'": ("spot: 'yes'\n", "--spot: expected true or false"),
    "spot: 1": ("spot: 1\n", "--spot"),
    "all_stacks: 'no'": ("all_stacks: 'no'\n", "--all-stacks"),
    "padded: 'false'": ("padded: 'false'\n", "--padded"),
    "grad_checkpointing: 'no'": ("grad_checkpointing: 'no'\n", "--grad-checkpointing: expected true or false"),
    "lora_rank: 8.5": ("lora_rank: 8.5\n", "--lora-rank"),
    "lora_dropout: .nan": ("lora_dropout: .nan\n", "--lora-dropout"),
    "precision: evil": ("precision: '$(reboot)'\n", "--precision"),
    "top: -1": ("top: -1\n", "--top"),
    "top: 10^9": ("top: 1000000000\n", "10000"),
    "top: 2.5": ("top: 2.5\n", "whole number"),
    "seq_len: '1e9'": ("seq_len: '1e9'\n", "whole number"),
    "max_nodes: 10^9": ("max_nodes: 1000000000\n", "16384"),
    "budget: .inf": ("budget: .inf\n", "finite"),
    "budget: -5": ("budget: -5\n", "positive"),
    "setup_hours: .nan": ("setup_hours: .nan\n", "finite"),
    "deadline: .nan": ("deadline: .nan\n", "--deadline"),
    "tokens: 1e30": ("tokens: 1e30\n", "at most 1e15"),
    "tokens: {a: 1}": ("tokens: {a: 1}\n", "--tokens"),
    "alias bomb": (ALIAS_BOMB + "\n", "alias"),
    "recursive alias": ("a: &a [*a]\n", "recursive"),
    "nested 10^4": ("methods: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested more than 20 levels"),
    "python tag": ("epochs: !!python/object/apply:os.system ['touch PWNED']\n", "not valid YAML"),
    "custom tag": ("epochs: !evil 3\n", "not valid YAML"),
    "a list": ("- a\n- b\n", "mapping"),
    "a scalar": ("just text\n", "mapping"),
    "NUL byte": ("epochs: 1\x00\n", "not valid YAML"),
    "unknown key with ANSI": ('"\\e[31mred\\e[0m": 1\n', "unknown field"),
    "model with newline": ('model: "x\\ntouch PWNED"\ntokens: 1M\n', "U+000A"),
    "model with ANSI": ('model: "\\e]0;pwned\\a"\ntokens: 1M\n', "U+001B"),
    "10,000-digit int": ("epochs: " + "9" * 10_000 + "\n", "--"),
}


@pytest.mark.parametrize("case", list(YAML_FILES))
def test_hostile_yaml_plan_files_are_refused_in_one_line(tmp_path, capsys, builds, case):
    body, expect = YAML_FILES[case]
    head = "" if body.startswith(("-", "just", "a:")) or "model:" in body else "model: llama-3.1-8b\ntokens: 1M\n"
    path = tmp_path / "plan.yaml"
    path.write_text(head + body, encoding="utf-8")
    line = refused(capsys, "plan", "-f", path)
    assert expect in line and (str(path) in line or line.startswith(("error: --", "error: model:"))), line
    assert not list(tmp_path.rglob("PWNED")) and not list(Path.cwd().glob("PWNED"))
    if case in ("alias bomb", "recursive alias", "nested 10^4", "python tag", "custom tag"):
        assert builds.of(head + body) == []  # refused by the event walk: nothing expanded or built


def test_oversized_yaml_plan_file_is_refused_before_parsing(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    with open(path, "wb") as f:
        f.truncate(200_000_000)
    assert "larger than" in refused(capsys, "plan", "-f", path)


def test_a_sane_yaml_plan_file_still_plans(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text("model: qwen2.5-0.5b\ntokens: 1M\nspot: false\nepochs: 2\ngpu: A10G\nproviders: aws\ntop: 3\n")
    code, out, err = gpu_advisor(capsys, "plan", "-f", path, "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert 1 <= len(plan["candidates"]) <= 3 and plan["workload"]["epochs"] == 2


# --------------------------------------------------------------------------- price sheets on the terminal

def test_escape_sequences_and_line_breaks_in_a_price_sheet_never_reach_the_terminal(tmp_path, capsys):
    sheet = tmp_path / "mine.csv"
    sheet.write_text(
        "provider,region,instance_type,gpu_model,gpu_count,price_per_gpu_hour\n"
        'acme\x1b[2J\x1b]0;pwned\x07,r1,box-1,H100,8,2.0\n'
        '"acme\nsplit",r1,box-2,H100,8,2.0\n'
        "acme,<script>r</script>,box-3,H100,8,2.0\n", encoding="utf-8")
    code, out, err = gpu_advisor(capsys, "prices", "list", "--prices", sheet, "--gpu", "H100", "--limit", "5")
    assert "row 2, column 'provider'" in one_line_error(code, err)  # a bad row refuses the sheet ...
    assert "\x07" not in err
    code, out, err = gpu_advisor(capsys, "prices", "list", "--prices", sheet, "--gpu", "H100", "--limit", "5",
                                 "--skip-bad-rows")  # ... or is left out, with a warning
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    for line in out.splitlines()[1:6]:
        assert len(line.split()) >= 8, line  # no row was split in two
    code, out, err = gpu_advisor(capsys, "prices", "list", "--prices", sheet, "--provider", "acme", "--format", "csv",
                                 "--skip-bad-rows")
    assert code == 0, err and "\x1b" not in out


# --------------------------------------------------------------------------- one error style

def test_unexpected_failures_are_one_plain_line_without_class_names(capsys, monkeypatch):
    import cli.models

    def boom(family):
        raise KeyError("fitted")

    monkeypatch.setattr(cli.models, "_rows", boom)
    line = refused(capsys, "models", code=1)
    assert "internal error" in line and "--debug" in line and "KeyError" not in line


@pytest.mark.parametrize("exc, words", [
    (PermissionError(13, "Permission denied", "/x/y"), "/x/y: permission denied"),
    (FileExistsError(17, "File exists", "/x/link"), "/x/link: already exists"),
    (NotADirectoryError(20, "Not a directory", "/etc/passwd/x"), "/etc/passwd/x: a part of the path is a file"),
    (OSError(28, "No space left on device", "/x"), "no space left"),
    (IsADirectoryError(21, "Is a directory", "/tmp"), "is a folder"),
    (RecursionError("maximum recursion depth exceeded"), "too large or too deeply nested"),
])
def test_environment_failures_are_plain_words_exit_1(capsys, monkeypatch, exc, words):
    import cli.models

    def boom(family):
        raise exc

    monkeypatch.setattr(cli.models, "_rows", boom)
    line = refused(capsys, "models", code=1)
    assert words in line and type(exc).__name__ not in line


def test_debug_still_shows_the_traceback(capsys, monkeypatch):
    import cli.models

    monkeypatch.setattr(cli.models, "_rows", lambda family: (_ for _ in ()).throw(KeyError("x")))
    from cli import main

    with pytest.raises(KeyError):
        main(["--debug", "models"])


def test_library_warnings_become_one_plain_line(capsys, monkeypatch):
    import warnings

    import cli.models

    def warn(family):
        warnings.warn("glyph \x1b[31mmissing\nsecond line", UserWarning, stacklevel=2)
        return []

    monkeypatch.setattr(cli.models, "_rows", warn)
    code, out, err = gpu_advisor(capsys, "models")
    assert code == 0 and err == "warning: glyph missing second line\n"


@pytest.mark.parametrize("args, expect", [
    (["--min-gpus", "nan"], "--min-gpus"),
    (["--min-gpus", "inf"], "--min-gpus"),
    (["--min-gpus", "-1"], "--min-gpus"),
    (["--limit", "-3"], "--limit"),
    (["--provider", "\x1b[2Jaws"], "--provider"),
    (["--gpu", "H100\n--evil"], "--gpu"),
])
def test_prices_list_refuses_impossible_filters(capsys, args, expect):
    assert expect in refused(capsys, "prices", "list", *args)
