"""The pages of `gpu-advisor serve`, rendered by the report's own jinja2 environment (autoescape on,
undefined names refused), its decision-card and table macros (templates/report_macros.html.j2) and its
context (`build_context`), so a page and the HTML report of the same plan say the same thing.
"""

from __future__ import annotations

from advisor.explain.price_age import is_stale, price_age_days
from advisor.results import Plan
from advisor.units import money
from reports import charts
from reports.render import _env, build_context


def render_page(template: str, **context) -> str:
    """A page template (templates/serve_*.html.j2) with every value escaped."""
    return _env("html").get_template(template).render(**{"svg_css": charts.SVG_CSS, **context})


def plan_context(plan: Plan) -> dict:
    """The report's context for a plan, plus the line the page shows under the decision card: what the
    pick's price is, where it is from and how old (a budget owner asks that second)."""
    ctx = build_context(plan)
    ctx["price_line"] = price_line(plan)
    ctx["asked"] = asked(plan)
    return ctx


def price_line(plan: Plan) -> str:
    if not plan.candidates:
        return ""
    c = plan.candidates[0]
    age = price_age_days(c, plan)
    when = f"dated {c.offer.price_date}, {age:,} day{'s' if age != 1 else ''} old" if age is not None else "undated"
    warn = " (stale: check it with the provider before you buy)" if is_stale(c, plan) else ""
    return (f"{money(c.cost.price_hour)}/h {'spot' if c.cost.spot else 'on-demand'} from "
            f"{c.offer.source or 'an unnamed source'}, {when}{warn}")


def asked(plan: Plan) -> str:
    """The workload and ranking in one line (what the numbers answer)."""
    w, a = plan.workload, plan.assumptions
    parts = [f"{w.get('train_tokens', 0):,} training tokens", f"seq {w.get('seq_len', 0):,}",
             f"methods {w.get('methods') or 'all'}", f"ranked by {a.get('sort', 'cost')} at {a.get('risk', 'p50')}"]
    if w.get("budget_usd") is not None:
        parts.append(f"budget {money(w['budget_usd'])}")
    if w.get("deadline_hours") is not None:
        parts.append(f"deadline {w['deadline_hours']:g} h")
    if (w.get("max_nodes") or 1) > 1:
        parts.append(f"up to {w['max_nodes']} nodes")
    return " · ".join(parts)
