"""Errors the CLI turns into one line on stderr and an exit code (2: bad input, 1: runtime).

Any exception with an integer `exit_code` attribute is treated the same way, so `pricing`
(which must not import `advisor`) can define its own.
"""


class AdvisorError(Exception):
    """A runtime failure the user can act on (exit 1)."""

    exit_code = 1


class BadInput(AdvisorError, ValueError):
    """Input that cannot be used: names the field and the accepted values (exit 2)."""

    exit_code = 2


def validation_message(exc) -> str:
    """One sentence from a pydantic ValidationError: the field and what it accepts."""
    errors = exc.errors()
    if not errors:
        return str(exc)
    err = errors[0]
    ctx = err.get("ctx") or {}
    if isinstance(ctx.get("error"), Exception) and str(ctx["error"]).startswith("--"):
        return str(ctx["error"])  # our validators already name the option
    field = ".".join(str(p) for p in err.get("loc", ())) or "input"
    msg = err.get("msg", "invalid value")
    if "expected" in ctx:
        msg = f"expected {ctx['expected']}"
    if isinstance(ctx.get("error"), Exception):
        msg = str(ctx["error"])
    got = repr(err.get("input"))
    if len(got) > ECHO_CHARS:  # a whole plan or sheet row is the input of a model-level check: name, don't dump
        got = got[:ECHO_CHARS] + "…"
    return f"--{field.replace('_', '-')}: {msg} (got {got})."


ECHO_CHARS = 120  # how much of a refused value the one-line error repeats
