"""`gpu-advisor models`: list the built-in model catalog (names a user can pass to --model)."""

from __future__ import annotations

import csv
import io
import json

import click

from advisor.models import human_count
from advisor.modelspec import SUPPORTED_FAMILIES


def _rows(family: str | None) -> list[dict]:
    from advisor.models import catalog

    try:  # parameter counts need the architecture module; list without them if it is missing
        from advisor.architecture import build
    except ImportError:
        build = None
    rows = []
    for spec in catalog():
        if family and spec.family != family:
            continue
        row = {"name": spec.name, "aliases": spec.aliases, "family": spec.family}
        if build is not None:
            arch = build(spec)
            row["params"] = arch.params_total
            row["params_active"] = arch.params_active
        row["max_position_embeddings"] = spec.max_position_embeddings
        rows.append(row)
    return rows


@click.command("models")
@click.option("--family", type=click.Choice(SUPPORTED_FAMILIES), help="Only this config.json model_type.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "md", "csv"]), default="table",
              show_default=True, help="Output format.")
def models(family: str | None, fmt: str) -> None:
    """List the built-in models: Hugging Face id, short aliases, family and parameter count.

    Any of these names (any case) works as a model argument; so do a path to a config.json
    and other Hugging Face ids (fetched once, then cached).
    """
    rows = _rows(family)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    has_params = bool(rows) and "params" in rows[0]
    header = ["name", "aliases", "family"] + (["params", "active"] if has_params else []) + ["max_pos"]
    table = []
    for r in rows:
        cells = [r["name"], ", ".join(r["aliases"]), r["family"]]
        if has_params:  # csv keeps exact integers for spreadsheets; the others read better rounded
            fmt_count = str if fmt == "csv" else human_count
            cells += [fmt_count(r["params"]), fmt_count(r["params_active"])]
        cells.append(str(r["max_position_embeddings"]))
        table.append(cells)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(table)
        click.echo(out.getvalue(), nl=False)
    elif fmt == "md":
        click.echo("| " + " | ".join(header) + " |")
        click.echo("|" + "---|" * len(header))
        for cells in table:
            click.echo("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        widths = [max(len(h), *(len(c[i]) for c in table)) if table else len(h) for i, h in enumerate(header)]
        click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
        for cells in table:
            click.echo("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
