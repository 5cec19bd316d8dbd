"""Untrusted text as people read it — the one filter of each kind.

Text that came from a file or a server (model names, provider names, price sources) is data:
`plain` makes it safe for a terminal or a one-line cell (no ANSI escapes, no control
characters, no line breaks), `md` for Markdown (also escapes markup and HTML), and CSV cells go
through `pricing.files.csv_safe` (spreadsheet formulas neutralised). Numbers, sizes and money are
formatted by advisor/units.py.
"""

from __future__ import annotations

import re

# ESC-introduced sequences (CSI, OSC ... BEL/ST, two-char escapes), then any other C0/C1 control or DEL.
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
# C0/C1 controls and DEL, line/paragraph separators, bidirectional embeddings, overrides and
# isolates (text that displays in another order than it reads), lone surrogates and the two
# non-characters XML refuses: none of these is ever needed in a name, a source or a label.
_REFUSED = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff"
_CONTROL = re.compile(f"[{_REFUSED}]")
MD_SPECIAL = "\\`*_[]|~$@"


def plain(value: object) -> str:
    """Untrusted text for a terminal or a one-line cell: escape sequences and control characters
    removed, every run of white space (line breaks included) folded to one space."""
    s = "" if value is None else str(value)
    s = _ANSI.sub("", s)
    s = re.sub(r"\s+", " ", s)
    return _CONTROL.sub("", s).strip()


def md(value: object) -> str:
    """Untrusted text for Markdown: `plain`, then HTML (&, <, >) and Markdown markup escaped, so no
    value can add a heading, a list item, a link, an image, a code span or a table column.
    `@`, the `:` of `://` and the `.` of `www.` are escaped too, so GitHub's extended autolinks
    (bare `https://...`, `www.`, e-mail addresses) stay text: a report links only to what the tool
    wrote. Every escape is CommonMark's backslash escape of ASCII punctuation (shown as the
    character itself)."""
    s = plain(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = "".join("\\" + ch if ch in MD_SPECIAL else ch for ch in s)
    s = re.sub(r"(?i)\b(www)\.", r"\1\\.", s).replace("://", "\\://")
    # At the start of a line a value must not become a heading, a list item or a setext underline.
    if s.startswith("#") or re.match(r"[+=-](\s|$|[+=-])", s):
        s = "\\" + s
    return re.sub(r"^(\d{1,9})([.)])(?=\s|$)", r"\1\\\2", s)


def refused_char(value: str) -> str | None:
    """The first character of `value` that untrusted text may not hold (control characters, line
    breaks, bidirectional overrides, lone surrogates), as 'U+000A', or None when there is none."""
    m = _CONTROL.search(value)
    return None if m is None else f"U+{ord(m.group()):04X}"
