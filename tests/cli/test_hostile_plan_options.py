"""Plan options that were dropped, rounded or explained with an internal record: each is now refused at the
edge, once, in one line naming the option the user typed, before any planning (the planner is counted and
must not run), or read exactly as given. Messages print sane figures (no 300-digit percentage, no dump of a
plan's fields)."""

from __future__ import annotations

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.errors import BadInput
from advisor.planner import PlanRequest
from advisor.planner.request import MIN_HOURS, MIN_USD

MODEL = "llama-3.2-1b"


@pytest.fixture()
def plans(monkeypatch):
    """How many times the planner ran (a refusal at the edge leaves it at 0)."""
    import cli.plan

    calls = []
    real = cli.plan.planner.plan
    monkeypatch.setattr(cli.plan.planner, "plan", lambda request: calls.append(request) or real(request))
    return calls


def refused(capsys, plans, *args) -> str:
    line = one_line_error(*gpu_advisor(capsys, "plan", "--model", MODEL, *args, "--format", "json")[::2])
    assert plans == [], "the planner ran before the refusal"
    for leak in ("ModelInfo(", "Offer(", "shape.", "{'", "--input"):  # no internal record in the sentence
        assert leak not in line, line
    return line


# --------------------------------------------------------------------------- silently dropped or rounded

@pytest.mark.parametrize("args, names", [
    (["--tokens", "10M", "--examples", "<script>"], "--examples"),
    (["--tokens", "10M", "--avg-tokens", "nan"], "--avg-tokens"),
    (["--tokens", "10M", "--examples", "-5"], "--examples"),
    (["--tokens", "10M", "--examples", "1000", "--avg-tokens", "500"], "--examples"),  # both ways: not both
    (["--examples", "1e400", "--avg-tokens", "10"], "--examples"),
    (["--examples", "2.5", "--avg-tokens", "10"], "--examples"),
    (["--tokens", "10M", "--global-batch-tokens", "1"], "--global-batch-tokens"),
    (["--tokens", "10M", "--global-batch-tokens", "2047"], "--global-batch-tokens"),
    (["--tokens", "10M", "--regions", ",,,"], "--regions"),
    (["--tokens", "10M", "--providers", " , "], "--providers"),
    (["--tokens", "10M", "--gpu", ","], "--gpu"),
    (["--objective", "dpo", "--pairs", "1.5"], "--pairs"),
    (["--objective", "grpo", "--prompts", "2.5"], "--prompts"),
    (["--objective", "dpo", "--pairs", "10k", "--tokens", "10M"], "--pairs"),
])
def test_an_option_is_never_dropped_or_rounded(capsys, plans, args, names):
    line = refused(capsys, plans, *args)
    assert line.startswith(f"error: {names}:"), line


def test_global_batch_tokens_below_one_row_names_the_row_it_needs(capsys, plans):
    line = refused(capsys, plans, "--tokens", "10M", "--global-batch-tokens", "1")
    assert "--seq-len 2,048" in line and "at least 2,048" in line


def test_whole_counts_are_read_exactly():
    exact = PlanRequest.from_options({"model": MODEL, "examples": "2.5k", "avg_tokens": "400"})
    assert exact.tokens == 2_500 * 400
    dpo = PlanRequest.from_options({"model": MODEL, "objective": "dpo", "pairs": 1000})
    assert dpo.tokens == 1000 * 2 * dpo.seq_len
    wide = PlanRequest.from_options({"model": MODEL, "tokens": "10M", "global_batch_tokens": "4096"})
    assert wide.sequences_per_step == 2  # whole rows of --seq-len 2048
    assert PlanRequest.from_options({"model": MODEL, "tokens": "10M", "regions": "EU,"}).regions == ("EU",)


# --------------------------------------------------------------------------- messages

@pytest.mark.parametrize("args, names, says", [
    (["--budget=1e-300"], "--budget", f"at least {MIN_USD} USD"),
    (["--budget", "0.001"], "--budget", "at least"),
    (["--deadline", "1e-300"], "--deadline", "at least one minute"),
    (["--deadline", "0.0000001h"], "--deadline", "at least one minute"),
    (["--deadline", "0.5m"], "--deadline", "at least one minute"),
    (["--global-batch-tokens", "1T"], "--global-batch-tokens", "at most 1,048,576 rows"),
])
def test_a_value_below_a_sane_minimum_or_past_the_shapes_is_one_plain_line(capsys, plans, args, names, says):
    line = refused(capsys, plans, "--tokens", "10M", *args)
    assert line.startswith(f"error: {names}:") and says in line, line
    assert max(len(w) for w in line.split()) < 40, line  # no 300-digit figure


def test_the_minimums_are_a_cent_and_a_minute():
    assert MIN_USD == 0.01 and MIN_HOURS == pytest.approx(1 / 60)
    assert PlanRequest.from_options({"model": MODEL, "tokens": "1M", "budget": 0.01, "deadline": "1m"}).budget == 0.01


@pytest.mark.parametrize("value", ["us-east-1\n", "us-east-1\x85", "us-east-1\u2028", "\u202eEU"])
def test_a_control_character_in_regions_is_refused_before_the_plan(capsys, plans, value):
    line = refused(capsys, plans, "--tokens", "10M", "--regions", value)
    assert line.startswith("error: --regions: the control character U+")


@pytest.mark.parametrize("option", ["--model", "--providers", "--gpu", "--methods", "--discount"])
def test_every_text_option_refuses_a_line_break_under_its_own_name(capsys, plans, option):
    args = ["--tokens", "10M", option, "x\ny"]
    line = one_line_error(*gpu_advisor(capsys, "plan", *(["--model", MODEL] if option != "--model" else []), *args,
                                       "--format", "json")[::2])
    assert plans == []
    assert line.startswith(f"error: {option}:"), line


def test_pairs_past_the_token_limit_name_pairs_not_tokens(capsys, plans):
    line = refused(capsys, plans, "--objective", "dpo", "--pairs", "1e12")
    assert line.startswith("error: --pairs:") and "--tokens" not in line and "at most 1e15 tokens" in line


def test_prompts_past_the_token_limit_name_prompts(capsys, plans):
    line = refused(capsys, plans, "--objective", "grpo", "--prompts", "1e12")
    assert line.startswith("error: --prompts:")


def test_a_library_caller_gets_the_same_sentences():
    for fields, names in [({"tokens": "1M", "budget": 1e-300}, "--budget"),
                          ({"tokens": "1M", "regions": ",,,"}, "--regions"),
                          ({"tokens": "1M", "global_batch_tokens": 1}, "--global-batch-tokens")]:
        with pytest.raises(BadInput, match=f"^{names}:"):
            PlanRequest.from_options({"model": MODEL, **fields})


def test_a_query_value_is_refused_under_its_query_name():
    from cli.serve_query import parse, split

    for query, name in [("model=llama-3.2-1b&examples=1e400&avg-tokens=10", "examples: "),
                        ("model=llama-3.2-1b&tokens=10M&examples=1e400", "examples: "),
                        ("model=llama-3.2-1b&tokens=10M&regions=%2C%2C%2C", "regions: "),
                        ("model=llama-3.2-1b&tokens=10M&regions=us-east-1%0A", "regions: ")]:
        with pytest.raises(BadInput) as exc:
            parse(split(query), [])
        assert str(exc.value).startswith(name), exc.value
