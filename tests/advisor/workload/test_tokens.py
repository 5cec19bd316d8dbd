"""`gpu-advisor tokens` and `plan --dataset`: a user's dataset counted in the model's own tokens.

Real data made here: JSONL, Parquet, CSV, a JSON array and a `datasets` folder with known texts, a
tokenizer built with the `tokenizers` library (saved as tokenizer.json: nothing downloaded) and a
transformers tokenizer folder with a chat template. Every figure is checked against a direct
computation with the same tokenizer (brute force over every batch for the padding waste).
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

pa = pytest.importorskip("pyarrow")
pytest.importorskip("tokenizers")

WORDS = "the quick brown fox jumps over a lazy dog while birds sing".split()
# Twelve rows of 1..45 words: lengths spread enough that truncation and padding both matter.
TEXTS = [" ".join(itertools.islice(itertools.cycle(WORDS), n)) for n in (3, 45, 7, 12, 30, 1, 18, 9, 25, 4, 40, 15)]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s>{% endfor %}")
CHATS = [[{"role": "user", "content": "the quick fox"}, {"role": "assistant", "content": "a lazy dog " * k}]
         for k in (1, 4, 2, 9)]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "<|user|>": 3, "<|assistant|>": 4,
             **{w: i + 5 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokens")
    tok = _tokenizer()
    tok.save(str(root / "tokenizer.json"))
    chat = root / "chat_tok"
    chat.mkdir()
    tok.save(str(chat / "tokenizer.json"))
    (chat / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "[UNK]", "chat_template": CHAT_TEMPLATE}))
    (root / "d.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)))
    (root / "d.json").write_text(json.dumps([{"text": t} for t in TEXTS]))
    import pyarrow.csv
    import pyarrow.parquet

    table = pa.table({"text": TEXTS, "id": list(range(len(TEXTS)))})
    pyarrow.parquet.write_table(table, root / "d.parquet")
    pyarrow.csv.write_csv(table, root / "d.csv")
    (root / "chat.jsonl").write_text("".join(json.dumps({"messages": m}) + "\n" for m in CHATS))
    (root / "sharegpt.jsonl").write_text("".join(json.dumps({"conversations": [
        {"from": {"user": "human", "assistant": "gpt"}[x["role"]], "value": x["content"]} for x in m]}) + "\n"
        for m in CHATS))
    (root / "empty.jsonl").write_text("")
    (root / "broken.jsonl").write_text('{"text": "a"}\n{"text": \n')
    big = [" ".join(WORDS[: 1 + (i * 7919) % len(WORDS)] * (1 + i % 5)) for i in range(3000)]
    (root / "big.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in big))
    lengths = [len(tok.encode(t).ids) for t in TEXTS]
    return {"root": root, "tok": tok, "lengths": lengths, "big": [len(tok.encode(t).ids) for t in big]}


def _count(capsys, *args) -> dict:
    code, out, err = gpu_advisor(capsys, "tokens", *args, "--format", "json")
    assert code == 0 and err == "", err  # nothing on stderr: no library progress bars or logs
    return json.loads(out)


def _nearest_rank(values, p):
    s = sorted(values)
    return s[math.ceil(p / 100 * len(s)) - 1]


@pytest.mark.parametrize("name", ["d.jsonl", "d.parquet", "d.csv", "d.json"])
def test_counts_are_the_tokenizers_exact_counts(capsys, data, name):
    root, lengths = data["root"], data["lengths"]
    seq = 20
    got = _count(capsys, root / name, "--tokenizer", root / "tokenizer.json", "--seq-len", seq)
    s = got["stats"]
    assert got["field"] == "text" and s["exact"] and s["rows"] == s["counted_rows"] == len(TEXTS)
    assert s["total_tokens"] == sum(lengths)  # every word one token, plus <s>
    assert sum(lengths) == sum(len(t.split()) + 1 for t in TEXTS)
    assert s["kept_tokens"] == sum(min(n, seq) for n in lengths)
    assert s["truncated_rows_share"] == pytest.approx(sum(n > seq for n in lengths) / len(lengths))
    assert [s[k] for k in ("p50", "p90", "p99", "max")] == [_nearest_rank(lengths, p) for p in (50, 90, 99, 100)]
    assert s["suggested_seq_len"] == 256  # p99 (46) rounded up to a multiple of 256


@pytest.mark.parametrize("micro_batch", [2, 3, 5])
def test_padding_waste_is_the_average_over_every_random_batch(capsys, data, micro_batch):
    """Random batches (the Trainer's RandomSampler): brute force over every k-subset of rows."""
    root, lengths = data["root"], data["lengths"]
    seq = 30
    kept = [min(n, seq) for n in lengths]
    subsets = list(itertools.combinations(kept, micro_batch))
    expected_padded = len(kept) * sum(max(b) for b in subsets) / len(subsets)
    s = _count(capsys, root / "d.jsonl", "--tokenizer", root / "tokenizer.json", "--seq-len", seq,
               "--micro-batch", micro_batch)["stats"]
    assert s["padded_tokens"] == pytest.approx(expected_padded, rel=1e-9)
    assert s["padding_waste"] == pytest.approx(1 - sum(kept) / expected_padded, rel=1e-9)


def test_group_by_length_pads_only_to_neighbours(capsys, data):
    root, lengths = data["root"], data["lengths"]
    kept = sorted(min(n, 30) for n in lengths)
    expected = sum(max(kept[i:i + 4]) * len(kept[i:i + 4]) for i in range(0, len(kept), 4))
    s = _count(capsys, root / "d.jsonl", "--tokenizer", root / "tokenizer.json", "--seq-len", 30,
               "--micro-batch", 4, "--group-by-length")["stats"]
    assert s["padded_tokens"] == expected
    random_batches = _count(capsys, root / "d.jsonl", "--tokenizer", root / "tokenizer.json", "--seq-len", 30,
                            "--micro-batch", 4)["stats"]
    assert s["padding_waste"] < random_batches["padding_waste"]


@pytest.mark.parametrize("name,field", [("chat.jsonl", "messages"), ("sharegpt.jsonl", "conversations")])
def test_chat_messages_go_through_the_chat_template(capsys, data, name, field):
    from transformers import AutoTokenizer

    root = data["root"]
    auto = AutoTokenizer.from_pretrained(str(root / "chat_tok"))
    rendered = [auto.apply_chat_template(m, tokenize=False) for m in CHATS]
    expected = [len(auto(r, add_special_tokens=False)["input_ids"]) for r in rendered]
    assert expected[0] == 1 + 1 + 3 + 1 + 1 + 3 + 1  # <s>, <|user|> the quick fox </s>, <|assistant|> a lazy dog </s>
    got = _count(capsys, root / name, "--tokenizer", root / "chat_tok")
    assert got["field"] == field and got["kind"] == "messages" and got["rendering"] == "chat template"
    assert got["stats"]["total_tokens"] == sum(expected)


def test_the_tokens_that_carry_loss_are_the_assistants_turns_of_a_chat_and_all_of_plain_text(capsys, data):
    """The template writes no generation prompt, so each assistant turn is its <|assistant|> header, its words and
    its </s> (chat_mask.py, the masking the launch bundle trains with)."""
    root = data["root"]
    got = _count(capsys, root / "chat.jsonl", "--tokenizer", root / "chat_tok")
    assert got["loss_tokens"] == sum(1 + 3 * k + 1 for k in (1, 4, 2, 9))
    assert got["loss_tokens"] < got["stats"]["kept_tokens"]
    text = _count(capsys, root / "d.jsonl", "--tokenizer", root / "tokenizer.json")
    assert text["loss_tokens"] == text["stats"]["kept_tokens"]
    code, out, _ = gpu_advisor(capsys, "tokens", root / "chat.jsonl", "--tokenizer", root / "chat_tok")
    assert code == 0 and "tokens that carry loss" in out and "the assistant's turns" in out


def test_without_a_chat_template_messages_are_joined_and_it_says_so(capsys, data):
    root, tok = data["root"], data["tok"]
    got = _count(capsys, root / "chat.jsonl", "--tokenizer", root / "tokenizer.json")
    joined = ["\n".join(f"{x['role']}: {x['content']}" for x in m) for m in CHATS]
    assert "no chat template" in got["rendering"]
    assert got["loss_tokens"] is None and "no chat template" in got["loss_note"]
    assert got["stats"]["total_tokens"] == sum(len(tok.encode(j, add_special_tokens=False).ids) for j in joined)


def test_a_datasets_folder_counts_the_same(capsys, data, tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(folder))
    s = _count(capsys, folder, "--tokenizer", data["root"] / "tokenizer.json")["stats"]
    assert s["total_tokens"] == sum(data["lengths"])


def test_a_big_dataset_is_sampled_with_an_error_bound_that_holds(capsys, data):
    root, truth = data["root"], data["big"]
    s = _count(capsys, root / "big.jsonl", "--tokenizer", root / "tokenizer.json", "--sample", 400)["stats"]
    assert not s["exact"] and s["counted_rows"] == 400 and s["rows"] == len(truth)
    assert 0 < s["total_tokens_error"] < 0.2 * sum(truth)
    assert abs(s["total_tokens"] - sum(truth)) <= s["total_tokens_error"]
    exact = _count(capsys, root / "big.jsonl", "--tokenizer", root / "tokenizer.json", "--exact")["stats"]
    assert exact["exact"] and exact["total_tokens"] == sum(truth) and exact["total_tokens_error"] == 0


def test_a_sampled_jsonl_reads_only_its_sample_yet_counts_as_the_full_read(capsys, data, tmp_path):
    """The JSON-lines fast path (only the sampled lines parsed) picks the same rows as reading the whole
    file: the same sample of the same data as Parquet gives the same figures; blank lines are not rows."""
    import pyarrow.parquet

    root = data["root"]
    lines = (root / "big.jsonl").read_text().splitlines()
    (tmp_path / "gaps.jsonl").write_text("\n".join(x + ("\n" if i % 500 == 0 else "") for i, x in enumerate(lines))
                                         + "\n\n")
    texts = [json.loads(x)["text"] for x in lines]
    pyarrow.parquet.write_table(pa.table({"text": texts}), tmp_path / "big.parquet")
    tok = ("--tokenizer", root / "tokenizer.json", "--sample", 300, "--micro-batch", 4)
    fast = _count(capsys, tmp_path / "gaps.jsonl", *tok)["stats"]
    full = _count(capsys, tmp_path / "big.parquet", *tok)["stats"]
    assert fast["rows"] == full["rows"] == len(lines) and fast["counted_rows"] == 300
    assert fast == full


def test_table_output_names_every_figure(capsys, data):
    root = data["root"]
    code, out, err = gpu_advisor(capsys, "tokens", root / "d.jsonl", "--tokenizer", root / "tokenizer.json",
                                 "--seq-len", 20, "--micro-batch", 2)
    assert code == 0, err
    assert f"{sum(data['lengths']):,}" in out and "padding" in out and "suggested seq_len" in out
    assert err == ""  # no progress bar off a terminal


def test_the_length_histogram_is_a_clean_svg_with_the_seq_lens_marked(capsys, data, tmp_path):
    import xml.etree.ElementTree as ET

    root = data["root"]
    out = tmp_path / "lengths.svg"
    code, _, err = gpu_advisor(capsys, "tokens", root / "d.jsonl", "--tokenizer", root / "tokenizer.json",
                               "--seq-len", 20, "--histogram", out)
    assert code == 0 and "wrote" in err
    svg = ET.parse(out).getroot()
    texts = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    assert "seq_len 20" in texts and "suggested 256" not in texts  # 256 lies far right of the longest row (46)
    assert not [e for e in svg.iter() if e.tag.endswith("script") or e.tag.endswith("style")]


@pytest.mark.parametrize("args,needle", [
    (["empty.jsonl"], "no rows"),
    (["broken.jsonl"], "row 2 is not valid JSON"),
    (["missing.jsonl"], "no such file"),
    (["d.jsonl", "--text-field", "body"], "no column 'body'"),
    (["d.jsonl", "--messages-field", "text"], "messages must be"),
    (["d.txt"], "unknown format"),
    (["null.jsonl"], "row 2: the text is empty (null)"),
    (["cut.json"], "cannot be read as a JSON array"),
])
def test_bad_datasets_are_one_line_and_exit_2(capsys, data, args, needle):
    root = data["root"]
    (root / "d.txt").write_text("hello")
    (root / "null.jsonl").write_text('{"text": "a b"}\n{"text": null}\n')
    (root / "cut.json").write_text('[{"text": "a"}, {"text": ')
    args = [root / args[0], *args[1:]]
    line = one_line_error(*gpu_advisor(capsys, "tokens", *args, "--tokenizer", root / "tokenizer.json")[::2])
    assert needle in line


def test_a_tokenizer_that_cannot_be_loaded_is_one_line(capsys, data, tmp_path, monkeypatch):
    root = data["root"]
    (tmp_path / "bad.json").write_text("{}")
    line = one_line_error(*gpu_advisor(capsys, "tokens", root / "d.jsonl", "--tokenizer", tmp_path / "bad.json")[::2])
    assert "not a tokenizers JSON file" in line
    # offline: a Hub id not in the cache, the Hub unreachable (a closed local port): the line says what is missing
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    line = one_line_error(*gpu_advisor(capsys, "tokens", root / "d.jsonl", "--model", "llama-3.2-1b")[::2])
    assert "meta-llama/Llama-3.2-1B" in line and "cannot be reached" in line and "HF_TOKEN" in line
    # a missing dataset is what the line names, before any tokenizer is looked for
    line = one_line_error(*gpu_advisor(capsys, "tokens", root / "missing.jsonl", "--model", "llama-3.2-1b")[::2])
    assert "missing.jsonl: no such file" in line


# ----------------------------------------------------------------------------- plan --dataset

PLAN = ("--model", "llama-3.2-1b", "--gpu", "L4", "--providers", "aws", "--methods", "lora", "--top", "3",
        "--seq-len", "32", "--format", "json")


def _plan(capsys, *args) -> dict:
    code, out, err = gpu_advisor(capsys, "plan", *PLAN, *args)
    assert code == 0, err
    return json.loads(out)


def _hours(plan) -> list[float]:
    return [c["timing"]["train_hours"] for c in plan["candidates"]]


def test_plan_from_a_dataset_equals_plan_from_its_token_count(capsys, data):
    root = data["root"]
    kept = sum(min(n, 32) for n in data["lengths"])
    from_data = _plan(capsys, "--dataset", root / "d.parquet", "--tokenizer", root / "tokenizer.json")
    from_count = _plan(capsys, "--tokens", kept)
    assert from_data["workload"]["tokens"] == kept and from_data["workload"]["dataset_rows"] == len(TEXTS)
    assert _hours(from_data) == _hours(from_count) and _hours(from_data)
    assert [c["timing"]["hours"] for c in from_data["candidates"]] == [c["timing"]["hours"] for c in from_count["candidates"]]


def test_three_epochs_of_a_dataset_take_three_times_as_long(capsys, data):
    """Training hours are whole optimizer steps: on ~2,000 steps of 32 tokens the rounding is below 0.1 %."""
    root = data["root"]
    args = ("--dataset", root / "big.jsonl", "--tokenizer", root / "tokenizer.json", "--global-batch", 1)
    once, thrice = _plan(capsys, *args), _plan(capsys, *args, "--epochs", 3)
    assert thrice["workload"]["train_tokens"] == 3 * once["workload"]["tokens"] > 50_000
    assert _hours(thrice) == pytest.approx([3 * h for h in _hours(once)], rel=1e-3)


def test_plan_dataset_with_tokens_is_refused(capsys, data):
    root = data["root"]
    code, out, err = gpu_advisor(capsys, "plan", *PLAN, "--dataset", root / "d.jsonl", "--tokens", "1M",
                                 "--tokenizer", root / "tokenizer.json")
    assert "not both" in one_line_error(code, err)


def test_a_local_model_folder_brings_its_own_tokenizer(capsys, data, tmp_path):
    """--model FOLDER (config.json beside tokenizer.json, as save_pretrained writes them): no --tokenizer needed."""
    root = data["root"]
    (tmp_path / "tokenizer.json").write_bytes((root / "tokenizer.json").read_bytes())
    (tmp_path / "config.json").write_text("{}")
    s = _count(capsys, root / "d.jsonl", "--model", tmp_path / "config.json")["stats"]
    assert s["total_tokens"] == sum(data["lengths"])


# ----------------------------------------------------------------------------- the report's length histogram

def _bars(svg_text: str) -> int:
    """Bins drawn: the chart gives each bar its own id (reports/charts.py length_histogram_chart)."""
    import re

    return len(set(re.findall(r'id="chart-lengths-length-bar-(\d+)"', svg_text)))


def test_the_report_of_a_dataset_plan_draws_its_length_histogram(capsys, data, tmp_path):
    from advisor.results import Plan
    from reports.render import render

    root = data["root"]
    plan = Plan.model_validate(_plan(capsys, "--dataset", root / "d.jsonl", "--tokenizer", root / "tokenizer.json"))
    # the bins, computed here: width ceil((max + 1) / 24) tokens, from 0 to the longest row
    top = max(data["lengths"])
    width = math.ceil((top + 1) / 24)
    expected = [(b * width, b * width + width - 1, sum(b * width <= n < (b + 1) * width for n in data["lengths"]))
                for b in range(math.ceil((top + 1) / width))]
    assert [tuple(b) for b in plan.workload_lengths.bins] == expected
    assert (plan.workload_lengths.seq_len, plan.workload_lengths.exact) == (32, True)
    saved = tmp_path / "plan.json"
    saved.write_text(plan.model_dump_json())
    for name in ("r.html", "r.md"):  # `gpu-advisor report` loads the saved plan strictly
        code, _, err = gpu_advisor(capsys, "report", saved, "-o", tmp_path / name)
        assert code == 0, err
    html = (tmp_path / "r.html").read_text()
    assert _bars(html) == len(expected) and "Dataset token lengths" in html
    assert "(r-lengths.svg)" in (tmp_path / "r.md").read_text()
    assert _bars((tmp_path / "r-lengths.svg").read_text()) == len(expected)
    # a plan file saved before the field existed still loads, and draws no histogram
    old = Plan.model_validate({k: v for k, v in plan.model_dump(mode="json").items() if k != "workload_lengths"})
    assert old.workload_lengths is None and "chart-lengths" not in render(old, "html")


def test_a_plan_without_a_dataset_has_no_length_histogram(capsys, tmp_path):
    from advisor.results import Plan
    from reports.render import render, write

    plan = Plan.model_validate(_plan(capsys, "--tokens", 100_000))
    assert plan.workload_lengths is None
    assert "chart-lengths" not in render(plan, "html") and "Dataset token lengths" not in render(plan, "md")
    assert tmp_path / "r-lengths.svg" not in write(plan, tmp_path / "r.md")
    assert not (tmp_path / "r-lengths.svg").exists()


@pytest.mark.parametrize("bins", [[], [[0, 9, -1]], [[5, 2, 1]], [[0, 9, 1], [9, 12, 1]],
                                  [[i, i, 1] for i in range(300)]])
def test_a_shared_plan_with_a_malformed_length_histogram_is_refused(capsys, data, bins):
    from advisor.results import Plan

    root = data["root"]
    plan = _plan(capsys, "--dataset", root / "d.jsonl", "--tokenizer", root / "tokenizer.json")
    plan["workload_lengths"]["bins"] = bins
    with pytest.raises(ValueError, match="workload_lengths"):
        Plan.model_validate(plan)


def test_a_plan_file_names_the_dataset_and_config_and_flags_win(capsys, data, tmp_path):
    """-f plan.yaml takes dataset / tokenizer / text_field / from_config like the flags, paths relative to it."""
    root = data["root"]
    for name in ("d.jsonl", "tokenizer.json"):
        (tmp_path / name).write_bytes((root / name).read_bytes())
    # axolotl keys: src/axolotl/utils/schemas/{model,peft,config}.py (commit 067b021c8b87)
    (tmp_path / "ax.yaml").write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 4\n"
                                      "lora_alpha: 8\nsequence_len: 16\n")
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text("dataset: d.jsonl\ntokenizer: tokenizer.json\ntext_field: text\nfrom_config: ax.yaml\n"
                         "seq_len: 24\n")
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(elsewhere)  # the file's paths are read beside it, not in the working folder
        plan = _plan(capsys, "-f", plan_file)  # PLAN's --seq-len 32 wins over the file's 24 and the config's 16
        flagged = _plan(capsys, "-f", plan_file, "--dataset", root / "big.jsonl")
    assert plan["workload"]["dataset_rows"] == len(TEXTS)
    assert plan["workload"]["tokens"] == sum(min(n, 32) for n in data["lengths"])
    assert plan["candidates"] and {c["stack"]["lora_rank"] for c in plan["candidates"]} == {4}
    assert plan["assumptions"]["config_framework"] == "axolotl" and plan["workload_lengths"]
    assert flagged["workload"]["dataset_rows"] == len(data["big"])


