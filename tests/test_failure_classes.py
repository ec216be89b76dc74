"""Each failure class of DESIGN.md §2, produced on purpose with triggers, rules and
constraints on a test table. The write must end unverified/failed/invalid with
nothing (or nothing wrong) left in the table, and the evidence must say so."""

from __future__ import annotations

import pytest
from helpers import FAR_TIME, begin, check_recorded, count, invoke, one, rows, scalar

EVENTS = """
CREATE TABLE public.events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL,
    title text NOT NULL CHECK (title <> 'forbidden'),
    starts_at timestamptz NOT NULL,
    seats integer NOT NULL DEFAULT 1 CHECK (seats BETWEEN 1 AND 10),
    CONSTRAINT events_slot_key UNIQUE (owner, starts_at)
);
SELECT agentdb.register_tool(name => 'add_event', action => 'insert', target => 'public.events',
    label_zh => '加一个日程', label_en => 'add an event', owner_column => 'owner');
SELECT agentdb.register_tool(name => 'edit_event', action => 'update', target => 'public.events',
    label_zh => '改一个日程', label_en => 'change an event', owner_column => 'owner');
SELECT agentdb.register_tool(name => 'drop_event', action => 'delete', target => 'public.events',
    label_zh => '删一个日程', label_en => 'delete an event', owner_column => 'owner');
"""

EVENT = {"title": "dentist", "starts_at": "2030-05-01 09:00:00+00"}


@pytest.fixture
def events(reminders):
    """The events table and its tools; u1 holds WRITE and DELETE (from `reminders`)."""
    reminders.execute(EVENTS)
    return reminders


def trigger(db, name: str, when: str, body: str) -> None:
    db.execute(f"""
        CREATE FUNCTION public.{name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {body} END $$;
        CREATE TRIGGER {name} {when} ON public.events FOR EACH ROW EXECUTE FUNCTION public.{name}();
    """)


def add_event(db, task, **extra):
    return invoke(db, task, "add_event", {**EVENT, **extra})


def seed_event(db) -> int:
    """One event for u1 written directly (not through invoke)."""
    return scalar(db, "INSERT INTO events (owner, title, starts_at) VALUES ('u1', 'dentist', %s) "
                      "RETURNING id", (EVENT["starts_at"],))


# --- executed, not persisted / persisted but not what was asked -------------------------------


def test_trigger_that_silently_drops_the_row(events):
    trigger(events, "drop_it", "BEFORE INSERT", "RETURN NULL;")
    task = begin(events)
    receipt = add_event(events, task)
    check_recorded(events, receipt, outcome="unverified", refusal="row_count")
    assert receipt["expected_rows"] == 1 and receipt["matched_rows"] == 0
    assert receipt["row"] is None and receipt["key"] is None
    assert count(events, "events") == 0


def test_trigger_that_shifts_the_time_is_rolled_back(events):
    trigger(events, "shift_it", "BEFORE INSERT",
            "NEW.starts_at := NEW.starts_at + interval '30 minutes'; RETURN NEW;")
    task = begin(events)
    receipt = add_event(events, task)
    step, _ = check_recorded(events, receipt, outcome="unverified", refusal="readback_mismatch")
    assert receipt["mismatched"] == ["starts_at"]
    # The receipt shows what was read back (the wrong time), though it was undone.
    assert receipt["row"]["starts_at"].startswith("2030-05-01T09:30:00")
    assert "starts_at" in step["error"]
    assert count(events, "events") == 0


def test_update_trigger_that_keeps_the_old_value(events):
    rid = seed_event(events)
    trigger(events, "keep_old", "BEFORE UPDATE", "NEW.title := OLD.title; RETURN NEW;")
    task = begin(events)
    receipt = invoke(events, task, "edit_event", {"id": rid, "title": "doctor", "seats": 2})
    check_recorded(events, receipt, outcome="unverified", refusal="readback_mismatch")
    assert receipt["mismatched"] == ["title"]
    # Rolled back entirely: the seats change that did stick is undone too.
    assert one(events, "SELECT title, seats FROM events") == {"title": "dentist", "seats": 1}


