"""Ranking rules a senior engineer signs: one row per distinct offer, near-ties settled by what
matters more than a few percent, and spot prices that look like placeholders kept off the headline.

- One offer, one row: the same provider, GPU, GPU count, price and network under several instance
  names (or regions) is one offer; only its best stack and method is ranked (per node count).
- Every candidate is ranked at one quantile of the time model's held-out error (--risk, default p80):
  the figure the table's cost and hours columns show.
- Near-ties are relative only: within NEAR_TIE_PCT percent of the cheapest remaining candidate (or the
  fastest, with --sort time), the tie-breakers pick, in TIE_BREAKERS order: the requested global batch
  kept exactly; fewer GPUs and nodes; clear of the memory limit (not tight); a calibrated time model; a
  non-marketplace seller; a known host (its RAM listed); a dated price before an undated one;
  then bf16 and unquantized base weights. A candidate promoted over a cheaper one says which rule did it
  (a mark in the table, its note, and `Why #1`). Since each pick is within NEAR_TIE_PCT of the cheapest
  candidate still unplaced, no row is more than NEAR_TIE_PCT dearer than any row below it.
- Spot sanity: a spot price that is a fixed fraction of on-demand across many instance types of one
  provider (a catalog placeholder, not a market price), or a row noted `spot_suspect`, is suspect.
"""

from __future__ import annotations

from advisor import techniques
from advisor.planner.costing import offer_billing
from advisor.planner.frame_memo import per_frame
from advisor.results.facts import Finding, FindingKind
from pricing import providers
from pricing.schema import mentions

# Time has a value (DESIGN.md "Recommendation policy"): rows are ranked on total = compute cost + wall hours x
# time value, both at the ranking quantile. The default is the loaded cost of one ML engineer per wall-clock hour
# of waiting: BLS OEWS May 2022, software developers' annual mean wage $132,930 (https://www.bls.gov/oes/, news
# release of 2023-04-25), over wages' share of employer compensation cost, 68.3 % (BLS ECEC September 2018,
# https://www.bls.gov/news.release/archives/ecec_12142018.htm): $194,627 a year, over 8,760 wall-clock hours a
# year = $22.22 per hour. A salary accrues per calendar hour, not per working hour, so a team blocked for a day
# loses 24 of these. `--time-value 0` ranks on compute cost alone. (advisor/explain/claims.py TIME_VALUE_SOURCE says
# where the default comes from, in the plan's `ranking` record.)
DEFAULT_TIME_VALUE = round(132_930 / 0.683 / 8_760, 2)  # 22.22 USD per wall-clock hour
MAX_TIME_VALUE = 100_000.0  # USD per hour: far above any team's waiting cost, refuses a typo's extra zeros

NEAR_TIE_PCT = 3.0  # DESIGN.md "Recommendation policy": a near-tie is within 3 % (relative only)
# The tie-breakers, in order (docs/plans.md "How the table ranks"); each names a preference where True is worse.
TIE_BREAKERS = ("requested global batch kept", "fewer GPUs and nodes", "clear of the memory limit", "calibrated",
                "no stack caveat", "non-marketplace", "known host", "dated price", "bf16", "unquantized")
