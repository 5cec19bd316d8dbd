"""`gpu-advisor estimate`: the per-GPU memory breakdown of one model × stack × shape.

Imports nothing heavy (no torch, transformers, pandas or rich) so it answers in well under
half a second; formatting is plain text.
"""

from __future__ import annotations

import json
import shlex

import click

from advisor.api import estimate_memory
from advisor.errors import BadInput
from advisor.estimate.alloc_trace import parse_lengths
from advisor.estimate.engine import Engine, usable_limit
from advisor.estimate.phases import LOAD, STEP
from advisor.model import release
from advisor.model.architecture import default_attention
from advisor.model.catalog import load_model, parse_param_count, synthetic_spec
from advisor.model.spec import MAX_BATCH, MAX_GPUS, MAX_NODES, MAX_SEQ_LEN
from advisor.objective import objective_of, pop_objective
from advisor.planner.configs import precision_for
from advisor.stacks import METHODS, Shape, Stack
from advisor.text import md, plain
from advisor.units import GB, GiB, MiB, count, gb
from cli.objective_options import objective_options
from cli.objective_view import objective_lines, objective_markdown, per_card
from cli.options import FIELDS, choice, stack_options
from cli.output import emit, next_step, output_options
from pricing.gpus import get_gpu


class Finite(click.FloatRange):
    """click.FloatRange that also refuses nan (which compares false with every bound) and inf."""

    def convert(self, value, param, ctx):
        import math

        number = super().convert(value, param, ctx)
        if number is not None and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def build_stack(family: str = "llama", objective=None, transformers=None, **kw):
    """The Stack the estimate options describe (sharding defaults to fsdp on more than one GPU; attention to
    what that transformers release picks)."""
    fields = {k: kw[k] for k in FIELDS if kw.get(k) is not None}
    fields["sharding"] = kw.get("sharding") or ("fsdp" if kw["gpus"] > 1 else "none")
    fields["attention"] = kw.get("attention") or default_attention(family, transformers)
    if objective is not None:
        fields["objective"] = objective
    return Stack(method=kw["method"], gpus=kw["gpus"], **fields)


# The card a colocated vLLM's budget is sized for when `estimate` is given no --gpu (its share is a fraction of the
# card's memory): said on the output.
DEFAULT_VLLM_CARD = "H100"


def _objective(fields: dict, gpu: str | None, seq_len: int, seq_given: bool):
    """The Objective of the estimate and the row length it implies (GRPO: prompt + completion)."""
    objective = objective_of(fields)
    if objective.kind == "grpo":
        if seq_given and "prompt_length" not in fields:
            if seq_len <= objective.max_completion_length:
                raise BadInput(f"--seq-len: {seq_len} leaves no prompt beside --max-completion-length "
                               f"{objective.max_completion_length}.")
            objective = objective.model_copy(update={"prompt_length": seq_len - objective.max_completion_length})
        elif seq_given and seq_len != objective.grpo_seq_len():
            raise BadInput(f"--seq-len: {seq_len} differs from --max-prompt-length + --max-completion-length "
                           f"({objective.grpo_seq_len()}); give one or the other.")
        seq_len = objective.grpo_seq_len()
    if objective.vllm != "none":
        objective = objective.model_copy(update={"card_bytes": int(get_gpu(gpu or DEFAULT_VLLM_CARD).usable_bytes)})
    return objective, seq_len


@click.command()
@click.argument("model", required=False)
@click.option("--params", "params", default=None, help="only a parameter count: 4B, 4e9, 4000M (simple mode)")
@click.option("--method", type=choice(METHODS), default="full", show_default=True)
@stack_options
@objective_options
@click.option("--gpus", type=click.IntRange(min=1, max=MAX_GPUS), default=1, show_default=True, help="data-parallel ranks in total")
@click.option("--batch-size", type=click.IntRange(min=1, max=MAX_BATCH), default=1, show_default=True, help="micro-batch per GPU")
@click.option("--seq-len", type=click.IntRange(min=1, max=MAX_SEQ_LEN), default=2048, show_default=True)
@click.option("--grad-accum", type=click.IntRange(min=1, max=MAX_BATCH), default=None,
              help="micro-batches per optimizer step; 1 = gradients freed before each forward "
                   "(default: unknown, assume accumulation, gradients resident)")
