"""A GPU's identity is its canonical model, memory and form factor included (SXM/PCIe/NVL, 40/80 GB), in every key
(issue 46): one (provider, instance_type) never stands for two cards, in the loaded offers, across sheets, in the
observation matching, or in a plan's rows and warnings. Checked on the bundled data, where SkyPilot's vast catalog
names an A100 40 GB and an A100 80 GB host both `1x-A100_SXM4-32-65536`."""

from __future__ import annotations

import pytest

from advisor.planner import PlanRequest, plan
from advisor.results import Plan
from pricing import crosscheck, observations
from pricing.gpus import canonical_name
from pricing.loader import CONFLATED, load

TODAY = "2026-12-01"
SHARED = "1x-A100_SXM4-32-65536"  # the catalog name the bundled vast rows share
CZECH = "Czechia, CZ, EU"  # where the bundled sheet lists the A100-80GB host of that name
HEADER = ("provider,region,instance_type,gpu_model,gpu_count,gpu_memory_gb,vcpus,ram_gb,price_hour,currency,source,"
          "fetched_at\n")


@pytest.fixture(autouse=True)
def _today(monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_TODAY", TODAY)


def cards_per_name(df) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for p, t, g in df[["provider", "instance_type", "gpu_model"]].astype(str).to_numpy():
        out.setdefault((p, t), set()).add(canonical_name(g) or g)
    return out


def test_the_bundled_sheet_still_shares_a_name_between_two_cards():
    """The premise: the raw snapshot gives one vast name to two GPU identities (else this file tests nothing)."""
    raw, _ = load(include_cache=False)
    split = raw[crosscheck.catalog_names(raw) == SHARED]
    assert {canonical_name(g) for g in split["gpu_model"]} == {"A100", "A100-80GB"}


def test_every_loaded_name_is_one_card():
    df, _ = load(include_cache=False)
    shared = {k: v for k, v in cards_per_name(df).items() if len(v) > 1}
    assert shared == {}
    named = df[crosscheck.catalog_names(df) == SHARED]
    assert sorted(named["instance_type"]) == [f"{SHARED} [A100-80GB]", f"{SHARED} [A100]"]
    assert all(CONFLATED in n for n in named["notes"])


def test_a_user_row_under_the_shared_name_prices_its_own_card(tmp_path):
    """A user's quote for the Czech A100-80GB host under the catalog's bare name replaces the bundled row of that
    card and region (one key across sheets), and leaves the A100 40 GB rows alone."""
    sheet = tmp_path / "quote.csv"
    sheet.write_text(HEADER + f'vast,"{CZECH}",{SHARED},A100-80GB,1,80,32,64,0.80,USD,quote,2026-11-30\n')
    df, _ = load(user_sheets=[str(sheet)], include_cache=False)
    assert {k: v for k, v in cards_per_name(df).items() if len(v) > 1} == {}
    here = df[(crosscheck.catalog_names(df) == SHARED) & (df["region"] == CZECH)]
    assert len(here) == 1
    assert here["instance_type"].iat[0] == f"{SHARED} [A100-80GB]"
    assert here["price_hour"].iat[0] == pytest.approx(0.80)
    forty = df[(crosscheck.catalog_names(df) == SHARED) & (df["gpu_model"] == "A100")]
    assert len(forty) == 1 and forty["price_hour"].iat[0] == pytest.approx(0.93)


def test_an_observation_of_the_shared_name_matches_only_its_card(tmp_path):
    """An observation naming the catalog product for the A100-80GB pairs with that card's row as the same product
    (specificity 0), never with the A100 40 GB row of the same name."""
    path = tmp_path / "obs.csv"
    head = ("provider,product,region,gpu_model,gpu_count,tier,price_hour,price_unit,currency,observed_at,source,"
            "read_at,vcpus,ram_gb,notes,basis,sample_size\n")
    path.write_text(head + f'vast,{SHARED},"{CZECH}",A100-80GB,1,on-demand,0.95,instance,USD,2026-11-30,'
                           "https://vast.ai/console/create/,2026-12-01,,,,listing,\n")
    obs, problems = observations.read(path)
    assert not problems and len(obs) == 1
    df, _ = load(include_cache=False)
    pairs = crosscheck.candidates(df, obs, ("on-demand",))
    named = pairs[df["instance_type"].to_numpy()[pairs["i"].to_numpy()] == f"{SHARED} [A100-80GB]"]
    assert list(named["spec"]) == [0]
    models = {df["gpu_model"].iat[i] for i in pairs["i"]}
    assert models == {"A100-80GB"}


PLANS = {
    "vast-a100": dict(model="meta-llama/Llama-3.1-8B", tokens=100e6, methods=("lora",), providers=("vast",),
                      gpus=("A100", "A100-80GB")),
    "8b": dict(model="meta-llama/Llama-3.1-8B", tokens=100e6),
    "70b-qlora": dict(model="meta-llama/Llama-3.1-70B", tokens=100e6, methods=("qlora",)),
    "a100-any": dict(model="meta-llama/Llama-3.1-8B", tokens=50e6, methods=("lora",), gpus=("A100", "A100-80GB"),
                     allow_stale=True),
}


def shown_rows(p: Plan):
    rows = [*p.candidates, *p.pareto, *p.best_per_gpu.values(), *p.best_per_provider.values()]
    return rows + ([p.baseline] if p.baseline else [])


@pytest.mark.parametrize("name", list(PLANS))
def test_no_name_in_a_plan_or_its_warnings_stands_for_two_cards(name):
    p = plan(PlanRequest(**PLANS[name]))
    cards: dict[tuple[str, str], set[str]] = {}
    for c in shown_rows(p):
        cards.setdefault((c.offer.provider, c.offer.instance_type), set()).add(c.offer.gpu_model)
    assert {k: v for k, v in cards.items() if len(v) > 1} == {}
    by_rank = {c.rank: c for c in p.candidates}
    for f in p.findings:
        if "instance_type" in f.figures:  # a warning naming a row: the row of that rank, by that name
            c = by_rank[int(f["rank"])]
            assert (f["provider"], f["instance_type"]) == (c.offer.provider, c.offer.instance_type)
            assert cards[(c.offer.provider, c.offer.instance_type)] == {c.offer.gpu_model}
    if name == "vast-a100":  # both cards of the shared name are in this plan, each under its own name
        names = {c.offer.instance_type for c in shown_rows(p)}
        assert {f"{SHARED} [A100]", f"{SHARED} [A100-80GB]"} <= names