def test_the_plan_files_own_fields_win_over_its_config(capsys, data, tmp_path):
    root = data["root"]
    (tmp_path / "ax.yaml").write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 4\n")
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(f"dataset: {root / 'd.jsonl'}\ntokenizer: {root / 'tokenizer.json'}\n"
                         "from_config: ax.yaml\nlora_rank: 8\n")
    plan = _plan(capsys, "-f", plan_file)
    assert {c["stack"]["lora_rank"] for c in plan["candidates"]} == {8}
    plan_file.write_text("dataset: [a, b]\n")
    code, _, err = gpu_advisor(capsys, "plan", *PLAN, "-f", plan_file)
    assert "dataset: expected text" in one_line_error(code, err)


def test_launch_from_a_plan_file_counts_its_dataset_and_trains_on_it(capsys, data, tmp_path):
    """`launch -f plan.yaml` reads the file's dataset keys as `plan -f` does: the bundle is the plan's rank 1,
    and training_args.yaml reads the dataset that was counted (an explicit --dataset still wins)."""
    import yaml

    root = data["root"]
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(f"dataset: {root / 'd.jsonl'}\ntokenizer: {root / 'tokenizer.json'}\n")
    planned = _plan(capsys, "-f", plan_file)["candidates"][0]
    launch = [a for a in PLAN if a not in ("--format", "json")]
    code, _, err = gpu_advisor(capsys, "launch", *launch, "-f", plan_file, "--out", tmp_path / "b")
    assert code == 0, err
    args = yaml.safe_load((tmp_path / "b" / "training_args.yaml").read_text(encoding="utf-8"))
    assert args["data"]["path"] == str(root / "d.jsonl")
    assert args["estimate"]["hours"] == planned["timing"]["hours"]
    assert (args["estimate"]["stack"], args["estimate"]["gpu_model"]) == (planned["label"],
                                                                          planned["offer"]["gpu_model"])
    code, _, err = gpu_advisor(capsys, "launch", *launch, "-f", plan_file, "--out", tmp_path / "c",
                               "--dataset", "mine.jsonl")
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "c" / "training_args.yaml").read_text())["data"]["path"] == "mine.jsonl"


