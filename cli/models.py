"""`gpu-advisor models`: list the built-in model catalog (names a user can pass to --model)."""

from __future__ import annotations

import json

import click

from advisor.model.architecture import build
from advisor.model.catalog import catalog, human_count
from advisor.model.spec import SUPPORTED_FAMILIES
from cli.options import choice
from cli.output import output_options, render_rows, render_table


def _rows(family: str | None) -> list[dict]:
    rows = []
    for spec in catalog():
        if family and spec.family != family:
            continue
        row = {"name": spec.name, "aliases": spec.aliases, "family": spec.family}
        arch = build(spec)
        row["params"] = arch.params_total
        row["params_active"] = arch.params_active
        row["max_position_embeddings"] = spec.max_position_embeddings
        rows.append(row)
    return rows


@click.command("models")
@click.option("--family", type=choice(SUPPORTED_FAMILIES), help="Only this config.json model_type.")
@output_options("table", "json", "md", "csv", format_help="Output format.")
def models(family: str | None, fmt: str) -> None:
    """List the built-in models: Hugging Face id, short aliases, family and parameter count.

    Any of these names (any case) works as a model argument; so do a path to a config.json
    and other Hugging Face ids (fetched once, then cached).
    """
    rows = _rows(family)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    header = ["name", "aliases", "family", "params", "active", "max_pos"]
    count = str if fmt == "csv" else human_count  # csv keeps exact integers for spreadsheets
    table = [[r["name"], ", ".join(r["aliases"]), r["family"], count(r["params"]), count(r["params_active"]),
              str(r["max_position_embeddings"])] for r in rows]
    if fmt == "table":  # fits the terminal: aliases fold or are left out first, then max_pos
        left_out: list[str] = []
        click.echo(render_table(header, table, right=[3, 4, 5], drop=[1, 5], left_out=left_out))
        if left_out:
            click.echo(f"\n({', '.join(left_out)} left out to fit; --format md shows all)")
        return
    click.echo(render_rows(header, table, fmt))