@click.option("--padded/--packed", default=False, show_default=True,
              help="batches padded with an attention mask (SDPA then repeats k/v and copies the mask per layer)")
@click.option("--gpu", default=None, help="check the fit on this GPU (e.g. A10G, H100, A100-80GB)")
@click.option("--nodes", type=click.IntRange(min=1, max=MAX_NODES), default=1, show_default=True,
              help="instances the --gpus are spread over (time model: inter-node traffic)")
@click.option("--internode-gbps", type=Finite(0, 100_000, min_open=True), default=None,
              help="network per node in Gb/s for multi-node timing (default: the GPU class's typical fabric)")
@click.option("--mfu", type=Finite(0, 1, min_open=True), default=None,
              help="kernel efficiency instead of the calibrated table (advisor/data/mfu.json)")
@click.option("--headroom", type=Finite(0, 1, max_open=True), default=0.10, show_default=True,
              help="share of usable memory kept free")
@click.option("--lengths", default=None, metavar="MEAN,STD,MAX|FILE",
              help="row lengths in tokens (or a `tokens --format json` file): replay the caching allocator over "
                   "batches padded to their longest row, cut at --seq-len (default: fixed shapes)")
@click.option("--expandable-segments/--no-expandable-segments", "expandable_segments", default=True, show_default=True,
              help="with --lengths: model PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (as the launch bundle sets) "
                   "or the default allocator")
@click.option("--transformers-version", "transformers_version", default=None, metavar="X.Y[.Z]",
              help="the transformers release that loads and runs the model: its default attention and how a QLoRA "
                   "model is loaded under FSDP / ZeRO-3 (default: the launch bundle's pin)")
@output_options("table", "json", "md", out=True)
def estimate(model, params, batch_size, seq_len, grad_accum, padded, gpu, nodes, internode_gbps, mfu, headroom, lengths,
             expandable_segments, transformers_version, fmt, out, **stack_kw):
    """Per-GPU memory for fine-tuning MODEL (catalog name, HF id, config.json path) or --params N."""
    if model is None and params is None:
        raise BadInput("estimate: no model given; name one (catalog name, Hub id or config.json path), e.g. "
                       "`gpu-advisor estimate meta-llama/Llama-3.1-8B`, or give only a size: --params 8B.")
    if model is not None and params is not None:
        raise BadInput(f"estimate: you gave both MODEL {plain(model)[:80]} and --params {plain(params)[:20]}; "
                       "keep one of them.")
    spec = synthetic_spec(parse_param_count(params)) if params else load_model(model)
    source = click.get_current_context().get_parameter_source("seq_len")
    objective, seq_len = _objective(pop_objective(stack_kw), gpu, seq_len,
                                    source == click.core.ParameterSource.COMMANDLINE)
    transformers = release.parse(transformers_version) if transformers_version is not None else None
    stack = build_stack(spec.family, objective=objective, transformers=transformers, **stack_kw)
    shape = Shape(micro_batch=batch_size, seq_len=seq_len, grad_accum=grad_accum, padded=padded)
    if nodes > 1 and stack.gpus % nodes:
        raise BadInput(f"--nodes: {stack.gpus} GPUs do not split evenly over {nodes} nodes.")
    if lengths is not None:
        lengths = parse_lengths(lengths)
    est = estimate_memory(spec, stack, shape, gpu=gpu, headroom=headroom, lengths=lengths,
                          expandable_segments=expandable_segments, transformers=transformers)
    if gpu:
        est.throughput = Engine.of(spec, transformers).throughput(stack, shape, gpu, nodes=nodes, mfu=mfu,
                                                     network_gbps=internode_gbps)
    for w in est.warnings:
        click.echo(f"warning: {plain(w)}", err=True)
    if fmt == "json":
        emit(json.dumps(est.model_dump(mode="json"), indent=2), out)
    elif fmt == "md":
        emit(render_markdown(est), out)
    else:
        cards = per_card(spec, stack, shape, COMMON_GPUS, headroom) if objective.vllm == "colocate" and not gpu else None
        emit(render_table(est, headroom, cards=cards), out)
    if model is not None:
        next_step(f"gpu-advisor plan --model {shlex.quote(model)} --methods {stack.method} --tokens 100M"
                  + (f" --gpu {shlex.quote(gpu)}" if gpu else ""),
                  "instances and stacks ranked by the whole run's cost; --tokens is your data's size", fmt, out)


