"""The caching-allocator model (advisor/estimate/allocator.py) against the behaviour its source documents, a
real recorded CPU training trace replayed through it, and `estimate --lengths`.

Source of every rule: pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @ 001074d25084fdb87a799823e395a50f5ec044d3.
"""

from __future__ import annotations

import json

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.estimate.allocator import CachingAllocator, MiB, needed_capacity, replay


def test_freed_block_is_reused_without_a_new_segment():
    # malloc -> get_free_block: a cached block of the pool that fits is handed out before any cudaMalloc.
    a = CachingAllocator()
    x = a.malloc(3 * MiB)
    a.free(x)
    y = a.malloc(3 * MiB)
    assert y.ptr == x.ptr and a.reserved == 20 * MiB


def test_segment_sizes_follow_get_allocation_size():
    # round_size (512 B), get_allocation_size: 2 MiB small segments, 20 MiB for 1-10 MiB, else 2 MiB multiples.
    a = CachingAllocator()
    assert a.malloc(100).size == 512 and a.reserved == 2 * MiB
    a.malloc(5 * MiB)
    assert a.reserved == 22 * MiB
    a.malloc(11 * MiB)  # fits the 15 MiB left of the 20 MiB segment: no new segment
    assert a.reserved == 22 * MiB
    b = CachingAllocator()
    b.malloc(11 * MiB + 1)
    assert b.reserved == 12 * MiB


def test_large_blocks_split_only_when_more_than_1_mib_remains():
    # should_split: large pool splits when remaining > kSmallSize; small pool when >= 512 B.
    a = CachingAllocator()
    assert a.malloc(3 * MiB).size == 3 * MiB  # the 20 MiB segment is split, 17 MiB cached
    assert a.pools[False].keys == [(17 * MiB, 3 * MiB)]
    b = CachingAllocator()
    whole = b.malloc(11 * MiB + 512 * 1024)  # 12 MiB segment, 0.5 MiB left: not split
    assert whole.size == 12 * MiB and b.pools[False].keys == []
    assert CachingAllocator().malloc(1000).next.size == 2 * MiB - 1024  # small pool: split at 512 B


def test_best_fit_takes_the_smallest_cached_block_that_fits():
    # get_free_block: pool.blocks.lower_bound on (size, address).
    a = CachingAllocator()
    big, small = a.malloc(40 * MiB), a.malloc(12 * MiB)
    a.free(big)
    a.free(small)
    assert a.malloc(11 * MiB).ptr == small.ptr


def test_max_split_size_keeps_oversize_blocks_whole_and_apart_from_small_requests():
    # should_split (size < max_split_size) and get_free_block's oversize rules.
    a = CachingAllocator(max_split_size=32 * MiB)
    big = a.malloc(64 * MiB)
    a.free(big)
    small = a.malloc(12 * MiB)  # an oversize cached block never serves a request under max_split_size
    assert small.ptr != big.ptr and a.reserved == 76 * MiB
    assert a.malloc(60 * MiB).size == 64 * MiB  # within 20 MiB of it: handed out whole


def test_cache_is_released_and_the_allocation_retried_before_oom():
    # malloc: alloc_block fails -> release_cached_blocks -> alloc_block(isRetry) (num_alloc_retries).
    seq = [(1, 60 * MiB), (1, 0), (2, 70 * MiB)]
    r = replay(seq, capacity=100 * MiB)
    assert not r.oom and r.num_alloc_retries == 1 and r.peak_reserved == 70 * MiB
    assert replay(seq).peak_reserved == 130 * MiB  # a large card keeps both: what max_memory_reserved shows


def test_a_split_segment_cannot_be_released():
    # release_blocks frees only blocks that are not split: a live 4 MiB piece (best fit, split from the
    # cached 60 MiB segment) pins it.
    seq = [(1, 60 * MiB), (1, 0), (2, 4 * MiB), (3, 70 * MiB)]
    assert replay(seq, capacity=100 * MiB).oom
    assert not replay(seq, capacity=130 * MiB).oom


def test_expandable_segments_grow_in_20_mib_pages_instead_of_new_segments():
    # Note [Expandable Segments]; try_allocate_expandable_block / map_block (kLargeBuffer pages).
    seq = [(1, 60 * MiB), (1, 0), (2, 70 * MiB)]
    r = replay(seq, capacity=100 * MiB, expandable=True)
    assert not r.oom and r.num_alloc_retries == 0 and r.peak_reserved == 80 * MiB
    pinned = [(1, 60 * MiB), (1, 0), (2, 4 * MiB), (3, 70 * MiB)]
    assert not replay(pinned, capacity=100 * MiB, expandable=True).oom  # the freed pages are reused in place


def test_growing_batches_fragment_the_default_allocator_not_expandable_segments():
    seq, tid = [], 0
    for step in (3, 5, 4, 8, 6, 9):  # per step: 30 tensors of the batch's size, freed in reverse
        ids = list(range(tid, tid + 30))
        tid += 30
        seq += [(i, step * 11 * MiB + 12345) for i in ids] + [(i, 0) for i in reversed(ids)]
    default, expandable = needed_capacity(seq, False), needed_capacity(seq, True)
    assert default[1].peak_reserved > 1.3 * default[1].peak_allocated
    assert expandable[1].peak_reserved < 1.02 * expandable[1].peak_allocated


# ----------------------------------------------------------------------------- a recorded CPU trace

SCALE = 2048  # tiny-model bytes x 2048: blocks of KiB to tens of MiB, both pools


