"""Snapshots and diffs: per-table checksums first, then rows added, removed and changed (with
the changed columns), for watched tables (from the change log) and others (from stored rows)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from helpers import FAR_TIME, begin, invoke, rows, scalar

MODES = ["watched", "stored"]


def snap(conn, *tables: str) -> int:
    return scalar(conn, "SELECT agentdb.snapshot(%s::regclass[])", (list(tables),))


def diff(conn, before: int, after: int) -> list[dict]:
    return scalar(conn, "SELECT agentdb.diff(%s, %s)", (before, after))


def by_table(result: list[dict]) -> dict:
    return {d["table"]: d for d in result}


@pytest.fixture(params=MODES)
def mode(request, db):
    """Each test runs against watched tables (diff from the change log) and plain ones
    (diff from the rows each snapshot stored)."""
    db.execute("""
        CREATE TYPE public.mood AS ENUM ('calm', 'busy');
        CREATE TABLE public.accounts (
            code text PRIMARY KEY,              -- no id column
            owner text,
            balance numeric(12, 2),
            opened timestamptz,
            tags text[],
            meta jsonb,
            ratio float8,
            blob bytea,
            span interval,
            mood public.mood,
            active boolean,
            note varchar(20),
            doc json
        );
        CREATE TABLE public.seats (            -- a composite key
            hall text, seat_row int, seat int, holder text,
            PRIMARY KEY (hall, seat_row, seat)
        );
        INSERT INTO public.accounts VALUES
            ('A1', 'ann', 10.50, '2030-01-01 08:00+08', '{x,y}', '{"k": [1, 2]}', 0.1, '\\x00ff',
             '1 day 02:00', 'calm', true, 'n1', '{"a": 1}'),
            ('B2', 'bob', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
            ('C3', 'cat', 0, '2031-05-05 00:00+00', '{}', '[]', -2.5e-7, '\\x', '-3 months', 'busy', false,
             '', '[]');
        INSERT INTO public.seats
        SELECT 'main', r, s, NULL FROM generate_series(1, 3) AS r, generate_series(1, 4) AS s;
    """)
    if request.param == "watched":
        db.execute("SELECT agentdb.watch('public.accounts'), agentdb.watch('public.seats')")
    db.ledger_mode = request.param
    return db


def test_unchanged_tables_give_an_empty_diff(mode):
    a = snap(mode, "public.accounts", "public.seats")
    b = snap(mode, "public.accounts", "public.seats")
    assert diff(mode, a, b) == []
    modes = {r["table_name"]: r["mode"]
             for r in rows(mode, "SELECT * FROM agentdb.snapshots WHERE snapshot_id = %s", (a,))}
    expected = "log" if mode.ledger_mode == "watched" else "rows"
    assert modes == {"public.accounts": expected, "public.seats": expected}


def test_inserts_deletes_updates_and_nulls(mode):
    a = snap(mode, "public.accounts", "public.seats")
    mode.execute("""
        INSERT INTO public.accounts (code, owner, balance) VALUES ('D4', 'dan', 1);
        DELETE FROM public.accounts WHERE code = 'C3';
        UPDATE public.accounts SET balance = 11.00, tags = NULL, meta = '{"k": [1, 3]}' WHERE code = 'A1';
        UPDATE public.accounts SET owner = NULL, ratio = 1.5, span = '5 minutes' WHERE code = 'B2';
        UPDATE public.seats SET holder = 'zoe' WHERE seat_row = 2 AND seat = 3;
    """)
    b = snap(mode, "public.accounts", "public.seats")
    found = by_table(diff(mode, a, b))
    assert list(found) == ["public.accounts", "public.seats"]
    acc = found["public.accounts"]
    assert acc["complete"] is True
    assert [r["code"] for r in acc["added"]] == ["D4"]
    (new,) = acc["added"]
    assert new["balance"] == 1 and new["owner"] == "dan" and new["tags"] is None
    assert [r["code"] for r in acc["removed"]] == ["C3"]
    assert acc["removed"][0]["ratio"] == -2.5e-7 and acc["removed"][0]["mood"] == "busy"
    changed = {c["key"]["code"]: c for c in acc["changed"]}
    assert changed["A1"]["columns"] == ["balance", "tags", "meta"]
    assert changed["A1"]["before"]["tags"] == ["x", "y"] and changed["A1"]["after"]["tags"] is None
    assert changed["B2"]["columns"] == ["owner", "ratio", "span"]
    assert changed["B2"]["before"]["owner"] == "bob" and changed["B2"]["after"]["owner"] is None
    seats = found["public.seats"]
    assert seats["added"] == [] and seats["removed"] == []
    assert seats["changed"] == [{"key": {"hall": "main", "seat_row": 2, "seat": 3}, "columns": ["holder"],
                                 "before": {"hall": "main", "seat_row": 2, "seat": 3, "holder": None},
                                 "after": {"hall": "main", "seat_row": 2, "seat": 3, "holder": "zoe"}}]


def test_a_change_undone_is_no_change(mode):
    a = snap(mode, "public.accounts", "public.seats")
    mode.execute("UPDATE public.accounts SET owner = 'x' WHERE code = 'A1'")
    mode.execute("UPDATE public.accounts SET owner = 'ann' WHERE code = 'A1'")
    mode.execute("INSERT INTO public.seats VALUES ('side', 1, 1, 'tmp')")
    mode.execute("DELETE FROM public.seats WHERE hall = 'side'")
    b = snap(mode, "public.accounts", "public.seats")
    assert diff(mode, a, b) == []


def test_several_changes_to_one_row_net_out(mode):
    a = snap(mode, "public.seats")
    mode.execute("INSERT INTO public.seats VALUES ('side', 1, 1, 'one')")
    mode.execute("UPDATE public.seats SET holder = 'two' WHERE hall = 'side'")
    mode.execute("UPDATE public.seats SET holder = 'kim' WHERE hall = 'main' AND seat_row = 1 AND seat = 1")
    mode.execute("UPDATE public.seats SET holder = 'lee' WHERE hall = 'main' AND seat_row = 1 AND seat = 1")
    mode.execute("DELETE FROM public.seats WHERE hall = 'main' AND seat_row = 3")
    b = snap(mode, "public.seats")
    (seats,) = diff(mode, a, b)
    assert seats["added"] == [{"hall": "side", "seat_row": 1, "seat": 1, "holder": "two"}]
    assert [(r["seat_row"], r["seat"]) for r in seats["removed"]] == [(3, 1), (3, 2), (3, 3), (3, 4)]
    (one,) = seats["changed"]
    assert (one["before"]["holder"], one["after"]["holder"]) == (None, "lee")


def test_a_key_update_is_a_removal_and_an_addition(mode):
    a = snap(mode, "public.accounts")
    mode.execute("UPDATE public.accounts SET code = 'Z9' WHERE code = 'B2'")
    b = snap(mode, "public.accounts")
    (acc,) = diff(mode, a, b)
    assert [r["code"] for r in acc["added"]] == ["Z9"]
    assert [r["code"] for r in acc["removed"]] == ["B2"]
    assert acc["changed"] == [] and acc["complete"] is True


def test_only_tables_in_both_snapshots_are_compared(mode):
    a = snap(mode, "public.accounts")
    mode.execute("DELETE FROM public.seats")
    mode.execute("DELETE FROM public.accounts WHERE code = 'A1'")
    b = snap(mode, "public.accounts", "public.seats")
    assert [d["table"] for d in diff(mode, a, b)] == ["public.accounts"]


def test_snapshot_and_changes_in_one_transaction(mode):
    with mode.transaction():
        a = snap(mode, "public.seats")
        mode.execute("UPDATE public.seats SET holder = 'same tx' WHERE seat = 4")
        b = snap(mode, "public.seats")
        mode.execute("UPDATE public.seats SET holder = 'later' WHERE seat = 1")
        c = snap(mode, "public.seats")
    (ab,) = diff(mode, a, b)
    assert sorted(ch["key"]["seat"] for ch in ab["changed"]) == [4, 4, 4] and ab["complete"] is True
    (bc,) = diff(mode, b, c)
    assert sorted(ch["key"]["seat"] for ch in bc["changed"]) == [1, 1, 1] and bc["complete"] is True


def test_a_write_still_open_at_the_snapshot_counts_when_it_commits(mode, dsn):
    """MVCC: a change committed after snapshot b belongs to (b, c), not to (a, b)."""
    a = snap(mode, "public.seats")
    other = psycopg.connect(dsn)
    try:
        other.execute("UPDATE public.seats SET holder = 'slow' WHERE seat_row = 1 AND seat = 2")
        b = snap(mode, "public.seats")  # the update is not committed yet
        other.commit()
    finally:
        other.close()
    c = snap(mode, "public.seats")
    assert diff(mode, a, b) == []
    (bc,) = diff(mode, b, c)
    assert [ch["key"] for ch in bc["changed"]] == [{"hall": "main", "seat_row": 1, "seat": 2}]
    assert bc["complete"] is True


def test_concurrent_writers_during_snapshots(mode, dsn):
    a = snap(mode, "public.seats")
    stop = threading.Event()
    done = []

    def writer(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            i = 0
            while not stop.is_set():
                i += 1
                conn.execute("INSERT INTO public.seats VALUES (%s, %s, 1, 'w')", (f"w{n}", i))
            done.append(i)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    middle = [snap(mode, "public.seats") for _ in range(5)]
    stop.set()
    for t in threads:
        t.join(30)
    z = snap(mode, "public.seats")
    counts = [scalar(mode, "SELECT row_count FROM agentdb.snapshots WHERE snapshot_id = %s", (s,))
              for s in [a, *middle, z]]
    total = 0
    pairs = zip([a, *middle], [*middle, z], counts[:-1], counts[1:], strict=True)
    for before, after, n_before, n_after in pairs:
        found = diff(mode, before, after)
        added = found[0]["added"] if found else []
        assert len(added) == n_after - n_before
        assert not found or found[0]["complete"] is True
        total += len(added)
    assert total == sum(done)


def test_a_table_without_a_primary_key_is_refused(db):
    db.execute("CREATE TABLE public.bag (x int)")
    with pytest.raises(psycopg.errors.InvalidTableDefinition,
                       match="cannot snapshot public.bag: it has no primary key"):
        snap(db, "public.bag")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="give one or more tables"):
        db.execute("SELECT agentdb.snapshot('{}'::regclass[])")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no snapshot 424242"):
        db.execute("SELECT agentdb.diff(424242, 424243)")


def test_a_change_behind_the_log_is_flagged_incomplete(db):
    """Changes made with the triggers off cannot be shown from the log; the checksum still
    sees them, and the diff says it is incomplete rather than claiming nothing changed."""
    db.execute("CREATE TABLE public.kv (k int PRIMARY KEY, v text)")
    db.execute("INSERT INTO public.kv SELECT g, 'v' || g FROM generate_series(1, 5) AS g")
    db.execute("SELECT agentdb.watch('public.kv')")
    a = snap(db, "public.kv")
    db.execute("UPDATE public.kv SET v = 'logged' WHERE k = 1")
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")
        db.execute("UPDATE public.kv SET v = 'hidden' WHERE k = 2")
    b = snap(db, "public.kv")
    (kv,) = diff(db, a, b)
    assert kv["complete"] is False
    assert [c["key"] for c in kv["changed"]] == [{"k": 1}]
    db.execute("TRUNCATE public.kv")
    c = snap(db, "public.kv")
    assert diff(db, b, c)[0]["complete"] is False


def test_the_app_and_auditor_may_snapshot_what_they_can_read(reminders, role_connect):
    task = begin(reminders)
    reminders.execute("GRANT USAGE ON SCHEMA public TO agentdb_app")
    app = role_connect("agentdb_app")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not read it"):
        snap(app, "public.reminders")
    reminders.execute("GRANT SELECT ON public.reminders TO agentdb_app")
    a = snap(app, "public.reminders")
    invoke(reminders, task, "add_reminder", {"content": "dentist", "remind_at": FAR_TIME})
    b = snap(app, "public.reminders")
    (found,) = diff(app, a, b)
    assert [r["content"] for r in found["added"]] == ["dentist"] and found["source"] == "change_log"
    assert scalar(app, "SELECT agentdb.forget_snapshot(%s)", (a,)) is True
    agent = role_connect("agentdb_agent")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        snap(agent, "public.reminders")
