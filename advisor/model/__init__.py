"""The model side: what a model is (`spec.ModelSpec`), the catalog of known models and how a name, a
config.json or a Hub id becomes a spec (`catalog`), per-family traits (`families`), and the module
inventory the estimator counts from (`architecture`)."""