def _step(est):
    """The training step's breakdown: what the components add up to, whichever phase is the peak."""
    return est.phases.get(STEP, est.breakdown)


def phase_words(est) -> str:
    """Each phase's device total and which is the peak the fit check uses."""
    if not est.phases:
        return ""
    parts = [f"{name} {gb(b.total, 2)}" for name, b in est.phases.items()]
    words = "by phase: " + ", ".join(parts) + f"; peak (fit check): {est.peak_phase}"
    if est.peak_phase != STEP and est.load is not None and est.peak_phase == LOAD:
        words += f": {est.load.formula}"
    return words


def _rows(est) -> list[tuple[str, int, str]]:
    b = _step(est)
    comps = est.components
    rows = []
    parts = [("weights", b.weights), ("gradients", b.gradients), ("optimizer", b.optimizer),
             ("activations", b.activations)]
    if b.generation or any(k.startswith("generation.") for k in comps):
        parts.append(("generation", b.generation))
    for part, total in parts + [("overhead", b.overhead)]:
        rows.append((part, total, ""))
        subs = [(k.split(".", 1)[1], c) for k, c in comps.items() if k.startswith(part + ".") and c.bytes]
        subs.sort(key=lambda kv: -kv[1].bytes)
        for name, c in subs[:6]:
            rows.append((f"  {name}", c.bytes, c.formula))
        if len(subs) > 6:
            rows.append((f"  ({len(subs) - 6} more)", sum(c.bytes for _, c in subs[6:]), ""))
        absent = total - sum(c.bytes for _, c in subs)
        if part in ("gradients", "activations", "generation") and absent < 0:
            rows.append(("  not allocated at the step's peak", absent,
                         est.assumptions.get("step_peak_phase" if est.peak_phase != STEP else "peak_phase", "")))
    return rows


def _total_lines(est, step) -> list[str]:
    """The step's total, the peak where another phase is larger, and every phase's figure."""
    loaded = est.peak_phase != STEP
    lines = [f"{'total (training step)' if loaded else 'total':<34}{step.total:>16,}{'':>3}{step.total / GB:>10.2f}"]
    if loaded:
        lines.append(f"{'peak: ' + est.peak_phase:<34}{est.device_total:>16,}{'':>3}{est.device_total / GB:>10.2f}")
    return lines + [f"(GB = 10^9 bytes; nvidia-smi counts MiB: the peak shows there as {est.device_total / MiB:,.0f} "
                    f"MiB, {est.device_total / GiB:.2f} GiB)", phase_words(est)]


