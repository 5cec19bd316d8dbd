"""The fields of the plan form at `/`: the plan's main options, named as the CLI names them.

Each field's name is the option's long name (the query name /plan reads) and its hint is the option's
own `--help` text, so the form cannot drift from `gpu-advisor plan`. Options a shared link carries
that the form has no field for are kept as plain text fields, so "change inputs" loses nothing.
"""

from __future__ import annotations

import click

from cli.serve_query import option_names

METHODS = [("", "all: full, LoRA, QLoRA"), ("lora", "LoRA"), ("qlora", "QLoRA"), ("full", "full fine-tuning"),
           ("lora,qlora", "LoRA or QLoRA")]
RISKS = [("", "p80 (default): a figure the run stays under four times in five"), ("p50", "p50: the median"), ("p90", "p90")]
SORTS = [("", "cost"), ("time", "time")]
# (legend, [(name, label, kind, choices or min)])
GROUPS = [
    ("What to train", [("model", "Model", "text", None), ("tokens", "Tokens", "text", None),
                       ("examples", "or examples", "text", None), ("avg-tokens", "× average tokens", "text", None),
                       ("methods", "Methods", "select", METHODS)]),
    ("Where", [("gpu", "GPU", "text", None), ("providers", "Providers", "text", None),
               ("regions", "Regions", "text", None), ("max-nodes", "Most instances", "number", 1),
               ("spot", "Also price spot capacity", "check", None)]),
    ("Limits and ranking", [("budget", "Budget (USD)", "number", 0), ("deadline", "Deadline", "text", None),
                            ("risk", "Risk", "select", RISKS), ("sort", "Rank by", "select", SORTS),
                            ("time-value", "Time value (USD per hour)", "number", 0)]),
]


def form_groups(values: dict[str, str]) -> list[dict]:
    """The fieldsets with their fields, filled from `values` (query name -> text)."""
    names = option_names()
    groups, shown = [], set()
    for legend, specs in GROUPS:
        fields = []
        for name, label, kind, extra in specs:
            option, _ = names[name]
            value = values.get(name, "")
            f = {"name": name, "label": label, "kind": kind, "hint": _hint(option), "value": value,
                 "placeholder": "", "min": extra if kind == "number" else None}
            if kind == "select":
                choices = list(extra)
                if value and value not in dict(choices):  # a link's own value stays selectable
                    choices.append((value, value))
                f["choices"] = choices
            if kind == "check":
                f["value"] = _on(value, option)
            fields.append(f)
            shown.add(name)
        groups.append({"legend": legend, "fields": fields})
    others = [{"name": k, "label": k, "kind": "text", "hint": _hint(names[k][0]) if k in names else "",
               "value": v, "placeholder": "", "min": None} for k, v in values.items() if k not in shown]
    if others:
        groups.append({"legend": "Other settings from the link", "fields": others})
    return groups


HINTS = {"model": "catalog name or Hugging Face id"}  # the server plans no config.json on its own disk


def _hint(option: click.Option) -> str:
    text = HINTS.get(option.name) or (option.help or "").split(" (")[0]
    return text if len(text) <= 90 else text[:90].rsplit(" ", 1)[0] + "…"


def _on(value: str, option: click.Option) -> bool:
    try:
        return bool(value) and bool(click.BOOL.convert(value, option, None))
    except click.BadParameter:
        return False
