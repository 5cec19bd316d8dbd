"""Errors raised by `pricing`; the CLI turns any `exit_code` into one line on stderr.

`pricing` must not import `advisor`, so it defines its own (same contract as advisor.errors).
"""


class PricingError(Exception):
    """A runtime failure the user can act on (exit 1): a fetch failed, a cache is unreadable."""

    exit_code = 1


class PriceInputError(PricingError, ValueError):
    """Bad input (exit 2): names the option or field and lists the accepted values."""

    exit_code = 2


class FetchError(PricingError):
    """A fetch that failed; the message names the URL and, for bad payloads, the field."""

    def __init__(self, url: str, message: str):
        super().__init__(f"{url}: {message}")
        self.url = url


def unknown(option: str, value: str, valid) -> PriceInputError:
    """`--gpu: unknown value 'X'; valid: a, b, c` with close matches first."""
    import difflib

    valid = sorted({str(v) for v in valid})
    close = difflib.get_close_matches(str(value), valid, n=3, cutoff=0.5)
    show = [f"'{v}'" if "," in v else v for v in valid]  # Vast regions contain commas
    hint = f" Did you mean {', '.join(show[valid.index(c)] for c in close)}?" if close else ""
    return PriceInputError(f"{option}: unknown value '{value}'.{hint} Valid: {', '.join(show)}.")
