"""The DPO / GRPO estimate agrees, term by term, with what a real TRL step holds on the CPU.

benchmarks/rl_census.py runs one step of trl 1.16.0's DPOTrainer and GRPOTrainer (transformers generate, no
vLLM) on a tiny random Llama under the SFT harness's saved-tensor recorder and counts model states, the reference
model, saved activations (TRL's fused log-prob head and the loss terms among them), the KV cache at the end of
generation and GRPO's buffered batch. Each term must be within the SFT census's tolerance (2 % model states, 10 %
the rest); leaving one modelled term out of the estimate must fail that check. vLLM's share cannot run here: it is
modelled from vLLM's source and checked by scripts/device_check.sh on a GPU.
"""

from __future__ import annotations

import functools

import pytest

from benchmarks.rl_census import CASES, estimated, measure, mismatches

pytestmark = pytest.mark.slow
BY_NAME = {c.name: c for c in CASES}


@functools.cache
def _measured(name: str):
    return measure(BY_NAME[name])


@pytest.mark.parametrize("name", list(BY_NAME))
def test_estimate_matches_a_real_trl_step_term_by_term(name):
    m = _measured(name)
    assert not mismatches(m.terms, estimated(BY_NAME[name]))


def test_dpo_runs_chosen_and_rejected_through_the_policy_together():
    case = BY_NAME["dpo lora (reference = adapter off)"]
    rows, width = _measured(case.name).rows_shape
    assert rows == 2 * case.shape.micro_batch and width == case.shape.seq_len


def test_grpo_trains_on_prompt_plus_completion_of_each_completion():
    case = BY_NAME["grpo full beta 0 (generate)"]
    assert _measured(case.name).rows_shape == (case.shape.micro_batch, case.prompt + case.completion)


@pytest.mark.parametrize("name, dropped, term", [
    ("dpo full (reference = frozen copy)", "weights.reference", "reference"),
    ("dpo lora (reference = adapter off)", "activations.fused_head.hidden", "fused_head"),
    ("dpo lora (reference = adapter off)", "activations.dpo_loss", "loss_terms"),
    ("grpo lora beta 0.04 (generate, adapter-off reference pass)", "generation.kv_cache", "kv_cache"),
    ("grpo lora beta 0.04 (generate, adapter-off reference pass)", "overhead.grpo_buffered_batch", "buffered_batch"),
    ("grpo lora beta 0.04 (generate, adapter-off reference pass)", "activations.grpo_loss", "loss_terms"),
    ("grpo full beta 0 (generate)", "activations.layers.mlp.gate_act_up", "activations"),
])
def test_leaving_a_modelled_term_out_fails_the_census(name, dropped, term):
    m = _measured(name)
    assert term in mismatches(m.terms, estimated(BY_NAME[name], drop=dropped))
