"""The proof holes of issue 12: each case made a receipt say more than the committed database
holds (or made invoke raise). Each test here failed on the code before the fix.

- deferred constraints and constraint triggers: checked inside the write's subtransaction,
  before the read-back, in autocommit and inside a caller's transaction;
- comparison on an exact representation, not the type's `=` (numeric(10,2), interval);
- columns named like the guarded write's aliases (t, r, w, k);
- dedup keyed on the converted values, and refused outside READ COMMITTED.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from helpers import FAR_TIME, begin, check_recorded, count, invoke, one, scalar, steps

EVENTS = """
CREATE TABLE public.events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL,
    title text NOT NULL,
    starts_at timestamptz NOT NULL
);
SELECT agentdb.register_tool(name => 'add_event', action => 'insert', target => 'public.events',
    label_zh => '加一个日程', label_en => 'add an event', owner_column => 'owner');
SELECT agentdb.register_tool(name => 'edit_event', action => 'update', target => 'public.events',
    label_zh => '改一个日程', label_en => 'change an event', owner_column => 'owner');
"""
EVENT = {"title": "dentist", "starts_at": "2030-05-01 09:00:00+00"}


@pytest.fixture
def events(reminders):
    reminders.execute(EVENTS)
    return reminders


# --- deferred constraints and constraint triggers -------------------------------------------

REWRITE_LATER = """
CREATE FUNCTION public.rename_later() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.events SET title = 'renamed by a deferred trigger' WHERE id = NEW.id;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER rename_later AFTER INSERT ON public.events
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.rename_later();
"""
DEFERRED_UNIQUE = """
ALTER TABLE public.events ADD CONSTRAINT events_one_per_time
UNIQUE (owner, starts_at) DEFERRABLE INITIALLY DEFERRED;
INSERT INTO public.events (owner, title, starts_at) VALUES ('u1', 'already there', '2030-05-01 09:00:00+00');
"""


def test_a_deferred_rewrite_is_caught_by_the_read_back(events):
    events.execute(REWRITE_LATER)
    task = begin(events)
    receipt = invoke(events, task, "add_event", EVENT)
    check_recorded(events, receipt, outcome="unverified", refusal="readback_mismatch")
    assert receipt["mismatched"] == ["title"]
    assert count(events, "events") == 0


def test_a_deferred_rewrite_is_caught_inside_a_callers_transaction(events, dsn):
    events.execute(REWRITE_LATER)
    task = begin(events)
    with psycopg.connect(dsn) as conn:  # not autocommit: the caller's own transaction
        receipt = invoke(conn, task, "add_event", EVENT)
        conn.commit()
    check_recorded(events, receipt, outcome="unverified", refusal="readback_mismatch")
    assert count(events, "events") == 0


def test_a_deferred_unique_failure_is_a_recorded_failed_step(events):
    events.execute(DEFERRED_UNIQUE)
    task = begin(events)
    receipt = invoke(events, task, "add_event", {**EVENT, "title": "second at that time"})
    check_recorded(events, receipt, outcome="failed", refusal="unique_violation")
    assert count(events, "events") == 1


def test_a_deferred_unique_failure_inside_a_callers_transaction(events, dsn):
    events.execute(DEFERRED_UNIQUE)
    task = begin(events)
    with psycopg.connect(dsn) as conn:
        receipt = invoke(conn, task, "add_event", {**EVENT, "title": "second at that time"})
        conn.commit()  # nothing of the failed write is left to fail here
    check_recorded(events, receipt, outcome="failed", refusal="unique_violation")
    assert count(events, "events") == 1


def test_a_verified_write_leaves_the_callers_constraints_deferred(events, dsn):
    """Checking our write immediately must not make the caller's later statements immediate."""
    events.execute(DEFERRED_UNIQUE)
    task = begin(events)
    with psycopg.connect(dsn) as conn:
        ok = invoke(conn, task, "add_event", {**EVENT, "starts_at": "2030-06-01 09:00:00+00"})
        assert ok["outcome"] == "success" and ok["verified"], ok
        # Two rows at one time: deferred, so no error until COMMIT.
        conn.execute("INSERT INTO events (owner, title, starts_at) "
                     "VALUES ('u9', 'a', now()), ('u9', 'b', now())")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.commit()
    assert count(events, "events") == 1


# --- exact comparison -----------------------------------------------------------------------

PRICES = """
CREATE TABLE public.prices (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL,
    price numeric(10, 2),
    code varchar(5),
    span interval
);
SELECT agentdb.register_tool(name => 'add_price', action => 'insert', target => 'public.prices',
    label_zh => '记一个价格', label_en => 'record a price', owner_column => 'owner');
"""


