"""Offers the catalogs lack, taken from the dated observation sheet.

Public trackers and pricing pages list sellers no catalog carries (Akash, Civo, Scaleway, ...), and
configurations of known sellers the extracts miss. A budget owner gets quotes from them, so an
observation that no catalog row answers to (pricing.crosscheck.candidates finds no row for it in
any tier) becomes an offer of its own:

* one row per (provider, region, GPU, GPU count, kind), kind being the on-demand/spot pair, the
  community tier or the marketplace median (trackers spell one product several ways: 'H100 SXM5
  80GB', '1H100.80S.30V'; the GPU and count say what it is); an aggregator's product named
  `<seller>/<type>` (Shadeform's 'lambdalabs/gpu_8x_b200') is kept apart per seller. instance_type is the newest
  observation's product (or `<n>x<GPU>`), with a community or marketplace-median tier named in
  brackets since it is a different product from the seller's on-demand one; region is the
  observation's or 'unknown';
* price_hour from the newest on-demand or community observation (a marketplace median is a statistic over
  many hosts, not a rentable machine: it only confirms or disputes catalog rows), spot_price_hour
  from the newest spot one (per instance: a per-GPU price x gpu_count; a per-GPU rate card without a
  count prices one GPU); observed_at is that price's observed_at, source its citation;
* vcpus and ram_gb as the source states them, else the same instance type's shape elsewhere in the
  catalogs, else the curated instance table's (pricing/data/instances.csv); otherwise empty,
  meaning unknown, and the row's notes say so (a host is never assumed);
* reserved terms are not offers for a run of hours (a 1- or 3-year commitment), so they stay in
  the sheet as evidence only; community and marketplace tiers are noted `marketplace` (peer hosts).
"""

from __future__ import annotations

from pricing.crosscheck import OBSERVATION, candidates
from pricing.gpus import get_gpu
from pricing.instances import lookup
from pricing.schema import COLUMNS, validate

# -> price_hour. A marketplace median is a statistic over many hosts, not a machine one can rent at that price:
# it confirms or disputes catalog rows (CHECKED_TIERS) but never becomes an offer of its own (issue 31).
PRICED_TIERS = ("on-demand", "community")
SPOT_TIERS = ("spot",)  # -> spot_price_hour
CHECKED_TIERS = ("on-demand", "marketplace-median", "spot")  # tiers that compare with catalog rows
HOST_UNKNOWN = "host vCPUs/RAM not stated by the source (unknown)"


def offers(df, obs, origin: str = "price_origin", sheet: str = "observations"):
    """(new offer rows, [Problem]) for the observations in `obs` that answer to no catalog row of `df`
    and whose key is not in it already. The rows are validated like any sheet (pricing.schema) and
    carry `origin` 'bundled' and pricing.crosscheck's status columns ('observation')."""
    import numpy as np
    import pandas as pd

    if not len(obs):
        return pd.DataFrame(), []
    covered = set(candidates(df, obs, CHECKED_TIERS, origin)["j"].tolist())
    checked = np.flatnonzero(obs["tier"].isin(CHECKED_TIERS).to_numpy())
    used = {int(checked[j]) for j in covered}  # positions in obs
    free = obs[[i not in used and t in PRICED_TIERS + SPOT_TIERS for i, t in enumerate(obs["tier"])]]
    if not len(free):
        return pd.DataFrame(), []
    groups = _groups(free)
    shapes = _shapes(df)
    rows = _distinct([_row(groups[k], shapes) for k in sorted(groups)])
    keys = set(zip(df["provider"], df["region"], df["instance_type"]))
    rows = [r for r in rows if (r["provider"], r["region"], r["instance_type"]) not in keys]
    if not rows:
        return pd.DataFrame(), []
    raw = pd.DataFrame(rows)
    good, problems = validate(raw[[c for c in COLUMNS if c in raw]], sheet)
    kept = np.asarray(good.attrs.pop("rows"), dtype=int) - 1
    status = raw.iloc[kept].reset_index(drop=True)
    return _marked(good, status, origin), problems


def _marked(good, status, origin: str):
    """The validated offers with their origin and crosscheck's status columns ('observation', sources, dates)."""
    import numpy as np
    import pandas as pd

    good[origin] = "bundled"
    # numpy's stubs do not take None as the object scalar it is here
    good["price_check"] = np.where(good["price_hour"].notna(), OBSERVATION, None)  # type: ignore[call-overload]
    good["spot_check"] = np.where(good["spot_price_hour"].notna(), OBSERVATION, None)  # type: ignore[call-overload]
    for col in ("checked_by", "spot_checked_by"):
        good[col] = status[col].to_numpy(dtype=object)
    for col in ("checked_at", "spot_checked_at"):
        good[col] = pd.to_datetime(status[col], utc=True)  # both indexes run 0..n-1
    good["spot_observed_at"] = good["spot_checked_at"]  # the spot price's own observation
    return good


