"""Plan reports: `render(plan, "html" | "md")` to a string, `write(plan, path)` to files."""

from reports.render import render, write

__all__ = ["render", "write"]
