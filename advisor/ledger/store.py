"""Open a ledger (creating or upgrading its schema with Alembic) and read and write it in transactions.

SQLite by default (a file, no server; WAL and a busy timeout so concurrent `track` processes wait instead of
failing), PostgreSQL by URL. Migrations run under a lock (PostgreSQL's advisory lock; SQLite's write lock via
BEGIN IMMEDIATE) so two processes opening a new ledger at once do not both create it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from advisor.errors import BadInput
from advisor.ledger.schema import ApprovalRow, RunRow

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
LOCK_KEY = 7_403_913  # PostgreSQL advisory lock id for schema upgrades (any fixed number; this one is ours)
SQLITE_BUSY_SECONDS = 30


@dataclass(frozen=True)
class Ledger:
    engine: Engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine) as s, s.begin():
            yield s

    def add_approval(self, row: dict) -> None:
        """Insert once: a second `track` of the same approval, even at the same instant, keeps the first row."""
        table = ApprovalRow.__table__
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self.session() as s:
            s.execute(insert(table).values(**row).on_conflict_do_nothing(index_elements=["digest"]))

    def add_run(self, row: dict) -> None:
        with self.session() as s:
            s.add(RunRow(**row))

    def approvals(self, project: str | None = None) -> list[ApprovalRow]:
        with Session(self.engine) as s:
            q = select(ApprovalRow).order_by(ApprovalRow.approved_at)
            if project is not None:
                q = q.where(ApprovalRow.project == project)
            return list(s.scalars(q))

    def runs(self) -> list[RunRow]:
        with Session(self.engine) as s:
            return list(s.scalars(select(RunRow).order_by(RunRow.run, RunRow.observed_at, RunRow.id)))


def _engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise BadInput("--ledger: a database URL like sqlite:///path/ledger.sqlite or "
                       "postgresql://user@host/db.") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise BadInput("--ledger: a SQLite ledger needs a file (sqlite:///path/ledger.sqlite).")
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_SECONDS})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi, _record):  # WAL: readers never block the one writer
            dbapi.isolation_level = None  # SQLAlchemy's BEGIN below, not pysqlite's implicit one
            dbapi.execute("PRAGMA journal_mode=WAL")
            dbapi.execute("PRAGMA foreign_keys=ON")

        @event.listens_for(engine, "begin")
        def _begin(conn):  # take the write lock at BEGIN: two writers queue instead of deadlocking
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True)
    raise BadInput(f"--ledger: SQLite or PostgreSQL URLs only (got a {backend!r} URL).")


def _upgrade(engine: Engine) -> None:
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    with engine.connect() as conn:
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
        if MigrationContext.configure(conn).get_current_revision() == head:  # another process did it meanwhile
            return
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def open_ledger(url: str) -> Ledger:
    """The ledger at `url`, its schema at the newest migration; one line on a database that cannot be reached."""
    engine = _engine(url)
    try:
        _upgrade(engine)
    except (OperationalError, SQLAlchemyError) as exc:
        where = make_url(url).render_as_string(hide_password=True)
        reason = str(getattr(exc, "orig", exc)).splitlines()[0][:200]
        raise BadInput(f"--ledger: cannot open {where}: {reason}") from None
    return Ledger(engine)
