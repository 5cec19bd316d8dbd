"""The closed sets of a training stack (methods, shardings, precisions, offloads, ...) are defined once
(advisor/stacks.py Literal types) and asked about through predicates on Stack (`is_zero`, `is_adapter`,
`mixed_precision`, ...): the CLI's choices, the pydantic fields and the code read the same definition, and the
JSON a stack serialises to is the plain strings it always was."""

from __future__ import annotations

import itertools
import json
import typing

import pytest

from advisor import stacks
from advisor.stacks import Stack
from cli.options import _SPECS

COMBINATIONS = []
for method, sharding, precision, offload in itertools.product(stacks.METHODS, stacks.SHARDINGS, stacks.PRECISIONS,
                                                               stacks.OFFLOADS):
    try:
        COMBINATIONS.append(Stack(method=method, sharding=sharding, precision=precision, offload=offload, gpus=4))
    except ValueError:  # StackError, or pydantic wrapping it
        pass


def test_the_valid_combinations_are_many():
    assert len(COMBINATIONS) > 100


@pytest.mark.parametrize("s", COMBINATIONS, ids=lambda s: s.label())
def test_each_predicate_says_what_its_name_says(s):
    assert s.is_full == (s.method == "full") and s.is_adapter == (s.method in ("lora", "qlora"))
    assert s.is_qlora == (s.method == "qlora")
    assert s.is_zero == s.sharding.startswith("zero")
    assert s.is_distributed == (s.sharding != "none")
    # ZeRO paper (Rajbhandari et al. 2020) §5: stage 1 shards optimizer states, 2 + gradients, 3 + parameters
    assert (s.is_sharded, s.shards_grads, s.shards_params) == {
        "none": (False, False, False), "ddp": (False, False, False), "zero1": (True, False, False),
        "zero2": (True, True, False), "zero3": (True, True, True), "fsdp": (True, True, True)}[s.sharding]
    assert (s.shard_degree_optimizer, s.shard_degree_grads, s.shard_degree_params) == tuple(
        4 if on else 1 for on in (s.is_sharded, s.shards_grads, s.shards_params))
    assert s.mixed_precision == s.precision.startswith("amp-")
    assert s.fp32_weights == (s.precision in ("fp32", "amp-bf16", "amp-fp16"))
    assert s.half_weights == (s.precision in ("bf16", "fp16"))
    assert s.offloads_params == (s.offload in ("params", "both"))
    assert s.offloads_optimizer == (s.offload in ("optimizer", "both"))


def test_every_cli_choice_is_its_field_s_closed_set():
    """`--precision` offers exactly Stack.precision's Literal values, and so on for every closed set."""
    for decl, field, kind, _, _ in _SPECS:
        annotation = Stack.model_fields[field].annotation
        if typing.get_origin(annotation) is typing.Literal:
            assert list(kind.choices) == list(typing.get_args(annotation)), decl


def test_a_stack_serialises_to_the_plain_strings():
    s = Stack(method="qlora", sharding="zero3", precision="amp-bf16", offload="optimizer", gpus=8)
    data = json.loads(s.model_dump_json())
    assert (data["method"], data["sharding"], data["precision"], data["offload"]) == ("qlora", "zero3", "amp-bf16",
                                                                                     "optimizer")
    assert Stack.model_validate_json(s.model_dump_json()) == s
