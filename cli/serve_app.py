"""The pages of `gpu-advisor serve`: a path and a query in, a status, headers and bytes out.

Every page is rendered from the plan `cli.plan.build_plan` makes (through `cli.serve_jobs.Planner`)
and the report's templates (`reports.pages`); downloads (/plan.json, /report.md, /report.html,
/bundle.zip) are the CLI's own outputs, built in memory. The query carries every input, so a link
reproduces its page. Any refusal is one line with status 400, any failure one line with 500; the
HTTP plumbing (request-line cap, Host check, headers) is `cli.serve_http`.
"""

from __future__ import annotations

import io
import sys
import time
import zipfile
from dataclasses import dataclass, field

import reports
from advisor.errors import BadInput
from advisor.text import plain
from cli.launch import bundle_files, launch, pick
from cli.serve_cache import Pages
from cli.serve_form import form_groups
from cli.serve_jobs import Busy, Outcome, Planner, classify
from cli.serve_ledger import LedgerView
from cli.serve_query import Scenario, encode, filled, parse, split, to_args
from reports.compare import compare_table
from reports.pages import plan_context, render_page

MAX_SCENARIOS = 4
PATIENCE = 1.0  # seconds a page waits for its plan before it answers "Planning..." and reloads
DOWNLOAD_WAIT = 600.0  # a download waits for its plan this long at most (a ceiling, not an estimate)
REFRESH = 1  # seconds between reloads of the "Planning..." page
RETRY_AFTER = 5  # seconds a busy server asks a client to wait
DEFAULTS = {"model": "meta-llama/Llama-3.1-8B", "tokens": "100M"}  # the empty form's values
HTML = "text/html; charset=utf-8"


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = HTML
    headers: dict = field(default_factory=dict)