def _groups(free) -> dict[tuple, list[dict]]:
    """The observations by (provider, region, GPU, count, kind, seller): one offer each (module docstring)."""
    groups: dict[tuple, list[dict]] = {}
    for r in free.to_dict("records"):  # a few hundred rows: plain dicts beat pandas per group
        r["region"] = r["region"] if isinstance(r["region"], str) and r["region"] else "unknown"
        r["n"] = r["gpu_count"] if r["gpu_count"] == r["gpu_count"] else 1.0
        kind = r["tier"] if r["tier"] in ("community", "marketplace-median") else "list"
        seller = r["product"].split("/")[0] if isinstance(r["product"], str) and "/" in r["product"] else ""
        groups.setdefault((r["provider"], r["region"], r["gpu_model"], r["n"], kind, seller), []).append(r)
    return groups


def _distinct(rows: list[dict]) -> list[dict]:
    """Rows whose (provider, region, instance_type) repeats (one product name for several GPU counts)
    get the count appended, so each stays a row of its own."""
    from collections import Counter

    seen = Counter((r["provider"], r["region"], r["instance_type"]) for r in rows)
    for r in rows:
        if seen[(r["provider"], r["region"], r["instance_type"])] > 1:
            r["instance_type"] = f"{r['instance_type']} ({r['gpu_count']:g}x)"
    return rows


def _name(r) -> str:
    """The offer's instance_type: the observation's product, or `<n>x<GPU>`; a tier other than the
    seller's list price named in brackets."""
    product = r["product"] if isinstance(r["product"], str) and r["product"] else None
    base = product or f"{r['n']:g}x{r['gpu_model']}"
    return f"{base} [{r['tier']}]" if r["tier"] in ("community", "marketplace-median") else base


def _newest(group: list[dict], tiers) -> dict | None:
    """The group's newest observation of these tiers (the first in the sheet among equally new ones)."""
    rows = [r for r in group if r["tier"] in tiers]
    return max(rows, key=lambda r: (r["observed_at"], -r["row"])) if rows else None


def _shapes(df) -> dict[tuple[str, str], tuple[float, float]]:
    """(provider, instance_type) -> (vCPUs, RAM GB) of the catalog rows that state both: an instance
    type has one shape in every region, so a region the catalog lacks can borrow it."""
    known = df[df["vcpus"].notna() & df["ram_gb"].notna()].drop_duplicates(["provider", "instance_type"])
    return {(p, t): (v, r) for p, t, v, r in zip(known["provider"], known["instance_type"], known["vcpus"],
                                                 known["ram_gb"])}


def _row(group: list[dict], shapes: dict) -> dict:
    """One offer from the observations of one (provider, region, GPU, count, kind)."""

    first = group[0]
    provider, region, gpu, n = first["provider"], first["region"], first["gpu_model"], first["n"]
    on, spot = _newest(group, PRICED_TIERS), _newest(group, SPOT_TIERS)
    main = on if on is not None else spot
    assert main is not None, "a group holds at least one priced observation"  # _groups makes it so
    itype = _name(main)
    notes = [x for x in (main["notes"],) if isinstance(x, str) and x]
    if main["tier"] in ("community", "marketplace-median"):
        notes.append(f"marketplace ({main['tier']})")
    if main["price_unit"] == "gpu" and main["gpu_count"] != main["gpu_count"]:
        notes.append("per-GPU rate card, priced as one GPU")
    vcpus, ram, interconnect = _host(provider, itype, main, shapes)
    if vcpus != vcpus or ram != ram:
        notes.append(HOST_UNKNOWN)
    if on is not None and spot is not None:
        notes.append(f"spot observed {spot['observed_at']:%Y-%m-%d} ({spot['source']})")
    return {"provider": provider, "region": region, "instance_type": itype, "gpu_model": gpu, "gpu_count": n,
            "gpu_memory_gb": get_gpu(gpu).memory_gb, "vcpus": vcpus, "ram_gb": ram, "interconnect": interconnect,
            "price_hour": None if on is None else on["per_gpu"] * n,
            "spot_price_hour": None if spot is None else spot["per_gpu"] * n,
            "currency": main["currency"], "source": main["source"], "fetched_at": _iso(main["read_at"]),
            "observed_at": _iso(main["observed_at"]), "notes": ";".join(notes) or None,
            "checked_by": None if on is None else on["source"],
            "checked_at": None if on is None else _iso(on["observed_at"]),
            "spot_checked_by": None if spot is None else spot["source"],
            "spot_checked_at": None if spot is None else _iso(spot["observed_at"])}


def _host(provider: str, itype: str, main, shapes: dict) -> tuple[float, float, str | None]:
    """(vCPUs, RAM GB, interconnect): the source's own figures, else the same instance type's shape in
    another region of the catalogs, else the curated instance table's (pricing/data/instances.csv),
    else NaN (unknown)."""

    spec = lookup(provider, itype)
    nan = float("nan")
    vcpus, ram = main["vcpus"], main["ram_gb"]
    if vcpus != vcpus or ram != ram:
        table = (spec.vcpus or nan, spec.ram_gb or nan) if spec else (nan, nan)
        vcpus, ram = shapes.get((provider, itype), table)
    return vcpus, ram, spec.interconnect if spec else None


def _iso(stamp) -> str:
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
