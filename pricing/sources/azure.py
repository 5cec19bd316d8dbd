"""Azure Retail Prices API -> our schema (public, no auth; PRICE_SOURCES.md §4).

GET <base>?$filter=serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and
armRegionName eq '<region>', then follow `NextPageLink` until it is null (same host only, no
page twice, at most GPU_ADVISOR_HTTP_MAX_PAGES pages per region).
Items are classified: Windows (productName contains ' Windows' or ' Win'), Low Priority,
DevTest, Reservation and Cloud Services items are dropped; skuName containing ' Spot' is the
spot price; the rest is on-demand. Specs (GPU, count, vCPUs, RAM) are not in this API: they
come from our instance table; GPU sizes missing from it are reported, not guessed.
"""

from __future__ import annotations

import datetime as dt

from pricing import http
from pricing.errors import FetchError
from pricing.gpus import get_gpu
from pricing.http import field
from pricing.instances import lookup
from pricing.schema import Problem

ORDER = 20  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "azure"
DEFAULT_URL = "https://prices.azure.com/api/retail/prices"
DEFAULT_REGIONS = ["eastus", "eastus2", "westus2", "westus3", "southcentralus", "centralus",
                   "northcentralus", "westus", "westeurope"]


def classify(item: dict) -> str | None:
    """'ondemand' | 'spot' | None (excluded) for one Items entry."""
    product = str(item.get("productName", ""))
    sku = str(item.get("skuName", ""))
    if item.get("type") not in (None, "Consumption") or item.get("reservationTerm"):
        return None
    if " Windows" in product or " Win" in product or "Cloud Services" in product:
        return None
    if sku.endswith("Low Priority") or str(item.get("unitOfMeasure", "1 Hour")) != "1 Hour":
        return None
    return "spot" if " Spot" in sku else "ondemand"


def parse_items(items: list, url: str, fetched_at: str):
    """Items from every page -> (DataFrame in our schema, problems)."""
    import pandas as pd

    prices: dict[tuple[str, str], dict] = {}
    problems: list[Problem] = []
    for i, it in enumerate(items, start=1):
        if not isinstance(it, dict):
            problems.append(Problem(url, i, "Items", "item is not an object", it))
            continue
        sku = it.get("armSkuName")
        if not isinstance(sku, str) or not sku.startswith("Standard_N"):
            continue  # not a GPU size
        kind = classify(it)
        price = it.get("retailPrice")
        if kind is None:
            continue
        if not isinstance(price, (int, float)) or price <= 0:
            problems.append(Problem(url, i, "retailPrice", "missing or <= 0", price))
            continue
        if str(it.get("currencyCode", "USD")) != "USD":
            problems.append(Problem(url, i, "currencyCode", "only USD is accepted",
                                    it.get("currencyCode")))
            continue
        region = str(it.get("armRegionName", "")).lower()
        slot = prices.setdefault((sku, region), {})
        slot[kind] = min(price, slot.get(kind, price))  # several meters: keep the cheapest
    rows = []
    for (sku, region), p in sorted(prices.items()):
        spec = lookup("azure", sku)
        if spec is None or not spec.gpu_model:
            problems.append(Problem(url, 0, "armSkuName", "GPU size not in pricing/data/instances.csv; "
                                    "add it to price this size", sku))
            continue
        od, spot = p.get("ondemand"), p.get("spot")
        notes = None
        if od is not None and spot is not None and spot >= od:
            spot, notes = None, "spot_suspect"
        rows.append({"provider": "azure", "region": region, "instance_type": sku,
                     "gpu_model": spec.gpu_model, "gpu_count": spec.gpu_count,
                     "gpu_memory_gb": get_gpu(spec.gpu_model).memory_gb, "vcpus": spec.vcpus,
                     "ram_gb": spec.ram_gb, "price_hour": od, "spot_price_hour": spot,
                     "currency": "USD", "source": f"azure-retail:{url}", "fetched_at": fetched_at,
                     "interconnect": spec.interconnect, "notes": notes})
    return pd.DataFrame(rows), problems


def fetch(base_url: str, regions=None, session=None, progress=None):
    """Every page of every region. `NextPageLink` is followed while it stays on the base URL's
    host (same scheme and port), never repeats a page, and the pages of one region stay under
    GPU_ADVISOR_HTTP_MAX_PAGES; anything else stops the fetch with a FetchError."""
    from urllib.parse import urljoin

    from requests.models import PreparedRequest

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    max_pages = http.settings()["max_pages"]
    items: list = []
    for region in regions or DEFAULT_REGIONS:
        flt = ("serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
               f"and armRegionName eq '{region}'")
        params: dict[str, str] | None = {"$filter": flt}  # the next pages' links carry it themselves
        url = base_url
        first = PreparedRequest()
        first.prepare_url(base_url, params)
        seen = {first.url, base_url}
        pages = 0
        while True:
            pages += 1
            if pages > max_pages:
                raise FetchError(url, f"more than {max_pages} pages for region {region} "
                                      "(GPU_ADVISOR_HTTP_MAX_PAGES); stopped following NextPageLink")
            page = http.get_json(url, session=session, params=params)
            items += field(page, "Items", url, list)
            nxt = page.get("NextPageLink") if isinstance(page, dict) else None
            if progress:
                progress(region)
            if not nxt:
                break
            if not isinstance(nxt, str):
                raise FetchError(url, f"field 'NextPageLink' is {type(nxt).__name__}, expected a URL")
            nxt = urljoin(url, nxt.strip())
            if not http.same_origin(nxt, base_url):
                raise FetchError(url, f"NextPageLink leaves the price server ({nxt[:120]!r}); "
                                      "refused to follow it")
            if nxt in seen:
                raise FetchError(url, f"NextPageLink repeats a page already fetched ({nxt[:120]!r}): "
                                      "a loop; stopped")
            seen.add(nxt)
            url, params = nxt, None
    return parse_items(items, base_url, now)
