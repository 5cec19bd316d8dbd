"""Alembic's environment for the ledger: the connection comes from advisor.ledger.store (config.attributes), never
from an ini file, so a URL with a password is not written anywhere."""

from __future__ import annotations

from alembic import context

from advisor.ledger.schema import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
