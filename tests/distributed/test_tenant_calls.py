"""The calls routed by a task or an action beyond invoke and the gate, on the distributed schema:
drafts revised and rejected, approvals asked, decided and run, the prompt rules, a replan, each
through its user_id-first form (one statement, delegated to the user's worker); the fleet-wide
maintenance calls and verify_chain with an anchor from the coordinator.
"""

from __future__ import annotations

import time
import uuid

import psycopg
from psycopg.types.json import Jsonb

from .conftest import FAR, begin, call, invoke
from .test_distribute import remote_commands


def _dbname(dsn: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]


def _delegated(db, function: str, user, task, **named):
    """call(...) with the commands the coordinator sent: (result, [(command, node)])."""
    return remote_commands(db, lambda: call(db, function, user, task, **named))


def _sent_to(cluster, dist, user, sent, name: str) -> None:
    """The call went as one command to the user's worker, and nothing else went anywhere."""
    home = cluster.worker_of(_dbname(dist), user)
    assert len(sent) == 1 and f"agentdb.{name}" in sent[0][0], sent
    assert f":{home.port} " in sent[0][1] + " ", sent


def _shown_draft(db, user, conversation: str) -> dict:
    task = begin(db, user, conversation)
    draft = call(db, "propose", user, task, tool="book_reminder",
                 args={"content": "court 3", "remind_at": FAR})
    assert draft["outcome"] == "proposed", draft
    call(db, "finalize_reply", user, task, model_text=f"Shall I? {draft['summary']}")
    time.sleep(0.002)
    return draft


def test_revise_and_reject_a_draft_for_the_user(cluster, dist, db, user):
    first = _shown_draft(db, user, "revise")
    task = begin(db, user, "revise")
    revised, sent = _delegated(db, "revise", user, task, draft_ref="1",
                                    args={"content": "court 4", "remind_at": FAR})
    _sent_to(cluster, dist, user, sent, "revise_for")
    assert revised["outcome"] == "proposed" and revised["supersedes"] == first["ordinal"], revised
    old = db.execute("SELECT status FROM agentdb_private.drafts WHERE user_id = %s AND id = %s",
                     (user, first["draft_id"])).fetchone()[0]
    assert old == "superseded"
    rejected, sent = _delegated(db, "reject", user, task, draft_ref=str(revised["ordinal"]))
    _sent_to(cluster, dist, user, sent, "reject_for")
    assert rejected["outcome"] == "rejected", rejected
    again = call(db, "reject", user, begin(db, user, "revise"), draft_ref=str(revised["ordinal"]))
    assert again["refusal"] == "draft_closed"
    rows = db.execute("SELECT count(*) FROM public.reminders WHERE user_id = %s", (user,)).fetchone()[0]
    assert rows == 0


def test_another_users_draft_and_task_read_as_unknown(db, user):
    _shown_draft(db, user, "mine")
    other = f"u-{uuid.uuid4().hex[:10]}"
    theirs = begin(db, other, "mine")
    assert call(db, "reject", other, theirs, draft_ref="1")["refusal"] == "draft_not_found"
    mine = begin(db, user, "mine")
    assert call(db, "reject", other, mine, draft_ref="1")["refusal"] == "unknown_task"
    assert call(db, "mark_drafts_shown", other, mine) == 0


def test_mark_drafts_shown_replan_and_context_rules(cluster, dist, db, user):
    task = begin(db, user, "rules")
    draft = call(db, "propose", user, task, tool="book_reminder", args={"content": "x", "remind_at": FAR})
    shown, sent = _delegated(db, "mark_drafts_shown", user, task)
    _sent_to(cluster, dist, user, sent, "mark_drafts_shown_for")
    assert shown == 1 and draft["outcome"] == "proposed"
    replans, sent = _delegated(db, "replan", user, task)
    _sent_to(cluster, dist, user, sent, "replan_for")
    assert replans == 1
    rules, sent = _delegated(db, "context_rules", user, task)
    _sent_to(cluster, dist, user, sent, "context_rules_for")
    assert rules and all(isinstance(r, str) for r in rules)
    assert call(db, "replan", f"u-{uuid.uuid4().hex[:10]}", task) is None  # not that user's task


def test_an_approval_is_asked_decided_and_run_for_the_user(cluster, dist, db, user):
    task = begin(db, user, "approvals")
    asked, sent = _delegated(db, "request_approval", user, task, tool="book_reminder",
                                  args={"content": "approved one", "remind_at": FAR})
    _sent_to(cluster, dist, user, sent, "request_approval_for")
    assert asked["outcome"] == "pending_approval", asked
    action = asked["action_id"]
    stranger = f"u-{uuid.uuid4().hex[:10]}"
    refused = db.execute("SELECT agentdb.approve_for(%s, %s, %s)", (stranger, action, stranger)).fetchone()[0]
    assert refused["refusal"] == "action_not_found"  # another user's action, by its number
    decided, sent = remote_commands(db, lambda: db.execute(
        "SELECT agentdb.approve_for(%s, %s, %s)", (user, action, user)).fetchone()[0])
    _sent_to(cluster, dist, user, sent, "approve_for")
    assert decided["outcome"] == "approved", decided
    ran, sent = remote_commands(db, lambda: db.execute(
        "SELECT agentdb.run_next_action_for(%s)", (user,)).fetchone()[0])
    _sent_to(cluster, dist, user, sent, "run_next_action_for")
    assert ran["action_id"] == action and ran["receipt"]["outcome"] == "success", ran
    assert db.execute("SELECT agentdb.run_next_action_for(%s)", (user,)).fetchone()[0] is None
    status = db.execute("SELECT status FROM agentdb_private.actions WHERE user_id = %s AND id = %s",
                        (user, action)).fetchone()[0]
    assert status == "done"
    content = db.execute("SELECT content FROM public.reminders WHERE user_id = %s", (user,)).fetchall()
    assert content == [("approved one",)]