# Risk is priced, not hidden (DESIGN.md "Recommendation policy"): a risky row -- a tight fit, an uncalibrated time
# model (fewer than three held-out rows) or a stack with a caveat (STACK_CAVEATS) -- loses to a safe row (none of
# the three) up to RISK_MARGIN_PCT dearer in total. 10 %: a tight fit's out-of-memory restart or a caveat's rebuilt
# environment costs hours of a team's time, and an uncalibrated band is about twice as wide (mfu.json `bands`
# unseen 0.32-1.53 against 0.6-1.3 for a calibrated class), so a few percent is not the price of that risk.
RISK_MARGIN_PCT = 10.0
RISK_RULE = "safe over risky"  # the rule name a row promoted by the risk margin carries
# Software stacks that do not install or run as the estimate assumes, keyed as the plan JSON records them:
# - "rocm-bitsandbytes": QLoRA's NF4 weights and 8-bit optimizers come from bitsandbytes, whose AMD ROCm support is
#   experimental ("We also have experimental support for additional platforms such as AMD ROCm",
#   https://huggingface.co/docs/bitsandbytes/v0.48.1/installation).
# - "aarch64-host": GH200's Grace CPU is aarch64; flash-attn publishes no prebuilt aarch64 wheel (Dao-AILab/
#   flash-attention issues #1866 "flash attention install on aarch64 grace hopper", #1875), so it builds from
#   source, and bitsandbytes' and vLLM's aarch64 wheels differ from their x86_64 ones (pricing/data/gpus.csv GH200).
# - "rocm-host": an AMD GPU runs ROCm, and the bundle installs CUDA builds of two pieces (ROCM_CUDA_PIECES):
#   requirements.txt pins torch from PyPI, whose Linux wheels are CUDA builds; ROCm's are separate wheels ("PyTorch
#   supports the ROCm platform by providing tested wheels packages ... select 'Linux', 'Python', 'pip', and 'ROCm'",
#   https://rocm.docs.amd.com/projects/install-on-linux/en/docs-6.2.0/how-to/3rd-party/pytorch-install.html); and a
#   flash stack's setup runs `pip install flash-attn --no-build-isolation`, which builds the CUDA kernels, while
#   ROCm's FlashAttention-2 is built from ROCm's own fork (Composable Kernel, `GPU_ARCHS=gfx942` for MI300) or its
#   Triton backend ("ROCm provides two different implementations of Flash Attention 2 modules",
#   https://rocmdocs.amd.com/en/develop/how-to/llm-fine-tuning-optimization/model-acceleration-libraries.html).
#   Liger Kernel's Triton kernels run on ROCm (v0.4.0 "Full AMD support", linkedin/Liger-Kernel README.md; Triton
#   "works seamlessly with AMD GPUs", https://rocm.docs.amd.com/projects/radeon/en/latest/docs/install/native_linux/
#   install-triton.html), so liger adds no caveat; bitsandbytes has its own (rocm-bitsandbytes).
STACK_CAVEATS = ("rocm-bitsandbytes", "rocm-host", "aarch64-host")
BITSANDBYTES_OPTIMIZERS = techniques.eight_bit()  # the 8-bit rows of advisor/data/optimizers.csv
# Sellers that list third-party hosts at prices their suppliers set: providers.csv's `marketplace` column
# (vast.ai; Hyperbolic's GPU Marketplace, "Suppliers set their own price", https://docs.hyperbolic.xyz/docs/gpu-marketplace-pricing).
MARKETPLACES = providers.marketplaces()
SUSPECT_SHARE_ROWS = 5  # instance types of one provider at one exact spot/on-demand ratio: a placeholder


def total(cost, hours, time_value: float):
    """What a row is ranked on (--sort cost): its compute cost plus its wall hours priced at the time value,
    both at the ranking quantile; a time value of 0 is the compute cost alone."""
    return cost + hours * time_value if time_value else cost


@per_frame
def offer_identity(priced):
    """An integer per offer row and tier: equal for the same provider, GPU, GPU count, price (and spot
    price, on the spot tier), fabric and billing terms."""
    import numpy as np
    import pandas as pd

    spot = priced["spot"].to_numpy(bool)
    spot_price = np.where(spot, priced["spot_price_hour"].round(6).fillna(-1).to_numpy(float), -1.0)  # its tier's

    inc, mins = offer_billing(priced)  # other billing terms (a sheet row's own increment): another offer
    keys = [priced["provider"].astype(str).str.lower(), priced["gpu_model"], priced["gpu_count"],
            priced["price_hour"].round(6), spot_price, priced["fabric_gbps"].fillna(-1), spot, inc, mins]
    return pd.MultiIndex.from_arrays(keys).factorize()[0]


def one_per_offer(ranked, identity, fitting, cfg_row):
    """The first (best) candidate of each distinct offer × node count, in rank order: its best stack
    and method (the others stay in the Pareto front and best-per pools)."""
    import numpy as np

    nodes = fitting["nodes"].to_numpy(np.int64)[cfg_row]
    group = identity.astype(np.int64) * 4096 + nodes
    _, first = np.unique(group[ranked], return_index=True)
    return ranked[np.sort(first)]


def marketplace(priced):
    import numpy as np

    return priced["provider"].astype(str).str.lower().isin(providers.marketplaces()).to_numpy() | np.asarray(
        mentions(priced["notes"], "marketplace"), bool)


def rocm_cuda_pieces(stack) -> tuple[str, ...]:
    """The packages the bundle installs as CUDA builds that an AMD (ROCm) host needs in its ROCm build: torch
    always (the PyPI pin), flash-attn when the stack uses FlashAttention-2 (STACK_CAVEATS "rocm-host")."""
    return ("torch",) + (("flash-attn",) if stack.attention == "flash" else ())