@pytest.fixture(scope="module")
def traces():
    pytest.importorskip("transformers")
    from benchmarks.alloc_trace import record

    return {"fixed": record([90, 90, 90, 90]), "variable": record([24, 61, 37, 90])}


def test_recorded_training_steps_replay_through_the_allocator_model(traces):
    from benchmarks.alloc_trace import replayed

    fixed, variable = ({e: replayed(traces[k][0], SCALE, e) for e in (False, True)} for k in ("fixed", "variable"))
    for events, cpu_peak in traces.values():
        assert sum(1 for _, n in events if n) > 1000  # a real step: thousands of tensors
        r = replayed(events, SCALE, False)
        assert r["allocated"] >= cpu_peak * SCALE  # rounding only adds
        assert r["allocated"] <= r["needed"] <= r["shows"]
    gap_default = variable[False]["needed"] - fixed[False]["needed"]
    gap_expandable = variable[True]["needed"] - fixed[True]["needed"]
    assert gap_default > 0  # variable lengths need more than the same steps at one length
    assert gap_expandable < gap_default / 2  # expandable segments take most of it back


# ----------------------------------------------------------------------------- estimate --lengths

BASE = ["estimate", "llama-3.2-1b", "--method", "lora", "--grad-checkpointing", "--seq-len", "4096",
        "--grad-accum", "1", "--format", "json"]


def _reserved(capsys, *extra) -> dict:
    code, out, err = gpu_advisor(capsys, *BASE, *extra)
    assert code == 0, err
    return json.loads(out)


def test_variable_lengths_need_more_reserved_growing_with_spread_less_with_expandable_segments(capsys):
    std = ("--loss", "standard")  # the full fp32 logits are the buffers whose sizes fragment the cache
    narrow = _reserved(capsys, *std, "--lengths", "1500,100,8192", "--no-expandable-segments")
    wide = _reserved(capsys, *std, "--lengths", "1500,2000,8192", "--no-expandable-segments")
    wide_exp = _reserved(capsys, *std, "--lengths", "1500,2000,8192")
    for d in (narrow, wide, wide_exp):
        r = d["reserved"]
        assert d["peak_reserved"] == r["needed"] and d["device_total"] > r["needed"]
        assert r["needed"] >= d["peak_allocated"] and r["shows"] >= r["needed"]
    fixed = narrow["reserved"]["fixed_shape_needed"]
    assert narrow["reserved"]["needed"] > fixed
    assert wide["reserved"]["needed"] > narrow["reserved"]["needed"]
    assert wide_exp["reserved"]["expandable_segments"] and not wide["reserved"]["expandable_segments"]
    gap = wide["reserved"]["needed"] - wide["reserved"]["fixed_shape_needed"]
    gap_exp = wide_exp["reserved"]["needed"] - wide_exp["reserved"]["fixed_shape_needed"]
    assert gap_exp < gap / 4


def test_without_lengths_the_estimate_says_it_used_fixed_shapes(capsys):
    d = _reserved(capsys)
    assert d["reserved"] is None and d["assumptions"]["lengths"].startswith("fixed shapes")


def test_a_tokens_histogram_file_drives_the_replay(capsys, tmp_path):
    f = tmp_path / "lengths.json"
    f.write_text(json.dumps({"stats": {"histogram": [[1, 512, 300], [512, 2048, 100], [2048, 8192, 20]]}}))
    d = _reserved(capsys, "--lengths", str(f))
    assert d["reserved"]["lengths"].startswith("histogram of 420 rows")


@pytest.mark.parametrize("bad", ["1,2", "0,5,10", "abc,1,2", "nan,1,5", "9,1,5", "x" * 5000, "{}", "[[1,-2,3]]",
                                 "huge", "dir"])
def test_bad_lengths_are_refused_in_one_line(capsys, tmp_path, bad):
    if bad in ("{}", "[[1,-2,3]]"):
        (tmp_path / "h.json").write_text(json.dumps({"histogram": json.loads(bad)} if bad != "{}" else {}))
        bad = str(tmp_path / "h.json")
    elif bad == "huge":
        (tmp_path / "big.json").write_bytes(b" " * (17 * 2**20))
        bad = str(tmp_path / "big.json")
    elif bad == "dir":
        bad = str(tmp_path)
    code, _, err = gpu_advisor(capsys, *BASE, "--lengths", bad)
    line = one_line_error(code, err)
    assert "--lengths" in line and len(line) < 200


def test_accuracy_benchmark_reports_allocated_and_reserved_errors_apart():
    from benchmarks import accuracy
    from benchmarks.calibration_rows import MEASURED_CSV, load_rows

    rows = [r for r in load_rows(MEASURED_CSV) if r.included]
    pick = [r for r in rows if r.kind == "allocated"][:3] + [r for r in rows if r.kind == "unknown"][:3]
    s = accuracy.evaluate(pick, accuracy.default_estimator(), None, accuracy.default_replay())
    assert s["by_kind"]["allocated"]["rows"] == 3 and s["by_kind"]["unknown"]["rows"] == 3
    assert s["by_kind_replay"]["unknown"]["rows"] == 3 and "allocated" not in s["by_kind_replay"]
    for r in s["results"]:
        assert (accuracy.REPLAY in r["errors"]) == (r["kind"] == "unknown")
    text = accuracy.render(s, MEASURED_CSV, "2026-12-01")
    assert "| allocated | peak_allocated | 3 |" in text and "| unknown | allocator replay" in text
