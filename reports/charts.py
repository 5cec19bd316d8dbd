"""Charts for plan reports: matplotlib figures saved as SVG, then sanitised for inlining.

matplotlib is imported inside the functions so `import reports` stays cheap. We draw on a bare
`matplotlib.figure.Figure` (no pyplot, no global backend switch), with text kept as <text>
(`svg.fonttype = "none"`), maths parsing off (a `$` in a provider name stays a `$`) and a fixed
hash salt so the same plan gives byte-identical SVG.

`clean_svg` re-parses what matplotlib wrote and rebuilds it from an allow-list of SVG elements:
even if a label ever reached the file unescaped, it could not add a script, an event handler,
an external link or a <style> that leaks into the host page.
"""

from __future__ import annotations

import io
import re
import warnings
import xml.etree.ElementTree as ET

from advisor.explain.claims import pareto_points, ranked_figures, ranking_quantile
from advisor.results import Candidate, Plan, ranked_cost, ranked_hours
from advisor.text import plain
from advisor.units import GB

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
# Okabe & Ito (2008) colour-blind-safe palette, one colour per memory component.
COMPONENT_COLOURS = {
    "weights": "#0072B2",
    "gradients": "#E69F00",
    "optimizer": "#009E73",
    "activations": "#CC79A7",
    "overhead": "#999999",
}
COMPONENTS = tuple(COMPONENT_COLOURS)
RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "gpu-advisor",
    "text.parse_math": False,
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
ALLOWED_TAGS = {
    "svg", "g", "defs", "path", "clipPath", "use", "text", "tspan", "rect", "line",
    "polyline", "polygon", "circle", "ellipse", "title", "desc",
}
DROPPED_TAGS = {"metadata", "style", "script"}  # removed with their content


def bar_label(c: Candidate, tag: str) -> str:
    """The memory chart's row label. Any provider or instance name is taken: advisor.text.plain removes
    control characters, line breaks, lone surrogates and the non-characters XML refuses, so the SVG stays
    well-formed (matplotlib escapes <, > and &), and the label is cut to 48 characters."""
    nodes = f" ×{c.nodes} nodes" if c.nodes > 1 else ""
    text = plain(f"{tag} {c.offer.provider} {c.offer.instance_type}{nodes} · {c.stack.method}")
    return text if len(text) <= 48 else text[:47] + "…"


def memory_rows(plan: Plan, top: int = 5) -> list[tuple[str, Candidate]]:
    """(label, candidate) for the memory chart: the top picks, then the baseline."""
    rows = [(f"#{c.rank or i + 1}", c) for i, c in enumerate(plan.candidates[:top])]
    if plan.baseline is not None:
        rows.append(("baseline", plan.baseline))
    return rows


def _svg(fig) -> str:
    buf = io.StringIO()
    with warnings.catch_warnings():
        # Text stays <text> (svg.fonttype none): a glyph DejaVu lacks only changes the measured width.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        warnings.filterwarnings("ignore", message="Matplotlib currently does not support")
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight",
                    pad_inches=0.1)
    return buf.getvalue()


def memory_chart(plan: Plan, top: int = 5, narrow: bool = False) -> str | None:
    """Stacked per-GPU memory by component (GB) for the top candidates and the baseline,
    with each GPU's usable capacity marked. None when there is nothing to draw. `narrow`: the phone
    version (NARROW_INCHES wide, rows named by rank only, legend below), shown instead at small widths."""
    rows = memory_rows(plan, top)
    if not rows:
        return None
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(NARROW_INCHES, 0.45 * len(rows) + 2.6) if narrow else (7.5, 0.5 * len(rows) + 1.5))
        if narrow:
            fig.subplots_adjust(left=0.2, right=0.96, bottom=0.38)
        else:
            fig.subplots_adjust(left=0.36, right=0.80)  # fixed margins: cheaper than tight_layout
        ax = fig.add_subplot()
        ys = list(range(len(rows)))[::-1]
        for y, (_tag, c) in zip(ys, rows):
            left = 0.0
            if c.memory is None:
                ax.barh(y, c.fit.peak_bytes / GB, color="#bbbbbb", height=0.6)
            else:
                for comp in COMPONENTS:
                    width = getattr(c.memory, comp) / GB
                    ax.barh(y, width, left=left, color=COMPONENT_COLOURS[comp], height=0.6,
                            label=comp if y == ys[0] else None)
                    left += width
            cap = c.fit.usable_bytes / GB
            ax.plot([cap, cap], [y - 0.42, y + 0.42], color="#000000", linewidth=2,
                    label="usable GPU memory" if y == ys[0] else None)
        ax.set_yticks(ys, [tag if narrow else bar_label(c, tag) for tag, c in rows])
        ax.set_xlabel("memory per GPU (GB)")
        ax.set_title("Peak memory per GPU, by component" if narrow else
                     "Peak memory per GPU, by component, against the GPU's usable memory")
        _legend(ax, narrow)
        ax.set_xlim(0, max(max(c.fit.usable_bytes, c.fit.peak_bytes) for _, c in rows) / GB * 1.05)
        return _svg(fig)