def stack_caveats(gpu, stack) -> tuple[str, ...]:
    """The STACK_CAVEATS keys that apply to this stack on this GPU (recorded on the row; worded by
    advisor.explain.notes)."""
    out = []
    amd = str(gpu.vendor).upper() == "AMD"
    if amd and (stack.method == "qlora" or stack.optimizer in BITSANDBYTES_OPTIMIZERS):
        out.append("rocm-bitsandbytes")
    if amd and rocm_cuda_pieces(stack):
        out.append("rocm-host")
    if "aarch64" in str(gpu.architecture).lower():
        out.append("aarch64-host")
    return tuple(out)


def risky(fitting, cfg_row):
    """Mask of candidates that carry a risk the risk margin prices: tight, uncalibrated or a stack caveat."""
    import numpy as np

    caveat = fitting["caveats"].to_numpy(bool)[cfg_row] if "caveats" in fitting else np.zeros(len(cfg_row), bool)
    return fitting["tight"].to_numpy(bool)[cfg_row] | ~fitting["calibrated"].to_numpy(bool)[cfg_row] | caveat


def preferences(sc, fitting, priced, request):
    """Per candidate, the tie-breakers (TIE_BREAKERS order) as sort keys, lower is better: the requested
    global batch not kept, the GPU count (then nodes), a tight fit, an uncalibrated time model, a
    marketplace seller, an unknown host, an undated price, no bf16, 4-bit base weights."""
    import numpy as np
    import pandas as pd

    ci, oi = sc["cfg_row"].to_numpy(), sc["offer_row"].to_numpy()
    gpus = fitting["gpus"].to_numpy(np.int64)[ci] if "gpus" in fitting else (
        fitting["gpu_count"].to_numpy(np.int64) * fitting["nodes"].to_numpy(np.int64))[ci]
    nodes = fitting["nodes"].to_numpy(np.int64)[ci]
    ram = pd.to_numeric(priced["ram_gb"], errors="coerce").to_numpy(float)
    return {"requested global batch kept": fitting["global_batch"].to_numpy(np.int64)[ci] != request.sequences_per_step,
            "fewer GPUs and nodes": gpus * 1024 + nodes,
            "clear of the memory limit": fitting["tight"].to_numpy(bool)[ci],
            "calibrated": ~fitting["calibrated"].to_numpy(bool)[ci],
            "no stack caveat": (fitting["caveats"].to_numpy(bool)[ci] if "caveats" in fitting
                                else np.zeros(len(ci), bool)),
            "non-marketplace": marketplace(priced)[oi],
            "known host": np.isnan(ram)[oi],
            "dated price": undated(priced)[oi],
            "bf16": ~fitting["bf16"].to_numpy(bool)[ci],
            "unquantized": (fitting["method"] == "qlora").to_numpy(bool)[ci]}


def undated(priced):
    """Mask of offer rows whose price has no observation date."""
    import numpy as np

    if "price_date" not in priced:
        return np.ones(len(priced), bool)
    dates = priced["price_date"].astype(str).to_numpy()
    return ~np.char.startswith(dates.astype("U"), "20")


SPOT_DATED_BY = ("confirmed", "disputed", "observation")  # pricing.crosscheck spot_check values a dated spot observation set


@per_frame
def undated_spot(priced):
    """Mask of offer rows whose spot price has no observation date of its own: never a spot headline nor a remedy.
    Dated: `spot_price_date` where the sheets carry it (the spot observation's own date); else a spot observation
    that checked it (pricing.crosscheck `spot_check` with `spot_checked_at`), or a dated row not from the bundled
    catalog (its `observed_at` dates both of its prices). A catalog row's on-demand date never dates its spot price."""
    import numpy as np
    import pandas as pd

    def dated(column):
        return priced[column].fillna("").astype(str).str.startswith("20").to_numpy() if column in priced else \
            np.zeros(len(priced), bool)

    if "spot_price_date" in priced:
        return ~dated("spot_price_date")
    checked = (priced["spot_check"].isin(SPOT_DATED_BY).to_numpy() if "spot_check" in priced
               else np.zeros(len(priced), bool)) & dated("spot_checked_at")
    # a row of the user's sheet, a fetched cache or a frame given to plan() dates both of its prices itself; the
    # bundled catalog's observed_at is the catalog commit's, not a spot quote's
    own = (priced["price_origin"] != "bundled").to_numpy() if "price_origin" in priced else np.ones(len(priced), bool)
    observed = pd.to_datetime(priced["observed_at"], errors="coerce", utc=True).notna().to_numpy() \
        if "observed_at" in priced else np.zeros(len(priced), bool)
    return ~(checked | (own & observed))


# A tie rule never promotes a row that takes this many times the wall time of the cheaper row it passes:
# at a 3 % price difference nobody trades 4.5 h for 16 h to rent fewer GPUs or a safer host.
SLOWER_LIMIT = 2.0


