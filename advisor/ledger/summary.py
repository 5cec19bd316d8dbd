"""Approved against actual, per run and per project, from the ledger's rows: the burn-down (approved, spent, what
remains) and the p50/p90 of what the unfinished runs will still cost.

What remains of a run is its steps not yet done: at p50 its measured rate so far (cost per step × steps left), at
p90 that times the plan's own p90/p50 cost ratio (the time model's band for this candidate); a run not yet started
counts its approved p50 and p90; a finished or capped run has nothing left."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.ledger.schema import ApprovalRow, RunRow


@dataclass(frozen=True)
class RunLine:
    project: str
    run: str
    approval: str
    candidate: str
    approved_by: str
    status: str
    cap_usd: float
    cap_hours: float
    estimate_usd: float
    spent_usd: float
    hours: float
    steps: int
    max_steps: int
    tokens_per_sec: float | None
    remaining_p50_usd: float
    remaining_p90_usd: float


@dataclass(frozen=True)
class ProjectLine:
    project: str
    runs: int
    approved_usd: float
    spent_usd: float
    remaining_p50_usd: float
    remaining_p90_usd: float
    headroom_p90_usd: float  # approved − spent − remaining at p90: below 0, the project will overrun its approvals


def _remaining(a: ApprovalRow, r: RunRow | None) -> tuple[float, float]:
    if r is None or r.status == "not started":
        return a.estimate_p50_usd, a.estimate_p90_usd
    if r.status in ("stopped at cap", "finished") or not r.max_steps or r.steps >= r.max_steps:
        return 0.0, 0.0
    left = r.max_steps - r.steps
    per_step = r.cost_usd / r.steps if r.steps else a.estimate_p50_usd / r.max_steps
    p50 = per_step * left
    return p50, p50 * max(1.0, a.estimate_p90_usd / a.estimate_p50_usd)


def run_lines(approvals: list[ApprovalRow], runs: list[RunRow]) -> list[RunLine]:
    """One line per run (its newest observation), and one per approval no run has reported yet."""
    newest: dict[tuple[str, str], RunRow] = {}
    for r in runs:
        newest[(r.approval, r.run)] = r  # rows come ordered by observed_at: the last one wins
    out = []
    for a in approvals:
        mine = [r for (digest, _), r in newest.items() if digest == a.digest] or [None]
        for r in mine:
            p50, p90 = _remaining(a, r)
            out.append(RunLine(project=a.project, run=r.run if r else "-", approval=a.digest[:19],
                               candidate=a.candidate, approved_by=a.approved_by,
                               status=r.status if r else "not started", cap_usd=a.cap_usd, cap_hours=a.cap_hours,
                               estimate_usd=a.estimate_usd, spent_usd=r.cost_usd if r else 0.0,
                               hours=r.hours if r else 0.0, steps=r.steps if r else 0,
                               max_steps=r.max_steps if r else 0, tokens_per_sec=r.tokens_per_sec if r else None,
                               remaining_p50_usd=p50, remaining_p90_usd=p90))
    return out


def project_lines(lines: list[RunLine]) -> list[ProjectLine]:
    out = []
    for project in sorted({ln.project for ln in lines}):
        mine = [ln for ln in lines if ln.project == project]
        approved = sum({ln.approval: ln.cap_usd for ln in mine}.values())  # one cap per approval, however many runs
        spent = sum(ln.spent_usd for ln in mine)
        p50 = sum(ln.remaining_p50_usd for ln in mine)
        p90 = sum(ln.remaining_p90_usd for ln in mine)
        out.append(ProjectLine(project=project, runs=sum(1 for ln in mine if ln.run != "-"), approved_usd=approved,
                               spent_usd=spent, remaining_p50_usd=p50, remaining_p90_usd=p90,
                               headroom_p90_usd=approved - spent - p90))
    return out
