"""The ledger: approved plans and what their runs actually spent, per run and per project (SQLite by default,
PostgreSQL for a team, one SQLAlchemy schema with Alembic migrations). Imported only by the commands that use it,
so `plan` never pays for SQLAlchemy."""
