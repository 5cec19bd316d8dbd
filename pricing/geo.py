"""Where an offer's host is: the country (ISO 3166-1 alpha-2) and continent of a price row's region,
so a plan can keep data in a jurisdiction (`plan --regions DE` or `--regions EU,US`).

Region names are the providers' own. A marketplace row spells its place ("Germany, DE, EU", "US, NA",
"JP"); a cloud region maps by the provider's published region list (the table below, one line per
region, from each provider's regions page); a region this module cannot place is unknown (""), which a
country or continent filter leaves out, never guesses. Continents: NA, SA, EU (Europe, the continent:
Norway, the UK and Switzerland included), AS, OC, AF, AN. A code that is both a continent and a country
(NA Namibia, SA Saudi Arabia, AS American Samoa, AF Afghanistan) means the continent.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

COUNTRIES_FILE = Path(__file__).resolve().parent / "data" / "countries.csv"
CONTINENTS = {"NA": "North America", "SA": "South America", "EU": "Europe", "AS": "Asia", "OC": "Oceania",
              "AF": "Africa", "AN": "Antarctica"}

# Cloud regions -> country. AWS: https://docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html;
# GCP: https://cloud.google.com/compute/docs/regions-zones; Azure: https://learn.microsoft.com/azure/reliability/
# regions-list; Lambda: https://docs.lambda.ai/public-cloud/on-demand/#regions; OCI:
# https://docs.oracle.com/iaas/Content/General/Concepts/regions.htm; Nebius: https://docs.nebius.com/overview/regions;
# Cudo: https://www.cudocompute.com/regions. Regions a provider reuses under one name (us-east-1) mean the same country.
REGION_COUNTRY = {
    # AWS
    "us-east-1": "US", "us-east-2": "US", "us-west-1": "US", "us-west-2": "US", "ca-central-1": "CA",
    "sa-east-1": "BR", "eu-central-1": "DE", "eu-central-2": "CH", "eu-west-1": "IE", "eu-west-2": "GB",
    "eu-west-3": "FR", "eu-north-1": "SE", "eu-south-1": "IT", "eu-south-2": "ES", "ap-northeast-1": "JP",
    "ap-northeast-2": "KR", "ap-northeast-3": "JP", "ap-south-1": "IN", "ap-southeast-1": "SG",
    "ap-southeast-2": "AU", "ap-southeast-3": "ID", "ap-east-1": "HK", "me-south-1": "BH", "me-central-1": "AE",
    # GCP
    "us-central1": "US", "us-east1": "US", "us-east4": "US", "us-east5": "US", "us-south1": "US", "us-west1": "US",
    "us-west2": "US", "us-west3": "US", "us-west4": "US", "northamerica-northeast1": "CA",
    "northamerica-northeast2": "CA", "southamerica-east1": "BR", "europe-west1": "BE", "europe-west2": "GB",
    "europe-west3": "DE", "europe-west4": "NL", "europe-west6": "CH", "europe-west9": "FR", "europe-north1": "FI",
    "europe-central2": "PL", "asia-east1": "TW", "asia-east2": "HK", "asia-northeast1": "JP", "asia-northeast3": "KR",
    "asia-south1": "IN", "asia-south2": "IN", "asia-southeast1": "SG", "asia-southeast2": "ID",
    "australia-southeast1": "AU", "me-west1": "IL", "me-central2": "SA",
    # Azure
    "eastus": "US", "eastus2": "US", "centralus": "US", "southcentralus": "US", "northcentralus": "US",
    "westus": "US", "westus2": "US", "westus3": "US", "westeurope": "NL",
    # Lambda
    "us-south-1": "US", "us-south-2": "US", "us-south-3": "US", "us-midwest-1": "US", "us-west-3": "US",
    "us-east-3": "US", "europe-central-1": "DE", "asia-south-1": "IN", "asia-northeast-1": "JP",
    "asia-northeast-2": "KR", "me-west-1": "IL", "australia-east-1": "AU",
    # OCI, Nebius, Cudo and others
    "eu-amsterdam-1": "NL", "eu-stockholm-1": "SE", "se-stockholm-1": "SE", "no-kristiansand-1": "NO",
    "us-carlsbad-1": "US", "us-dallas-1": "US", "us-newyork-1": "US", "ca-montreal-3": "CA", "eu-north1": "FI",
    "eu-west1": "FR", "east coast (ny2)": "US", "finland": "FI",
}


@lru_cache(maxsize=1)
def countries() -> dict[str, tuple[str, str]]:
    """ISO code -> (name, continent), from pricing/data/countries.csv."""
    lines = [ln for ln in COUNTRIES_FILE.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]
    return {r["code"]: (r["name"], r["continent"]) for r in csv.DictReader(lines)}


@lru_cache(maxsize=4096)
def country_of(region: str) -> str:
    """The ISO country code of a price row's region, or "" when it cannot be placed."""
    text = str(region or "").strip()
    known = countries()
    parts = [p.strip() for p in text.split(",")]
    if len(parts) >= 2:  # "Germany, DE, EU" / "US, NA" / "CN, AS": the two-letter country among them
        for p in parts:
            if len(p) == 2 and p.upper() in known and p.upper() not in CONTINENTS:
                return p.upper()
        if parts[0].upper() in known:
            return parts[0].upper()
        return ""
    if len(text) == 2 and text.upper() in known and text.upper() not in CONTINENTS:
        return text.upper()
    return REGION_COUNTRY.get(text.lower(), "")


def continent_of(country: str) -> str:
    return countries().get(country, ("", ""))[1]


def place(region: str) -> str:
    """'Germany (DE)' for a region that can be placed, else 'unknown country'."""
    code = country_of(region)
    return f"{countries()[code][0]} ({code})" if code else "unknown country"


def parse_codes(codes) -> tuple[set[str], set[str], list[str]]:
    """(countries, continents, other words) from --regions: two-letter codes are continents (CONTINENTS
    first) or ISO countries; anything longer is a provider region name, matched as given."""
    want_c, want_k, names = set(), set(), []
    for code in codes:
        c = str(code).strip()
        if c.upper() in CONTINENTS:
            want_k.add(c.upper())
        elif len(c) == 2 and c.upper() in countries():
            want_c.add(c.upper())
        else:
            names.append(c)
    return want_c, want_k, names


def matches(regions, countries_: set[str], continents: set[str]):
    """Mask of regions whose country is listed, or whose continent is."""
    import numpy as np

    out = []
    for r in regions:
        code = country_of(r)
        out.append(bool(code) and (code in countries_ or continent_of(code) in continents))
    return np.asarray(out, bool)