class App:
    """Routes. `server_args` are the server's own plan arguments (--prices, --discount, --skip-bad-rows);
    `sheets` the price sheets in use with their dates (named on every page)."""

    def __init__(self, planner: Planner, server_args: list[str], sheets: list[dict], discounts: str = "",
                 patience: float = PATIENCE, ledger: LedgerView | None = None):
        self.planner, self.server_args, self.patience, self.ledger = planner, list(server_args), patience, ledger
        self.frame = {"sheets": sheets, "discounts": discounts}
        self.pages = Pages()  # /plan and /plan.json bytes per plan outcome (cli/serve_cache.py)
        self.routes = {"/": self.form, "/plan": self.plan_page, "/plan.json": self.plan_json,
                       "/report.md": self.report_md, "/report.html": self.report_html, "/bundle.zip": self.bundle,
                       "/compare": self.compare, "/project": self.project}

    def handle(self, path: str, query: str, authorization: str | None = None) -> Response:
        """One request: the route's response, or a one-line error page (400, 401, 403, 404, 503, 500)."""
        route = self.routes.get(path)
        if path == "/project":
            refused = self.ledger.refusal(authorization) if self.ledger else (404, "this server has no ledger.")
            if refused:
                return self.error(refused[0], "Not allowed" if refused[0] != 404 else "Not found", refused[1])
        if route is None:
            return self.error(404, "Not found", f"no page {plain(path)[:80]!r}; the pages are "
                              + ", ".join(self.routes) + ".")
        try:
            return route(split(query))
        except Busy:
            return self.error(503, "Busy", f"the server is making as many plans as it takes at once; try again in "
                              f"{RETRY_AFTER} seconds.", headers={"Retry-After": str(RETRY_AFTER)})
        except Exception as exc:  # noqa: BLE001 - bad input is a 400 page, anything else one line
            out = classify(exc)
            if out.status >= 500:
                print(f"gpu-advisor serve: {path}: {out.message}", file=sys.stderr, flush=True)
            return self.error(out.status, "Bad input" if out.status == 400 else "Error", out.message,
                              query=_echo(query) if out.status == 400 else "", back=_back(path, query))

    # ------------------------------------------------------------------ pages

    def form(self, pairs: list[tuple[str, str]]) -> Response:
        """The form, empty with defaults, prefilled from a link's query, or (with s=...) adding a scenario."""
        bases = [v for k, v in pairs if k == "s"]
        given = [(k, v) for k, v in pairs if k != "s"]
        to_args(filled(given))  # names and switches checked as /plan checks them: the form never shows junk
        for b in bases:
            self.scenario(b)
        if len(bases) >= MAX_SCENARIOS:
            raise BadInput(f"s: at most {MAX_SCENARIOS} scenarios side by side.")
        values = dict(given) if given or bases else dict(DEFAULTS)
        if bases and not given:
            values = dict(split(bases[-1]))
        return self.page(200, "serve_form.html.j2", title="Compare with another scenario" if bases else
                         "Plan a fine-tuning run", groups=form_groups(values), bases=bases,
                         action="/compare" if bases else "/plan", submit="Compare" if bases else "Plan")

    def plan_page(self, pairs: list[tuple[str, str]]) -> Response:
        if len(filled(pairs)) != len(pairs):  # a form sends empty fields: the shared link leaves them out
            return _redirect("/plan?" + encode(filled(pairs)))
        s = self.scenario_of(pairs)
        out = self.planner.get(s.key, s.options, self.patience)
        if out is None:
            return self.waiting([s])
        return self.pages.get("/plan", s.query, out, lambda: self._plan_page(out, s))

    def _plan_page(self, out: Outcome, s: Scenario) -> Response:
        plan = self.ready(out, s)
        q = s.query
        links = {"json": f"/plan.json?{q}", "md": f"/report.md?{q}", "html": f"/report.html?{q}",
                 "bundle": f"/bundle.zip?{q}&rank=1", "compare": "/?" + encode([("s", q)]), "edit": f"/?{q}"}
        return self.page(200, "serve_plan.html.j2", **plan_context(plan), links=links)

    def plan_json(self, pairs: list[tuple[str, str]]) -> Response:
        """Byte for byte what `gpu-advisor plan --format json` prints for the same options, but for
        `generated_at` (when this server planned it) and, if it planned the same model before,
        assumptions.memory_estimates (the shared engine's count of estimates)."""
        s = self.scenario_of(pairs)
        out = self.outcome(s)

        def render() -> Response:
            plan = self.ready(out, s).model_copy(update={"command": s.command("json")})
            return Response(200, (plan.model_dump_json(indent=2) + "\n").encode(), "application/json; charset=utf-8")

        return self.pages.get("/plan.json", s.query, out, render)

    def report_md(self, pairs: list[tuple[str, str]]) -> Response:
        """The Markdown report (`gpu-advisor report plan.json -o report.md`, without the chart files)."""
        s = self.scenario_of(pairs)
        text = reports.render(self.download(s), "md")
        return Response(200, text.encode(), "text/markdown; charset=utf-8",
                        {"Content-Disposition": 'inline; filename="report.md"'})

    def report_html(self, pairs: list[tuple[str, str]]) -> Response:
        s = self.scenario_of(pairs)
        return Response(200, reports.render(self.download(s), "html").encode())

    def bundle(self, pairs: list[tuple[str, str]]) -> Response:
        """`gpu-advisor launch --rank N` for this plan, zipped in memory under launch/."""
        ranks = [v for k, v in pairs if k == "rank"]
        if len(ranks) > 1:
            raise BadInput("rank: given twice; give it once.")
        option = next(p for p in launch.params if p.name == "rank")
        try:  # launch's own --rank type
            rank = option.type.convert(ranks[0], option, None) if ranks else option.default
        except Exception:  # noqa: BLE001 - click.BadParameter: a one-line refusal
            raise BadInput(f"rank: expected a whole number (got {ranks[0][:80]!r}).") from None
        s = self.scenario_of([(k, v) for k, v in pairs if k != "rank"])
        plan = self.download(s)
        candidate = pick(plan, rank)
        dataset = plan.workload.get("dataset") or next(p for p in launch.params if p.name == "dataset").default
        files, _ = bundle_files(plan, candidate, str(dataset))
        return Response(200, zip_bundle(files), "application/zip",
                        {"Content-Disposition": f'attachment; filename="gpu-advisor-launch-rank{rank}.zip"'})

    def project(self, pairs: list[tuple[str, str]]) -> Response:
        """The ledger, read-only: every run's approved cap against what it spent, and each project's burn-down."""
        project = dict(pairs).get("project") or None
        runs, projects = self.ledger.rows(project)
        return self.page(200, "serve_project.html.j2", title="Ledger", runs=runs, projects=projects,
                         project=project, headers={"Cache-Control": "no-store"})

    def compare(self, pairs: list[tuple[str, str]]) -> Response:
        """2 to 4 scenarios side by side; plan options beside the s= values (the form's "compare with")
        are one more scenario, added by a redirect to the link that carries it as s=."""
        bases = [v for k, v in pairs if k == "s"]
        added = filled([(k, v) for k, v in pairs if k != "s"])
        if added:
            to_args(added)
            return _redirect("/compare?" + encode([("s", b) for b in bases] + [("s", encode(added))]))
        if not 2 <= len(bases) <= MAX_SCENARIOS:
            raise BadInput(f"s: give 2 to {MAX_SCENARIOS} scenarios (s=<query>&s=<query>...; got {len(bases)}).")
        scenarios = [self.scenario(b, f"scenario {i}: ") for i, b in enumerate(bases, 1)]
        for s in scenarios:
            self.planner.start(s.key, s.options)
        outcomes = [self.planner.get(s.key, s.options, self.patience) for s in scenarios]
        if any(o is None for o in outcomes):
            return self.waiting(scenarios, outcomes)
        plans = [self.ready(o, s, f"scenario {i}: ") for i, (o, s) in enumerate(zip(outcomes, scenarios), 1)]
        columns = []
        for i, s in enumerate(scenarios):
            rest = [("s", b.query) for j, b in enumerate(scenarios) if j != i]
            columns.append({"query": s.label, "plan": f"/plan?{s.query}",
                            "remove": "/compare?" + encode(rest) if len(scenarios) > 2 else ""})
        add = "/?" + encode([("s", s.query) for s in scenarios]) if len(scenarios) < MAX_SCENARIOS else ""
        return self.page(200, "serve_compare.html.j2", title=f"{len(plans)} scenarios side by side",
                         columns=columns, rows=compare_table(plans), links={"add": add},
                         max_scenarios=MAX_SCENARIOS)

    # ------------------------------------------------------------------ helpers

    def scenario(self, query: str, what: str = "") -> Scenario:
        try:
            return parse(split(query), self.server_args)
        except BadInput as exc:
            raise BadInput(f"{what}{exc}") from None

    def scenario_of(self, pairs: list[tuple[str, str]]) -> Scenario:
        return parse(pairs, self.server_args)

    def ready(self, out: Outcome, s: Scenario, what: str = ""):
        """The plan of a finished outcome (its command as this query's), or its error raised as input."""
        if out.plan is None:
            raise (BadInput if out.status == 400 else _Failed)(f"{what}{out.message}")
        return out.plan.model_copy(update={"command": s.command()})

    def download(self, s: Scenario):
        return self.ready(self.outcome(s), s)

    def outcome(self, s: Scenario) -> Outcome:
        """The finished outcome a download waits for (DOWNLOAD_WAIT at most, then Busy)."""
        out = self.planner.get(s.key, s.options, DOWNLOAD_WAIT)
        if out is None:
            raise Busy()
        return out

    def waiting(self, scenarios: list[Scenario], outcomes: list | None = None) -> Response:
        states = [{"query": s.label, "ready": bool(outcomes and outcomes[i] is not None)}
                  for i, s in enumerate(scenarios)]
        return self.page(202, "serve_wait.html.j2", title="Planning…", states=states, refresh=REFRESH,
                         headers={"Cache-Control": "no-store"})

    def page(self, status: int, template: str, headers: dict | None = None, **context) -> Response:
        return Response(status, render_page(template, **self.frame, **context).encode(), headers=headers or {})

    def error(self, status: int, heading: str, message: str, query: str = "", back: str = "/",
              headers: dict | None = None) -> Response:
        """A one-line error page; the input it echoes goes through the templates' autoescape."""
        line = " ".join(plain(message).split()) or heading
        return self.page(status, "serve_error.html.j2", headers=headers, title=heading, heading=heading,
                         message=line, query=query, back=back, retry=RETRY_AFTER if status == 503 else None)


class _Failed(Exception):
    """A plan that failed for a reason other than its input (status 500)."""

    exit_code = 1


def _redirect(location: str) -> Response:
    return Response(303, b"", headers={"Location": location})


def _echo(query: str, limit: int = 400) -> str:
    """The input as the user wrote it (decoded: name=value · ...), shortened; escaped by the template."""
    try:
        text = " · ".join(f"{k}={v}" for k, v in split(query))
    except BadInput:
        text = query
    return text if len(text) <= limit else text[:limit] + "…"


def _back(path: str, query: str) -> str:
    """Where an error page's "change the inputs" goes: the form, prefilled when the query was a plan's."""
    return f"/?{query}" if path in ("/plan", "/plan.json", "/report.md", "/report.html") and query else "/"


def zip_bundle(files: dict[str, str]) -> bytes:
    """The bundle as a zip under launch/, with the modes `advisor.launch.write_bundle` gives (scripts 755)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(f"launch/{name}", date_time=time.localtime()[:6])
            info.external_attr = (0o100755 if name.endswith((".sh", ".py")) else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, files[name])
    return buf.getvalue()

