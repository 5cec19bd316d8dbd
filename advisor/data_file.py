"""A JSON file a user hands us (a saved plan, an approval): read once, size and nesting limited, and its first
schema problem as one line. Both readers (cli/report.py plan_data, advisor/approval.py load) use these, so a
folder, a missing file, a bomb or a wrong field reads the same everywhere."""

from __future__ import annotations

from pathlib import Path

from advisor.errors import BadInput
from advisor.text import plain
from pricing.errors import PriceInputError
from pricing.files import load_json, read_text


def read_json(path: Path, what: str, max_bytes: int, wanted: str) -> object:
    """The parsed JSON of `path`, or one BadInput naming `what` (the option or argument) and `wanted` (what to
    give instead: "a file written by `gpu-advisor plan --format json`")."""
    name = plain(path)
    if path.is_dir():
        raise BadInput(f"{what}: {name} is a folder; give {wanted}.")
    if not path.exists():
        raise BadInput(f"{what}: {name} does not exist; give {wanted}.")
    try:
        return load_json(read_text(path, f"{what}: {name}", max_bytes=max_bytes), f"{what}: {name}",
                         max_bytes=max_bytes)
    except PriceInputError as exc:
        raise BadInput(f"{str(exc).rstrip('.')}.") from None


def first_problem(exc) -> tuple[str, str]:
    """(field path, message) of a pydantic ValidationError's first error, as plain text for one line."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
    ctx_error = (err.get("ctx") or {}).get("error")
    msg = str(ctx_error) if ctx_error is not None else err.get("msg", "invalid")
    return plain(field), plain(msg).rstrip(".")
