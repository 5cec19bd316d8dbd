"""A page's query string -> the `plan` command's own options, validated by the command itself.

`gpu-advisor serve` takes the plan's inputs as query names spelled like the CLI's long options
(`/plan?model=...&max-nodes=2&spot=on`). The query is turned into the argument list a user would type
(`--model=... --max-nodes=2 --spot`) and handed to the `plan` command's own click parsing, then to
`PlanRequest.from_options` (what `build_plan` calls first): every value meets the same types, ranges
and sentences as on the command line, and there is no second validator that could drift. Options
that read files from the server's disk or choose the output are refused by name; the price sheets
are the server's, given when it starts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import click

from advisor.errors import BadInput
from advisor.planner import PlanRequest
from cli.plan import command_line, plan as plan_command
from cli.workload_sources import SOURCE_KEYS

_LEADING_FLAG = re.compile(r"^--([a-z0-9][a-z0-9-]*)")  # "--examples: ..." -> "examples: ..."
_QUOTED_FLAG = re.compile(r"'--([a-z0-9][a-z0-9-]*)'")
MAX_FIELDS = 40  # names in one query: the plan has about 50 options, a page sets a handful
MAX_VALUE_CHARS = 600  # a model name is at most 512 characters (advisor.models.MAX_NAME_CHARS)
# Query names of `plan` options the server does not take, and why (the answer names the reason).
REFUSED = {
    **dict.fromkeys(("prices", "discount", "skip-bad-rows"),
                    "the price sheets and discounts are the server's, set when it starts (gpu-advisor serve --prices)"),
    **dict.fromkeys(("file", "measured", "dataset", "text-field", "messages-field", "tokenizer", "from-config"),
                    "the server reads no files named in a query"),
    **dict.fromkeys(("format", "report"), "each page has its format (/plan, /plan.json, /report.md)"),
}


@dataclass(frozen=True)
class Scenario:
    """One validated plan: the options `build_plan` takes, the cache key, and the query that made it."""

    options: dict = field(hash=False, compare=False)
    key: str  # the PlanRequest's fields as JSON: '100M' and '100000000' plan the same
    query: str  # the user's names and values, empty ones dropped: links reproduce the page
    pairs: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        """The inputs as a reader scans them: model=... · tokens=..."""
        return " · ".join(f"{k}={v}" for k, v in self.pairs)

    def command(self, fmt: str = "table") -> str:
        """The `gpu-advisor plan ...` line that makes this plan (the plan JSON's `command` field)."""
        return command_line({k: v for k, v in self.options.items() if k != "command"}, fmt=fmt)


def split(query: str) -> list[tuple[str, str]]:
    """name=value pairs in order (blank values kept: a form sends every field)."""
    try:
        return parse_qsl(query, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FIELDS,
                         errors="strict")
    except UnicodeDecodeError:
        raise BadInput("the query is not UTF-8 text.") from None
    except ValueError:
        raise BadInput(f"the query has more than {MAX_FIELDS} fields.") from None


def filled(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs that carry a value (an empty form field means: not set)."""
    return [(k, v) for k, v in pairs if v.strip() != ""]


def option_names() -> dict[str, tuple[click.Option, bool]]:
    """Query name -> (plan option, is the `--no-...` half of an on/off pair), from the command's own params."""
    names: dict[str, tuple[click.Option, bool]] = {}
    for p in plan_command.params:
        if not isinstance(p, click.Option):
            continue
        for opt in p.opts:
            if opt.startswith("--"):
                names[opt[2:]] = (p, False)
        for opt in p.secondary_opts:
            names[opt[2:]] = (p, True)
    return {k: v for k, v in names.items() if k not in REFUSED and k != "help"}


def to_args(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """The command-line words for the pairs (`--name=value`, so a value can never read as an option;
    a switch takes on/off, true/false, 1/0, yes/no, as click's BOOL reads them)."""
    names, args, seen = option_names(), [], set()
    for name, value in pairs:
        if name in REFUSED:
            raise BadInput(f"{name}: not taken in a query; {REFUSED[name]}.")
        if name not in names:
            raise BadInput(f"unknown parameter {name[:80]!r}; the query names are the plan's options, "
                           "as `gpu-advisor plan --help` lists them without the dashes (model, tokens, methods, "
                           "max-nodes, ...).")
        if len(value) > MAX_VALUE_CHARS:
            raise BadInput(f"{name}: the value is longer than {MAX_VALUE_CHARS} characters.")
        option, negative = names[name]
        if option.name in seen:
            raise BadInput(f"{name}: given twice; give each option once.")
        seen.add(option.name)
        if not option.is_flag:
            args.append(f"--{name}={value}")
            continue
        try:
            on = click.BOOL.convert(value, option, None)
        except click.BadParameter:
            raise BadInput(f"{name}: a switch; give on or off (got {value[:80]!r}).") from None
        if on != negative:
            args.append(option.opts[0])
        elif option.secondary_opts:
            args.append(option.secondary_opts[0])
    return args


def parse(pairs: Iterable[tuple[str, str]], server_args: list[str]) -> Scenario:
    """Validate one scenario: the plan command's click parsing, then the PlanRequest it would make.
    `server_args` are the server's own --prices / --discount / --skip-bad-rows."""
    pairs = tuple(filled(pairs))
    try:
        ctx = plan_command.make_context("plan", to_args(pairs) + list(server_args))
    except click.UsageError as exc:  # "Invalid value for '--max-nodes'": the query's name, max-nodes
        raise BadInput(_QUOTED_FLAG.sub(r"'\1'", exc.format_message())) from None
    options = {k: v for k, v in ctx.params.items() if k not in ("fmt", "report")}
    _refuse_local_model(options.get("model"))
    try:
        request = PlanRequest.from_options({k: v for k, v in options.items()
                                            if k not in SOURCE_KEYS and k != "plan_file"})
    except BadInput as exc:  # the sentence names the query parameter, as the page's link spells it
        raise BadInput(_LEADING_FLAG.sub(r"\1", str(exc), count=1)) from None
    options["command"] = command_line(options, fmt="table")
    key = request.model_dump_json(exclude={"command"})
    return Scenario(options=options, key=key, query=encode(pairs), pairs=pairs)


def encode(pairs: Iterable[tuple[str, str]]) -> str:
    """A query string that keeps '/' and ',' readable (model=meta-llama/Llama-3.1-8B&methods=lora,qlora)."""
    return urlencode(list(pairs), safe="/,")


def _refuse_local_model(model: str | None) -> None:
    """A page plans catalog models and Hugging Face ids; a path would read a file on the server's disk."""
    if not model:
        return
    text = model.strip()
    local = text.startswith(("/", "~", ".", "\\")) or text.lower().endswith(".json")
    try:
        local = local or Path(text).exists()
    except (OSError, ValueError):
        local = True
    if local:
        raise BadInput(f"model: the server plans catalog names and Hugging Face ids, not files on its disk "
                       f"(got {text[:80]!r}).")
