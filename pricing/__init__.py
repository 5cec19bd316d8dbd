"""Price sheets: one schema for every provider, a bundled dated snapshot, user sheets,
importers, live fetchers and an atomic cache. Knows nothing of `advisor` or `reports`."""

__all__ = ["load_offers"]


def __getattr__(name: str):
    if name == "load_offers":
        from pricing.loader import load_offers

        return load_offers
    raise AttributeError(name)