def test_a_padded_dataset_plan_times_each_candidate_at_its_own_micro_batch(capsys, data):
    """--padded: every candidate computes the padding of its own micro-batch (rows × E[longest of mb random
    rows], length_stats.padded_compute, checked by brute force above), not that of micro-batch 1."""
    import numpy as np

    from advisor.workload.length_stats import padded_compute

    root = data["root"]
    args = ("--dataset", root / "big.jsonl", "--tokenizer", root / "tokenizer.json", "--epochs", "20")
    packed, padded = _plan(capsys, *args), _plan(capsys, *args, "--padded")
    assert padded["workload"]["tokens"] == packed["workload"]["tokens"]  # the kept tokens; padding is per candidate
    kept = np.sort(np.minimum(np.asarray(data["big"]), 32))
    twins = {(c["offer"]["instance_type"], c["offer"]["region"], c["label"], c["shape"]["micro_batch"]): c
             for c in packed["candidates"]}
    compared = 0
    for c in padded["candidates"]:
        mb = c["shape"]["micro_batch"]
        twin = twins.get((c["offer"]["instance_type"], c["offer"]["region"], c["label"], mb))
        if twin is None:
            continue
        factor = padded_compute(kept, mb, False) / kept.sum()
        assert mb > 1 and factor > 1.1
        assert c["timing"]["train_hours"] / twin["timing"]["train_hours"] == pytest.approx(factor, rel=2e-3)
        assert any(f"padded batches of {mb} rows compute {factor:.3f}×" in n for n in c["notes"])
        compared += 1
    assert compared


def test_padding_factors_are_one_for_equal_lengths_and_grow_with_the_micro_batch():
    import numpy as np

    from advisor.planner import PlanRequest
    from advisor.workload.length_stats import padding_factors

    equal = padding_factors(np.full(1000, 37), 64, False)
    assert all(f == pytest.approx(1.0, abs=1e-9) and f >= 1.0 for f in equal)
    PlanRequest(model="llama-3.2-1b", tokens=1e6, padded=True, padding=equal)  # accepted as they are
    spread = padding_factors(np.sort(np.arange(1, 1001)), 64, False)
    assert spread[0] == 1.0 and all(a < b for a, b in zip(spread, spread[1:]))
    # E[max of k drawn from 1..N] = k (N + 1) / (k + 1), over the mean (N + 1) / 2: 2k / (k + 1)
    assert spread[-1] == pytest.approx(2 * 64 / 65, rel=1e-9) and spread[1] == pytest.approx(4 / 3, rel=1e-9)
