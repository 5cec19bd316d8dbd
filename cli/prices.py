"""`gpu-advisor prices`: list, refresh, import and inspect price sheets.

A thin layer over `pricing`: parse options, call the library, format. `prices list` must
start fast (< 0.5 s), so it imports only pandas + the loader and prints a plain-text table.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import click

from advisor.text import plain
from advisor.units import money
from cli.options import choice
from cli.output import output_options, render_rows
from pricing import cache, files, settings
from pricing.cache import stale_days
from pricing.crosscheck import tolerance
from pricing.errors import PriceInputError, PricingError, unknown
from pricing.files import to_csv
from pricing.gpus import get_gpu
from pricing.http import redact
from pricing.loader import load, provider_checks, read_sheet, sources_status
from pricing.refresh import base_url, refresh as run
from pricing.schema import validate
from pricing.sources import KEY_OPTIONAL, SOURCES, gpuhunt, skypilot

SOURCE_NAMES = list(SOURCES)  # the one registry: pricing/sources/__init__.py


def _warn(problems, limit: int = 10) -> None:
    if not problems:
        return

    click.echo(f"warning: {len(problems)} price row(s) skipped:", err=True)
    for p in problems[:limit]:
        click.echo(f"  {plain(p)}", err=True)
    if len(problems) > limit:
        click.echo(f"  ... and {len(problems) - limit} more", err=True)


@click.group()
def prices() -> None:
    """Price sheets: bundled snapshot, your own sheets, the fetch cache."""


@prices.command("list")
@click.option("--gpu", help="GPU model, e.g. H100, A100-80GB, L4.")
@click.option("--provider", help="Provider id, e.g. aws, gcp, azure, lambda.")
@click.option("--region", help="Provider region id, e.g. us-east-1.")
@click.option("--min-gpus", type=float, default=None, help="Only instances with at least this many GPUs.")
@click.option("--spot", is_flag=True, help="Show and sort by spot prices (rows without spot are hidden).")
@click.option("--sort", "sort_by", type=choice(["price", "per-gpu"]), default="per-gpu",
              show_default=True)
@output_options("table", "json", "csv")
@click.option("--prices", "sheets", multiple=True, type=click.Path(dir_okay=False),
              help="Your price sheet (CSV/YAML/JSON); overrides list prices. Repeatable.")
@click.option("--discount", multiple=True, metavar="PROVIDER=FRACTION",
              help="Negotiated discount, e.g. aws=0.3 (30% off). Repeatable.")
@click.option("--skip-bad-rows", is_flag=True,
              help="Leave out rows of your --prices sheets that cannot be read (default: refuse the sheet, "
                   "naming the row).")
@click.option("--all", "all_rows", is_flag=True,
              help="Every matching row (default: the cheapest row per GPU model, or with --gpu per instance type; "
                   "a fresh price before a stale one).")
@click.option("--limit", type=click.IntRange(min=0), default=0, help="Show at most N rows (0 = all).")
def list_(gpu, provider, region, min_gpus, spot, sort_by, fmt, sheets, discount, skip_bad_rows, all_rows,
          limit) -> None:
    """List GPU instance offers with their source, date and cross-check (cheapest per GPU, or per instance type
    with --gpu; --all for every row)."""
    df, problems = load(user_sheets=sheets, discounts=list(discount), skip_bad_rows=skip_bad_rows)
    _warn([str(p) for p in problems])
    df = _filter(df, gpu, provider, region, min_gpus, spot)
    price = "spot_price_hour" if spot else "price_hour"
    df = df.assign(_sort=df[price] / (df["gpu_count"] if sort_by == "per-gpu" else 1))
    df = df.sort_values(["_sort", "provider", "region"], na_position="last", kind="stable")
    matching = len(df)
    per = None if all_rows else (PER_INSTANCE if gpu else PER_GPU)
    if per is not None:
        df = cheapest_per(df, per.key)
    df = df.drop(columns="_sort")
    offers = len(df)
    if limit > 0:
        df = df.head(limit)
    if fmt == "json":
        click.echo(df.to_json(orient="records", indent=1))
    elif fmt == "csv":
        click.echo(to_csv(df), nl=False)
    else:
        _table(df, spot, _shown(len(df), offers, matching, per, limit))


class _Per(NamedTuple):
    key: list[str]  # the columns one listed row stands for
    words: str  # "the cheapest <words> of N matching rows"


# Without --gpu the list is an overview, one row per GPU model; with --gpu (one model) one row per instance
# type, so `--gpu H100 --limit 3` is the three cheapest H100 instances (whichever region is cheapest).
PER_GPU = _Per(["gpu_model"], "per GPU")
PER_INSTANCE = _Per(["gpu_model", "provider", "instance_type"], "region per instance type")


def cheapest_per(df, key: list[str]):
    """One row per `key`, in the frame's (price) order: its cheapest fresh row, else its cheapest
    stale one, as a plan would pick (a stale price never heads a plan while a fresh one exists)."""
    stale = df["stale"].fillna(True).astype(bool)
    first = df.assign(_stale=stale).sort_values("_stale", kind="stable").drop_duplicates(key)
    return df.loc[df.index.isin(first.index)]


def _shown(rows: int, offers: int, matching: int, per: _Per | None, limit: int) -> str:
    """The footer's count: how many rows of how many offers, what one row stands for, and what --limit cut."""
    count = f"{rows:,} of {offers:,} offers (--limit {limit})" if rows < offers else f"{offers:,} offers"
    if per is None:
        return count
    return f"{count}: the cheapest {per.words} of {matching:,} matching rows (--all lists every row)"