def test_rule_do_instead_nothing(events):
    events.execute("CREATE RULE swallow AS ON INSERT TO public.events DO INSTEAD NOTHING")
    task = begin(events)
    receipt = add_event(events, task)
    # PostgreSQL refuses RETURNING through a DO INSTEAD NOTHING rule: a failure, never a success.
    step, audit = check_recorded(events, receipt, outcome="failed", refusal="error")
    assert "0A000" in step["error"] and audit["status"] == "FAILED"
    events.execute("DROP RULE swallow ON public.events")
    assert count(events, "events") == 0


def test_check_constraint_violation(events):
    task = begin(events)
    receipt = add_event(events, task, seats=50)
    step, _ = check_recorded(events, receipt, outcome="invalid", refusal="check_violation")
    assert receipt["attempts"] == 1
    assert "events_seats_check" in step["error"]
    assert "events_seats_check" not in receipt["detail"]
    assert count(events, "events") == 0


def test_trigger_that_fails_once_then_succeeds(events):
    # nextval is not rolled back with the failed subtransaction, so the second try passes.
    events.execute("CREATE SEQUENCE public.flaky_calls")
    trigger(events, "flaky", "BEFORE INSERT",
            "IF nextval('public.flaky_calls') = 1 THEN "
            "RAISE EXCEPTION 'lock timeout, try again' USING ERRCODE = 'lock_not_available'; "
            "END IF; RETURN NEW;")
    task = begin(events)
    receipt = add_event(events, task)
    check_recorded(events, receipt, outcome="success")
    assert receipt["attempts"] == 2
    assert count(events, "events") == 1
    problems = rows(events, "SELECT * FROM agentdb.v_problems WHERE task_id = %s", (task,))
    assert [(p["step_id"], p["problem"], p["attempts"]) for p in problems] == [
        (receipt["step_id"], "second_attempt", 2)]


def test_trigger_that_always_fails_gives_up_after_two_attempts(events):
    events.execute("CREATE SEQUENCE public.flaky_calls")
    trigger(events, "broken", "BEFORE INSERT",
            "PERFORM nextval('public.flaky_calls'); "
            "RAISE EXCEPTION 'storage offline' USING ERRCODE = 'lock_not_available';")
    task = begin(events)
    receipt = add_event(events, task)
    step, audit = check_recorded(events, receipt, outcome="failed", refusal="error")
    assert receipt["attempts"] == 2
    assert scalar(events, "SELECT last_value FROM public.flaky_calls") == 2
    assert "storage offline" in step["error"] and audit["status"] == "FAILED"
    assert count(events, "events") == 0
    problem = one(events, "SELECT problem FROM agentdb.v_problems WHERE step_id = %s",
                  (receipt["step_id"],))
    assert problem == {"problem": "failed"}


def test_unique_violation(events):
    seed_event(events)
    task = begin(events)
    receipt = add_event(events, task, title="another at the same time")
    check_recorded(events, receipt, outcome="failed", refusal="unique_violation")
    assert receipt["attempts"] == 1
    assert count(events, "events") == 1


def test_update_matching_no_row(events):
    task = begin(events)
    receipt = invoke(events, task, "edit_event", {"id": 424242, "title": "x"})
    check_recorded(events, receipt, outcome="unverified", refusal="not_found")
    assert receipt["matched_rows"] == 0
    assert count(events, "events") == 0


def test_update_matching_no_row_with_version(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "edit_reminder", {"id": 424242, "content": "x", "version": 1})
    check_recorded(reminders, receipt, outcome="unverified", refusal="not_found")
    assert count(reminders) == 0


def test_delete_matching_no_row(events):
    seed_event(events)
    task = begin(events)
    receipt = invoke(events, task, "drop_event", {"id": 424242})
    check_recorded(events, receipt, outcome="unverified", refusal="not_found")
    assert count(events, "events") == 1


def test_delete_that_a_trigger_undoes_is_still_there(events):
    rid = seed_event(events)
    events.execute("""
        CREATE FUNCTION public.resurrect() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.events OVERRIDING SYSTEM VALUE SELECT OLD.*;
            RETURN OLD;
        END $$;
        CREATE TRIGGER resurrect AFTER DELETE ON public.events
        FOR EACH ROW EXECUTE FUNCTION public.resurrect();
    """)
    task = begin(events)
    receipt = invoke(events, task, "drop_event", {"id": rid})
    check_recorded(events, receipt, outcome="unverified", refusal="still_there")
    assert one(events, "SELECT id, title FROM events") == {"id": rid, "title": "dentist"}