# The phone version of a chart: this many inches wide (matplotlib's 72 pt each), so at a 390 px screen (about 358 px
# of content) its 9 pt text draws at about 11 px, and the legend sits below the axes, not beside them.
NARROW_INCHES = 4.2


def _legend(ax, narrow: bool) -> None:
    if narrow:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, frameon=False)
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


# An axis goes to log scale when its values span more than SPAN× or one point is more than OUTLIER× the
# median (one 8× B300 row at $42 among $4-$6 rows would squash the rest into the bottom eighth); the label says so.
SPAN = 20
OUTLIER = 4


def log_scaled(values: list[float]) -> bool:
    if not values or min(values) <= 0:
        return False
    ordered = sorted(values)
    median = ordered[len(ordered) // 2]
    return max(values) / min(values) > SPAN or max(values) > OUTLIER * median


def cost_time_points(plan: Plan) -> dict[str, list[tuple[float, float]]]:
    """What the cost-vs-time chart plots, (hours, cost) at the ranking quantile (ranked_hours / ranked_cost, the
    figures the table, the card and the Pareto front use): every candidate, the front fastest first, #1 and the
    baseline."""
    point = lambda c: (ranked_hours(c), ranked_cost(c))  # noqa: E731
    return {"candidates": [point(c) for c in plan.candidates],
            "front": [point(c) for c, _ in pareto_points(plan)],
            "top": [point(plan.candidates[0])] if plan.candidates else [],
            "baseline": [point(plan.baseline)] if plan.baseline is not None else []}


def cost_time_chart(plan: Plan, narrow: bool = False) -> str | None:
    """Cost (USD) against wall time (hours) for every candidate, both at the ranking quantile, Pareto front joined,
    top pick and baseline marked (their figures in the legend). None when there are no candidates."""
    if not plan.candidates:
        return None
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    pts = cost_time_points(plan)
    q = ranking_quantile(plan)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(NARROW_INCHES, 5.2) if narrow else (7.5, 4.5))
        if narrow:
            fig.subplots_adjust(left=0.2, right=0.96, bottom=0.4)
        else:
            fig.subplots_adjust(left=0.11, right=0.74)
        ax = fig.add_subplot()
        xs, ys = zip(*pts["candidates"])
        ax.scatter(xs, ys, s=12, color="#9aa5b1", alpha=0.7, label=f"candidates ({len(xs)})", linewidths=0,
                   gid="cost-time-candidates")
        if pts["front"]:
            fx, fy = zip(*pts["front"])
            ax.plot(fx, fy, "-o", color="#D55E00", markersize=5, linewidth=1.5, label="Pareto front",
                    gid="cost-time-front")
        (tx, ty), = pts["top"]
        ax.scatter([tx], [ty], marker="*", s=180, color="#0072B2", zorder=5, gid="cost-time-top",
                   label=("recommended (#1)" if plan.constraints_met else "nearest (#1, misses)")
                   + f": {ranked_figures(plan.candidates[0])}")
        for bx, by in pts["baseline"]:
            ax.scatter([bx], [by], marker="X", s=90, color="#000000", zorder=5, gid="cost-time-baseline",
                       label=f"naive baseline: {ranked_figures(plan.baseline)}")
        points = pts["candidates"] + pts["baseline"]
        labels = {}
        for axis, values, fmt, label in ((ax.xaxis, [h for h, _ in points], "{:,g} h", f"wall time at {q} (hours)"),
                                         (ax.yaxis, [k for _, k in points], "${:,g}", f"cost at {q} (USD)")):
            labels[axis] = label
            if log_scaled(values):
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_minor_formatter(NullFormatter())
                labels[axis] = label + ", log scale: " + ("spans decades" if max(values) / min(values) > SPAN
                                                         else f"outlier at {fmt.format(float(f'{max(values):.3g}'))}")
            axis.set_major_formatter(FuncFormatter(lambda v, _pos, f=fmt: f.format(float(f"{v:.3g}"))))
        ax.set_xlabel(labels[ax.xaxis])
        ax.set_ylabel(labels[ax.yaxis])
        ax.set_title(f"Cost against wall time, both at {q}")
        ax.grid(True, linewidth=0.3, alpha=0.5)
        _legend(ax, narrow)
        return _svg(fig)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def clean_svg(svg: str, *, id_prefix: str, title: str, desc: str, variant: str = "") -> str:
    """Rebuild matplotlib's SVG from an allow-list, give it a <title>/<desc> and role="img",
    and prefix every id so several charts can share one HTML page. Raises ValueError if the
    input is not well-formed XML."""
    try:
        root = ET.fromstring(svg.encode("utf-8"))
    except ET.ParseError as exc:
        raise ValueError(f"chart SVG is not well-formed: {exc}") from exc
    if _local(root.tag) != "svg":
        raise ValueError("chart SVG has no <svg> root")

    def rename(value: str) -> str:
        value = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{id_prefix}-{m.group(1)})", value)
        return value

    def walk(elem: ET.Element) -> ET.Element | None:
        name = _local(elem.tag)
        if name in DROPPED_TAGS or name not in ALLOWED_TAGS:
            return None
        out = ET.Element(f"{{{SVG_NS}}}{name}")
        for key, value in elem.attrib.items():
            attr = _local(key)
            if attr.lower().startswith("on"):
                continue
            if attr == "href":
                if not value.startswith("#"):
                    continue
                out.set(f"{{{XLINK_NS}}}href", f"#{id_prefix}-{value[1:]}")
                continue
            if attr == "id":
                value = f"{id_prefix}-{value}"
            elif "url(" in value:
                value = rename(value)
            if "javascript:" in value.lower():
                continue
            if "}" in key:  # only xlink:href is expected in a namespace
                continue
            out.set(attr, value)
        out.text = elem.text
        out.tail = elem.tail
        for child in elem:
            kept = walk(child)
            if kept is not None:
                out.append(kept)
            elif child.tail and len(out):
                out[-1].tail = (out[-1].tail or "") + child.tail
        return out

    clean = walk(root)
    assert clean is not None
    clean.set("class", f"chart {variant}".strip())
    clean.set("role", "img")
    clean.set("aria-labelledby", f"{id_prefix}-title {id_prefix}-desc")
    t = ET.Element(f"{{{SVG_NS}}}title", {"id": f"{id_prefix}-title"})
    t.text = title
    d = ET.Element(f"{{{SVG_NS}}}desc", {"id": f"{id_prefix}-desc"})
    d.text = desc
    clean.insert(0, d)
    clean.insert(0, t)
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    return ET.tostring(clean, encoding="unicode")