def _filter(df, gpu, provider, region, min_gpus, spot):
    known = set(df["provider"])  # before any filter: every provider we have prices for
    if gpu:
        gpu = get_gpu(gpu).name  # unknown GPU: exit 2 with suggestions
        df = df[df["gpu_model"] == gpu]
    if provider:
        if provider.lower() not in known:
            raise unknown("--provider", provider, known)
        df = df[df["provider"] == provider.lower()]
    if region:
        if region not in set(df["region"]):
            raise unknown("--region", region, set(df["region"]) or {"(none for this filter)"})
        df = df[df["region"] == region]
    if min_gpus is not None:
        if not min_gpus > 0 or min_gpus == float("inf"):
            raise PriceInputError(f"--min-gpus: must be a positive, finite number of GPUs (got {min_gpus:g})")
        df = df[df["gpu_count"] >= min_gpus]
    if spot:
        df = df[df["spot_price_hour"].notna()]
    return df


def _table(df, spot: bool, shown: str) -> None:
    if not len(df):
        click.echo("no offers match", err=True)
        return
    head = ["provider", "region", "instance_type", "gpu", "n", "GB/gpu", "vCPUs", "RAM GB", "$/h", "$/gpu-h",
            "spot $/h", "origin", "observed", "check"]
    rows = [[r.provider, r.region, r.instance_type, r.gpu_model, f"{r.gpu_count:g}", _num(r.gpu_memory_gb),
             _num(r.vcpus), _num(r.ram_gb), money(r.price_hour, 3), money(r.price_per_gpu_hour, 3),
             money(r.spot_price_hour, 3), r.price_origin, observed_label(r.observed_at, r.stale),
             check_label(r, spot)]
            for r in df.itertuples(index=False)]
    out = [render_rows(head, rows, "table", right={4, 5, 6, 7, 8, 9, 10})]
    sources = sorted(set(df["source"]))
    out.append(f"{shown}; USD per hour, whole instance (on-demand unless noted). "
               f"Sources: {plain(', '.join(sources[:4]))}{' ...' if len(sources) > 4 else ''}")
    checked = ("confirmed", "disputed")
    if df["price_check"].isin(checked).any() or df["spot_check"].isin(checked).any():
        out.append("check: 'confirmed' = a dated public observation agrees (its date is the row's); 'disputed' = it "
                   "does not, and its dated price is shown in place of the catalog's (a market median never replaces "
                   "a listing's own price; pricing/data/OBSERVATIONS.md).")
    if df["stale"].any():
        out.append(f"STALE: observed more than {stale_days():g} days ago (GPU_ADVISOR_STALE_DAYS), or the source "
                   "gives no date; run `gpu-advisor prices refresh`.")
    click.echo("\n".join(out))


