"""`gpu-advisor tokens DATA --model M`: the dataset in the model's own tokens, and what its lengths cost.

A thin layer over advisor/workload/dataset_tokens.py (reading, tokenizing, sampling) and advisor/workload/length_stats.py
(every figure). `count_for_plan` and `summary_lines` are reused by `plan --dataset`.
"""

from __future__ import annotations

import shlex

import click

from advisor.text import plain
from advisor.workload.dataset_tokens import (
    DEFAULT_SAMPLE,
    count_dataset,
    existing,
    load_tokenizer,
    terminal_progress,
    tokenizer_ref,
)
from cli.output import emit, next_step, output_options, render_rows
from pricing.files import atomic_write
from reports import charts


def count(dataset: str, *, model: str | None, tokenizer: str | None, text_field: str | None,
          messages_field: str | None, seq_len: int, micro_batch: int = 1, group_by_length: bool = False,
          sample: int | None = None, exact: bool = False, padding_up_to: int = 0):
    """The DatasetCount, with a progress bar on a terminal."""
    existing(dataset)  # a missing file is named before a tokenizer is fetched
    tok = load_tokenizer(tokenizer_ref(model, tokenizer), model=None if tokenizer else model)
    bar, update = terminal_progress(f"tokenizing {plain(dataset)[-40:]}")
    kwargs = dict(text_field=text_field, messages_field=messages_field, seq_len=seq_len, micro_batch=micro_batch,
                  group_by_length=group_by_length, sample=None if exact else (sample or DEFAULT_SAMPLE),
                  progress=update, padding_up_to=padding_up_to)
    if bar is None:
        return count_dataset(dataset, tok, **kwargs)
    with bar:
        return count_dataset(dataset, tok, **kwargs)


def _n(x: float) -> str:
    return f"{round(x):,}"


def summary_rows(c) -> list[tuple[str, str]]:
    """(what, figure) lines: the one place a DatasetCount becomes text."""
    s = c.stats
    how = "every row counted" if s.exact else f"{s.counted_rows:,} random rows counted (seed {c.seed})"
    err = "" if s.exact else f" ± {_n(s.total_tokens_error)} (95 %)"
    kept_err = "" if s.exact else f" ± {_n(s.kept_tokens_error)}"
    batches = "grouped by length" if s.group_by_length else "random batches"
    saved = 1 - s.suggested_padded_tokens / s.padded_tokens if s.padded_tokens else 0.0
    return [
        ("dataset", f"{plain(c.dataset)} ({c.kind} field {plain(c.field)!r}; {c.rendering})"),
        ("tokenizer", plain(c.tokenizer)),
        ("rows", f"{s.rows:,} ({how})"),
        ("total tokens", _n(s.total_tokens) + err),
        (f"tokens kept at seq_len {s.seq_len:,}", _n(s.kept_tokens) + kept_err
         + f" ({s.truncated_rows_share:.1%} of rows truncated)"),
        ("tokens that carry loss", (f"{_n(c.loss_tokens)} ({c.loss_tokens / s.kept_tokens:.0%} of those kept"
                                    + ("; the assistant's turns" if c.kind == "messages" else "") + ")")
         if c.loss_tokens is not None and s.kept_tokens else f"not counted: {c.loss_note}"),
        ("length p50 / p90 / p99 / max", f"{s.p50:,} / {s.p90:,} / {s.p99:,} / {s.max:,} (mean {s.mean:,.1f})"),
        ("computed, packed batches", _n(s.packed_tokens)),
        (f"computed, padded batches of {s.micro_batch}", f"{_n(s.padded_tokens)} ({batches}; "
                                                         f"{s.padding_waste:.1%} padding)"),
        ("suggested seq_len (p99, multiple of 256)",
         f"{s.suggested_seq_len:,}: {s.suggested_truncated_rows_share:.1%} of rows truncated, "
         f"{_n(s.suggested_kept_tokens)} tokens kept, padded compute {_n(s.suggested_padded_tokens)}"
         + (f" ({saved:.1%} less than at {s.seq_len:,})" if saved > 0 else "")),
    ]


@click.command("tokens")
@click.argument("dataset", metavar="DATA")
@click.option("--model", default=None, help="model whose tokenizer counts (catalog name, Hub id or local folder)")
@click.option("--tokenizer", default=None, help="tokenizer folder, tokenizer.json or Hub id instead of the model's")
@click.option("--text-field", default=None, help="column holding plain text [text]")
@click.option("--messages-field", default=None, help="column holding chat messages [messages or conversations]")
@click.option("--seq-len", type=click.IntRange(1, 16_777_216), default=2048, show_default=True,
              help="truncate rows at this many tokens")
@click.option("--micro-batch", type=click.IntRange(1, 65_536), default=1, show_default=True,
              help="rows per padded micro-batch (padding waste)")
@click.option("--group-by-length", is_flag=True, help="padded batches hold rows of similar length (Trainer group_by_length)")
@click.option("--sample", type=click.IntRange(min=1), default=None,
              help="rows tokenized on a big dataset, chosen at random [20000]")
@click.option("--exact", is_flag=True, help="tokenize every row")
@click.option("--histogram", type=click.Path(dir_okay=False), default=None,
              help="also write the length histogram as an SVG file")
@output_options("table", "json", "md", "csv", out=True,
                out_help="write the output to FILE (whole, atomically) instead of standard output; with --format json "
                         "it is a --lengths file for estimate")
def tokens(dataset: str, model, tokenizer, text_field, messages_field, seq_len, micro_batch, group_by_length,
           sample, exact, histogram, fmt, out) -> None:
    """Count DATA (JSONL/JSON, CSV, Parquet or a datasets folder) in the model's tokens: totals,
    truncation at --seq-len, length percentiles, packed vs padded compute and a suggested seq_len."""
    result = count(dataset, model=model, tokenizer=tokenizer, text_field=text_field, messages_field=messages_field,
                   seq_len=seq_len, micro_batch=micro_batch, group_by_length=group_by_length, sample=sample,
                   exact=exact)
    if histogram:
        write_histogram(result, histogram)
    if fmt == "json":
        emit(result.model_dump_json(indent=2), out)
    else:
        emit(render_rows(["what", "figure"], summary_rows(result), fmt), out)
    s = result.stats
    if model:  # the exact command needs the model (a --tokenizer alone does not name one)
        next_step(f"gpu-advisor plan --model {shlex.quote(model)} --tokens {round(s.kept_tokens)} "
                  f"--seq-len {s.seq_len}", "rank instances for training on these tokens", fmt, out)


def write_histogram(result, path: str) -> None:
    """The length histogram as a sanitised SVG (reports/charts.py), written atomically."""
    svg = charts.clean_svg(charts.length_histogram_chart(result.stats), id_prefix="chart-lengths",
                           title="Token lengths of the dataset",
                           desc=f"Rows per token length of {plain(result.dataset)}; seq_len {result.stats.seq_len} and "
                                f"the suggested {result.stats.suggested_seq_len} marked.")
    atomic_write(path, svg)
    click.echo(f"wrote {plain(path)}", err=True)
