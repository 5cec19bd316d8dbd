"""Price sheets: one schema for every provider, a bundled snapshot (each row dated only as its source
dates it), cluster and managed fine-tuning sheets, user sheets,
importers, live fetchers and an atomic cache. Knows nothing of `advisor` or `reports`.

`load_offers(...)` -> validated pandas DataFrame (see pricing.loader); imports are lazy so
`import pricing` costs nothing until prices are needed.
"""

__all__ = ["load_offers", "sources_status"]


def __getattr__(name: str):
    if name in __all__:
        from pricing import loader

        return getattr(loader, name)
    raise AttributeError(name)
