"""`gpu-advisor calibrate measured.json`: the estimate beside a measured run, and the run stored so plans use it.

measured.json is what a launch bundle's `launch.sh --benchmark` writes; it is validated like a plan
file (advisor/workload/measurements.py) before anything is computed or stored.
"""

from __future__ import annotations

from pathlib import Path

import click

from advisor.estimate.engine import Engine
from advisor.text import plain
from advisor.units import gb
from advisor.workload import measurements
from cli.output import output_options, render_rows


def _gb(value: int | None) -> str:
    return "not measured" if value is None else gb(value, 2)


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def render(cal) -> str:
    """The comparison as a text table plus the lines that say what it means."""
    rows = [["tokens/s", f"{cal.measured_tokens_per_sec:,.0f}",
             "n/a (CPU run)" if cal.estimated_tokens_per_sec is None else f"{cal.estimated_tokens_per_sec:,.0f}",
             _ratio(cal.tokens_per_sec_ratio),
             "" if cal.within_band is None else ("inside" if cal.within_band else "outside") + " the p10-p90 band"]]
    s = cal.measured_step_seconds
    rows.append(["step seconds (median)", f"{s.median:.4g} (p10 {s.p10:.4g}, p90 {s.p90:.4g})",
                 "n/a" if cal.estimated_step_seconds is None else f"{cal.estimated_step_seconds:.4g}", "", ""])
    for c in cal.memory:
        rows.append([c.kind.replace("_", " "), _gb(c.measured_bytes), _gb(c.estimated_bytes), _ratio(c.ratio),
                     "" if c.safe is None else ("estimate safe" if c.safe else "estimate too LOW")])
    head = (f"{cal.model} on {cal.nodes} node(s) of {cal.gpu_model}: {cal.stack}; {cal.shape}; "
            f"{cal.steps} timed steps, measured {cal.measured_at}")
    tail = [] if cal.memory_safe is None else [
        "Memory: the estimate was on the safe side." if cal.memory_safe else
        "Memory: the run needed more than estimated; plans with this setup use the measured peak."]
    return "\n".join([head, render_rows(["", "measured", "estimated", "ratio", ""], rows), *tail])


@click.command()
@click.argument("measured", type=click.Path(dir_okay=False, path_type=Path))
@output_options("table", "json")
@click.option("--model", "model", default=None,
              help="config.json (or catalog name / Hub id) to estimate with when the run's model name is not one, "
                   "e.g. a plan made from a local config [the measurement's model]")
def calibrate(measured: Path, fmt: str, model: str | None) -> None:
    """Compare a measured run (measured.json from `launch.sh --benchmark`) with the estimate for the same
    model, GPU, stack and shape, and store it so `gpu-advisor plan` uses it for matching candidates."""
    m = measurements.load(measured)
    cal = measurements.compare(m, Engine.of(model or m.model))
    path = measurements.store(m)
    cal = cal.model_copy(update={"stored_at": str(path)})
    click.echo(cal.model_dump_json(indent=2) if fmt == "json" else render(cal))
    click.echo(f"stored {plain(path)}" + (" (a CPU run: it matches no GPU candidate)"
                                          if m.gpu_model == measurements.CPU else ""), err=True)
