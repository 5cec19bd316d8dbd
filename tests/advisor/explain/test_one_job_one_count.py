"""One job, one token count (issue 46): the workload line and the managed-service line of a plan name the same
figure, the tokens the job trains on (for DPO, through the policy: each pair's chosen and rejected rows), and a
DPO service's billed count is named as what it is (the pairs' file tokens), never as "the same" tokens."""

from __future__ import annotations

import json

import pytest
from helpers.cli_run import gpu_advisor

from advisor.explain.card import decision_card
from advisor.explain.summary import summary_lines
from advisor.results import Plan
from advisor.units import MILLION, tokens

TODAY = "2026-12-01"


def planned(capsys, monkeypatch, *args: str) -> tuple[Plan, str]:
    """(the plan, its terminal text) from the real CLI, offline, today pinned."""
    monkeypatch.setenv("GPU_ADVISOR_TODAY", TODAY)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = gpu_advisor(capsys, "plan", *args, "--format", "json")
    assert code == 0, err
    plan = Plan.model_validate(json.loads(out))
    code, text, err = gpu_advisor(capsys, "plan", *args)
    assert code == 0, err
    return plan, text


def managed_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("A managed service")]
    assert len(lines) == 1, text
    return lines[0]


def test_a_dpo_plan_says_one_token_count_for_its_job(capsys, monkeypatch):
    plan, text = planned(capsys, monkeypatch, "--model", "meta-llama/Llama-3.1-8B", "--objective", "dpo",
                         "--pairs", "20000")
    w = plan.workload
    job = int(w["train_tokens"])
    assert job == 20_000 * 2 * w["seq_len"]  # each pair's two rows of seq_len through the policy
    said = f"{job:,} training tokens through the policy"
    head = next(line for line in text.splitlines() if line.startswith(plan.model.name + ":"))
    assert said in head
    m = plan.managed_alternatives[0]
    billed = m.billed_m_tokens * MILLION
    assert billed < job  # a DPO service bills the pairs' files (prompt once), not the policy's two rows
    line = managed_line(text)
    assert f"for the same {said}," in line  # the job's one count ...
    assert f"bills as {tokens(billed)} file tokens" in line  # ... and the billed one, named as billed
    assert f"the same {tokens(billed)}" not in line
    assert decision_card(plan)["managed"] in summary_lines(plan)  # the card and the terminal say it alike


def test_an_sft_plan_bills_the_tokens_it_trains_on(capsys, monkeypatch):
    plan, text = planned(capsys, monkeypatch, "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M")
    m = plan.managed_alternatives[0]
    assert m.billed_m_tokens * MILLION == pytest.approx(plan.workload["train_tokens"])
    assert f"{int(plan.workload['train_tokens']):,} training tokens," in text
    assert f"for the same {tokens(plan.workload['train_tokens'])} tokens " in managed_line(text)
