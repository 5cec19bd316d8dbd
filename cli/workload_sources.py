"""`plan --dataset` and `plan --from-config`: the workload from what the user already has.

Turns a training config (advisor/workload/training_config.py) and a dataset's token count (cli/tokens.py) into
the plan options a user would otherwise type (flags win over both), says on stderr what was read and
what was not, and records the same in the plan's JSON (workload, assumptions, warnings).
"""

from __future__ import annotations

from typing import Any

import click

from advisor.errors import BadInput
from advisor.planner import PlanRequest
from advisor.planner.configs import MAX_MICRO_BATCH
from advisor.planner.request import read_plan_file
from advisor.results import LengthHistogram
from advisor.text import plain
from advisor.workload.training_config import read_config

SOURCE_KEYS = ("dataset", "text_field", "messages_field", "tokenizer", "from_config")


def source_options(f):
    """The options of `plan` that read the user's own files (not shared with `launch`, whose --dataset
    names the bundle's training data)."""
    for option in reversed([
        click.option("--dataset", default=None,
                     help="count this dataset (JSONL/JSON, CSV, Parquet, datasets folder) in the model's tokens "
                          "instead of --tokens"),
        click.option("--text-field", default=None, help="--dataset column holding plain text [text]"),
        click.option("--messages-field", default=None, help="--dataset column holding chat messages [messages]"),
        click.option("--tokenizer", default=None, help="tokenizer for --dataset (folder, tokenizer.json or Hub id) "
                                                        "[the model's]"),
        click.option("--from-config", type=click.Path(dir_okay=False), default=None,
                     help="axolotl / LLaMA-Factory / TRL / torchtune training config: its settings become pins"),
    ]):
        f = option(f)
    return f


def _fill(options: dict[str, Any], values: dict[str, Any], taken: dict[str, Any]) -> None:
    """Set every option the user left empty (flags, then the plan file's own fields in `taken`, win)."""
    for key, value in values.items():
        if key == "pins":
            _fill(options, value, taken)
        elif options.get(key) in (None, ()) and key not in taken:
            options[key] = value