def render_table(est, headroom: float = 0.10, cards: str | None = None) -> str:
    m, b = est.model, _step(est)
    lines = [
        stack_note(est.stack),
        f"{plain(m.name)}  ({plain(m.family)}; {count(m.params_total)} params, {count(m.params_trainable)} trainable)",
        f"stack: {est.stack.label()}  ·  micro-batch {est.shape.micro_batch} × seq {est.shape.seq_len}",
        "",
        f"{'per GPU':<34}{'bytes':>16}{'':>3}{'GB':>10}",
    ]
    for name, n, _ in _rows(est):
        lines.append(f"{name:<34}{n:>16,}{'':>3}{n / GB:>10.2f}")
    lines += _total_lines(est, b)
    lines += [
        "",
        f"static (weights+grads+optimizer): {gb(est.static_bytes, 2)}   "
        f"peak allocated: {gb(est.peak_allocated, 2)}   peak reserved: {gb(est.peak_reserved, 2)}",
    ]
    if est.reserved:
        r = est.reserved
        lines.append(f"reserved ({plain(r.lengths)}): needs {gb(r.needed, 2)} on the card checked "
                     f"({gb(r.fixed_shape_needed, 2)} at fixed shapes); max_memory_reserved shows {gb(r.shows, 2)} "
                     f"{'on the card checked' if r.card_bytes else 'on a larger card'}; expandable segments "
                     f"{'on' if r.expandable_segments else 'off'}")
    if est.cpu_ram_bytes:
        lines.append(f"CPU RAM for offloaded states: {gb(est.cpu_ram_bytes, 2)}")
    if est.fit:
        f = est.fit
        verdict = "fits" if f.fits else "does NOT fit"
        lines.append(
            f"{get_gpu(f.gpu).memory_words(f.headroom_fraction)}: {verdict}; "
            f"largest micro-batch at seq {est.shape.seq_len}: {_limit(f.max_micro_batch)}; "
            f"longest seq at micro-batch {est.shape.micro_batch}: {_limit(f.max_seq_len)}"
        )
        if f.suggestions:
            lines.append("  makes it fit: " + "; ".join(plain(x) for x in f.suggestions))
    if est.objective is not None:
        lines += objective_lines(est)
    if not est.fit:
        lines.append(cards or fits_line(est, headroom))
    if est.throughput:
        t = est.throughput
        band = ""
        if t.tokens_per_sec_low is not None and t.tokens_per_sec_high is not None:
            basis = t.interval_basis.get("basis", "") if isinstance(t.interval_basis, dict) else ""
            band = (f"; p10-p90 {t.tokens_per_sec_low:,.0f}-{t.tokens_per_sec_high:,.0f} tokens/s"
                    + (f" ({plain(basis)})" if basis else ""))
        lines.append(f"throughput: {t.tokens_per_sec:,.0f} tokens/s (MFU {t.mfu:.0%}), {t.step_seconds:.2f} s per step"
                     f" at grad-accum {t.grad_accum}" + (f" on {t.nodes} nodes" if t.nodes > 1 else "") + band)
    lines.append("assumptions: " + "; ".join(f"{plain(k)}={plain(v)}" for k, v in est.assumptions.items()))
    return "\n".join(lines)


def plan_precision(stack) -> str:
    """The precision `plan` picks for this method and sharding (the recommendation policy, advisor.planner.configs)."""
    return precision_for(stack.method, stack.sharding, bf16=stack.precision not in ("fp16", "amp-fp16"))


def stack_note(stack) -> str:
    """The first line: the stack this estimate assumed and, where its precision is not what `plan` would pick
    for the same method (the recommendation policy), how they differ and the flag that gives plan's figure."""
    said = f"Assumed stack: {stack.label()}"
    policy = plan_precision(stack)
    if stack.precision == policy:
        return said + f" (what plan picks for {stack.method}: {PRECISION_WORDS.get(policy, policy)}). " + loss_note(stack)
    return (said + f". plan would pick --precision {policy} for {stack.method} ({PRECISION_WORDS.get(policy, policy)}) "
            f"where this is {PRECISION_WORDS.get(stack.precision, stack.precision)}; add --precision {policy} "
            "for plan's figure. " + loss_note(stack))


def loss_note(stack) -> str:
    """The loss path the estimate assumed, in the first line: the default is TRL's fused LM head, which keeps
    no logits, so a plain transformers Trainer (fp32 logits and log-softmax kept) needs `--loss standard`."""
    if stack.liger_loss:
        return "Loss: Liger's fused linear cross-entropy (--liger with --loss standard)."
    if stack.loss == "trl":
        return f"Loss: {LOSS_WORDS['trl']}; for a plain transformers Trainer, --loss standard."
    return f"Loss: {LOSS_WORDS.get(stack.loss, stack.loss)} (--loss {stack.loss})."


LOSS_WORDS = {  # the --loss choices as docs/usage/estimate.md names them
    "trl": "TRL's fused LM head (SFTTrainer, the launch bundle's train.py)",
    "standard": "transformers' ForCausalLMLoss, fp32 logits kept (a plain Trainer)",
    "chunked": "torchtune-style chunked cross-entropy",
    "cce": "Apple's Cut Cross-Entropy",
}


