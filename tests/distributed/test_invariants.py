"""The reliability invariants on the cluster: one call touches one worker, a worker process
killed in the middle of a call leaves nothing behind, tenants on different workers do not
wait on each other, and the books reconcile exactly after concurrent work."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from .conftest import FAR, begin, call, invoke
from .reconcile import reconcile
from .test_distribute import remote_commands


def fresh_user(db, cluster, dbname: str, *, avoid=None, on=None) -> str:
    """A user with write permission whose shard lives on worker `on` (or not on `avoid`)."""
    for _ in range(200):
        name = f"u-{uuid.uuid4().hex[:10]}"
        home = cluster.worker_of(dbname, name)
        if (on is None or home == on) and (avoid is None or home != avoid):
            db.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (name,))
            db.execute("SELECT agentdb.grant_permission(%s, 'DELETE')", (name,))
            return name
    raise AssertionError("no user hashes to the wanted worker")


def dbname_of(dsn: str) -> str:
    return conninfo_to_dict(dsn)["dbname"]


def statements_on(cluster, node, dbname: str) -> list[tuple[str, int]]:
    """Statements that touched agentdb or the business tables on a node (pg_stat_statements)."""
    with cluster.connect(node, dbname) as conn:
        return conn.execute(
            "SELECT query, calls FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            "   AND (query ~ 'agentdb' OR query ~ 'reminders') AND query !~ 'pg_stat_statements'").fetchall()


def reset_statements(cluster, dbname: str) -> str | None:
    """Empty pg_stat_statements on every node; the reason when it cannot. (The extension is
    created on the coordinator, which propagates it: a worker refuses the DDL.)"""
    for node in cluster.nodes:
        with cluster.connect(node, dbname) as conn:
            try:
                if node.is_coordinator:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                conn.execute("SELECT pg_stat_statements_reset()")
            except psycopg.Error as exc:
                return f"pg_stat_statements on {node.host}:{node.port}: {str(exc).splitlines()[0]}"
    return None


def test_each_call_touches_one_worker(cluster, dist, db):
    """From the coordinator one command, to the user's worker; on the other worker nothing ran."""
    dbname = dbname_of(dist)
    user = fresh_user(db, cluster, dbname)
    home = cluster.worker_of(dbname, user)
    other = next(w for w in cluster.workers if w != home)
    task = begin(db, user)
    cannot = reset_statements(cluster, dbname)
    if cannot:
        pytest.skip(cannot)
    receipt, sent = remote_commands(db, invoke, db, user, task, "add_reminder",
                                    {"content": "one worker", "remind_at": FAR})
    assert receipt["outcome"] == "success"
    assert len(sent) == 1 and "agentdb.invoke_for" in sent[0][0], sent
    assert f":{home.port} " in sent[0][1] + " ", sent
    assert statements_on(cluster, other, dbname) == []
    ran_home = statements_on(cluster, home, dbname)  # top-level statements: the delegated call
    assert [(q.split("(")[0], n) for q, n in ran_home] == [("SELECT agentdb.invoke_for", 1)], ran_home


def test_worker_killed_mid_call_leaves_no_partial_write(cluster, dist, db):
    """The call is held after its write (a trigger waits on a lock the test holds), then the
    worker process running it is killed: no row, no step, no audit row; the next call works."""
    dbname = dbname_of(dist)
    user = fresh_user(db, cluster, dbname)
    home = cluster.worker_of(dbname, user)
    task = begin(db, user)
    outcome: dict = {}

    def held_call():
        try:
            with psycopg.connect(dist, autocommit=True) as conn:
                outcome["receipt"] = invoke(conn, user, task, "add_held", {"note": "hold"})
        except psycopg.Error as exc:
            outcome["error"] = exc

    with cluster.connect(home, dbname) as lock:
        lock.execute("SELECT pg_advisory_lock(4242)")
        thread = threading.Thread(target=held_call)
        thread.start()
        pid = None
        for _ in range(200):
            found = lock.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND query ~ 'invoke'").fetchone()
            if found:
                pid = found[0]
                break
            time.sleep(0.05)
        assert pid, "the call never reached the held point on its worker"
        written = lock.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'relation'"
                               " AND mode = 'RowExclusiveLock'", (pid,)).fetchone()[0]
        assert written > 0  # it had written when it was killed
        lock.execute("SELECT pg_terminate_backend(%s::int)", (pid,))
        thread.join(30)
    assert "error" in outcome, outcome
    for table in ("public.held", "agentdb_private.steps", "agentdb_private.audit"):
        left = db.execute(f"SELECT count(*) FROM {table} WHERE user_id = %s", (user,)).fetchone()[0]
        assert left == 0, table
    after = invoke(db, user, task, "add_held", {"note": "fine"})
    assert after["outcome"] == "success" and after["seq"] == 1