def _num(value) -> str:
    return "?" if value is None or value != value else f"{value:,.4g}"


def check_label(r, spot: bool) -> str:
    """What the dated observation sheet said about the row's price (pricing.crosscheck): 'confirmed
    <date>', 'disputed (catalog $x)' with the catalog's own price, 'observed' for an offer only the
    sheet lists, '' when nothing was observed."""

    status, at, old = ((r.spot_check, r.spot_checked_at, r.catalog_spot_price_hour) if spot
                       else (r.price_check, r.checked_at, r.catalog_price_hour))
    if status == "confirmed":
        return f"confirmed {str(at)[:10]}"
    if status == "disputed" and old == (r.spot_price_hour if spot else r.price_hour):  # an aggregate disputed it
        return "disputed by market median (own price kept)"
    if status == "disputed":
        return f"disputed (catalog {money(old, 3)})"
    return "observed" if status == "observation" else ""


def observed_label(observed_at, stale: bool) -> str:
    """The date shown beside a price: when its source observed it, or that nobody knows."""
    day = observed_at[:10] if isinstance(observed_at, str) and observed_at else "date unknown"
    return day + (" STALE" if stale else "")


@prices.command()
@click.option("--source", "sources", multiple=True, type=choice(SOURCE_NAMES),
              help="Source to fetch (repeatable; default: all).")
@click.option("--region", "regions", multiple=True, help="Only these regions (repeatable).")
@click.option("--endpoint", help="Base URL replacing the source's public one (one --source).")
@click.option("--offline", is_flag=True, help="Fetch nothing; report what the cache holds.")
def refresh(sources, regions, endpoint, offline) -> None:
    """Fetch live prices into the cache (a failed fetch keeps the last good sheet)."""
    outcomes = run(sources or None, regions, endpoint, offline,
                   notify=lambda m: click.echo(plain(m), err=True))
    if offline:
        click.echo("offline: nothing fetched; prices come from the cache and the bundled snapshot",
                   err=True)
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        raise PricingError(f"{len(failed)} source(s) failed: "
                           + "; ".join(f"{o.source}: {o.message}" for o in failed))


@prices.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option("--name", help="Cache name for the imported sheet (default: from PATH).")
@click.option("--observed-at", metavar="DATE",
              help="When the imported catalog was collected (ISO date), if you know it; otherwise its rows "
                   "are dated by what the file states, or shown as 'date unknown' (stale).")
def import_(path, name, observed_at) -> None:
    """Import SkyPilot vms.csv files, a gpuhunt catalog (file, catalog.zip or folder) or a sheet in our
    schema into the cache."""
    from pathlib import Path

    p = Path(path)
    stamp = _iso_date(observed_at)
    if not p.is_dir():  # a FIFO, a device or a missing path is refused before anything reads it
        with files.open_regular(p, f"prices import: {p}", 1 << 30) as f:
            head = f.peek(65_536)[:65_536]
            first = f.readline(65_536).decode("utf-8", "replace")
        kind = files.binary_kind(head) if p.suffix.lower() != ".zip" else None
        if kind:  # a zip or gzip under a .csv name would reach a CSV parser as garbage
            raise PriceInputError(f"{p}: is {kind}, not a text price sheet; refused"
                                  + (" (name it .zip to import a gpuhunt catalog.zip)" if "zip archive" in kind else ""))
    ours = p.is_file() and (p.suffix.lower() in (".yaml", ".yml", ".json")
                            or (p.suffix.lower() != ".zip" and "gpu_model" in first))  # a stored zip shows its CSVs
    if ours:
        good, problems = read_sheet(p)
        if stamp:
            good["observed_at"] = good["observed_at"].where(good["observed_at"].notna(), _stamp(stamp))
    else:
        module = gpuhunt if gpuhunt.is_catalog(p) else skypilot
        df, problems = module.import_path(p, observed_at=stamp)
        good, more = validate(df, str(p)) if len(df) else (df, [])
        problems += more
    _warn([str(x) for x in problems])
    if not len(good):
        raise PriceInputError(f"PATH: no valid offers in {p}; nothing imported")
    meta = cache.write_sheet(f"import-{name or p.stem}", good, source=str(p.resolve()),
                             url=None, kind="import")

    undated = int(good["observed_at"].isna().sum()) if "observed_at" in good else len(good)
    click.echo(plain(f"imported {meta['rows']} offers from {p} into {cache.sheet_path(meta['name'])}"
                     + (f"; {undated} have no observation date (stale; --observed-at DATE if you know it)"
                        if undated else "")))


