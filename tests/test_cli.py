"""The command line: install (idempotent, --sql), status, demo, embedded default vs --dsn."""

import json
import os
import subprocess
import sys

import psycopg

from pyagentdb import cli


def run_cli(*argv, env=None):
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYAGENTDB_DSN", None) if env is None or "PYAGENTDB_DSN" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "pyagentdb", *argv], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_install_is_a_no_op_the_second_time(dsn, capsys):
    assert cli.main(["install", "--dsn", dsn, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["after"] == first["head"] and first["changed"] is False  # template already at head
    with psycopg.connect(dsn) as conn:
        logged = conn.execute("SELECT count(*) FROM agentdb_private.install_log").fetchone()[0]
    assert cli.main(["install", "--dsn", dsn]) == 0
    assert "already at" in capsys.readouterr().out
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM agentdb_private.install_log").fetchone()[0] == logged


def test_install_sql_prints_a_script_without_a_server(tmp_path):
    result = run_cli("install", "--sql", "--data-dir", str(tmp_path / "never"))
    assert result.returncode == 0, result.stderr
    assert "CREATE OR REPLACE FUNCTION agentdb.invoke" in result.stdout
    assert result.stdout.strip().endswith("COMMIT;")
    assert not (tmp_path / "never").exists()


def test_status_json(dsn, capsys):
    assert cli.main(["status", "--dsn", dsn, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["schema_revision"] == status["head"] and status["embedded"] is False


def test_dsn_given_never_starts_the_embedded_server(dsn, tmp_path):
    result = run_cli("status", "--dsn", dsn, "--data-dir", str(tmp_path / "pg"))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "pg").exists()


def test_bad_dsn_is_a_clear_error(tmp_path):
    result = run_cli("status", "--dsn", f"postgresql://nobody@/nodb?host={tmp_path}&connect_timeout=2")
    assert result.returncode == 1
    assert result.stderr.startswith("pyagentdb: cannot connect") and "Traceback" not in result.stderr


def test_uninstall_asks_for_yes(dsn):
    result = run_cli("uninstall", "--dsn", dsn)
    assert result.returncode == 2 and "--yes" in result.stderr


def test_demo_runs_twice_on_the_same_database(dsn):
    for _ in range(2):
        result = run_cli("demo", "--dsn", dsn, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        verdicts = {scene["scene"]: scene["verdict"] for scene in report["scenes"]}
        assert verdicts["Honest success"] == "deliver"
        assert verdicts["The liar: no tool called"] == "replace"
        assert verdicts["Two steps, one failed"] == "replace"
        assert verdicts["Asked only to look, the agent books"] == "replace"
        assert report["counts"] == {
            "reminders": 3,
            "notes": 0,
            "meetings": 1,
            "bookings": 1,
            "orders_repriced": 0,
        }
        for scene in report["scenes"]:
            assert scene["model_said"] == scene["user_reads"] or scene["verdict"] == "replace"
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pyagentdb_demo.reminders").fetchone()[0] == 3


def test_embedded_default_starts_and_reuses_its_data_dir(tmp_path):
    data_dir = tmp_path / "pg"
    env = {"PYAGENTDB_DATA_DIR": str(data_dir)}
    first = run_cli("install", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["embedded"] is True
    assert (data_dir / "PG_VERSION").read_text().strip() == "18"
    marker = (data_dir / "PG_VERSION").stat().st_mtime_ns
    second = run_cli("status", "--json", env=env)  # same data dir: reused, not re-initialised
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["schema_revision"] is not None
    assert (data_dir / "PG_VERSION").stat().st_mtime_ns == marker


def test_doctor_json_and_exit_code(dsn, capsys):
    assert cli.main(["doctor", "--dsn", dsn, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["schema_revision"] == report["head"]
    assert all(report["roles"].values()) and report["pending_drafts"] == 0


def test_not_installed_database_gets_the_fix_command(db, dsn, capsys):
    db.execute("CREATE DATABASE cli_empty")
    try:
        empty = dsn.replace("dbname=agentdb_test", "dbname=cli_empty")
        assert cli.main(["doctor", "--dsn", empty]) == 1
        assert "pyagentdb install" in capsys.readouterr().err
        assert cli.main(["worker", "--once", "--dsn", empty]) == 1
        err = capsys.readouterr().err
        assert "not installed" in err and f"pyagentdb install --dsn '{empty}'" in err
        assert "Traceback" not in err
    finally:
        db.execute("DROP DATABASE cli_empty WITH (FORCE)")
