"""Alembic environment for pyagentdb.

Tables come from the versioned revisions in versions/. After an upgrade, the
functions, views and triggers are re-applied from sql/ (all CREATE OR REPLACE),
unless the checksum recorded at the last install says nothing changed.
"""

from __future__ import annotations

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool

from pyagentdb import install, resources

VERSION_TABLE = "agentdb_alembic_version"
config = context.config


# From this revision on, every revision's SQL is idempotent (it checks, or uses IF NOT
# EXISTS, before it changes anything).
FIRST_REPEATABLE = 7


def _repair_scripts():
    """The revisions' SQL from FIRST_REPEATABLE on, in order: `pyagentdb install --repair`
    runs them all again on a database already at head. All of them, not only the repair
    revisions: a repair revision brings a table to the shape of its own time, and the later
    revisions then bring it to the head's."""
    found = []
    for path in (resources.migrations_dir() / "versions").glob("[0-9][0-9][0-9][0-9]_*.sql"):
        if int(path.name[:4]) >= FIRST_REPEATABLE:
            found.append(path)
    return sorted(found)


def _apply_sql_online(connection, *, migrated: bool) -> None:
    checksum = resources.sql_checksum()
    raw = connection.connection.driver_connection
    last = raw.execute(
        "SELECT sql_sha256 FROM agentdb_private.install_log ORDER BY id DESC LIMIT 1"
    ).fetchone()
    # Skip only when no revision ran: a downgrade drops (CASCADE) the functions and
    # views that used its tables, so the upgrade back must re-apply sql/ even though
    # sql/ itself has not changed since the last install.
    if last and last[0] == checksum and not migrated and not config.attributes.get("force_sql"):
        return
    install.apply_sql(raw)


def _apply_sql_offline() -> None:
    # Written to the script as is: through context.execute() SQLAlchemy compiles the
    # text as a template, doubling every % (RAISE '... %' then fails) and reading
    # :word as a bind parameter.
    out = context.get_context().impl.static_output
    for path in resources.sql_files():
        body = path.read_text(encoding="utf-8").rstrip()
        out(f"-- from sql/{path.name}\n{body}" + ("" if body.endswith(";") else ";"))
    patterns = resources.claim_patterns_text()
    out(f"SELECT agentdb_private.load_claim_patterns($claims${patterns}$claims$::jsonb);")
    out(f"INSERT INTO agentdb_private.install_log (sql_sha256) VALUES ('{resources.sql_checksum()}');")


def run_offline() -> None:
    context.configure(
        url="postgresql+psycopg://",
        literal_binds=True,
        version_table=VERSION_TABLE,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()
        if config.attributes.get("apply_sql"):
            _apply_sql_offline()


def run_online() -> None:
    dsn = config.attributes["dsn"]
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=pool.NullPool
    )
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            # One installer at a time: a second concurrent install waits, then finds head.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7415926535)")
            migration = context.get_context()
            before = migration.get_current_heads()
            context.run_migrations()
            repaired = bool(config.attributes.get("repair"))
            if repaired:
                raw = connection.connection.driver_connection
                for path in _repair_scripts():
                    raw.execute(path.read_text(encoding="utf-8"))
            if config.attributes.get("apply_sql"):
                _apply_sql_online(connection, migrated=repaired or migration.get_current_heads() != before)


if context.is_offline_mode():
    run_offline()
else:
    run_online()
