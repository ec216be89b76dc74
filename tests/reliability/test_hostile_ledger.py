"""Hostile cases against the ledger (issue 13, items 1 and 6; issue 14's snapshot statistics).

- Row-level security must hold through agentdb.snapshot / agentdb.diff: a caller that the
  table's policies confine to some rows must not read the others through a snapshot.
- A step whose write (through a trigger) changed another watched table must show up in an
  auditor's view.
- A snapshot leaves the snapshot tables analyzed, so a diff is not planned on empty statistics.
"""

from __future__ import annotations

import psycopg
import pytest
from helpers import FAR_TIME, begin, invoke, rows, scalar

from .conftest import record

RLS_TABLE = """
CREATE TABLE public.salaries (id integer PRIMARY KEY, owner name NOT NULL, body text);
ALTER TABLE public.salaries ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON public.salaries FOR SELECT USING (owner = current_user);
GRANT SELECT ON public.salaries TO agentdb_app, agentdb_auditor;
"""


@pytest.fixture
def salaries(db):
    db.execute(RLS_TABLE)
    return db


def _app(dsn, login_role, group="agentdb_app"):
    name, password = login_role(group)
    return name, psycopg.connect(dsn, user=name, password=password, autocommit=True)


@pytest.mark.parametrize("watched", [False, True], ids=["stored_rows", "change_log"])
def test_rls_hidden_rows_are_not_read_through_diff(salaries, dsn, login_role, watched):
    """An agentdb_app member with SELECT on an RLS table never reads the rows the policy hides:
    not in a snapshot it takes, not in a diff of snapshots the owner took."""
    db = salaries
    if watched:
        db.execute("SELECT agentdb.watch('public.salaries')")
    name, app = _app(dsn, login_role)
    db.execute("INSERT INTO public.salaries VALUES (1, %s, 'mine: 100k')", (name,))
    with app:
        assert scalar(app, "SELECT count(*) FROM public.salaries") == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security") as err:
            app.execute("SELECT agentdb.snapshot('{public.salaries}')")
        assert "public.salaries" in str(err.value)
        # Snapshots the owner took (it bypasses the policy) cannot be read by the app either.
        s0 = scalar(db, "SELECT agentdb.snapshot('{public.salaries}')")
        db.execute("INSERT INTO public.salaries VALUES (2, 'alice', 'alice: salary 250k')")
        s1 = scalar(db, "SELECT agentdb.snapshot('{public.salaries}')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            app.execute("SELECT agentdb.diff(%s, %s)", (s0, s1))
        # The owner still sees everything.
        added = scalar(db, "SELECT agentdb.diff(%s, %s)", (s0, s1))[0]["added"]
        assert [r["body"] for r in added] == ["alice: salary 250k"]
    record("escapes", tried=3, found=0)


def test_rls_policy_that_shows_every_row_does_not_block(salaries, dsn, login_role):
    """A policy that lets the caller see every row (USING (true), e.g. the one allow_sql adds
    for everyone but its writer) is no reason to refuse."""
    db = salaries
    db.execute("CREATE POLICY everyone ON public.salaries FOR SELECT TO agentdb_app USING (true)")
    db.execute("INSERT INTO public.salaries VALUES (1, 'alice', 'a'), (2, 'bob', 'b')")
    _, app = _app(dsn, login_role)
    with app:
        s0 = scalar(app, "SELECT agentdb.snapshot('{public.salaries}')")
        db.execute("INSERT INTO public.salaries VALUES (3, 'carol', 'c')")
        s1 = scalar(app, "SELECT agentdb.snapshot('{public.salaries}')")
        assert [r["id"] for r in scalar(app, "SELECT agentdb.diff(%s, %s)", (s0, s1))[0]["added"]] == [3]
        # A restrictive policy narrows it again: refused.
        db.execute("CREATE POLICY not_bob ON public.salaries AS RESTRICTIVE FOR SELECT "
                   "USING (owner <> 'bob')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            app.execute("SELECT agentdb.snapshot('{public.salaries}')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            app.execute("SELECT agentdb.diff(%s, %s)", (s0, s1))


def test_allow_sql_tables_stay_snapshottable(db, dsn, login_role):
    """allow_sql turns row-level security on for its writer only: everyone else still sees
    every row, so the exam and the app can snapshot the table."""
    db.execute("CREATE TABLE public.notes (id int PRIMARY KEY, user_id text NOT NULL, body text)")
    db.execute("INSERT INTO public.notes VALUES (1, 'u1', 'a'), (2, 'u2', 'b')")
    db.execute("GRANT SELECT ON public.notes TO agentdb_app")
    db.execute("SELECT agentdb.allow_sql('public.notes', owner_column => 'user_id')")
    _, app = _app(dsn, login_role)
    with app:
        s0 = scalar(app, "SELECT agentdb.snapshot('{public.notes}')")
        db.execute("DELETE FROM public.notes WHERE id = 2")
        s1 = scalar(app, "SELECT agentdb.snapshot('{public.notes}')")
        assert [r["id"] for r in scalar(app, "SELECT agentdb.diff(%s, %s)", (s0, s1))[0]["removed"]] == [2]


def test_forced_rls_binds_the_table_owner_too(db, dsn, login_role):
    """FORCE ROW LEVEL SECURITY: even the table's owner is confined, so a snapshot through
    agentdb (whose functions run as the installer) must not see more than the caller."""
    name, app = _app(dsn, login_role)
    db.execute(RLS_TABLE)
    db.execute("INSERT INTO public.salaries VALUES (1, 'alice', 'hidden')")
    db.execute(psycopg.sql.SQL("ALTER TABLE public.salaries OWNER TO {}").format(
        psycopg.sql.Identifier(name)))
    db.execute("ALTER TABLE public.salaries FORCE ROW LEVEL SECURITY")
    with app:
        assert scalar(app, "SELECT count(*) FROM public.salaries") == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            app.execute("SELECT agentdb.snapshot('{public.salaries}')")


def test_a_dropped_tables_snapshots_are_for_their_taker_only(salaries, dsn, login_role):
    db = salaries
    db.execute("INSERT INTO public.salaries VALUES (1, 'alice', 'alice: salary 250k')")
    s0 = scalar(db, "SELECT agentdb.snapshot('{public.salaries}')")
    db.execute("INSERT INTO public.salaries VALUES (2, 'bob', 'bob: salary 90k')")
    s1 = scalar(db, "SELECT agentdb.snapshot('{public.salaries}')")
    db.execute("DROP TABLE public.salaries")
    _, app = _app(dsn, login_role)
    with app, pytest.raises(psycopg.errors.InsufficientPrivilege, match="no longer exists"):
        app.execute("SELECT agentdb.diff(%s, %s)", (s0, s1))
    assert scalar(db, "SELECT jsonb_array_length(agentdb.diff(%s, %s))", (s0, s1)) == 1


# -- item 6: a step's change to another watched table ---------------------------------------------


def test_trigger_write_to_another_watched_table_is_visible(reminders, role_connect):
    """A trigger on the tool's table inserts into a second watched table. The auditor sees it in
    agentdb.v_step_side_changes (v_step_mismatches and v_unlogged_changes stay empty)."""
    db = reminders
    db.execute("""
        CREATE TABLE public.outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text);
        CREATE FUNCTION public.to_outbox() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $$
        BEGIN INSERT INTO public.outbox (note) VALUES ('reminder ' || NEW.id); RETURN NEW; END $$;
        CREATE TRIGGER to_outbox AFTER INSERT ON public.reminders
            FOR EACH ROW EXECUTE FUNCTION public.to_outbox();
        SELECT agentdb.watch('public.reminders');
        SELECT agentdb.watch('public.outbox');
    """)
    task = begin(db)
    receipt = invoke(db, task, "add_reminder", {"content": "dentist", "remind_at": FAR_TIME})
    assert receipt["outcome"] == "success", receipt
    auditor = role_connect("agentdb_auditor")
    side = rows(auditor, "SELECT * FROM agentdb.v_step_side_changes")
    assert [(r["step_id"], r["target"], r["changed_table"], r["ops"], r["changed_rows"]) for r in side] == [
        (receipt["step_id"], "public.reminders", "public.outbox", ["INSERT"], 1)]
    assert side[0]["task_id"] == task and side[0]["tool"] == "add_reminder"
    # A plain step changes only its target: nothing listed for it.
    db.execute("DROP TRIGGER to_outbox ON public.reminders")
    invoke(db, task, "add_reminder", {"content": "gym", "remind_at": FAR_TIME})
    assert scalar(auditor, "SELECT count(*) FROM agentdb.v_step_side_changes") == 1


def test_run_sql_step_side_change_is_visible(db, role_connect):
    """The same for a run_sql step: its target is the table the statement wrote."""
    db.execute("""
        CREATE TABLE public.stock (sku text PRIMARY KEY, qty integer NOT NULL);
        CREATE TABLE public.stock_log (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text);
        INSERT INTO public.stock VALUES ('a', 1);
        SELECT agentdb.allow_sql('public.stock');
        SELECT agentdb.watch('public.stock_log');
        SELECT agentdb.grant_permission('u1', 'WRITE');
    """)
    # Written by the owner inside the step (as if by a trigger run_sql could not see): the
    # change log puts it under the step, and the view shows it.
    task = begin(db)
    with db.transaction():
        receipt = scalar(db, "SELECT agentdb.run_sql(%s, 'UPDATE stock SET qty = 2 WHERE sku = ''a''', 1)",
                         (task,))
        db.execute("SELECT set_config('agentdb.call', %s, true)", (f"{task}:{receipt['seq']}",))
        db.execute("INSERT INTO public.stock_log (sku) VALUES ('a')")
    auditor = role_connect("agentdb_auditor")
    side = rows(auditor, "SELECT tool, target, changed_table FROM agentdb.v_step_side_changes")
    assert side == [{"tool": "run_sql", "target": "public.stock", "changed_table": "public.stock_log"}]


# -- issue 14: snapshots leave statistics behind -------------------------------------------------


def test_snapshot_analyzes_the_snapshot_rows(db):
    db.execute("CREATE TABLE public.big (id int PRIMARY KEY, v text)")
    db.execute("INSERT INTO public.big SELECT g, 'v' || g FROM generate_series(1, 5000) AS g")
    reltuples = "SELECT reltuples FROM pg_class WHERE oid = 'agentdb_private.snapshot_rows'::regclass"
    assert scalar(db, reltuples) < 1
    s0 = scalar(db, "SELECT agentdb.snapshot('{public.big}')")
    assert scalar(db, reltuples) >= 4000
    assert scalar(db, "SELECT count(*) FROM pg_stats WHERE schemaname = 'agentdb_private' "
                      "AND tablename = 'snapshot_rows'") > 0
    db.execute("UPDATE public.big SET v = 'x' WHERE id = 7")
    s1 = scalar(db, "SELECT agentdb.snapshot('{public.big}')")
    changed = scalar(db, "SELECT agentdb.diff(%s, %s)", (s0, s1))[0]["changed"]
    assert [c["key"] for c in changed] == [{"id": 7}]