def prefer_in_near_ties(ranked, key, prefs: dict, window: int, gpus=None, nodes=None, what: str = "cheaper",
                        hours=None, risk=None, scale=None):
    """Re-order the first `window` positions: repeatedly take, among the candidates within NEAR_TIE_PCT
    of the best remaining key (and, given `hours`, under SLOWER_LIMIT times its wall time), the one the
    tie-breakers (in `prefs` order) favour, then the best key; given `risk` (a mask of risky candidates), a risky
    pick gives way to the best safe candidate within RISK_MARGIN_PCT of it (same wall-time guard). Given `scale`
    (each candidate's compute cost, when `key` is the total with the time value), a share is of the compute cost,
    so the time value never turns a 25 % price difference between equally fast rows into a near-tie.
    Returns (ranked, why by position, rule by position): `why` is the finding that a rule promoted a candidate
    over a cheaper (or faster) one (with both rows' figures; for the risk margin, the risky position passed and
    how much dearer, which advisor.planner.assemble completes with what made that row risky), `rule` names it
    (the table's mark)."""
    import numpy as np

    names = list(prefs)
    head, tail = list(ranked[:window * 4]), ranked[window * 4:]
    out, why, rule = [], {}, {}
    share = NEAR_TIE_PCT / 100
    base = key if scale is None else scale  # what a share is of
    while head and len(out) < window:
        best = key[head[0]]
        tied = [j for j in head if key[j] <= best + share * base[head[0]]
                and (hours is None or j == head[0] or hours[j] < SLOWER_LIMIT * hours[head[0]])]
        pick = min(tied, key=lambda j: (tuple(prefs[n][j] for n in names), key[j]))
        safer = _safer(head, pick, key, risk, hours, base)
        if safer is not None:
            why[int(safer)] = Finding(kind=FindingKind.SAFE_OVER_RISKY, figures={
                "beaten": int(pick), "margin_pct": RISK_MARGIN_PCT,
                "here_pct": float(100 * (key[safer] - key[pick]) / base[pick])})
            rule[int(safer)] = RISK_RULE
            out.append(safer)
            head.remove(safer)
            continue
        if key[pick] > best:
            beaten = head[0]
            name = next((n for n in names if prefs[n][pick] < prefs[n][beaten]), "equal on every tie-breaker")
            g = gpus if gpus is not None else np.zeros(len(key), int)
            n = nodes if nodes is not None else np.ones(len(key), int)
            why[int(pick)] = Finding(kind=FindingKind.NEAR_TIE, figures={
                "rule": name, "within_pct": NEAR_TIE_PCT, "what": what,
                "here_pct": float(100 * (key[pick] - best) / base[head[0]]),
                "gpus": int(g[pick]), "nodes": int(n[pick]), "beaten_gpus": int(g[beaten]),
                "beaten_nodes": int(n[beaten])})
            rule[int(pick)] = name
        out.append(pick)
        head.remove(pick)
    return np.concatenate([np.asarray(out + head, dtype=int), tail]).astype(int), why, rule


def _safer(head, pick, key, risk, hours, base):
    """The cheapest safe candidate within RISK_MARGIN_PCT (of `base`, the pick's compute cost or key) of a risky
    `pick` (under SLOWER_LIMIT times its wall time), or None when `pick` is safe or no safe one is that close."""
    if risk is None or not risk[pick]:
        return None
    margin = RISK_MARGIN_PCT / 100
    safe = [j for j in head if not risk[j] and key[j] <= key[pick] + margin * base[pick]
            and (hours is None or hours[j] < SLOWER_LIMIT * hours[pick])]
    return min(safe, key=lambda j: key[j]) if safe else None


@per_frame
def spot_suspect(priced):
    """Mask of rows whose spot price is suspect: noted `spot_suspect`, or the same exact fraction of
    on-demand as SUSPECT_SHARE_ROWS or more instance types of the provider (a placeholder)."""
    import numpy as np
    import pandas as pd

    noted = np.asarray(mentions(priced["notes"], "spot_suspect"), bool)
    ratio = (pd.to_numeric(priced["spot_price_hour"], errors="coerce") / priced["price_hour"]).round(4)
    frame = pd.DataFrame({"p": priced["provider"].astype(str).str.lower(), "r": ratio,
                          "k": priced["instance_type"].astype(str)})
    kinds = frame.dropna().groupby(["p", "r"])["k"].nunique()
    fixed = pd.MultiIndex.from_frame(frame[["p", "r"]]).isin(kinds[kinds >= SUSPECT_SHARE_ROWS].index)
    return noted | (fixed & ratio.notna().to_numpy())