# The one global rule matplotlib puts in its <style>; re-applied by the page's CSS.
SVG_CSS = "svg.chart *{stroke-linejoin:round;stroke-linecap:butt}"


def length_histogram_chart(stats, narrow: bool = False) -> str:
    """Rows per token length (advisor.workload.length_stats.LengthStats.histogram), with the run's seq_len and
    the suggested one marked: how much of the dataset a seq_len truncates, at a glance (`narrow`: the phone
    version, legend below)."""
    import matplotlib
    from matplotlib.figure import Figure

    bins = stats.histogram
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(NARROW_INCHES, 4.2) if narrow else (7.5, 3.5))
        if narrow:
            fig.subplots_adjust(left=0.2, right=0.96, bottom=0.38)
        else:
            fig.subplots_adjust(left=0.11, right=0.74)
        ax = fig.add_subplot()
        bars = ax.bar([low for low, _, _ in bins], [rows for _, _, rows in bins],
                      width=[high - low + 1 for low, high, _ in bins], align="edge", color="#0072B2", linewidth=0,
                      label="rows" + ("" if stats.exact else f" (from {stats.counted_rows:,} sampled)"))
        for i, bar in enumerate(bars.patches):
            bar.set_gid(f"length-bar-{i}")  # one id per bin in the SVG (the report's tests count them)
        for x, colour, name in ((stats.seq_len, "#D55E00", f"seq_len {stats.seq_len:,}"),
                                (stats.suggested_seq_len, "#009E73", f"suggested {stats.suggested_seq_len:,} (p99)")):
            if x <= bins[-1][1] * 1.5:
                ax.axvline(x, color=colour, linewidth=1.5, linestyle="--", label=name)
        ax.set_xlabel("tokens per row")
        ax.set_ylabel("rows")
        ax.set_title("Token lengths of the dataset")
        _legend(ax, narrow)
        return _svg(fig)
