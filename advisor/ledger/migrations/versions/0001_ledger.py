"""The first ledger schema: approvals and run observations.

Revision ID: 0001_ledger
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_ledger"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("digest", sa.String(80), primary_key=True),
        sa.Column("project", sa.String(200), nullable=False, index=True),
        sa.Column("plan_digest", sa.String(80), nullable=False),
        sa.Column("candidate", sa.String(600), nullable=False),
        sa.Column("approved_by", sa.String(200), nullable=False),
        sa.Column("approved_at", sa.String(40), nullable=False),
        sa.Column("price_hour", sa.Float, nullable=False),
        sa.Column("price_source", sa.String(2000), nullable=False),
        sa.Column("price_date", sa.String(20), nullable=False),
        sa.Column("cap_usd", sa.Float, nullable=False),
        sa.Column("cap_hours", sa.Float, nullable=False),
        sa.Column("estimate_usd", sa.Float, nullable=False),
        sa.Column("estimate_hours", sa.Float, nullable=False),
        sa.Column("estimate_p50_usd", sa.Float, nullable=False),
        sa.Column("estimate_p90_usd", sa.Float, nullable=False),
    )
    op.create_table(
        "run_observations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("approval", sa.String(80), sa.ForeignKey("approvals.digest"), nullable=False, index=True),
        sa.Column("run", sa.String(200), nullable=False, index=True),
        sa.Column("observed_at", sa.String(40), nullable=False),
        sa.Column("observer", sa.String(80), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("hours", sa.Float, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("max_steps", sa.Integer, nullable=False),
        sa.Column("tokens_per_sec", sa.Float, nullable=True),
        sa.UniqueConstraint("run", "observed_at", "observer", name="one_observation"),
    )


def downgrade() -> None:
    op.drop_table("run_observations")
    op.drop_table("approvals")
