"""The ledger's two tables. An approval is written once (its record digest is its key); every `track` appends a
run observation, so two processes tracking at once each add a row and nothing is overwritten: the ledger reads the
newest observation of each run."""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class ApprovalRow(Base):
    __tablename__ = "approvals"

    digest: Mapped[str] = mapped_column(String(80), primary_key=True)
    project: Mapped[str] = mapped_column(String(200), index=True)
    plan_digest: Mapped[str] = mapped_column(String(80))
    candidate: Mapped[str] = mapped_column(String(600))
    approved_by: Mapped[str] = mapped_column(String(200))
    approved_at: Mapped[str] = mapped_column(String(40))
    price_hour: Mapped[float] = mapped_column(Float)
    price_source: Mapped[str] = mapped_column(String(2000))
    price_date: Mapped[str] = mapped_column(String(20))
    cap_usd: Mapped[float] = mapped_column(Float)
    cap_hours: Mapped[float] = mapped_column(Float)
    estimate_usd: Mapped[float] = mapped_column(Float)
    estimate_hours: Mapped[float] = mapped_column(Float)
    estimate_p50_usd: Mapped[float] = mapped_column(Float)
    estimate_p90_usd: Mapped[float] = mapped_column(Float)


class RunRow(Base):
    __tablename__ = "run_observations"
    __table_args__ = (UniqueConstraint("run", "observed_at", "observer", name="one_observation"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    approval: Mapped[str] = mapped_column(ForeignKey("approvals.digest"), index=True)
    run: Mapped[str] = mapped_column(String(200), index=True)
    observed_at: Mapped[str] = mapped_column(String(40))
    observer: Mapped[str] = mapped_column(String(80))
    status: Mapped[str] = mapped_column(String(40))
    hours: Mapped[float] = mapped_column(Float)
    cost_usd: Mapped[float] = mapped_column(Float)
    steps: Mapped[int] = mapped_column(Integer)
    max_steps: Mapped[int] = mapped_column(Integer)
    tokens_per_sec: Mapped[float | None] = mapped_column(Float, nullable=True)