@pytest.fixture
def prices(reminders):
    reminders.execute(PRICES)
    return reminders


def test_a_value_the_column_would_round_is_invalid(prices):
    task = begin(prices)
    receipt = invoke(prices, task, "add_price", {"price": 89.999})
    step, _ = check_recorded(prices, receipt, outcome="invalid")
    assert receipt["field"] == "price"
    assert "90.00" in step["error"]
    assert count(prices, "prices") == 0


@pytest.mark.parametrize("given", [89.99, "89.99", 90, "90", "90.000"])
def test_a_value_that_fits_the_column_verifies(prices, given):
    task = begin(prices)
    receipt = invoke(prices, task, "add_price", {"price": given})
    check_recorded(prices, receipt, outcome="success")
    assert count(prices, "prices") == 1


def test_an_interval_normalised_by_a_trigger_does_not_verify(prices):
    """'30 days' = '1 mon' for the interval type's =, but it is not what was asked."""
    prices.execute("""
        CREATE FUNCTION public.to_months() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.span := justify_days(NEW.span); RETURN NEW; END $$;
        CREATE TRIGGER to_months BEFORE INSERT ON public.prices
        FOR EACH ROW EXECUTE FUNCTION public.to_months();
    """)
    task = begin(prices)
    receipt = invoke(prices, task, "add_price", {"span": "30 days"})
    check_recorded(prices, receipt, outcome="unverified", refusal="readback_mismatch")
    assert receipt["mismatched"] == ["span"]
    assert count(prices, "prices") == 0


def test_a_string_too_long_for_varchar_is_invalid(prices):
    task = begin(prices)
    receipt = invoke(prices, task, "add_price", {"code": "abcdefgh"})
    check_recorded(prices, receipt, outcome="invalid")
    assert receipt["field"] == "code"
    assert count(prices, "prices") == 0


def test_a_string_cut_by_a_trigger_does_not_verify(prices):
    prices.execute("""
        CREATE FUNCTION public.cut() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.code := left(NEW.code, 2); RETURN NEW; END $$;
        CREATE TRIGGER cut BEFORE INSERT ON public.prices FOR EACH ROW EXECUTE FUNCTION public.cut();
    """)
    task = begin(prices)
    receipt = invoke(prices, task, "add_price", {"code": "abc"})
    check_recorded(prices, receipt, outcome="unverified", refusal="readback_mismatch")
    assert count(prices, "prices") == 0


# --- columns named like the write's aliases -------------------------------------------------

ALIASES = """
CREATE TABLE public.notes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL,
    t text, r text, w text, k text, done boolean NOT NULL DEFAULT false
);
SELECT agentdb.register_tool(name => 'add_note', action => 'insert', target => 'public.notes',
    label_zh => '记一条笔记', label_en => 'save a note', owner_column => 'owner',
    dedup_columns => ARRAY['t', 'k']);
SELECT agentdb.register_tool(name => 'edit_note', action => 'update', target => 'public.notes',
    label_zh => '改一条笔记', label_en => 'change a note', owner_column => 'owner');
SELECT agentdb.register_tool(name => 'drop_note', action => 'delete', target => 'public.notes',
    label_zh => '删一条笔记', label_en => 'delete a note', owner_column => 'owner');
"""


def test_columns_named_like_the_aliases(reminders):
    reminders.execute(ALIASES)
    task = begin(reminders)
    added = invoke(reminders, task, "add_note", {"t": "T", "r": "R", "w": "W", "k": "K"})
    check_recorded(reminders, added, outcome="success")
    assert added["row"]["t"] == "T" and added["row"]["k"] == "K"
    again = invoke(reminders, task, "add_note", {"t": "T", "r": "other", "k": "K"})
    check_recorded(reminders, again, outcome="duplicate")
    nid = added["key"]["id"]
    edit = invoke(reminders, task, "edit_note", {"id": nid, "w": "W2"})
    check_recorded(reminders, edit, outcome="success")
    bulk = invoke(reminders, task, "edit_note",
                  {"where": {"t": "T", "r": "R"}, "set": {"k": "K2", "done": True}}, expect_rows=1)
    check_recorded(reminders, bulk, outcome="success")
    assert one(reminders, "SELECT t, r, w, k, done FROM notes") == {
        "t": "T", "r": "R", "w": "W2", "k": "K2", "done": True}
    check_recorded(reminders, invoke(reminders, task, "drop_note", {"where": {"k": "K2"}}, expect_rows=1),
                   outcome="success")
    assert count(reminders, "notes") == 0
    # The change log names every change by its key, under its step.
    logged = reminders.execute(
        "SELECT op, key, seq FROM agentdb_private.change_log WHERE table_name = 'public.notes' ORDER BY id"
    ).fetchall()
    assert logged == [("INSERT", {"id": nid}, 1), ("UPDATE", {"id": nid}, 3), ("UPDATE", {"id": nid}, 4),
                      ("DELETE", {"id": nid}, 5)]



