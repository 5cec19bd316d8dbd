"""The one place results become text tables, Markdown tables and CSV, with escaping done here.

Every command that prints rows calls `render_rows` (aligned text, Markdown, CSV) or, for the wide
tables people read in a terminal (plan, models), `render_table`: rich, fitted to the terminal
width, colour only on a TTY. Cells that came
from files or servers are made safe for their format once: `advisor.text.plain` for the
terminal (no escape sequences, no line breaks), `advisor.text.md` for Markdown, and
`pricing.files.csv_safe` for CSV (no spreadsheet formulas).
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import click

from advisor.text import md, plain
from cli.options import choice
from pricing import settings
from pricing.files import atomic_write, csv_safe

# Every output format a command may offer, in the order --help lists them.
OUTPUT_FORMATS = ("table", "json", "md", "csv")
FOLD = 22  # the narrowest a text column is folded to before columns are left out
_TO_FILE = False  # set while `emit` renders for -o/--out: no terminal width, no colour


def output_options(*formats: str, default: str = "table", out: bool = False, out_required: bool = False,
                   out_help: str = "write the output to FILE (whole, atomically) instead of standard output",
                   format_help: str | None = None):
    """The one declaration of a command's output options (sqlite-utils' `output_options` habit): `--format`
    with `formats` (any case, listed in OUTPUT_FORMATS order; none: no --format) and, where the command writes
    a file, `-o/--out FILE` (`out`, or `out_required`). The command receives them as `fmt` and `out`."""
    if set(formats) - set(OUTPUT_FORMATS):
        raise ValueError(f"output_options: no such format {sorted(set(formats) - set(OUTPUT_FORMATS))}")

    def decorate(f):
        if out or out_required:
            f = click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path),
                             required=out_required, default=None, help=out_help)(f)
        if formats:
            listed = [x for x in OUTPUT_FORMATS if x in formats]
            f = click.option("--format", "fmt", type=choice(listed), default=default, show_default=True,
                             help=format_help)(f)
        return f

    return decorate


def emit(text: str | Callable[[], str], out: Path | None) -> None:
    """A command's output: on standard output, or with -o/--out written whole to that file (a temp file
    replaced atomically: a reader sees the old file or the new one) and `wrote FILE` on stderr. A callable
    is rendered for a file as for a pipe (no terminal width unless COLUMNS, no colour)."""
    if out is None:
        click.echo(text() if callable(text) else text)
        return
    if callable(text):
        with _rendering_for_file():
            text = text()
    atomic_write(out, text + "\n")
    click.echo(f"wrote {plain(out)}", err=True)


def next_step(command: str, why: str = "", fmt: str = "table", out: Path | None = None) -> None:
    """A command's last line: the natural next step as the exact command to type ('next: ...', on stderr, so a
    file or pipe holds only the output). Left out where JSON or CSV goes to standard output (a script reads it)."""
    if fmt in ("json", "csv") and out is None:
        return
    click.echo(f"next: {command}" + (f"  ({why})" if why else ""), err=True)


@contextlib.contextmanager
def _rendering_for_file():
    global _TO_FILE
    before, _TO_FILE = _TO_FILE, True
    try:
        yield
    finally:
        _TO_FILE = before


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


def terminal_width() -> int | None:
    """Columns the table may use: COLUMNS when set (also in a pipe), the terminal's width on a TTY,
    else None (a pipe or file keeps one line per row, for grep and scripts)."""
    columns = settings.terminal_columns()
    if columns is not None:
        return columns
    if _is_tty():
        return shutil.get_terminal_size().columns
    return None


def _is_tty() -> bool:
    if _TO_FILE:
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: Iterable[int] = (),
                 drop: Sequence[int] = (), width: int | None = None, left_out: list[str] | None = None) -> str:
    """A text table (rich) that fits `width` (default: `terminal_width()`): columns in `drop` are
    left out, first one first, while the natural widths do not fit (their headers appended to
    `left_out`); the rest fold long cells.
    Colour only on a TTY without NO_COLOR; in a pipe or file, plain text."""
    cells = [[plain("" if x is None else x) for x in r] for r in rows]
    heads = [plain(h) for h in headers]
    width = terminal_width() if width is None else width
    align = set(right)
    keep, least, natural, held = _fit(heads, cells, align, drop, width, left_out)
    return _print(heads, cells, align, keep, least, natural, held, width)


_GAP = 2  # spaces between columns


def _fit(heads: list[str], cells: list[list[str]], align: set[int], drop: Sequence[int], width: int | None,
         left_out: list[str] | None) -> tuple[list[int], list[int], list[int], bool]:
    """(columns kept, each column's width, natural widths, whether the widths hold): drop columns in `drop` order
    while the rest do not fit, then fold the widest text column a character at a time."""
    from rich.cells import cell_len

    keep = list(range(len(heads)))
    natural = [max([cell_len(h)] + [cell_len(r[i]) for r in cells]) for i, h in enumerate(heads)]  # CJK: 2 cells
    # A text column may fold to FOLD characters; numbers never fold.
    least = [n if i in align else max(cell_len(heads[i]), min(n, FOLD)) for i, n in enumerate(natural)]

    def needed(cols: list[int]) -> int:
        return sum(least[i] for i in cols) + _GAP * len(cols)  # rich pads the last column too

    def narrower() -> bool:
        """Fold the widest text column one character more (never below its header); False when none can."""
        text = [i for i in keep if i not in align and least[i] > cell_len(heads[i])]
        if not text:
            return False
        widest = max(text, key=lambda i: least[i])
        least[widest] -= 1
        return True

    for i in drop:
        if width is None or needed(keep) <= width:
            break
        keep.remove(i)
        if left_out is not None:
            left_out.append(heads[i])
    while width is not None and needed(keep) > width and narrower():
        pass
    held = width is None or needed(keep) <= width  # else (a very narrow terminal) rich folds headers too
    return keep, least, natural, held


def _print(heads: list[str], cells: list[list[str]], align: set[int], keep: list[int], least: list[int],
           natural: list[int], held: bool, width: int | None) -> str:
    """The kept columns at their widths, through rich, as plain lines (colour only on a TTY)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    colour = _is_tty() and not settings.no_color()
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, _GAP, 0, 0), collapse_padding=True,
                  header_style="bold" if colour else "", expand=False)
    for i in keep:
        table.add_column(Text(heads[i]), justify="right" if i in align else "left", overflow="fold",
                         min_width=least[i] if held else None)
    fold = held and width is not None
    for r in cells:  # folded here, at separators, so rich never breaks a name mid-word
        table.add_row(*(Text(fold_at_separators(r[i], least[i]) if fold and i not in align else r[i]) for i in keep))
    buf = io.StringIO()
    total = width if width is not None else sum(natural[i] for i in keep) + _GAP * len(keep)
    console = Console(file=buf, width=total, force_terminal=colour, color_system="auto" if colour else None,
                      no_color=not colour, highlight=False, emoji=False, markup=False, soft_wrap=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


SEPARATORS = "-_/ "
_PIECES = re.compile(r"[^-_/. ]*[-_/. ]+|[^-_/. ]+$")


def fold_at_separators(text: str, width: int) -> str:
    """`text` as lines of at most `width` cells, broken after a separator (`-`, `_`, `/`, `.`, space) so that
    `2x-H100-149-14343` folds as `2x-H100-149-` / `14343`, never `2x-H100-149-14` / `343`; a piece
    longer than the width on its own (no separator in it) is the only thing cut."""
    from rich.cells import cell_len

    if width <= 0 or cell_len(text) <= width:
        return text
    lines: list[str] = []
    line = ""
    for piece in _PIECES.findall(text):
        if cell_len((line + piece).rstrip(" ")) <= width:
            line += piece
            continue
        if line.strip():
            lines.append(line.rstrip(" "))
        line = piece.lstrip(" ")
        while cell_len(line.rstrip(" ")) > width:
            lines.append(line[:width])
            line = line[width:]
    if line.strip():
        lines.append(line.rstrip(" "))
    return "\n".join(lines)


def csv_text(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """CSV with every text cell neutralised for spreadsheets (numbers stay numbers)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([csv_safe(h) for h in headers])
    for r in rows:
        writer.writerow(["" if x is None else csv_safe(x) for x in r])
    return buf.getvalue().rstrip("\n")
