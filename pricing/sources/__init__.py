"""Price sources: each module turns one provider's feed into our schema (pure `parse_*`)
and has a `fetch(base_url, regions, session, progress)` that does the HTTP."""

# name -> (module, default base URL, env var with an API key or None)
SOURCES = {
    "skypilot": ("pricing.sources.skypilot", None),
    "azure": ("pricing.sources.azure", None),
    "aws": ("pricing.sources.aws", None),
    "lambda": ("pricing.sources.lambda_", "LAMBDA_API_KEY"),
    "runpod": ("pricing.sources.runpod", "RUNPOD_API_KEY"),
    "vast": ("pricing.sources.vast", "VAST_API_KEY"),
    "gpuhunt": ("pricing.sources.gpuhunt", None),  # dstack's catalog; needs the optional gpuhunt package
}
