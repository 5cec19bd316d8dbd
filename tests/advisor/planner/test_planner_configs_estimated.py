"""The planner estimates only the configs it may show: an unpinned 8-bit AdamW variant is fitted only where no
standard-AdamW stack of its method fits the same hardware (elsewhere it is dropped unfitted). Counted, not timed."""

from __future__ import annotations

import pytest
from helpers.planner_inputs import MODEL, OFFERS

from advisor.planner import pipeline
from advisor.planner.configs import EIGHT_BIT, STANDARD, Evaluator, Fit, drop_needless_8bit


@pytest.fixture
def evaluated(monkeypatch):
    """Plan with an evaluator that keeps what `configs` returned: (evaluator, configs)."""
    seen = []

    class Keeping(Evaluator):
        def configs(self, *args, **kwargs):
            rows = super().configs(*args, **kwargs)
            seen.append((self, rows))
            return rows

    monkeypatch.setattr(pipeline, "Evaluator", Keeping)

    def run(**kw):
        seen.clear()
        pipeline.plan(MODEL, offers=OFFERS, tokens=20e6, search_remedies=False, **kw)
        return seen[0]

    return run


def test_needless_8bit_variants_are_dropped_without_being_estimated(evaluated):
    evaluator, rows = evaluated()
    kept, dropped = drop_needless_8bit(rows, evaluator.request)
    assert dropped, "this plan has 8-bit variants a standard-AdamW stack makes needless"
    assert evaluator.estimated == len(kept) < len(rows)
    assert all(c.fitted.need1 > 0 for c in kept)  # every config the plan keeps was fitted
    assert all(c.fitted == Fit() and c.timed is None for c in dropped)
    fits = {(c.gpu.name, c.per_node, c.nodes, c.stack.method) for c in kept
            if c.stack.optimizer == STANDARD and c.fitted.max_micro_batch > 0}
    # the 8-bit variants kept are those of hardware where standard AdamW does not fit, fitted like any other
    assert all((c.gpu.name, c.per_node, c.nodes, c.stack.method) not in fits
               for c in kept if c.stack.optimizer in EIGHT_BIT)


def test_a_pinned_optimizer_estimates_every_config(evaluated):
    evaluator, rows = evaluated(pins={"optimizer": "adamw-8bit"})
    assert rows and evaluator.estimated == len(rows)
    assert drop_needless_8bit(rows, evaluator.request)[1] == []
