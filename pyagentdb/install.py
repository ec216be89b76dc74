"""Install and upgrade the agentdb schema through alembic (explicitly; never on connect)."""

from __future__ import annotations

import io

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from . import resources

VERSION_TABLE = "agentdb_alembic_version"


def _config(dsn: str | None = None, *, apply_sql: bool = True, stdout=None) -> Config:
    cfg = Config(stdout=stdout) if stdout is not None else Config()
    cfg.set_main_option("script_location", str(resources.migrations_dir()))
    cfg.attributes["dsn"] = dsn
    cfg.attributes["apply_sql"] = apply_sql
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(conn) -> str | None:
    """The installed revision, or None when the schema is not installed. `conn` is psycopg."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"public.{VERSION_TABLE}",)).fetchone()
    if not row[0]:
        return None
    found = conn.execute(f"SELECT version_num FROM public.{VERSION_TABLE}").fetchone()
    return found[0] if found else None


def apply_sql(conn) -> None:
    """Apply sql/ (functions, views, triggers) and the claim patterns on a psycopg connection,
    and record the checksum. On Citus one statement at a time: it forwards a trigger's whole
    query string to the workers, which refuse several commands in one."""
    citus = conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()[0]
    for path in resources.sql_files():
        text = path.read_text(encoding="utf-8")
        for statement in resources.split_statements(text) if citus else [text]:
            conn.execute(statement)
    conn.execute("SELECT agentdb_private.load_claim_patterns(%s::jsonb)", (resources.claim_patterns_text(),))
    conn.execute("INSERT INTO agentdb_private.install_log (sql_sha256) VALUES (%s)",
                 (resources.sql_checksum(),))
    if citus:  # a distributed schema: its new entry points delegated by user too
        from .distribute import delegate  # (imported here: distribute imports this module)

        delegate(conn)


def upgrade(dsn: str, revision: str = "head", *, force_sql: bool = False, repair: bool = False) -> None:
    """Upgrade to `revision`, then re-apply sql/ if it changed (or `force_sql`). `repair` also
    runs the idempotent repair revisions again (for a database at head whose tables are not
    the head's, as `pyagentdb doctor` reports), all in the same transaction."""
    cfg = _config(dsn)
    cfg.attributes["force_sql"] = force_sql
    cfg.attributes["repair"] = repair
    command.upgrade(cfg, revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    command.downgrade(_config(dsn, apply_sql=False), revision)


def offline_sql(revision: str = "head") -> str:
    """The full install script for DBAs who apply it by hand (psql -f)."""
    out = io.StringIO()
    cfg = _config(None, stdout=out)
    cfg.output_buffer = out
    command.upgrade(cfg, revision, sql=True)
    return out.getvalue()


__all__ = ["MigrationContext", "apply_sql", "current_revision", "downgrade", "head_revision", "offline_sql",
           "upgrade"]