def test_an_approval_is_rejected_or_changed_for_the_user(db, user):
    task = begin(db, user, "approvals")
    first = call(db, "request_approval", user, task, tool="book_reminder",
                 args={"content": "no", "remind_at": FAR})["action_id"]
    second = call(db, "request_approval", user, task, tool="book_reminder",
                  args={"content": "maybe", "remind_at": FAR})["action_id"]
    no = db.execute("SELECT agentdb.reject_action_for(%s, %s, %s, 'not now')",
                    (user, first, user)).fetchone()[0]
    assert no["outcome"] == "rejected", no
    changed = db.execute("SELECT agentdb.approve_with_changes_for(%s, %s, %s, %s)",
                         (user, second, user, Jsonb({"content": "yes", "remind_at": FAR}))).fetchone()[0]
    assert changed["outcome"] == "approved", changed
    ran = db.execute("SELECT agentdb.run_next_action_for(%s)", (user,)).fetchone()[0]
    assert ran["action_id"] == second and ran["receipt"]["outcome"] == "success", ran
    content = db.execute("SELECT content FROM public.reminders WHERE user_id = %s", (user,)).fetchall()
    assert content == [("yes",)]


def test_maintenance_calls_run_from_the_coordinator(db, user):
    """reap_tasks and sweep_drafts settle rows of every shard (task by task / one timestamp)."""
    stale = begin(db, user, "reap")
    assert invoke(db, user, stale, "add_reminder", {"content": "reaped", "remind_at": FAR})["verified"]
    other = f"u-{uuid.uuid4().hex[:10]}"
    idle = begin(db, other, "reap")
    assert db.execute("SELECT agentdb.reap_tasks(interval '0 seconds')").fetchone()[0] >= 2
    settled = dict(db.execute(
        "SELECT id, status FROM agentdb_private.tasks WHERE (user_id, id) IN ((%s, %s), (%s, %s))",
        (user, stale, other, idle)).fetchall())
    assert settled == {stale: "success", idle: "failed"}, settled
    assert db.execute("SELECT agentdb.sweep_drafts()").fetchone()[0] >= 0


def test_verify_chain_with_an_anchor(db, user):
    task = begin(db, user)
    assert invoke(db, user, task, "add_reminder", {"content": "anchored", "remind_at": FAR})["verified"]
    anchor = db.execute("SELECT agentdb.chain_anchor()").fetchone()[0]  # seals first, per user
    links = anchor["audit_links"]  # rows sealed since revision 0015: one tail per user
    assert user in links, sorted(links)[:5]
    for chain in ("audit", "change"):
        assert db.execute("SELECT count(*) FROM agentdb.verify_chain(%s, %s)",
                          (chain, Jsonb(anchor))).fetchone()[0] == 0
    # The anchored tail link of this user, as another anchor would have kept it, is gone.
    forged = {**anchor, "audit_links": {**links, user: {**links[user], "hash": "00"}}}
    problems = db.execute("SELECT id, problem FROM agentdb.verify_chain('audit', %s)",
                          (Jsonb(forged),)).fetchall()
    assert problems == [(links[user]["id"], "anchor_missing")], problems


def test_run_next_action_from_the_coordinator_takes_each_users_queue(db, user):
    """The approval worker's call (no user) runs on Citus too: user by user, in id order."""
    other = f"u-{uuid.uuid4().hex[:10]}"
    db.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (other,))
    actions = []
    for who in (user, other):
        task = begin(db, who, "queue")
        asked = call(db, "request_approval", who, task, tool="book_reminder",
                     args={"content": f"for {who}", "remind_at": FAR})
        assert db.execute("SELECT agentdb.approve_for(%s, %s, %s)",
                          (who, asked["action_id"], who)).fetchone()[0]["outcome"] == "approved"
        actions.append(asked["action_id"])
    ran = []
    while (result := db.execute("SELECT agentdb.run_next_action()").fetchone()[0]) is not None:
        assert result["receipt"]["outcome"] == "success", result
        ran.append(result["action_id"])
    assert [a for a in ran if a in actions] == sorted(actions)  # in id order, each once
    for who in (user, other):
        content = db.execute("SELECT content FROM public.reminders WHERE user_id = %s", (who,)).fetchall()
        assert content == [(f"for {who}",)]


def test_an_entry_point_added_by_an_upgrade_is_delegated(dist, db):
    """Re-applying sql/ on a distributed schema delegates the user_id-first functions it lacks."""
    from pyagentdb import install

    db.execute("CREATE FUNCTION agentdb.peek_for(user_id text, task uuid) RETURNS integer"
               " LANGUAGE sql AS 'SELECT 1'")
    try:
        db.execute("GRANT EXECUTE ON FUNCTION agentdb.peek_for(text, uuid) TO agentdb_app")
        delegated = ("SELECT count(*) FROM pg_dist_object WHERE classid = 'pg_proc'::regclass"
                     " AND objid = 'agentdb.peek_for(text, uuid)'::regprocedure"
                     " AND distribution_argument_index = 0")
        assert db.execute(delegated).fetchone()[0] == 0
        install.upgrade(dist, force_sql=True)
        assert db.execute(delegated).fetchone()[0] == 1
    finally:
        db.execute("DROP FUNCTION agentdb.peek_for(text, uuid)")