# the earliest year --observed-at accepts; AWS announced the first cloud GPU instance (cg1.4xlarge) on
# 2010-11-15: https://aws.amazon.com/blogs/aws/new-ec2-instance-type-the-cluster-gpu-instance/
OBSERVED_AT_FLOOR = 2000


def _iso_date(text: str | None) -> str | None:
    if text is None:
        return None
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise PriceInputError(f"--observed-at: expected an ISO date like 2026-11-30 (got '{text}')") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    if when > dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
        raise PriceInputError(f"--observed-at: {text} is in the future")
    if when.year < OBSERVED_AT_FLOOR:  # year 1 would be written '1-01-01' and refuse every row instead
        raise PriceInputError(f"--observed-at: {text} is before {OBSERVED_AT_FLOOR}; no cloud GPU price is that old "
                              "(AWS rented the first cloud GPUs in November 2010)")
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stamp(iso: str):
    import pandas as pd

    return pd.Timestamp(iso)


@prices.command()
@output_options("table", "json")
def sources(fmt) -> None:
    """Each price source: rows, age, and where it lives."""
    import json

    status = sources_status()
    fetchers = [{"name": n, "url": redact(base_url(n)),
                 "key": (k and ("set" if settings.present(k) else
                                f"optional ({k})" if n in KEY_OPTIONAL else f"missing ({k})")) or "not needed"}
                for n, (_, k) in SOURCES.items()]
    checks = provider_checks()
    if fmt == "json":
        click.echo(json.dumps({"sheets": status, "fetchers": fetchers, "providers": checks,
                               "tolerance": tolerance()}, indent=1))
        return

    click.echo("sheets (highest precedence first: --prices files, then cache, then bundled):")
    for s in status:
        age = "?" if s["age_days"] is None else f"{s['age_days']:.1f} d"
        flag = " STALE" if s["stale"] else ""
        click.echo(f"  {plain(s['name']):<22} {plain(s['kind']):<18} {s['rows']:>6} rows  {age:>8}{flag}  "
                   f"{plain(s['path'])}")
    click.echo("fetchers (`gpu-advisor prices refresh --source NAME`):")
    for f in fetchers:
        click.echo(f"  {f['name']:<10} key: {f['key']:<28} {plain(f['url'])}")
    click.echo(_checks_table(checks, tolerance()))


def _checks_table(checks: list[dict], tol: float) -> str:
    """Per provider: each row's price against the dated observation sheet (pricing.crosscheck)."""

    head = ["provider", "rows", "confirmed", "disputed", "observed", "own date", "undated", "newest obs", "sources"]
    rows = [[c["provider"], c["rows"], c["confirmed"], c["disputed"], c["observation"], c["dated"], c["undated"],
             c["newest_observation"] or "-", c["observation_sources"]] for c in checks]  # the last: 'all'
    table = "\n".join("  " + line for line in render_rows(head, rows, "table", right=set(range(1, 9))).splitlines())
    return (f"providers ({len(checks) - 1}; each row's on-demand price, else its spot price, against the dated "
            f"observation sheet, tolerance {tol:.0%} per GPU-hour):\n{table}\n"
            "  confirmed: an observation agrees and dates the row; disputed: its dated price replaced the catalog's; "
            "observed: an offer only the observation sheet lists; own date: dated by its own source, not "
            "contradicted by a newer observation; undated: nobody dated it (STALE).")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(prices())
