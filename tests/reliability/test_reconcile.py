"""reconcile() is not vacuous: each kind of damage it exists to find is made on purpose (as the
owner, with triggers disabled where needed, as only a superuser could) and must be reported."""

from __future__ import annotations

import json

import pytest

from .conftest import record
from .invariants import reconcile

FAR = "2030-11-30 08:00:00+08"
SNEAKY = "INSERT INTO reminders (user_id, content, remind_at) VALUES ('u1', 'sneaky', now())"


@pytest.fixture
def books(reminders, ledger):
    db = reminders
    task = str(db.execute("SELECT agentdb.begin_task('u1', 'c1', 'x', authenticated => true)").fetchone()[0])
    receipts = [db.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb, call_id => %s)",
                           (task, json.dumps({"content": f"r{i}", "remind_at": FAR}), f"c{i}")).fetchone()[0]
                for i in range(3)]
    assert all(r["outcome"] == "success" for r in receipts)
    db.execute("SELECT agentdb.finalize_reply(%s, 'Done.', %s::jsonb)",
               (task, json.dumps([{"kind": "create", "tool": "add_reminder"}])))
    db.execute("SELECT agentdb.finish_task(%s)", (task,))
    assert reconcile(db).ok, str(reconcile(db))
    return {"db": db, "task": task, "receipts": receipts, "ledger": ledger}


def _untriggered(db, table: str, statement: str, params=()):
    """Run a statement with the table's user triggers off (superuser-only tampering)."""
    db.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
    try:
        db.execute(statement, params)
    finally:
        db.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


DAMAGE = {
    "row written around invoke": (
        lambda b: b["db"].execute(SNEAKY),
        ["no verified insert step", "change outside any step"]),
    "row written around invoke and its log": (
        lambda b: _untriggered(b["db"], "public.reminders",
                               SNEAKY),
        ["no verified insert step", "replayed change log differ"]),
    "audit row deleted": (
        lambda b: _untriggered(b["db"], "agentdb_private.audit",
                               "DELETE FROM agentdb_private.audit WHERE step_id = %s",
                               (b["receipts"][0]["step_id"],)),
        ["step without audit row"]),  # a stripe's tail row: only an anchor shows its removal
    "audit row edited": (
        lambda b: _untriggered(b["db"], "agentdb_private.audit",
                               "UPDATE agentdb_private.audit SET detail = 'edited' WHERE step_id = %s",
                               (b["receipts"][0]["step_id"],)),
        ["audit hash chain broken"]),
    "step flipped to failed after its write": (
        lambda b: _untriggered(b["db"], "agentdb_private.steps",
                               "UPDATE agentdb_private.steps SET outcome = 'failed', verified = false "
                               "WHERE id = %s",
                               (b["receipts"][1]["step_id"],)),
        ["audit row disagrees", "not a verified success (partial write)", "no verified insert step"]),
    "backing row deleted behind the gate": (
        lambda b: _untriggered(b["db"], "public.reminders", "DELETE FROM reminders"),
        ["is not there and was never deleted", "replayed change log differ"]),
    "draft marked confirmed without running": (
        lambda b: _fake_confirm(b["db"], b["task"]),
        ["confirmed draft without its own verified step"]),
    "task left running": (
        lambda b: b["db"].execute("SELECT agentdb.begin_task('u1', 'c2')"),
        []),  # reap=True settles it: nothing to report; reap=False is checked below
}


def _fake_confirm(db, task):
    db.execute("""SELECT agentdb.register_tool(name => 'book_reminder', action => 'insert',
        target => 'public.reminders', label_zh => '预约', label_en => 'book', owner_column => 'user_id',
        needs_confirm => true)""")
    t2 = db.execute("SELECT agentdb.begin_task('u1', 'c9', 'x', authenticated => true)").fetchone()[0]
    d = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                   (t2, json.dumps({"content": "never", "remind_at": FAR}))).fetchone()[0]
    db.execute("UPDATE agentdb_private.drafts SET status = 'confirmed' WHERE id = %s", (d["draft_id"],))


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_reconcile_reports_damage(books, kind):
    damage, expected = DAMAGE[kind]
    damage(books)
    if not books["ledger"]:
        expected = [e for e in expected if "log" not in e and "chain" not in e and "partial write" not in e]
    result = reconcile(books["db"])
    text = "\n".join(result.problems)
    for phrase in expected:
        assert phrase in text, f"{kind}: expected '{phrase}' in:\n{text}"
    if not expected:
        assert result.ok
        assert reconcile(books["db"], reap=False).counts["running_after"] == 0
    if expected:
        record("reconcile_selftest", damage_made=1, damage_found=not result.ok)
