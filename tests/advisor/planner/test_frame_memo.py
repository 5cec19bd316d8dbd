"""Figures of one priced frame computed once per frame (advisor/planner/frame_memo.py): a plan asks each of them
once however many selection rounds it runs, another frame (even an equal one) is computed afresh, the answers
cannot be edited in place, and nothing is kept once the frame is gone. Work is counted, never timed."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers.planner_inputs import MODEL, OFFERS

from advisor.planner import costing, frame_memo, offers, pipeline, ranking
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest


@pytest.fixture()
def counts(monkeypatch):
    monkeypatch.setattr(frame_memo, "COUNTS", dict.fromkeys(frame_memo.COUNTS, 0))
    return frame_memo.COUNTS


def _priced():
    """The priced frame a plan with --spot ranks (the pipeline's own two stages)."""
    request = PlanRequest(model=MODEL, tokens=20e6, spot=True)
    return offers.priced_tiers(offers.prepare(OFFERS, request, Rejections()), True)


def test_each_figure_is_computed_once_per_frame_and_equals_the_plain_computation(counts):
    priced = _priced()
    first = ranking.offer_identity(priced), ranking.spot_suspect(priced), costing.offer_billing(priced)
    again = ranking.offer_identity(priced), ranking.spot_suspect(priced), costing.offer_billing(priced)
    assert counts == {"computed": 3, "hits": 4}  # offer_identity reads the billing terms too: the first hit
    assert all(a is b for a, b in zip(first, again))
    plain = (ranking.offer_identity.__wrapped__(priced), ranking.spot_suspect.__wrapped__(priced),
             costing.offer_billing.__wrapped__(priced))
    assert np.array_equal(first[0], plain[0]) and np.array_equal(first[1], plain[1])
    assert all(np.array_equal(a, b) for a, b in zip(first[2], plain[2]))


def test_an_equal_frame_of_its_own_is_computed_afresh_and_answers_are_read_only(counts):
    priced, twin = _priced(), _priced()
    ours = ranking.spot_suspect(priced)
    ranking.spot_suspect(twin)
    assert counts["computed"] == 2 and counts["hits"] == 0
    with pytest.raises(ValueError):
        ours[0] = not ours[0]


def test_nothing_is_kept_once_the_frame_is_gone(counts):
    priced = _priced()
    ranking.undated_spot(priced)
    key = id(priced)
    assert key in frame_memo._MEMO
    del priced
    gc.collect()
    assert key not in frame_memo._MEMO


def test_a_plan_with_spot_asks_each_figure_once_whatever_the_rounds(counts):
    pipeline.plan(MODEL, offers=OFFERS, tokens=20e6, spot=True, search_remedies=False)
    # offer identity, suspect and undated spot prices and billing of the priced frame, billing of the pruned one
    assert counts["computed"] <= 5 and counts["hits"] >= 1
