"""The one place results become text tables, Markdown tables and CSV, with escaping done here.

Every command that prints rows (plan, prices list, models) calls `render_rows`; cells that came
from files or servers are made safe for their format once: `advisor.text.plain` for the
terminal (no escape sequences, no line breaks), `advisor.text.md` for Markdown, and
`pricing.files.csv_safe` for CSV (no spreadsheet formulas).
"""

from __future__ import annotations

import csv
import io
from typing import Iterable, Sequence

from advisor.text import md, plain

FORMATS = ("table", "md", "csv")


def render_rows(headers: Sequence[str], rows: Iterable[Sequence[object]], fmt: str = "table",
                right: Iterable[int] = ()) -> str:
    """`rows` as an aligned text table, a GitHub Markdown table or CSV (header first)."""
    rows = [list(r) for r in rows]
    if fmt == "csv":
        return csv_text(headers, rows)
    if fmt == "md":
        out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]  # headers: our own constants
        out += ["| " + " | ".join(md("" if x is None else x) for x in r) + " |" for r in rows]
        return "\n".join(out)
    cells = [[plain("" if x is None else x) for x in r] for r in rows]
    heads = [plain(h) for h in headers]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(heads)]
    align = set(right)

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in align else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    return "\n".join([line(heads)] + [line(r) for r in cells])


def csv_text(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """CSV with every text cell neutralised for spreadsheets (numbers stay numbers)."""
    from pricing.files import csv_safe

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([csv_safe(h) for h in headers])
    for r in rows:
        writer.writerow(["" if x is None else csv_safe(x) for x in r])
    return buf.getvalue().rstrip("\n")
