"""An approval's caps in the bundle's own terms: the trainer callback's file (budget_cap.json + budget_cap.py, read
by train.py / train_rl.py), a copy of the approval for `gpu-advisor track`, and the README's section. Slurm's
--time and dstack's max_duration take the hours cap in advisor/launch/launchers.py; SkyPilot has no run-time limit
in its task file, so the run line asks for autostop with teardown (`sky launch -i 5 --down`): the callback stops
training at the cap and the idle cluster is torn down."""

from __future__ import annotations

import json
from pathlib import Path

from advisor.approval import Approval

TEMPLATES = Path(__file__).resolve().parent / "templates"

CAP_FILE = "budget_cap.json"
CALLBACK_FILE = "budget_cap.py"
APPROVAL_FILE = "approval.json"
SKY_AUTOSTOP = ["-i", "5", "--down"]  # sky launch: autostop after 5 idle minutes, and tear the cluster down


def cap_record(approval: Approval) -> dict:
    """What the trainer callback needs (nothing else: the bundle runs on a rented machine)."""
    return {"approval": approval.record_digest, "cost_usd": approval.caps.cost_usd,
            "price_hour": approval.price.price_hour, "hours": approval.caps.hours,
            "stop_hours": approval.caps.stop_hours, "warn_share": approval.caps.warn_share}


def files(approval: Approval) -> dict[str, str]:
    return {CAP_FILE: json.dumps(cap_record(approval), indent=2) + "\n",
            CALLBACK_FILE: (TEMPLATES / CALLBACK_FILE).read_text(encoding="utf-8"),
            APPROVAL_FILE: approval.model_dump_json(indent=2) + "\n"}


def sky_command() -> str:
    return " ".join(["sky launch sky.yaml", *SKY_AUTOSTOP])


def readme(approval: Approval) -> str:
    a, cap = approval, approval.caps
    return (f"\n## Approved budget\n\nApproved by {a.approved_by} on {a.approved_at} for project {a.project}: "
            f"${cap.cost_usd:,.2f} ({'the plan p90' if cap.basis == 'p90' else 'a cap given by the approver'}), "
            f"{cap.hours:,.2f} h at ${a.price.price_hour:,.2f}/h ({a.price.source}, {a.price.date or 'undated'}).\n"
            f"- `train.py` stops with a checkpoint at {cap.stop_hours:,.2f} h of billed wall time and warns at "
            f"{cap.warn_share:.0%} of the cap (`{CALLBACK_FILE}`, log `budget_cap.log.jsonl`).\n"
            f"- Slurm `--time` and dstack `max_duration` are the {cap.hours:,.2f} h cap; with SkyPilot run "
            f"`{sky_command()}` so the cluster is torn down once training stops.\n"
            f"- After the run: `gpu-advisor track .` records what it spent against this approval.\n")
