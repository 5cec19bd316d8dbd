"""Record the real allocation and free sequence of training steps on the CPU, for the allocator model.

    python benchmarks/alloc_trace.py [--lengths 24,61,37,90] [--scale 2048]

prints, for fixed and variable lengths, the recorded sequence and the estimator's synthetic one
(advisor/estimate/alloc_trace.py) replayed through the allocator model, with and without expandable segments.

torch.profiler with profile_memory=True records every allocation and free of the CPU allocator
as a "[memory]" event with its address and signed byte count (torch/profiler/profiler.py,
export_chrome_trace); pairing frees with allocations by address gives the sequence of a real
transformers + AdamW step of a tiny random-initialised Llama: the order and lifetimes the
estimator's synthetic sequence (advisor/estimate/alloc_trace.py) follows. `replayed()` runs it through the
caching-allocator model with every size multiplied by `scale` (to reach GPU-sized blocks).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from advisor.estimate.allocator import Event, needed_capacity  # noqa: E402


def tiny_llama():
    """A 2-layer Llama (random weights, no download) with dims that make every tensor's size distinct."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=320, max_position_embeddings=512)
    return LlamaForCausalLM(cfg)


def record(lengths: list[int], micro_batch: int = 2) -> tuple[list[Event], int]:
    """(events, peak bytes the CPU allocator reported) of one AdamW training step per length, the
    gradients set to None between steps as the Trainer does. Allocations made before the profiler
    starts (the model's weights) are not in the sequence."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for s in lengths:
            ids = torch.randint(0, model.config.vocab_size, (micro_batch, s))
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return pair(e["args"] for e in trace["traceEvents"] if e.get("name") == "[memory]")


def pair(memory_events) -> tuple[list[Event], int]:
    """Allocation/free events keyed by a fresh id per allocation (an address is reused after a free);
    frees of blocks allocated before recording are dropped."""
    live: dict[int, int] = {}
    events: list[Event] = []
    next_id, current, peak = 1, 0, 0
    for a in sorted(memory_events, key=lambda a: a.get("Ev Idx", 0)):
        if a.get("Device Type", 0) != 0:
            continue
        addr, n = a["Addr"], a["Bytes"]
        if n > 0:
            live[addr] = next_id
            events.append((next_id, n))
            next_id += 1
            current += n
            peak = max(peak, current)
        elif addr in live:
            events.append((live.pop(addr), 0))
            current += n
    return events, peak


def scaled(events: list[Event], scale: int) -> list[Event]:
    return [(i, n * scale) for i, n in events]


def replayed(events: list[Event], scale: int, expandable: bool) -> dict:
    """needed / shown reserved and the allocated peak of the scaled sequence."""
    needed, shows = needed_capacity(scaled(events, scale), expandable)
    return {"needed": needed, "shows": shows.peak_reserved, "allocated": shows.peak_allocated}


def synthetic(lengths: list[int], micro_batch: int = 2) -> list[Event]:
    """The estimator's own sequence (advisor.estimate.alloc_trace.step_events) for the same tiny model and steps:
    what `estimate --lengths` replays, here beside the recorded one."""
    import tempfile

    from advisor.estimate.alloc_trace import _sizes, step_events, tensor_counts
    from advisor.estimate.engine import Engine
    from advisor.model.catalog import load_model
    from advisor.stacks import Shape, Stack

    with tempfile.TemporaryDirectory() as tmp:
        tiny_llama().config.save_pretrained(tmp)
        spec = load_model(str(Path(tmp) / "config.json"))
    engine, stack = Engine.of(spec), Stack(loss="standard", method="full", precision="fp32", optimizer="adamw", attention="sdpa")
    at = lambda s: engine.memory(stack, Shape(micro_batch=micro_batch, seq_len=s, grad_accum=1))  # noqa: E731
    return step_events(_sizes(at, tuple(lengths)), spec.num_hidden_layers, True, *tensor_counts(engine.arch, stack))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="24,61,37,90", help="sequence length of each recorded step")
    ap.add_argument("--scale", type=int, default=2048, help="multiply every recorded size by this")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    for name, steps in (("fixed", [max(lengths)] * len(lengths)), ("variable", lengths)):
        events, peak = record(steps)
        for label, seq in (("recorded", events), ("synthetic", synthetic(steps))):
            for exp in (False, True):
                r = replayed(seq, args.scale, exp)
                print(f"{name:8s} {label:9s} expandable={exp!s:5s} events={len(seq):5d}  allocated="
                      f"{r['allocated'] / 2**20:8.1f}  needed={r['needed'] / 2**20:8.1f}  shows={r['shows'] / 2**20:8.1f} MiB"
                      f"  (slack needed {(r['needed'] - r['allocated']) / r['allocated']:+.1%}, shows "
                      f"{(r['shows'] - r['allocated']) / r['allocated']:+.1%})")
        print(f"{name:8s} CPU allocator peak x scale: {peak * args.scale / 2**20:.1f} MiB (weights not recorded)")


if __name__ == "__main__":
    main()