PRECISION_WORDS = {
    "amp-bf16": "fp32 master weights, bf16 autocast", "amp-fp16": "fp32 master weights, fp16 autocast",
    "bf16": "pure bf16 weights and optimizer states", "fp16": "pure fp16 weights and optimizer states",
    "fp32": "fp32 throughout",
}


def _limit(n: int) -> str:
    """A fit limit as people read it: 0 means nothing fits, not a size of zero."""
    return "none (even 1 does not fit)" if n <= 0 else f"{n:,}"


# A spread of common training cards, smallest first, for the one-line "fits on" summary.
COMMON_GPUS = ("T4", "A10G", "L4", "RTX4090", "A100", "L40S", "A100-80GB", "H100", "H200", "B200")


def fits_line(est, headroom: float = 0.10) -> str:
    """Which common GPUs hold this estimate with `headroom` kept free (without --gpu): the one limit
    rule, advisor.estimate.engine.usable_limit."""
    yes, no, emulated = [], [], False
    for name in COMMON_GPUS:
        gpu = get_gpu(name)
        label = f"{name} {gpu.memory_gb:g} GB"
        if "bf16" in est.stack.precision and not gpu.supports_bf16:
            label, emulated = label + "*", True
        (yes if est.device_total <= usable_limit(gpu, headroom) else no).append(label)
    return (f"fits with {headroom:.0%} headroom on: {', '.join(yes) or 'none of the common cards'}"
            + (f"; not on: {', '.join(no)}" if no else "")
            + ("  (* no native bf16: use --precision fp16 there)" if emulated else "")
            + "  (--gpu NAME for micro-batch and sequence limits)")


def render_markdown(est) -> str:
    m, b = est.model, _step(est)
    lines = [
        f"### {md(m.name)}: {md(est.stack.label())}, micro-batch {est.shape.micro_batch} × seq {est.shape.seq_len}",
        "",
        md(stack_note(est.stack)),
        "",
        f"{m.params_total:,} parameters ({m.params_trainable:,} trainable). Source: {md(m.source)}",
        "",
        "| component | bytes | GB | how |",
        "|---|---:|---:|---|",
    ]
    for name, n, how in _rows(est):
        label = name.strip() if not name.startswith("  ") else f"↳ {name.strip()}"
        lines.append(f"| {md(label)} | {n:,} | {n / GB:.2f} | {md(how)} |")
    lines.append(f"| **total** | {b.total:,} | {b.total / GB:.2f} | peak reserved + CUDA context |")
    if est.peak_phase != STEP:
        lines.append(f"| **peak: {md(est.peak_phase)}** | {est.device_total:,} | {est.device_total / GB:.2f} | "
                     f"{md(est.load.formula if est.load else '')} |")
    if est.phases:
        lines += ["", md(phase_words(est)) + "."]
    if est.objective is not None:
        lines += ["", *objective_markdown(est)]
    if est.reserved:
        r = est.reserved
        lines += ["", f"Reserved ({md(r.lengths)}): needs {r.needed / GB:.2f} GB on the card checked "
                      f"({r.fixed_shape_needed / GB:.2f} GB at fixed shapes); `max_memory_reserved` shows "
                      f"{r.shows / GB:.2f} GB {'on the card checked' if r.card_bytes else 'on a larger card'}."]
    if est.fit:
        f = est.fit
        lines += ["", f"**{md(get_gpu(f.gpu).memory_words(f.headroom_fraction))}**: "
                      f"{'fits' if f.fits else 'does not fit'}; max micro-batch {_limit(f.max_micro_batch)}, "
                      f"max sequence {_limit(f.max_seq_len)}."]
        if f.suggestions:
            lines += ["", "What makes it fit (one change each):",
                      *[f"- `{plain(s.split(':')[0]).replace('`', '')}`: {md(s.split(': ', 1)[-1])}"
                        for s in f.suggestions]]
    return "\n".join(lines)
