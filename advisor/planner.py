"""Planner: every offer × node count × technique stack, priced for the whole run, ranked.

Memory and time depend on (GPU model, GPUs in total, stack), never on price or region, so they
are computed once per distinct hardware×stack *config* (a few hundred estimator calls) and
joined to the offers as DataFrames; hours, cost, constraints, ranking and the Pareto front are
vectorised numpy/pandas over all candidates (no Python loop per candidate).
Defaults for billing, setup and spot live in advisor/data/billing.json (documented there).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

from advisor.errors import AdvisorError, BadInput
from advisor.modelspec import ModelSpec
from advisor.results import Breakdown, Candidate, ModelInfo, Plan, Rejection
from advisor.stacks import METHODS, Shape, Stack
from advisor.throughput import counts, step_time

BILLING_FILE = Path(__file__).parent / "data" / "billing.json"
OPTIMIZERS = ("adamw", "adamw-8bit")
DEFAULT_GLOBAL_BATCH = 64  # sequences per optimizer step when none is given
MAX_MICRO_BATCH = 64
CPU_RAM_USABLE = 0.9  # share of instance RAM offloaded states may use (OS, dataloader, page cache)


@lru_cache(maxsize=1)
def billing() -> dict:
    return json.loads(BILLING_FILE.read_text())


# --------------------------------------------------------------------------- stacks


def stacks_for(gpu, n_gpus: int, methods: Iterable[str], family: str = "llama") -> list[Stack]:
    """Every stack that makes sense on `n_gpus` of `gpu` for a model of `family` (DESIGN.md "Candidates")."""
    from advisor.architecture import supported_attention

    allowed = supported_attention(family)
    if gpu.supports_flash_attention and "flash" in allowed:
        attention = "flash"
    else:
        attention = "sdpa" if "sdpa" in allowed else "eager"
    return _stacks(gpu.supports_bf16, attention, n_gpus, tuple(methods))


@lru_cache(maxsize=1024)
def _stacks(bf16: bool, attention: str, n_gpus: int, methods: tuple[str, ...]) -> list[Stack]:
    out = []
    for method in methods:
        if bf16:
            precision = "bf16"
        else:  # T4/V100: no bf16; full FT needs fp32 master weights with fp16 compute
            precision = "amp-fp16" if method == "full" else "fp16"
        if n_gpus == 1:
            shardings = [("none", "none")] + ([("zero3", "optimizer")] if method == "full" else [])
        else:
            shardings = [("ddp", "none"), ("fsdp", "none"), ("zero3", "none")]
            if method == "full":
                shardings.append(("zero3", "optimizer"))
        for optimizer in OPTIMIZERS:
            for ckpt in (False, True):
                for sharding, offload in shardings:
                    out.append(Stack(method=method, precision=precision, optimizer=optimizer,
                                     grad_checkpointing=ckpt, attention=attention, gpus=n_gpus,
                                     sharding=sharding, offload=offload))
    return out


# --------------------------------------------------------------------------- memory fit


Estimator = Callable[[ModelSpec, Stack, Shape], object]  # -> MemoryEstimate


class _DefaultEstimator:
    """advisor.memory.estimate_memory, with the model's Architecture built once per plan.

    `estimate_memory` rebuilds the architecture on every call (~0.2 ms of ~0.35 ms); the planner
    makes hundreds of calls for one model, so it reuses one build when the memory module offers
    its internal `_check`/`_estimate` pair, and falls back to the public function otherwise.
    """

    def __init__(self) -> None:
        self._arch: dict[int, object] = {}

    def __call__(self, model: ModelSpec, stack: Stack, shape: Shape):
        from advisor import memory

        if hasattr(memory, "_estimate") and hasattr(memory, "_check"):
            arch = self._arch.get(id(model))
            if arch is None:
                from advisor.architecture import build

                arch = self._arch[id(model)] = build(model)
            memory._check(arch, stack)
            return memory._estimate(arch, stack, shape)
        return memory.estimate_memory(model, stack, shape)


@dataclass
class _MemoryFit:
    """Memory of one stack as a function of micro-batch: device_total(mb) ≈ a + b·mb, checked exactly."""

    model: ModelSpec
    stack: Stack
    seq_len: int
    estimator: Estimator
    cache: dict = field(default_factory=dict)
    family: "_MemoryFit | None" = None  # same method/ckpt/attention/precision on 1 GPU: shares the per-sample slope

    def at(self, mb: int):
        if mb not in self.cache:
            self.cache[mb] = self.estimator(self.model, self.stack, Shape(micro_batch=mb, seq_len=self.seq_len))
        return self.cache[mb]

    def largest(self, limit: int, cap: int, smaller: "_MemoryFit | None" = None) -> int:
        """Largest micro-batch ≤ cap predicted to fit in `limit` (0 when none; 1 is always exact).

        Memory grows linearly with the micro-batch (activations per sequence), with the slope of
        the 1-GPU `family` stack; `verify` checks the guess with the estimator itself. `smaller`
        is the same stack with checkpointing and 8-bit states, which never needs more memory:
        when it does not fit at micro-batch 1, neither does this one (no estimate needed).
        """
        if smaller is not None and smaller is not self and smaller.at(1).device_total > limit:
            return 0
        one = self.at(1).device_total
        if one > limit:
            return 0
        if cap == 1:
            return 1
        return int(min(cap, max(1, 1 + (limit - one) // self.slope())))

    def slope(self) -> int:
        fam = self.family or self
        return max(fam.at(2).device_total - fam.at(1).device_total, 1)

    def verify(self, mb: int, limit: int) -> int:
        """The largest micro-batch ≤ mb that the estimator says fits (exact)."""
        while mb > 1 and self.at(mb).device_total > limit:
            mb -= 1
        return mb


# --------------------------------------------------------------------------- scoring


def score(priced, cfg, *, spot_rate: float, checkpoint_interval: float):
    """Hours and cost of every (priced offer × fitting config) pair, vectorised.

    `priced`: one row per offer and tier (columns gpu_model, gpu_count, provider, price, price_hour,
    spot_price_hour, ram_gb, spot); `cfg`: one row per fitting config (gpu_model, gpu_count, nodes,
    train_hours, setup_hours, ckpt_hours, cpu_ram). Returns offer_row/cfg_row positions and numbers.
    """
    import numpy as np
    import pandas as pd

    left = pd.DataFrame({"gpu_model": priced["gpu_model"].to_numpy(), "gpu_count": priced["gpu_count"].to_numpy(),
                         "offer_row": np.arange(len(priced))})
    right = pd.DataFrame({"gpu_model": cfg["gpu_model"].to_numpy(), "gpu_count": cfg["gpu_count"].to_numpy(),
                          "cfg_row": np.arange(len(cfg))})
    pairs = left.merge(right, on=["gpu_model", "gpu_count"], how="inner", sort=False)
    oi, ci = pairs["offer_row"].to_numpy(), pairs["cfg_row"].to_numpy()

    nodes = cfg["nodes"].to_numpy(float)[ci]
    train = cfg["train_hours"].to_numpy(float)[ci]
    setup = np.broadcast_to(np.asarray(cfg["setup_hours"], float), (len(cfg),))[ci]
    ckpt = cfg["ckpt_hours"].to_numpy(float)[ci]
    is_spot = priced["spot"].to_numpy(bool)[oi]
    od_price = priced["price_hour"].to_numpy(float)[oi]
    sp_price = priced["spot_price_hour"].to_numpy(float)[oi]
    provider = priced["provider"]
    b = billing()
    inc = provider.map({k: v["increment_s"] for k, v in b["providers"].items()}).fillna(
        b["default"]["increment_s"]).to_numpy(float)[oi]
    mins = provider.map({k: v["minimum_s"] for k, v in b["providers"].items()}).fillna(
        b["default"]["minimum_s"]).to_numpy(float)[oi]

    def billed(h):
        return np.ceil(np.maximum(h * 3600, mins) / inc - 1e-9) * inc / 3600

    hours_od = train + setup
    # spot: lose half a checkpoint interval + a restart per interruption; pay for each checkpoint write
    hours_spot = hours_od + train * spot_rate * (checkpoint_interval / 2 + setup + ckpt) \
        + np.floor(train / checkpoint_interval) * ckpt
    cost_od = billed(hours_od) * od_price * nodes
    with np.errstate(invalid="ignore"):
        cost_spot = billed(hours_spot) * sp_price * nodes  # NaN where no spot price
    ram = pd.to_numeric(priced["ram_gb"], errors="coerce").fillna(0).to_numpy(float)[oi]
    return pd.DataFrame({
        "offer_row": oi, "cfg_row": ci,
        "hours": np.where(is_spot, hours_spot, hours_od),
        "cost_usd": np.where(is_spot, cost_spot, cost_od),
        "cost_on_demand_usd": cost_od, "cost_spot_usd": cost_spot,
        "price_hour": od_price * nodes,
        "ram_ok": cfg["cpu_ram"].to_numpy(float)[ci] <= ram * 1e9 * CPU_RAM_USABLE,
    })


# --------------------------------------------------------------------------- plan


def _fmt_gb(b: float) -> str:
    return f"{b / 1e9:.1f} GB"


def _canonical_gpus(gpus: Iterable[str]) -> list[str]:
    from pricing.gpus import get_gpu

    return [get_gpu(g).name for g in gpus]


def _check_choice(field_: str, wanted: Iterable[str], valid: Iterable[str]) -> None:
    valid = sorted(set(valid))
    low = {v.lower() for v in valid}
    bad = [w for w in wanted if w.lower() not in low]
    if bad:
        raise BadInput(f"{field_}: unknown value {', '.join(repr(b) for b in bad)}; valid: {', '.join(valid)}.")


def _model_info(spec: ModelSpec, c) -> ModelInfo:
    return ModelInfo(name=spec.name, family=spec.family, source=spec.source, params_total=int(c.params_total),
                     params_trainable=int(c.params_total), params_active=int(c.matmul_active))


def plan(model: ModelSpec | str, *, tokens: float, epochs: float = 1, seq_len: int = 2048,
         global_batch: int | None = None, global_batch_tokens: int | None = None,
         methods: Iterable[str] = METHODS, offers=None, providers: Iterable[str] = (),
         regions: Iterable[str] = (), gpus: Iterable[str] = (), spot: bool = True, max_gpus: int | None = None,
         max_nodes: int = 1, budget: float | None = None, deadline_hours: float | None = None,
         headroom: float = 0.10, mfu: float | None = None, setup_hours: float | None = None,
         sort: str = "cost", top: int = 20, interruptions_per_hour: float | None = None,
         checkpoint_interval_hours: float | None = None, network_gbps: float | None = None,
         estimator: Estimator | None = None, command: str = "", distinct: bool = True) -> Plan:
    """Rank every offer × nodes × stack for a fine-tuning job of `tokens` × `epochs` training tokens.

    `distinct`: rank one candidate per offer × node count × method (its best stack); False ranks
    every stack variant."""
    import numpy as np
    import pandas as pd

    from pricing.gpus import canonical_name, get_gpu

    # ---------------------------------------------------------------- inputs
    methods = tuple(dict.fromkeys(methods))
    _check_choice("--methods", methods, METHODS)
    if tokens is None or tokens <= 0:
        raise BadInput(f"--tokens: must be a positive number of training tokens, got {tokens}.")
    if epochs <= 0:
        raise BadInput(f"--epochs: must be positive, got {epochs}.")
    if not 0 <= headroom < 1:
        raise BadInput(f"--headroom: must be a fraction in [0, 1), got {headroom}.")
    if mfu is not None and not 0 < mfu <= 1:
        raise BadInput(f"--mfu: must be a fraction in (0, 1], got {mfu}.")
    if sort not in ("cost", "time"):
        raise BadInput(f"--sort: expected cost or time, got {sort!r}.")
    if max_nodes < 1:
        raise BadInput(f"--max-nodes: must be at least 1, got {max_nodes}.")
    if global_batch is None:
        global_batch = max(1, round(global_batch_tokens / seq_len)) if global_batch_tokens else DEFAULT_GLOBAL_BATCH
    if global_batch <= 0:
        raise BadInput(f"--global-batch: must be positive, got {global_batch}.")
    if not isinstance(model, ModelSpec):
        from advisor.models import load_model

        model = load_model(model)
    spec = model
    estimator = estimator or _DefaultEstimator()
    bill_cfg = billing()
    rate = bill_cfg["spot"]["interruptions_per_hour"] if interruptions_per_hour is None else interruptions_per_hour
    interval = (bill_cfg["spot"]["checkpoint_interval_hours"] if checkpoint_interval_hours is None
                else checkpoint_interval_hours)

    if offers is None:
        try:
            from pricing import load_offers

            offers = load_offers()
        except ImportError as exc:
            raise AdvisorError("No price sheet is available; run `gpu-advisor prices` to fetch or import one.") from exc
    if offers is None or len(offers) == 0:
        raise AdvisorError("No usable price sheet: no offers loaded; run `gpu-advisor prices` to fetch or import one.")
    off = offers.copy()
    off["price_hour"] = pd.to_numeric(off["price_hour"], errors="coerce")
    off["spot_price_hour"] = pd.to_numeric(off.get("spot_price_hour"), errors="coerce")
    off["gpu_count"] = pd.to_numeric(off["gpu_count"], errors="coerce")
    off = off[off["price_hour"].notna() & (off["price_hour"] > 0) & (off["gpu_count"] >= 1)]
    if len(off) == 0:
        raise AdvisorError("No usable price sheet: no offer has an on-demand price; run `gpu-advisor prices`.")
    off["gpu_count"] = off["gpu_count"].astype(int)
    off["gpu_model"] = off["gpu_model"].map(lambda g: canonical_name(str(g)) or str(g))
    rejected: dict[str, list] = {}

    def reject(reason: str, n: int, example: str = "") -> None:
        if n <= 0:
            return
        r = rejected.setdefault(reason, [0, example])
        r[0] += int(n)

    # filters: unknown names are errors listing the valid ones
    providers, regions = [p.lower() for p in providers], list(regions)
    if providers:
        _check_choice("--providers", providers, off["provider"].unique())
        off = off[off["provider"].str.lower().isin(providers)]
    if regions:
        _check_choice("--regions", regions, off["region"].unique())
        off = off[off["region"].str.lower().isin([r.lower() for r in regions])]
    if gpus:
        want = _canonical_gpus(gpus)
        _check_choice("--gpu", want, off["gpu_model"].unique())
        off = off[off["gpu_model"].isin(want)]
    known = off["gpu_model"].map(lambda g: canonical_name(g) is not None)
    for g, n in off.loc[~known, "gpu_model"].value_counts().items():
        reject(f"{g}: GPU not in the GPU table (pricing/data/gpus.csv)", n, g)
    off = off[known].reset_index(drop=True)

    c = counts(spec, Stack(method="lora"))
    train_tokens = float(tokens) * float(epochs)
    params = c.params_total

    # ---------------------------------------------------------------- configs (memory + time)
    eval_methods = tuple(dict.fromkeys(methods + ("full",)))  # full is always evaluated for the baseline
    hw = off[["gpu_model", "gpu_count"]].drop_duplicates().itertuples(index=False)
    fits_cache: dict[Stack, _MemoryFit] = {}
    families: dict[tuple, _MemoryFit] = {}
    smallest: dict[tuple, _MemoryFit] = {}
    counts_by_method = {m: counts(spec, Stack(method=m)) for m in eval_methods}
    rows = []

    def timing(row: dict) -> None:
        """Fill step time, throughput and training hours of a config at its micro-batch."""
        stack, mb, n = row["stack"], row["micro_batch"], row["stack"].gpus
        ga = max(1, math.ceil(global_batch / (mb * n)))
        r = step_time(counts_by_method[stack.method], stack, Shape(micro_batch=mb, seq_len=seq_len),
                      row["gpu"], grad_accum=ga, nodes=row["nodes"], gpus_per_node=row["gpu_count"], mfu=mfu,
                      network_gbps=network_gbps)
        tps = r["tokens_per_step"] / r["step_seconds"]
        row.update(grad_accum=ga, step_seconds=r["step_seconds"], tokens_per_sec=tps,
                   mfu=tps * r["model_flops_per_token"] / (n * r["peak_flops_per_gpu"]),
                   train_hours=math.ceil(train_tokens / r["tokens_per_step"]) * r["step_seconds"] / 3600)

    def settle(row: dict) -> bool:
        """Check a config's micro-batch with the estimator; False when it had to shrink."""
        if row["verified"]:
            return True
        fit: _MemoryFit = row["fit"]
        mb = fit.verify(row["micro_batch"], row["limit"])
        est = fit.at(mb)
        same = mb == row["micro_batch"]
        row.update(micro_batch=mb, peak=int(est.device_total), breakdown=est.breakdown,
                   cpu_ram=int(getattr(est, "cpu_ram_bytes", 0) or 0), verified=True)
        if not same:
            timing(row)
        return same

    for gpu_model, per_node in hw:
        gpu = get_gpu(gpu_model)
        limit = int(gpu.usable_bytes * (1 - headroom))
        for nodes in range(1, max_nodes + 1):
            n = per_node * nodes
            if max_gpus is not None and n > max_gpus:
                continue
            if n > global_batch:
                continue
            cap = min(MAX_MICRO_BATCH, max(1, global_batch // n))
            for stack in stacks_for(gpu, n, eval_methods, spec.family):
                fit = fits_cache.get(stack)
                if fit is None:
                    fkey = (stack.method, stack.grad_checkpointing, stack.attention, stack.precision)
                    if fkey not in families:
                        families[fkey] = _MemoryFit(spec, Stack(method=stack.method, precision=stack.precision,
                                                                grad_checkpointing=stack.grad_checkpointing,
                                                                attention=stack.attention), seq_len, estimator)
                    fit = fits_cache[stack] = _MemoryFit(spec, stack, seq_len, estimator, family=families[fkey])
                skey = (stack.method, stack.precision, stack.attention, n, stack.sharding, stack.offload)
                smaller = smallest.get(skey)
                if smaller is None:
                    small = stack.model_copy(update={"grad_checkpointing": True, "optimizer": "adamw-8bit"})
                    smaller = fits_cache.get(small) or _MemoryFit(spec, small, seq_len, estimator)
                    smallest[skey] = fits_cache[small] = smaller
                mb = fit.largest(limit, cap, smaller)
                one = fit.at(1) if (mb or 1 in fit.cache) else smaller.at(1)
                row = dict(gpu_model=gpu_model, gpu_count=per_node, nodes=nodes, stack=stack, gpu=gpu, fit=fit,
                           method=stack.method, micro_batch=mb, need1=int(one.device_total),
                           peak=int(one.device_total + max(mb - 1, 0) * (fit.slope() if mb > 1 else 0)),
                           cpu_ram=int(getattr(one, "cpu_ram_bytes", 0) or 0), usable=gpu.usable_bytes,
                           limit=limit, breakdown=one.breakdown, verified=mb <= 1)
                if mb > 0:
                    timing(row)
                rows.append(row)
    skipped_gpus = off["gpu_count"] > (max_gpus or 10**9)
    if max_gpus is not None:
        reject(f"--max-gpus {max_gpus} excludes larger instances", int(skipped_gpus.sum()),
               ", ".join(sorted(off.loc[skipped_gpus, "instance_type"].astype(str).unique())[:3]))
    big = off["gpu_count"] > global_batch
    reject(f"more GPUs than sequences in the global batch ({global_batch})", int(big.sum()),
           ", ".join(sorted(off.loc[big, "instance_type"].astype(str).unique())[:3]))

    # ---------------------------------------------------------------- priced offers
    frames = [off.assign(spot=False, price=off["price_hour"])]
    if spot:
        sp = off[off["spot_price_hour"].notna() & (off["spot_price_hour"] > 0)]
        frames.append(sp.assign(spot=True, price=sp["spot_price_hour"]))
    priced = pd.concat(frames, ignore_index=True)
    priced["offer_id"] = np.arange(len(priced))
    n_priced = priced.groupby(["gpu_model", "gpu_count"]).size().to_dict()
    setup = bill_cfg["setup"]
    weights_gb = params * 2 / 1e9
    fixed_rejections = dict(rejected)

    def select():
        """Score every candidate and pick what the plan shows (vectorised over candidates)."""
        rejected.clear()
        rejected.update({k: list(v) for k, v in fixed_rejections.items()})
        cols = ["gpu_model", "gpu_count", "nodes", "method", "micro_batch", "need1", "peak", "cpu_ram", "usable",
                "limit", "grad_accum", "step_seconds", "tokens_per_sec", "mfu", "train_hours"]
        cfg = pd.DataFrame([{k: r.get(k, np.nan) for k in cols} for r in rows], columns=cols)
        cfg["row"] = np.arange(len(cfg))
        is_full = (cfg["method"] == "full").to_numpy()
        out_gb = np.where(is_full, weights_gb, c.adapters_total * 4 / 1e9)
        cfg["setup_hours"] = (float(setup_hours) if setup_hours is not None else
                              setup["provisioning_hours"] + weights_gb / setup["download_gb_s"] / 3600
                              + out_gb / setup["checkpoint_write_gb_s"] / 3600)
        state_gb = np.where(is_full, params * 16 / 1e9, c.adapters_total * 16 / 1e9)
        cfg["ckpt_hours"] = state_gb / (setup["checkpoint_write_gb_s"] * cfg["nodes"].to_numpy(float)) / 3600
        cfg["n_priced"] = [n_priced.get((g, k), 0) for g, k in zip(cfg["gpu_model"], cfg["gpu_count"])]

        # rejections: configs that fit nowhere, counted once per priced offer they would have joined
        in_m = cfg["method"].isin(methods)
        nofit = cfg[in_m & (cfg["micro_batch"] == 0)]
        if len(nofit):
            fit_groups = set(map(tuple, cfg.loc[in_m & (cfg["micro_batch"] > 0),
                                                ["gpu_model", "gpu_count", "nodes", "method"]].itertuples(index=False)))
            for key, grp in nofit.groupby(["gpu_model", "gpu_count", "nodes", "method"]):
                g, pn, nodes, meth = key
                if key in fit_groups:
                    reject("stack variants that need more memory than a leaner stack on the same GPU",
                           grp["n_priced"].sum())
                    continue
                best = grp.loc[grp["need1"].idxmin()]
                ex = off[(off["gpu_model"] == g) & (off["gpu_count"] == pn)].iloc[0]
                where = f"{g} {best['usable'] / 2**30:.0f} GiB" + (f" ×{pn * nodes}" if pn * nodes > 1 else "")
                reject(f"{where}: {meth} fine-tuning needs {_fmt_gb(best['need1'])} per GPU even at micro-batch 1 "
                       f"(limit {_fmt_gb(best['limit'])} with {headroom:.0%} headroom)", grp["n_priced"].sum(),
                       f"{ex['provider']} {ex['instance_type']} · {rows[int(best['row'])]['stack'].label()}")

        fitting = cfg[cfg["micro_batch"] > 0].reset_index(drop=True)
        sc = score(priced, fitting, spot_rate=rate, checkpoint_interval=interval)
        cfg_row = sc["cfg_row"].to_numpy()
        sc["row"] = fitting["row"].to_numpy()[cfg_row]
        bad_ram = ~sc["ram_ok"].to_numpy()
        cmeth = fitting["method"].to_numpy()[cfg_row]
        i = np.flatnonzero(bad_ram & np.isin(cmeth, methods))
        if len(i):
            o = priced.iloc[sc["offer_row"].iat[i[0]]]
            reject(f"CPU offload needs more host RAM than the instance has (e.g. "
                   f"{_fmt_gb(fitting['cpu_ram'].iat[cfg_row[i[0]]])} vs {o['ram_gb']:g} GB)", len(i),
                   f"{o['provider']} {o['instance_type']}")
        sel = ~bad_ram & np.isin(cmeth, methods)
        cost, hours = sc["cost_usd"].to_numpy(), sc["hours"].to_numpy()

        notice = ""
        meets = sel.copy()
        if budget is not None:
            over = cost > budget
            reject(f"over the budget of ${budget:,.0f}", int((over & meets).sum()))
            meets &= ~over
        if deadline_hours is not None:
            late = hours > deadline_hours
            reject(f"misses the deadline of {deadline_hours:g} h", int((late & meets).sum()))
            meets &= ~late
        tie = sc["offer_row"].to_numpy() * (len(rows) + 1) + sc["row"].to_numpy()  # deterministic ties
        primary = (tie, hours, cost) if sort == "cost" else (tie, cost, hours)
        if sel.any() and not meets.any():
            what = " and ".join(x for x, v in (("budget", budget), ("deadline", deadline_hours)) if v is not None)
            notice = f"No candidate meets the {what}; showing the closest."
            viol = np.zeros(len(sc))
            if budget is not None:
                viol += np.maximum(cost / budget - 1, 0)
            if deadline_hours is not None:
                viol += np.maximum(hours / deadline_hours - 1, 0)
            pool = np.flatnonzero(sel)
            ranked = pool[np.lexsort((tie[pool], hours[pool], cost[pool], viol[pool]))]
        else:
            pool = np.flatnonzero(meets)
            ranked = pool[np.lexsort(tuple(k[pool] for k in primary))]
        # One row per instance offer × node count × method: its best stack. The variants behind
        # it (another optimizer or attention kernel at a higher cost) stay in the Pareto front and
        # the best-per lists' pool, but would crowd the ranking with near-copies.
        if distinct and len(ranked):
            nodes_c = fitting["nodes"].to_numpy(np.int64)[cfg_row]
            meth_c = np.unique(cmeth, return_inverse=True)[1].astype(np.int64)
            group = (sc["offer_row"].to_numpy(np.int64) * 4096 + nodes_c) * 8 + meth_c
            _, first = np.unique(group[ranked], return_index=True)
            ranked = ranked[np.sort(first)]
        if not sel.any():
            notice = ("Nothing fits: no offer can hold this job with the allowed settings."
                      if len(priced) else "No offer matches the filters.")
        # Pareto front (cost vs hours) over what meets the constraints (or the closest pool)
        by_cost = pool[np.lexsort((tie[pool], hours[pool], cost[pool]))]
        h = hours[by_cost]
        prev = np.concatenate(([np.inf], np.minimum.accumulate(h)[:-1])) if len(h) else h
        pareto = by_cost[h < prev]
        order = pool[np.lexsort(tuple(k[pool] for k in primary))]
        best = {}
        for column in ("gpu_model", "provider"):
            vals = priced[column].to_numpy()[sc["offer_row"].to_numpy()[order]]
            _, first = np.unique(vals, return_index=True)
            best[column] = [order[j] for j in sorted(first)]
        # naive baseline: full fine-tuning, on demand, on the cheapest instance where it fits
        b = np.flatnonzero(~bad_ram & (cmeth == "full") & ~priced["spot"].to_numpy()[sc["offer_row"].to_numpy()])
        baseline = b[np.lexsort((tie[b], cost[b], sc["price_hour"].to_numpy()[b]))][:1]
        shown = np.concatenate([ranked[:top], pareto, *map(np.asarray, best.values()), baseline]).astype(int)
        return dict(sc=sc, ranked=ranked, pareto=pareto, best=best, baseline=baseline, notice=notice,
                    scored=int(sel.sum()), meets=int(meets.sum()), shown=shown)

    # micro-batches of everything shown are checked with the estimator; re-rank if one shrank
    for _ in range(20):
        picked = select()
        stale_rows = {int(r) for r in picked["sc"]["row"].to_numpy()[picked["shown"]]}
        if all([settle(rows[r]) for r in sorted(stale_rows)]):
            break
    else:  # pragma: no cover - only if the estimator is far from linear in the micro-batch
        for r in rows:
            if r["micro_batch"] > 0:
                settle(r)
        picked = select()
    sc, notice = picked["sc"], picked["notice"]

    def to_candidate(i: int, rank: int = 0) -> Candidate:
        r = sc.iloc[int(i)]
        o = priced.iloc[int(r["offer_row"])]
        f = rows[int(r["row"])]
        st: Stack = f["stack"]
        stale = o.get("stale", False)
        return Candidate(
            rank=rank, provider=str(o["provider"]), region=str(o["region"]), instance_type=str(o["instance_type"]),
            gpu_model=str(o["gpu_model"]), gpu_count=int(o["gpu_count"]), nodes=int(f["nodes"]),
            spot=bool(o["spot"]), method=st.method, precision=st.precision, optimizer=st.optimizer,
            grad_checkpointing=st.grad_checkpointing, attention=st.attention, sharding=st.sharding,
            offload=st.offload, lora_rank=None if st.method == "full" else st.lora_rank,
            micro_batch=int(f["micro_batch"]), grad_accum=int(f["grad_accum"]), seq_len=seq_len,
            peak_memory_bytes=int(f["peak"]), gpu_memory_bytes=int(f["usable"]),
            headroom_bytes=int(f["usable"] - f["peak"]), tokens_per_sec=float(f["tokens_per_sec"]),
            mfu=float(f["mfu"]), hours=float(r["hours"]), train_hours=float(f["train_hours"]),
            cost_usd=float(r["cost_usd"]), cost_on_demand_usd=float(r["cost_on_demand_usd"]),
            cost_spot_usd=None if np.isnan(r["cost_spot_usd"]) else float(r["cost_spot_usd"]),
            usd_per_m_tokens=float(r["cost_usd"]) / (train_tokens / 1e6),
            price_hour=float(o["price"]) * int(f["nodes"]),
            price_source=str(o.get("source", "")), price_date=str(o.get("fetched_at", ""))[:10],
            price_stale=bool(stale) if isinstance(stale, (bool, np.bool_)) else False,
            stack_label=st.label() + (f" · {int(f['nodes'])} nodes" if f["nodes"] > 1 else ""),
            memory=f["breakdown"] if isinstance(f["breakdown"], Breakdown) else None,
        )

    # every candidate carries its place in the full ranking (0: outside it, e.g. the baseline)
    position = {int(i): k + 1 for k, i in enumerate(picked["ranked"])}
    candidates = [to_candidate(i, k + 1) for k, i in enumerate(picked["ranked"][:top])]
    pareto_c = [to_candidate(i, position.get(int(i), 0)) for i in picked["pareto"]]

    def best_by(column: str) -> dict[str, Candidate]:
        out = {}
        for i in picked["best"][column]:
            cand = to_candidate(i, position.get(int(i), 0))
            out[cand.gpu_model if column == "gpu_model" else cand.provider] = cand
        return out

    best_gpu, best_provider = best_by("gpu_model"), best_by("provider")
    baseline = (to_candidate(picked["baseline"][0], position.get(int(picked["baseline"][0]), 0))
                if len(picked["baseline"]) else None)
    saving = (baseline.cost_usd - candidates[0].cost_usd) if (baseline and candidates) else None
    scored, meets_n = picked["scored"], picked["meets"]

    rej = sorted((Rejection(reason=k, count=v[0], example=v[1]) for k, v in rejected.items()),
                 key=lambda r: -r.count)
    assumptions = {
        "headroom": headroom, "mfu_override": mfu, "sort": sort,
        "candidates_scored": int(scored), "candidates_meeting_constraints": int(meets_n),
        "configs_evaluated": len(rows),
        "memory_estimates": int(sum(len(f.cache) for f in {id(f): f for f in [*fits_cache.values(),
                                                                               *families.values()]}.values())),
        "setup_hours": setup_hours if setup_hours is not None else
        f"{setup['provisioning_hours']} h provisioning + download at {setup['download_gb_s']} GB/s "
        f"+ checkpoint at {setup['checkpoint_write_gb_s']} GB/s",
        "spot_interruptions_per_hour": rate, "checkpoint_interval_hours": interval,
        "billing": "per provider, advisor/data/billing.json", "currency": "USD",
        "time_model": "advisor/throughput.py + advisor/data/mfu.json",
        "precision_rule": "bf16 where supported; fp16 (LoRA/QLoRA) or amp-fp16 (full) on T4/V100",
        "optimizers": ", ".join(OPTIMIZERS), "lora_rank": 16,
    }
    workload = {"tokens": int(tokens), "epochs": epochs, "train_tokens": int(train_tokens), "seq_len": seq_len,
                "global_batch": global_batch, "global_batch_tokens": global_batch * seq_len,
                "methods": ",".join(methods), "budget_usd": budget, "deadline_hours": deadline_hours,
                "max_nodes": max_nodes, "max_gpus": max_gpus, "spot": spot}
    warnings = list(getattr(offers, "attrs", {}).get("problems", []))[:20]
    return Plan(model=_model_info(spec, c), workload=workload, candidates=candidates, pareto=pareto_c,
                baseline=baseline, best_per_gpu=best_gpu, best_per_provider=best_provider, rejected=rej,
                assumptions=assumptions, warnings=warnings, command=command,
                generated_at=datetime.now(UTC).isoformat(timespec="seconds"), saving_vs_baseline_usd=saving,
                notice=notice)