def test_tenants_on_different_workers_do_not_wait_on_each_other(cluster, dist, db):
    """User A's call runs in a transaction left open (every lock it takes is held); user B on
    the other worker, and user C on A's own worker, complete meanwhile. They have a lock
    timeout: waiting on A would fail them."""
    dbname = dbname_of(dist)
    a = fresh_user(db, cluster, dbname)
    b = fresh_user(db, cluster, dbname, avoid=cluster.worker_of(dbname, a))
    c = fresh_user(db, cluster, dbname, on=cluster.worker_of(dbname, a))
    ta, tb, tc = begin(db, a), begin(db, b), begin(db, c)
    with psycopg.connect(dist) as held:
        held.execute("SELECT 1")
        r = invoke(held, a, ta, "add_reminder", {"content": "A holds", "remind_at": FAR})
        assert r["outcome"] == "success"
        with psycopg.connect(dist, autocommit=True) as free:
            free.execute("SET lock_timeout = '3s'")
            for n in range(3):
                rb = invoke(free, b, tb, "add_reminder", {"content": f"B {n}", "remind_at": FAR})
                assert rb["outcome"] == "success", rb
            verdict = call(free, "finalize_reply", b, tb, model_text="I've set 3 reminders.")
            assert verdict["verdict"] == "deliver"
            rc = invoke(free, c, tc, "add_reminder", {"content": "C, next to A", "remind_at": FAR})
            assert rc["outcome"] == "success", rc
        held.commit()
    mine = db.execute("SELECT count(*) FROM public.reminders WHERE user_id = ANY (%s)",
                      ([a, b, c],)).fetchone()[0]
    assert mine == 5


def test_books_reconcile_exactly_after_concurrent_work(cluster, dist, db):
    dbname = dbname_of(dist)
    users = [fresh_user(db, cluster, dbname) for _ in range(6)]
    assert len({cluster.worker_of(dbname, u) for u in users}) >= 1
    errors: list = []

    def work(user: str, rounds: int):
        try:
            with psycopg.connect(dist, autocommit=True) as conn:
                for n in range(rounds):
                    task = begin(conn, user)
                    made = invoke(conn, user, task, "add_reminder", {"content": f"r{n}", "remind_at": FAR},
                                  call_id=f"c{n}")
                    invoke(conn, user, task, "add_reminder", {"content": f"r{n}", "remind_at": FAR},
                           call_id=f"c{n}")  # replay
                    invoke(conn, user, task, "add_reminder", {"content": "", "remind_at": FAR})  # invalid
                    if n % 3 == 0:
                        invoke(conn, user, task, "delete_reminder", made["key"])
                    call(conn, "finalize_reply", user, task, model_text="I've set the reminder.")
                    call(conn, "finish_task", user, task)
        except Exception as exc:  # reported below, with the user
            errors.append((user, repr(exc)))

    threads = [threading.Thread(target=work, args=(u, 6)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    books = reconcile(db, users)
    assert books["problems"] == {}, books
    counts = books["counts"]
    # Per user and round: insert, invalid, and a delete every third round; the replay writes nothing.
    assert counts["steps"] == len(users) * (6 * 2 + 2)
    assert counts["audit_rows"] == counts["steps"]
    assert counts["reminders"] == len(users) * 4
    assert counts["changes"] == len(users) * (6 + 2)
