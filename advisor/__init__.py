"""gpu-cost-advisor: will this fine-tuning run fit, where, how long, and for how much.

The public API (advisor/api.py) is handed on lazily, so that `import advisor.errors` (which runs this
file first) does not load the estimator and the planner: the CLI imports what each command needs.
"""

__all__ = ["estimate_memory", "estimate_throughput", "load_model", "plan"]


def __getattr__(name: str):
    if name in __all__:
        from advisor import api

        return getattr(api, name)
    raise AttributeError(name)
