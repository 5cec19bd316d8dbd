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
