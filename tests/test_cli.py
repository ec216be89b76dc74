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


def test_demo_refuses_a_database_that_holds_other_data(reminders, dsn):
    """The demo registers tools, users and permissions: never where other data lives."""
    tools = reminders.execute("SELECT count(*) FROM agentdb.tools").fetchone()[0]
    result = run_cli("demo", "--dsn", dsn)
    assert result.returncode == 2 and "holds other data" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert reminders.execute("SELECT count(*) FROM agentdb.tools").fetchone()[0] == tools
    assert reminders.execute("SELECT to_regnamespace('pyagentdb_demo')").fetchone()[0] is None
    as_json = run_cli("demo", "--dsn", dsn, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["code"] == "database_not_empty"


def test_demo_in_english_is_english_and_grants_only_its_tools(dsn):
    result = run_cli("demo", "--dsn", dsn, "--no-color")
    assert result.returncode == 0, result.stderr
    cjk = [line for line in result.stdout.splitlines() if any("\u3000" <= ch <= "\u9fff" for ch in line)]
    assert cjk == [], cjk
    assert "Couldn't book a meeting: design review is already at that time" in result.stdout
    with psycopg.connect(dsn) as conn:
        grants = conn.execute("SELECT user_id, permission, tool FROM agentdb.permissions").fetchall()
    assert grants and all(user.startswith("demo_") and tool and tool.startswith("demo_")
                          for user, _, tool in grants), grants


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
        assert conn.execute("SELECT count(*) FROM agentdb.v_tasks WHERE user_id NOT LIKE 'demo%'"
                            ).fetchone()[0] == 0


def test_embedded_default_starts_and_reuses_its_data_dir(embedded_data_dir):
    data_dir = embedded_data_dir
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


def test_json_errors_are_json_on_stdout(tmp_path, dsn):
    """--json: stdout carries one JSON document, errors too, with the exit code of the error."""
    bad = run_cli("status", "--json", "--dsn", f"postgresql://nobody@/nodb?host={tmp_path}&connect_timeout=2")
    assert bad.returncode == 1 and bad.stderr == ""
    error = json.loads(bad.stdout)["error"]
    assert error["code"] == "server_error" and error["message"].startswith("cannot connect")
    usage = run_cli("status", "--json", "--no-such-flag")
    assert usage.returncode == 2 and json.loads(usage.stdout)["error"]["code"] == "usage"
    yes = run_cli("uninstall", "--json", "--dsn", dsn)
    assert yes.returncode == 2 and json.loads(yes.stdout)["error"]["code"] == "confirmation_needed"
    plain = run_cli("status", "--no-such-flag")
    assert plain.returncode == 2 and plain.stdout == "" and plain.stderr.startswith("pyagentdb: ")


def test_not_installed_under_json_names_the_fix(db, dsn):
    db.execute("CREATE DATABASE cli_empty_json")
    try:
        empty = dsn.replace("dbname=agentdb_test", "dbname=cli_empty_json")
        result = run_cli("worker", "--once", "--json", "--dsn", empty)
        assert result.returncode == 1
        error = json.loads(result.stdout)["error"]
        assert error["code"] == "schema_not_installed"
        assert error["fix"] == f"pyagentdb install --dsn '{empty}'"
    finally:
        db.execute("DROP DATABASE cli_empty_json WITH (FORCE)")


def test_fix_hint_names_the_data_dir(tmp_path):
    from argparse import Namespace

    hint = cli.fix_command(Namespace(dsn=None, data_dir=str(tmp_path)))
    assert hint == f"pyagentdb install --data-dir '{tmp_path}'"
    assert cli.fix_command(Namespace(dsn="x", data_dir=None), "doctor") == "pyagentdb doctor --dsn 'x'"
    assert cli.fix_command(Namespace(dsn=None, data_dir=None)) == "pyagentdb install"


def test_worker_once_json_always_prints_its_result(dsn):
    result = run_cli("worker", "--once", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == [{"ran": 0}]


def test_snapshot_and_diff_commands(reminders, dsn):
    first = run_cli("snapshot", "public.reminders", "--dsn", dsn, "--json")
    assert first.returncode == 0, first.stderr
    before = json.loads(first.stdout)
    assert before["tables"] == [{"table": "public.reminders", "mode": "log", "rows": 0}]
    reminders.execute("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())")
    after = json.loads(run_cli("snapshot", "public.reminders", "--dsn", dsn, "--json").stdout)
    diff = run_cli("diff", str(before["snapshot"]), str(after["snapshot"]), "--dsn", dsn)
    assert diff.returncode == 0 and diff.stdout.startswith("public.reminders: 1 added, 0 removed, 0 changed")
    as_json = json.loads(run_cli("diff", str(before["snapshot"]), str(after["snapshot"]), "--dsn", dsn,
                                 "--json").stdout)
    assert [row["content"] for row in as_json[0]["added"]] == ["x"]


def test_progress_shows_only_for_long_work():
    import io
    import time

    from pyagentdb import textui

    quick, slow, quiet = io.StringIO(), io.StringIO(), io.StringIO()
    with textui.progress("quick", stream=quick, after=5):
        pass
    with textui.progress("slow", stream=slow, after=0.05, log_every=0.05):
        time.sleep(0.3)
    with textui.progress("quiet", stream=quiet, enabled=False, after=0.01):
        time.sleep(0.1)
    assert quick.getvalue() == "" and quiet.getvalue() == ""
    lines = slow.getvalue().splitlines()
    assert lines[0] == "slow ..." and lines[-1].startswith("slow: done in ")


def test_seal_links_the_ledger_and_doctor_reports_the_wait(reminders, dsn, capsys):
    """`pyagentdb seal` is the sealer once (for cron); doctor says what waits for it, warns when
    the oldest row has waited over a minute, and names audit rows whose step is gone."""
    task = reminders.execute("SELECT agentdb.begin_task('u1', 'c', authenticated => true)").fetchone()[0]
    reminders.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb)",
                      (task, json.dumps({"content": "seal me", "remind_at": "2035-01-01 08:00+00"})))
    assert cli.main(["doctor", "--dsn", dsn, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["unsealed_rows"] == 2  # one audit row, one change row
    assert not any("hash-chain link" in w for w in report["warnings"])
    # A row that waited longer than a minute (its time moved back, as an old row's would be).
    with reminders.transaction():
        reminders.execute("SET LOCAL session_replication_role = replica")
        reminders.execute("UPDATE agentdb_private.audit SET at = at - interval '5 minutes'")
    assert cli.main(["doctor", "--dsn", dsn, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["oldest_unsealed_seconds"] >= 300
    assert any("pyagentdb seal" in w for w in report["warnings"]), report["warnings"]
    assert cli.main(["seal", "--dsn", dsn, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"audit": 1, "change": 1}
    assert cli.main(["seal", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.strip() == "sealed 0 audit row(s) and 0 change-log row(s)"
    assert cli.main(["seal", "--dsn", dsn, "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    # An audit row naming a step that does not exist: a problem (exit 1).
    with reminders.transaction():
        reminders.execute("SET LOCAL session_replication_role = replica")
        reminders.execute("DELETE FROM agentdb_private.steps")
    assert cli.main(["doctor", "--dsn", dsn, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert any("name a step that does not exist" in p for p in report["problems"]), report["problems"]