@pytest.mark.parametrize("watched", [False, True])
def test_snapshots_and_diffs_of_a_table_with_a_column_named_t(db, watched):
    """The snapshot's stored rows are the whole row, not the column named like its alias."""
    db.execute("CREATE TABLE public.marks (id int PRIMARY KEY, t text, r text)")
    db.execute("INSERT INTO public.marks VALUES (1, 'one', 'a'), (2, 'two', 'b')")
    if watched:
        db.execute("SELECT agentdb.watch('public.marks')")
    before = scalar(db, "SELECT agentdb.snapshot(ARRAY['public.marks']::regclass[])")
    db.execute("UPDATE public.marks SET t = 'ONE' WHERE id = 1")
    db.execute("DELETE FROM public.marks WHERE id = 2")
    after = scalar(db, "SELECT agentdb.snapshot(ARRAY['public.marks']::regclass[])")
    (found,) = scalar(db, "SELECT agentdb.diff(%s, %s)", (before, after))
    assert found["removed"] == [{"id": 2, "t": "two", "r": "b"}], found
    assert found["changed"] == [{"key": {"id": 1}, "columns": ["t"],
                                 "before": {"id": 1, "t": "one", "r": "a"},
                                 "after": {"id": 1, "t": "ONE", "r": "a"}}], found

# --- dedup on the converted values ----------------------------------------------------------


def race(dsn, first_call, second_call):
    """first_call in an open transaction; second_call in another session must wait for it."""
    holder = psycopg.connect(dsn)
    results: dict = {}
    try:
        results["first"] = first_call(holder)

        def second():
            with psycopg.connect(dsn, autocommit=True) as conn:
                results["second"] = second_call(conn)

        worker = threading.Thread(target=second)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), "the second call must wait for the first"
        holder.commit()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        holder.close()
    return results["first"], results["second"]


def test_the_same_instant_in_two_zones_is_a_duplicate_even_when_racing(reminders, dsn):
    t1, t2 = begin(reminders), begin(reminders)
    utc = {"content": "dentist", "remind_at": "2034-01-01 08:00:00+00"}
    shanghai = {"content": "dentist", "remind_at": "2034-01-01 16:00:00+08"}
    first, second = race(dsn, lambda c: invoke(c, t1, "add_reminder", utc),
                         lambda c: invoke(c, t2, "add_reminder", shanghai))
    check_recorded(reminders, first, outcome="success")
    check_recorded(reminders, second, outcome="duplicate", refusal="duplicate")
    assert count(reminders) == 1


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_caller_outside_read_committed_is_refused(reminders, dsn, level):
    task = begin(reminders)
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        receipt = invoke(conn, task, "add_reminder", {"content": "dentist", "remind_at": FAR_TIME})
        conn.commit()
    check_recorded(reminders, receipt, outcome="refused", refusal="isolation_level")
    assert count(reminders) == 0


def test_a_repeatable_read_caller_that_waited_writes_no_duplicate(reminders, dsn):
    """The waiter's snapshot predates the first write: it must not decide 'no duplicate' from it."""
    t1, t2 = begin(reminders), begin(reminders)
    add = {"content": "dentist", "remind_at": FAR_TIME}
    holder = psycopg.connect(dsn)
    waiter = psycopg.connect(dsn)
    results: dict = {}
    try:
        waiter.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        waiter.execute("SELECT 1")  # the snapshot is taken here
        results["first"] = invoke(holder, t1, "add_reminder", add)

        def second():
            try:
                results["second"] = invoke(waiter, t2, "add_reminder", add)
                waiter.commit()
            except psycopg.Error as exc:  # a serialization failure is also no duplicate
                results["second"] = exc
                waiter.rollback()

        worker = threading.Thread(target=second)
        worker.start()
        worker.join(0.3)
        holder.commit()
        worker.join(10)
    finally:
        holder.close()
        waiter.close()
    assert count(reminders) == 1
    second = results["second"]
    assert isinstance(second, dict) and second["outcome"] != "success", second
    assert scalar(reminders, "SELECT count(*) FROM agentdb.v_steps WHERE outcome = 'success'") == 1
    assert len(steps(reminders, t1)) == 1