# --- bulk writes -----------------------------------------------------------------------------


def seed_reminders(db, n: int, user: str = "u1") -> None:
    db.execute(
        "INSERT INTO reminders (user_id, content, remind_at) "
        "SELECT %s, 'chore ' || i, %s::timestamptz + i * interval '1 minute' "
        "FROM generate_series(1, %s) AS i", (user, FAR_TIME, n))


def test_bulk_update_expecting_500_matches_428(reminders):
    seed_reminders(reminders, 428)
    seed_reminders(reminders, 30, user="u2")
    task = begin(reminders)
    receipt = invoke(reminders, task, "finish_reminders",
                     {"where": {"done": False}, "set": {"done": True}}, expect_rows=500)
    check_recorded(reminders, receipt, outcome="unverified", refusal="row_count")
    assert receipt["expected_rows"] == 500 and receipt["matched_rows"] == 428
    assert "500" in receipt["detail"] and "428" in receipt["detail"]
    # All rolled back: every one of the 428 is still not done, and u2's rows were never in scope.
    assert count(reminders, where="NOT done AND user_id = 'u1'") == 428
    assert count(reminders, where="done") == 0


def test_bulk_update_with_the_right_count(reminders):
    seed_reminders(reminders, 428)
    seed_reminders(reminders, 30, user="u2")
    task = begin(reminders)
    receipt = invoke(reminders, task, "finish_reminders",
                     {"where": {"done": False}, "set": {"done": True}}, expect_rows=428)
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["affected_rows"] == 428
    assert count(reminders, where="done AND user_id = 'u1'") == 428
    assert count(reminders, where="NOT done AND user_id = 'u2'") == 30


@pytest.mark.parametrize("tool, args, expect_rows, outcome, refusal", [
    ("delete_reminder", {"where": {}}, 5, "refused", "unbounded"),
    ("delete_reminder", {"where": {"user_id": "u1"}}, 5, "refused", "unbounded"),
    ("delete_reminder", {}, None, "invalid", "missing_field"),
    ("delete_reminder", {"where": {"done": False}}, None, "invalid", "expect_rows_required"),
    ("delete_reminder", {"where": {"done": False}}, 0, "invalid", "expect_rows_required"),
    ("finish_reminders", {"where": {}, "set": {"done": True}}, 5, "refused", "unbounded"),
    ("finish_reminders", {"where": {"done": False}, "set": {"done": True}}, None,
     "invalid", "expect_rows_required"),
    ("finish_reminders", {"set": {"done": True}}, 5, "invalid", None),
])
def test_unbounded_bulk_writes_refused(reminders, tool, args, expect_rows, outcome, refusal):
    seed_reminders(reminders, 5)
    task = begin(reminders)
    receipt = invoke(reminders, task, tool, args, expect_rows=expect_rows)
    check_recorded(reminders, receipt, outcome=outcome, refusal=refusal)
    assert count(reminders, where="NOT done") == 5


def test_bulk_delete_count_mismatch_rolls_back(reminders):
    seed_reminders(reminders, 12)
    task = begin(reminders)
    receipt = invoke(reminders, task, "delete_reminder", {"where": {"done": False}}, expect_rows=10)
    check_recorded(reminders, receipt, outcome="unverified", refusal="row_count")
    assert count(reminders) == 12


def test_max_rows_limits_a_bulk_write(reminders):
    reminders.execute("""SELECT agentdb.register_tool(name => 'finish_few', action => 'update',
        target => 'public.reminders', label_zh => '标记完成', label_en => 'mark done',
        owner_column => 'user_id', max_rows => 3)""")
    seed_reminders(reminders, 5)
    task = begin(reminders)
    receipt = invoke(reminders, task, "finish_few",
                     {"where": {"done": False}, "set": {"done": True}}, expect_rows=5)
    check_recorded(reminders, receipt, outcome="refused", refusal="too_many_rows")
    assert count(reminders, where="done") == 0


# --- timestamps at second precision ---------------------------------------------------------


