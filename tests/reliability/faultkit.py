"""Fault injection: stop a call at a chosen point inside the server, then kill it there.

A *point* is a place inside invoke / confirm / the worker where the victim's statement can be
held on purpose:

  lock points   the test holds a lock the call needs (the task row, the dedup advisory lock,
                the target row, the draft row) in an open transaction;
  hook points   a trigger or check function installed in the test database waits on an
                advisory lock the test holds: before/after the target write, before the change
                log row, the step row, the audit row, the draft/action update, the worker's
                task row, inside the conflict check, and at COMMIT (a deferred constraint
                trigger on the audit table).

The victim runs in a thread with its own connection (killed with pg_terminate_backend, or by
statement_timeout / lock_timeout) or in a separate Python process (killed with SIGKILL while
blocked). After the kill the test releases the hold, waits for the victim's backend to be gone,
and checks what the database kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psycopg

HOOKS_SQL = """
CREATE OR REPLACE FUNCTION public.fault_wait()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Passes at once unless the test holds the exclusive lock of this point.
    PERFORM pg_advisory_xact_lock_shared(hashtext('fault:' || TG_ARGV[0]));
    IF TG_LEVEL = 'ROW' AND TG_WHEN = 'BEFORE' THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION public.fault_check(p_user text, p_args jsonb)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('fault:conflict_check'));
    RETURN NULL;
END $$;

CREATE TRIGGER fault_before_write BEFORE INSERT OR UPDATE OR DELETE ON public.reminders
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('before_write');
CREATE TRIGGER fault_after_write AFTER INSERT OR UPDATE OR DELETE ON public.reminders
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('after_write');
CREATE TRIGGER fault_step_insert BEFORE INSERT ON agentdb_private.steps
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('step_insert');
CREATE TRIGGER fault_audit_insert BEFORE INSERT ON agentdb_private.audit
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('audit_insert');
CREATE CONSTRAINT TRIGGER fault_commit AFTER INSERT ON agentdb_private.audit
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('commit');
CREATE TRIGGER fault_task_insert BEFORE INSERT ON agentdb_private.tasks
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('task_insert');
CREATE TRIGGER fault_draft_update BEFORE UPDATE ON agentdb_private.drafts
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('draft_update');
CREATE TRIGGER fault_action_update BEFORE UPDATE ON agentdb_private.actions
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('action_update');

SELECT agentdb.register_tool(
    name => 'add_checked', action => 'insert', target => 'public.reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder', owner_column => 'user_id',
    conflict_check => 'public.fault_check(text, jsonb)'::regprocedure);
SELECT agentdb.register_tool(
    name => 'book_reminder', action => 'insert', target => 'public.reminders',
    label_zh => '预约提醒', label_en => 'book a reminder', owner_column => 'user_id',
    needs_confirm => true);
"""

LEDGER_HOOK_SQL = """
CREATE TRIGGER fault_log_insert BEFORE INSERT ON agentdb_private.change_log
    FOR EACH ROW EXECUTE FUNCTION public.fault_wait('log_insert');
"""

HOOK_POINTS = ("conflict_check", "before_write", "after_write", "log_insert", "step_insert",
               "audit_insert", "commit", "task_insert", "draft_update", "action_update")


def install_hooks(db, ledger: bool) -> None:
    db.execute(HOOKS_SQL)
    if ledger:
        db.execute(LEDGER_HOOK_SQL)


class Hold:
    """Hold one point closed from a separate owner connection until release()."""

    def __init__(self, dsn: str, point: str, *, task=None, row_id=None, draft=None, dedup: str | None = None):
        self.point = point
        self.conn = psycopg.connect(dsn)  # not autocommit: lock points keep a transaction open
        if point in HOOK_POINTS:
            self.conn.execute("SELECT pg_advisory_lock(hashtext('fault:' || %s))", (point,))
        elif point == "task_lock":
            self.conn.execute("SELECT 1 FROM agentdb_private.tasks WHERE id = %s FOR UPDATE", (task,))
        elif point == "row_lock":
            self.conn.execute("SELECT 1 FROM public.reminders WHERE id = %s FOR UPDATE", (row_id,))
        elif point == "draft_lock":
            self.conn.execute("SELECT 1 FROM agentdb_private.drafts WHERE id = %s FOR UPDATE", (draft,))
        elif point == "dedup_lock":
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (dedup,))
        else:
            raise ValueError(point)

    def release(self) -> None:
        if self.conn.closed:
            return
        try:
            if self.point in HOOK_POINTS:
                self.conn.execute("SELECT pg_advisory_unlock_all()")
            self.conn.rollback()
        finally:
            self.conn.close()


@dataclass
class Victim:
    """One call run so that it can be killed while blocked."""

    pid: int | None = None  # the victim's backend pid
    result: object = None
    error: BaseException | None = None
    proc: subprocess.Popen | None = None
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def sqlstate(self) -> str | None:
        return getattr(self.error, "sqlstate", None)


def run_in_thread(dsn: str, sql: str, params, *, user=None, password=None, options: str = "") -> Victim:
    victim = Victim()
    ready = threading.Event()

    def body():
        try:
            kwargs = {"autocommit": True}
            if user:
                kwargs.update(user=user, password=password)
            if options:
                kwargs["options"] = options
            with psycopg.connect(dsn, **kwargs) as conn:
                victim.pid = conn.info.backend_pid
                ready.set()
                victim.result = conn.execute(sql, params).fetchone()[0]
        except BaseException as exc:  # noqa: BLE001 - the victim's error is the observation
            victim.error = exc
        finally:
            ready.set()
            victim.done.set()

    victim.thread = threading.Thread(target=body, daemon=True)
    victim.thread.start()
    ready.wait(10)
    return victim


_CHILD = r"""
import json, sys
import psycopg
job = json.loads(sys.stdin.readline())
conn = psycopg.connect(job["dsn"], user=job["user"], password=job["password"], autocommit=True,
                       options=job["options"])
print(conn.info.backend_pid, flush=True)
result = conn.execute(job["sql"], job["params"]).fetchone()[0]
print(json.dumps(result), flush=True)
"""


def run_in_process(dsn: str, sql: str, params, *, user: str, password: str, options: str = "") -> Victim:
    """The call from a separate Python process (the 'client' that gets SIGKILLed)."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write(json.dumps({"dsn": dsn, "user": user, "password": password, "sql": sql,
                                 "params": list(params), "options": options}) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    victim = Victim(pid=int(line) if line.strip().isdigit() else None, proc=proc)
    return victim


def wait_blocked(db, pid: int, timeout: float = 10.0) -> str:
    """Wait until the victim's backend waits on a lock; returns the wait event."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.execute("SELECT wait_event_type, wait_event, state FROM pg_stat_activity WHERE pid = %s",
                         (pid,)).fetchone()
        if row and row[0] == "Lock":
            return row[1]
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never blocked: {row}")


def wait_gone(db, pid: int | None, timeout: float = 15.0) -> None:
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} still there after {timeout}s")


def terminate(db, pid: int) -> None:
    assert db.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0]


def sigkill(victim: Victim) -> None:
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    for stream in (victim.proc.stdin, victim.proc.stdout):
        with contextlib.suppress(OSError):
            stream.close()


def finish(victim: Victim, timeout: float = 15.0) -> None:
    if victim.thread is not None:
        victim.thread.join(timeout)
        assert not victim.thread.is_alive(), "victim thread still running"
    if victim.proc is not None and victim.proc.poll() is None:
        try:
            victim.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(victim.proc.pid, signal.SIGKILL)