def _from_file(options: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The `-f plan.yaml` fields; its dataset / config keys fill the source options the flags left empty,
    paths relative to the file's folder (a tokenizer only where that path exists: else a Hub id)."""
    from pathlib import Path

    if not options.get("plan_file"):
        return {}
    path = Path(options["plan_file"])
    file = read_plan_file(path)
    for key in SOURCE_KEYS:
        value = file.get(key)
        if given[key] or value in (None, ""):
            continue
        if not isinstance(value, str):
            raise BadInput(f"--file {plain(path)}: {key}: expected text (got {plain(value)[:40]!r}).")
        local = path.parent / Path(value).expanduser()
        if key in ("dataset", "from_config") or (key == "tokenizer" and local.exists()):
            value = str(local)
        given[key] = value
    return file


def apply(options: dict[str, Any]):
    """Pop the source options, fill `options` from them, and return a function that records them in
    the finished plan (or None when no source option was given)."""
    given = {k: options.pop(k, None) for k in SOURCE_KEYS}
    file = _from_file(options, given)
    if not any(given.values()):
        return None
    view = {**file, **{k: v for k, v in options.items() if v not in (None, ())}}  # what the plan will read
    extra: dict[str, Any] = {}
    warnings: list[str] = []
    read = _Read(given["dataset"], given["text_field"], given["messages_field"])
    if given["from_config"]:
        _config_into(options, given["from_config"], file, view, read, extra, warnings)
    if read.dataset:
        _count_into(options, view, read.dataset, given["tokenizer"], read.text_field, read.messages_field,
                    read.micro_batch, read.group, extra)
    elif not given["from_config"] and (given["tokenizer"] or given["text_field"] or given["messages_field"]):
        raise BadInput("--tokenizer / --text-field / --messages-field: only with --dataset.")
    warnings += extra.pop("_warnings", [])
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    lengths = extra.pop("_lengths", None)

    def record(plan):
        workload = {**plan.workload, **{k: v for k, v in extra.items() if k.startswith("dataset")}}
        assumptions = {**plan.assumptions, **{k: v for k, v in extra.items() if not k.startswith("dataset")}}
        return plan.model_copy(update={"workload": workload, "assumptions": assumptions,
                                       "warnings": [*plan.warnings, *warnings], "workload_lengths": lengths})

    return record


class _Read:
    """What the sources say to count: the dataset and its fields, and the config's batching."""

    def __init__(self, dataset, text_field, messages_field):
        self.dataset, self.text_field, self.messages_field = dataset, text_field, messages_field
        self.group, self.micro_batch = False, 1


def _config_into(options, path, file, view, read: _Read, extra, warnings) -> None:
    """--from-config: its settings fill the options the flags and the plan file left empty, said on stderr."""
    cfg = read_config(path)
    _fill(options, cfg.options, file)
    view.update({k: v for k, v in options.items() if v not in (None, ())})
    shown = {**{k: v for k, v in cfg.options.items() if k != "pins"}, **cfg.options.get("pins", {})}
    pins = ", ".join(f"{k}={v}" for k, v in shown.items())
    click.echo(f"config ({cfg.framework}): {plain(pins)}", err=True)
    for note in cfg.notes:
        click.echo(f"config: {plain(note)}", err=True)
    if cfg.unknown:
        warnings.append(f"--from-config {plain(cfg.path)}: settings not understood, not used: "
                        f"{', '.join(cfg.unknown)}")
    if cfg.ignored:
        click.echo(f"config: no effect on memory, time or cost: {', '.join(cfg.ignored)}", err=True)
    extra.update(config_framework=cfg.framework, config_unknown=", ".join(cfg.unknown),
                 config_ignored=", ".join(cfg.ignored))
    if not read.dataset and not read.text_field and not read.messages_field:
        read.text_field, read.messages_field = cfg.text_field, cfg.messages_field
    read.dataset = read.dataset or (cfg.dataset if view.get("tokens") in (None, "") else None)
    read.group, read.micro_batch = cfg.group_by_length, cfg.micro_batch or 1


def count(dataset, **kw):
    """cli.tokens.count, imported only when a dataset is counted: a plan without --dataset never loads cli.tokens,
    its tokenizer readers or reports.charts (tests/cli/test_speed.py)."""
    from cli.tokens import count as count_dataset

    return count_dataset(dataset, **kw)


def summary_rows(result):
    """cli.tokens.summary_rows (imported with `count`)."""
    from cli.tokens import summary_rows as rows

    return rows(result)


def _count_into(options, view, dataset, tokenizer, text_field, messages_field, micro_batch, group, extra) -> None:
    """Count `dataset` into options["tokens"]; `view` is what the plan reads (flags over the plan file)."""
    if view.get("tokens") not in (None, "") or view.get("examples") not in (None, ""):
        raise BadInput("--dataset: give the workload as --dataset or as --tokens / --examples, not both.")
    model = view.get("model") or view.get("model_arg")

    seq_len = view.get("seq_len") or PlanRequest.model_fields["seq_len"].default
    padded = bool(view.get("padded"))
    result = count(dataset, model=model, tokenizer=tokenizer, text_field=text_field, messages_field=messages_field,
                   seq_len=seq_len, micro_batch=micro_batch, group_by_length=group,
                   padding_up_to=MAX_MICRO_BATCH if padded else 0)
    s = result.stats
    options["tokens"] = max(1, round(s.kept_tokens))
    if padded:  # each candidate computes its own micro-batch's padding (PlanRequest.padding_factor)
        options["padding"] = s.padding_factors
    for what, figure in summary_rows(result):
        click.echo(f"dataset: {what}: {figure}", err=True)
    click.echo(f"dataset: plan counts {options['tokens']:,} tokens per epoch (kept at seq_len {seq_len:,}, "
               + (f"{'grouped' if group else 'random'} padded batches computing {s.padding_factors[1]:.2f}× that at "
                  f"micro-batch 2, {s.padding_factors[-1]:.2f}× at {MAX_MICRO_BATCH}: each candidate at its own)"
                  if padded else "packed)"), err=True)
    extra.update(dataset=plain(result.dataset), dataset_rows=s.rows, dataset_exact=s.exact,
                 dataset_total_tokens=round(s.total_tokens), dataset_kept_tokens=round(s.kept_tokens),
                 dataset_padded_tokens=round(s.padded_tokens), dataset_padding_waste=round(s.padding_waste, 4),
                 dataset_loss_tokens=None if result.loss_tokens is None else round(result.loss_tokens),
                 dataset_truncated_rows_share=round(s.truncated_rows_share, 4),
                 dataset_suggested_seq_len=s.suggested_seq_len)
    try:
        extra["_lengths"] = lengths_of(s)
    except ValueError:  # pydantic's ValidationError: past what a plan file records (advisor/results/plan.py)
        note = (f"--dataset {plain(result.dataset)}: its longest row is {s.max:,} tokens (suggested seq_len "
                f"{s.suggested_seq_len:,}), past the lengths a plan's chart records; the plan leaves the chart out")
        extra["_warnings"] = [note]


def lengths_of(stats):
    """The plan's copy of the dataset's length histogram (advisor.results.LengthHistogram), for the report."""
    return LengthHistogram(bins=stats.histogram, seq_len=stats.seq_len, suggested_seq_len=stats.suggested_seq_len,
                           exact=stats.exact, counted_rows=stats.counted_rows)