@pytest.mark.parametrize("asked", [
    "2030-05-01 09:00:00.200+00",
    "2030-05-01 09:00:00.800+00",   # +0.3 s crosses into the next second
    "2030-05-01 09:00:00.999+00",
])
def test_sub_second_difference_still_verifies(events, asked):
    trigger(events, "jitter", "BEFORE INSERT",
            "NEW.starts_at := NEW.starts_at + interval '300 milliseconds'; RETURN NEW;")
    task = begin(events)
    receipt = add_event(events, task, starts_at=asked)
    check_recorded(events, receipt, outcome="success")
    assert count(events, "events") == 1


def test_sub_second_truncation_still_verifies(events):
    trigger(events, "to_seconds", "BEFORE INSERT",
            "NEW.starts_at := date_trunc('second', NEW.starts_at); RETURN NEW;")
    task = begin(events)
    receipt = add_event(events, task, starts_at="2030-05-01 09:00:00.750+00")
    check_recorded(events, receipt, outcome="success")
    assert scalar(events, "SELECT starts_at = '2030-05-01 09:00:00+00' FROM events")


def test_one_second_off_does_not_verify(events):
    trigger(events, "late", "BEFORE INSERT",
            "NEW.starts_at := NEW.starts_at + interval '1 second'; RETURN NEW;")
    task = begin(events)
    receipt = add_event(events, task)
    check_recorded(events, receipt, outcome="unverified", refusal="readback_mismatch")
    assert count(events, "events") == 0


def test_time_given_in_another_zone_verifies(events):
    task = begin(events)
    receipt = add_event(events, task, starts_at="2030-05-01 17:00:00+08")
    check_recorded(events, receipt, outcome="success")
    assert scalar(events, "SELECT starts_at = '2030-05-01 09:00:00+00' FROM events")


# --- declared compare columns ----------------------------------------------------------------


def test_compare_columns_narrow_the_read_back(events):
    """A tool may compare only some columns, e.g. when a trigger normalises another."""
    trigger(events, "tidy_title", "BEFORE INSERT OR UPDATE", "NEW.title := initcap(NEW.title); RETURN NEW;")
    events.execute("""
        SELECT agentdb.register_tool(name => 'add_event_tidy', action => 'insert', target => 'public.events',
            label_zh => '加一个日程', label_en => 'add an event', owner_column => 'owner',
            compare_columns => ARRAY['starts_at', 'seats']);
        SELECT agentdb.register_tool(name => 'edit_event_tidy', action => 'update', target => 'public.events',
            label_zh => '改一个日程', label_en => 'change an event', owner_column => 'owner',
            compare_columns => ARRAY['starts_at', 'seats']);
    """)
    task = begin(events)
    strict = add_event(events, task)
    check_recorded(events, strict, outcome="unverified", refusal="readback_mismatch")
    assert strict["mismatched"] == ["title"]
    # seats is a declared compare column the call does not give: not compared against NULL.
    tidy = invoke(events, task, "add_event_tidy", EVENT)
    check_recorded(events, tidy, outcome="success")
    assert tidy["row"]["title"] == "Dentist"
    edit = invoke(events, task, "edit_event_tidy", {"id": tidy["key"]["id"], "title": "the dentist"})
    check_recorded(events, edit, outcome="success")
    moved = invoke(events, task, "edit_event_tidy", {"id": tidy["key"]["id"], "seats": 2})
    check_recorded(events, moved, outcome="success")
    assert one(events, "SELECT title, seats FROM events") == {"title": "The Dentist", "seats": 2}


@pytest.mark.parametrize("when", ["infinity", "-infinity"])
def test_infinite_times_verify(events, when):
    task = begin(events)
    receipt = add_event(events, task, starts_at=when)
    check_recorded(events, receipt, outcome="success")
    assert scalar(events, "SELECT starts_at = %s::timestamptz FROM events", (when,))


def test_infinite_time_stored_for_a_finite_one_does_not_verify(events):
    trigger(events, "to_infinity", "BEFORE INSERT", "NEW.starts_at := 'infinity'; RETURN NEW;")
    task = begin(events)
    receipt = add_event(events, task)
    check_recorded(events, receipt, outcome="unverified", refusal="readback_mismatch")
    assert count(events, "events") == 0
