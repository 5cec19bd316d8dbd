"""gpu-cost-advisor: will this fine-tuning run fit, where, how long, and for how much.

The public API is imported lazily so `import advisor` stays cheap for the CLI.
"""

__all__ = ["estimate_memory", "plan", "load_model"]


def __getattr__(name: str):
    if name == "estimate_memory":
        from advisor.memory import estimate_memory

        return estimate_memory
    if name == "load_model":
        from advisor.model.catalog import load_model

        return load_model
    if name == "plan":
        from advisor.planner import plan

        return plan
    raise AttributeError(name)
