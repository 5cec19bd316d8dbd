"""A provider is one data row (pricing/data/providers.csv): the planner, the launch bundle and the price
refresh all read it from there, so a row added to a copy of the file is known everywhere at once."""

from __future__ import annotations

import csv
import shutil

import pandas as pd
import pytest

from pricing import providers

NEW_ROW = {"name": "newcloud", "display_name": "New Cloud", "kind": "marketplace", "marketplace": "yes",
           "increment_s": "30", "minimum_s": "300", "billing_note": "per 30 s, 5 min minimum (test row)",
           "skypilot": "newsky", "dstack": "newbackend", "aliases": "new-cloud;NewCloudInc",
           "price_endpoint": "", "source": "https://example.invalid/pricing"}


@pytest.fixture
def with_new_provider(tmp_path, monkeypatch):
    """providers.csv copied with one more row, read in place of the bundled one."""
    from advisor.planner import costing

    copy = tmp_path / "providers.csv"
    shutil.copy(providers.DATA, copy)
    with copy.open("a", encoding="utf-8", newline="") as fh:
        csv.DictWriter(fh, fieldnames=list(NEW_ROW)).writerow(NEW_ROW)
    monkeypatch.setattr(providers, "DATA", copy)
    providers.reload()
    costing.billing.cache_clear()
    yield
    monkeypatch.undo()
    providers.reload()
    costing.billing.cache_clear()


def test_a_provider_row_added_to_a_copy_is_known_to_the_planner_and_the_launchers(with_new_provider):
    from advisor.launch.caveats import sky_cloud
    from advisor.launch.launchers import dstack_backend
    from advisor.planner.costing import billing_increment
    from advisor.planner.ranking import marketplace

    priced = pd.DataFrame({"provider": ["NewCloud", "new-cloud", "aws"], "notes": [None, None, None]})
    assert marketplace(priced).tolist() == [True, True, False]  # the near-tie rule sees a marketplace
    assert billing_increment("newcloud") == (30, 300)  # costed on its billing terms
    assert sky_cloud("NewCloudInc") == "newsky" and dstack_backend("new-cloud") == "newbackend"
    assert "newsky" in providers.skypilot_clouds() and "newbackend" in providers.dstack_backends()


def test_without_the_row_the_same_provider_is_unknown():
    from advisor.launch.launchers import dstack_backend
    from advisor.planner.costing import billing_increment

    assert providers.get("newcloud") is None and dstack_backend("newcloud") is None
    assert billing_increment("newcloud") == (3600, 3600)  # unknown: per started hour


def test_launcher_names_and_aliases_resolve_as_the_bundled_rows_say():
    from advisor.launch.caveats import SKYPILOT_CLOUDS, sky_cloud
    from advisor.launch.launchers import dstack_backend

    assert (sky_cloud("lambdalabs"), sky_cloud("google"), sky_cloud("Amazon")) == ("lambda", "gcp", "aws")
    assert (dstack_backend("vast"), dstack_backend("vast.ai"), dstack_backend("jarvis")) == (
        "vastai", "vastai", "jarvislabs")
    assert dstack_backend("coreweave") is None  # dstack 0.22.5 has no CoreWeave backend
    assert sky_cloud("coreweave") == "coreweave" and "coreweave" not in SKYPILOT_CLOUDS


def test_every_row_is_well_formed_and_cited():
    rows = providers.providers()
    assert len(rows) >= 36
    for p in rows.values():
        assert p.kind in providers.KINDS and p.source.startswith("https://"), p
        assert (p.increment_s is None) == (p.minimum_s is None), p  # both billing terms or neither
        assert not p.marketplace or p.kind == "marketplace", p


def test_a_malformed_row_names_its_line(tmp_path, monkeypatch):
    bad = tmp_path / "providers.csv"
    text = providers.DATA.read_text(encoding="utf-8")
    bad.write_text(text + "oops,Oops,bank,no,,,,,,,,https://x.invalid\n", encoding="utf-8")
    monkeypatch.setattr(providers, "DATA", bad)
    providers.reload()
    try:
        with pytest.raises(ValueError, match=rf"line {len(text.splitlines()) + 1}: needs a name and a kind"):
            providers.providers()
    finally:
        monkeypatch.undo()
        providers.reload()


def test_every_price_source_module_has_the_price_source_shape():
    import importlib

    from pricing.sources import SOURCES

    for name, (module_name, _) in SOURCES.items():
        module = importlib.import_module(module_name)
        assert module.NAME == name and callable(module.fetch) and isinstance(module.DEFAULT_URL, str)


def test_sources_read_as_text_match_the_imported_modules():
    """SOURCES is read from the modules' text (fast starts); importing each module must give the same names,
    key variables, optional keys and order, and no module with a NAME may be missed."""
    import importlib
    from pathlib import Path

    import pricing.sources as sources

    imported = []
    for path in sorted(Path(sources.__file__).parent.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        module = importlib.import_module(f"pricing.sources.{path.stem}")
        if isinstance(getattr(module, "NAME", None), str):
            imported.append((getattr(module, "ORDER", 100), module.NAME, module.__name__,
                             getattr(module, "KEY_ENV", None), getattr(module, "KEY_OPTIONAL", False) is True))
    imported.sort()
    assert list(sources.SOURCES) == [name for _, name, *_ in imported] and len(imported) >= 7
    assert sources.SOURCES == {name: (mod, key) for _, name, mod, key, _ in imported}
    assert sources.KEY_OPTIONAL == {name for _, name, _, _, optional in imported if optional}
