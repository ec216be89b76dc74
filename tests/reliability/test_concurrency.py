"""Concurrency: 8+ connections hammer the same rows for a few seconds.

Each thread has its own agent and app connections (real login roles) and mixes: adds from a tiny
pool of values (racing dedup), edits by the version it just read (racing versions), deletes,
bounded bulk updates, the same idempotent calls sent from several connections, confirmations of
the same drafts from several later turns, the approval worker, and the exit gate at the end of
every turn. Afterwards, from the database:

  - no lost update: every verified edit moved its row from the version it read to the next
    one, no two verified edits started from the same version of a row, and each row's version
    and content are those of its last verified edit; the losers got `conflict`;
  - no duplicate from racing dedup: no two rows hold the same values;
  - a call_id sent by several connections wrote once and every sender got the same step;
  - each draft confirmed at most once, each approved action run exactly once;
  - every receipt a client got is a step in the database with that outcome, and the counts
    reconcile exactly (target rows vs steps vs audit rows vs change log): reconcile().
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict

import psycopg
import pytest

from .conftest import detail, record
from .invariants import reconcile

FAR = "2030-11-30 08:00:00+08"
INVOKE = "SELECT agentdb.invoke(%s, %s, %s::jsonb, call_id => %s)"
POOL = [("water the plants", "2030-12-01 08:00:00+08"), ("call mum", "2030-12-01 09:00:00+08"),
        ("pay rent", "2030-12-02 10:00:00+08"), ("book dentist", "2030-12-03 11:00:00+08")]
THREADS = 8
# Rows made by shared calls, drafts and actions are kept: their checks look for them at the end.
PICK_DELETABLE = """
    SELECT r.id FROM reminders AS r
     WHERE NOT EXISTS (
        SELECT 1 FROM agentdb_private.steps AS s
         WHERE s.action = 'insert' AND s.outcome = 'success' AND (s.receipt -> 'key' ->> 'id')::bigint = r.id
           AND (s.call_id LIKE 'shared-call-%' OR s.call_id LIKE 'draft:%' OR s.call_id LIKE 'action:%'))
     ORDER BY random() LIMIT 1"""
SECONDS = 4.0


def begin(conn, conv: str) -> str:
    return str(conn.execute("SELECT agentdb.begin_task('u1', %s, 'race', authenticated => true, "
                            "lang => 'en')",
                            (conv,)).fetchone()[0])


@pytest.fixture
def arena(reminders, ledger, login_role, dsn):
    db = reminders
    db.execute("""SELECT agentdb.register_tool(
        name => 'book_reminder', action => 'insert', target => 'public.reminders',
        label_zh => '预约提醒', label_en => 'book a reminder', owner_column => 'user_id',
        needs_confirm => true)""")
    agent, app = login_role("agentdb_agent"), login_role("agentdb_app")
    setup_task = begin(db, "setup")
    for i in range(6):
        args = json.dumps({"content": f"seed {i}", "remind_at": FAR})
        r = db.execute(INVOKE, (setup_task, "add_reminder", args,
                                f"seed-{i}")).fetchone()[0]
        assert r["outcome"] == "success"
    db.execute("SELECT agentdb.finish_task(%s)", (setup_task,))
    # Idempotent calls that several connections will all send.
    shared = []
    for i in range(12):
        shared.append((begin(db, f"shared-{i}"), f"shared-call-{i}",
                       {"content": f"shared {i}", "remind_at": FAR}))
    # Drafts shown to the user in one turn; later turns race to confirm them.
    proposing = begin(db, "drafts")
    drafts = []
    for i in range(6):
        d = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                       (proposing, json.dumps({"content": f"draft {i}", "remind_at": FAR}))).fetchone()[0]
        assert d["outcome"] == "proposed", d
        drafts.append(d["draft_id"])
    db.execute("SELECT agentdb.finalize_reply(%s, 'Shall I book these?')", (proposing,))
    # Approved actions for the workers.
    asking = begin(db, "actions")
    actions = []
    for i in range(10):
        a = db.execute("SELECT agentdb.request_approval(%s, 'add_reminder', %s::jsonb)",
                       (asking, json.dumps({"content": f"action {i}", "remind_at": FAR}))).fetchone()[0]
        db.execute("SELECT agentdb.approve(%s, 'u1')", (a["action_id"],))
        actions.append(a["action_id"])
    time.sleep(0.01)
    steps_before = db.execute("SELECT count(*) FROM agentdb_private.steps").fetchone()[0]
    return {"db": db, "dsn": dsn, "agent": agent, "app": app, "shared": shared, "drafts": drafts,
            "actions": actions, "steps_before": steps_before}


def test_many_connections_on_the_same_rows(arena):
    db, dsn = arena["db"], arena["dsn"]
    stop = threading.Event()
    lock = threading.Lock()
    receipts: list[dict] = []           # every receipt any thread got (with what it sent)
    shared_steps = defaultdict(set)     # call_id -> step ids the senders got back
    confirmed = Counter()               # draft -> success receipts
    worker_ran: list[int] = []
    gate = Counter()
    failures: list[str] = []
    ops = Counter()

    def body(n: int):
        rng = random.Random(1000 + n)
        agent = psycopg.connect(dsn, user=arena["agent"][0], password="x", autocommit=True)
        app = psycopg.connect(dsn, user=arena["app"][0], password="x", autocommit=True)
        reader = psycopg.connect(dsn, autocommit=True)
        task, in_task, i = begin(app, f"conv-{n}"), [], 0

        def end_turn():
            # The model claims it created a reminder; the gate must agree with the receipts.
            created = any(r["tool"] == "add_reminder" and r["outcome"] == "success" and r["verified"]
                          for r in in_task)
            v = app.execute("SELECT agentdb.finalize_reply(%s, 'I''ve set it.', %s::jsonb)",
                            (task, json.dumps([{"kind": "create", "tool": "add_reminder"}]))).fetchone()[0]
            app.execute("SELECT agentdb.finish_task(%s)", (task,))
            with lock:
                gate[v["verdict"]] += 1
                if (v["verdict"] == "deliver") != created:
                    failures.append(f"gate said {v['verdict']} but created={created}")

        def keep(receipt, sent):
            with lock:
                receipts.append({**receipt, "_sent": sent})
            in_task.append(receipt)

        try:
            while not stop.is_set():
                i += 1
                if i % 8 == 0:
                    end_turn()
                    task, in_task = begin(app, f"conv-{n}"), []
                roll = rng.random()
                call_id = f"t{n}-{i}"
                if roll < 0.25:
                    content, at = rng.choice(POOL)
                    sent = ("add_reminder", {"content": content, "remind_at": at})
                elif roll < 0.50:
                    row = reader.execute("SELECT id, version FROM reminders "
                                         "ORDER BY random() LIMIT 1").fetchone()
                    if not row:
                        continue
                    sent = ("edit_reminder", {"id": row[0], "content": f"edit {n}-{i}", "version": row[1]})
                elif roll < 0.58:
                    row = reader.execute(PICK_DELETABLE).fetchone()
                    if not row:
                        continue
                    sent = ("delete_reminder", {"id": row[0]})
                elif roll < 0.64:
                    flag = rng.random() < 0.5
                    n_rows = reader.execute("SELECT count(*) FROM reminders "
                                            "WHERE user_id = 'u1' AND done = %s",
                                            (not flag,)).fetchone()[0]
                    if not n_rows:
                        continue
                    receipt = agent.execute(
                        "SELECT agentdb.invoke(%s, 'finish_reminders', %s::jsonb, call_id => %s, "
                        "expect_rows => %s)",
                        (task, json.dumps({"where": {"done": not flag}, "set": {"done": flag}}), call_id,
                         n_rows)).fetchone()[0]
                    ops["bulk"] += 1
                    keep(receipt, ("finish_reminders", {"expect_rows": n_rows}))
                    continue
                elif roll < 0.80:
                    s_task, s_call, s_args = rng.choice(arena["shared"])
                    receipt = agent.execute(INVOKE, (s_task, "add_reminder", json.dumps(s_args),
                                                     s_call)).fetchone()[0]
                    ops["shared"] += 1
                    with lock:
                        shared_steps[s_call].add(receipt["step_id"])
                        if receipt["outcome"] != "success":
                            failures.append(f"shared call {s_call}: {receipt['outcome']}")
                        if not receipt.get("replayed"):
                            receipts.append({**receipt, "_sent": ("shared", s_args)})
                    continue
                elif roll < 0.90:
                    draft = rng.choice(arena["drafts"])
                    later = begin(app, "drafts")
                    receipt = agent.execute("SELECT agentdb.confirm(%s, %s)", (later, draft)).fetchone()[0]
                    app.execute("SELECT agentdb.finish_task(%s)", (later,))
                    ops["confirm"] += 1
                    with lock:
                        receipts.append({**receipt, "_sent": ("confirm", draft)})
                        if receipt["outcome"] == "success":
                            confirmed[draft] += 1
                        elif receipt.get("refusal") != "draft_used":
                            failures.append(f"confirm {draft}: {receipt['outcome']} {receipt.get('refusal')}")
                    continue
                else:
                    result = app.execute("SELECT agentdb.run_next_action()").fetchone()[0]
                    ops["worker"] += 1
                    if result:
                        with lock:
                            worker_ran.append(result["action_id"])
                            receipts.append({**result["receipt"], "_sent": ("action", result["action_id"])})
                    continue
                receipt = agent.execute(INVOKE, (task, sent[0], json.dumps(sent[1]), call_id)).fetchone()[0]
                ops[sent[0]] += 1
                keep(receipt, sent)
            end_turn()
        except Exception as exc:  # noqa: BLE001 - any error is a finding
            with lock:
                failures.append(f"thread {n}: {type(exc).__name__}: {exc}")
        finally:
            for c in (agent, app, reader):
                c.close()

    threads = [threading.Thread(target=body, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(60)
    assert not failures, failures[:10]

    # Drain the action queue: every approved action runs exactly once in all.
    with psycopg.connect(dsn, user=arena["app"][0], password="x", autocommit=True) as app:
        while (result := app.execute("SELECT agentdb.run_next_action()").fetchone()[0]) is not None:
            worker_ran.append(result["action_id"])
            receipts.append({**result["receipt"], "_sent": ("action", result["action_id"])})
    assert sorted(worker_ran) == sorted(arena["actions"]), "each approved action runs exactly once"

    outcomes = Counter((r["_sent"][0], r["outcome"], r.get("refusal")) for r in receipts)

    # Every receipt is a step with that outcome; every step of the run is a receipt someone got.
    ids = [r["step_id"] for r in receipts]
    assert len(ids) == len(set(ids)), "two receipts share a step (a replay counted twice?)"
    in_db = dict(db.execute("SELECT id, outcome FROM agentdb_private.steps WHERE id = ANY(%s)",
                            (ids,)).fetchall())
    assert {r["step_id"]: r["outcome"] for r in receipts} == in_db
    steps_run = db.execute("SELECT count(*) FROM agentdb_private.steps").fetchone()[0] - arena["steps_before"]
    assert steps_run == len(receipts), (steps_run, len(receipts))

    # No lost update.
    edits = db.execute("""
        SELECT (args ->> 'id')::bigint, (args ->> 'version')::bigint, args ->> 'content'
          FROM agentdb_private.steps WHERE tool = 'edit_reminder' AND outcome = 'success' AND verified
         ORDER BY 1, 2""").fetchall()
    pairs = Counter((rid, v) for rid, v, _ in edits)
    assert max(pairs.values(), default=1) == 1, "two verified edits from the same version of a row"
    last = {}
    per_row = Counter()
    for rid, v, content in edits:
        per_row[rid] += 1
        last[rid] = (v, content)
    for rid, version, content in db.execute("SELECT id, version, content FROM reminders").fetchall():
        assert version == 1 + per_row[rid], (rid, version, per_row[rid])
        if rid in last:
            assert (version, content) == (last[rid][0] + 1, last[rid][1]), rid
    conflicts = sum(v for (tool, outcome, refusal), v in outcomes.items()
                    if tool == "edit_reminder" and outcome == "conflict")
    assert all(refusal == "stale_version" for (tool, outcome, refusal) in outcomes
               if tool == "edit_reminder" and outcome == "conflict")

    # No duplicate from racing dedup.
    assert not db.execute("""SELECT content, remind_at FROM reminders GROUP BY user_id, content, remind_at
                              HAVING count(*) > 1""").fetchall()

    # Idempotent call_ids across connections.
    for s_task, s_call, _s_args in arena["shared"]:
        if s_call in shared_steps:
            assert len(shared_steps[s_call]) == 1, (s_call, shared_steps[s_call])
            assert db.execute("SELECT count(*) FROM agentdb_private.steps "
                              "WHERE task_id = %s AND call_id = %s",
                              (s_task, s_call)).fetchone()[0] == 1
            key = db.execute("SELECT receipt -> 'key' ->> 'id' FROM agentdb_private.steps WHERE id = %s",
                             (next(iter(shared_steps[s_call])),)).fetchone()[0]
            assert db.execute("SELECT count(*) FROM reminders WHERE id = %s", (int(key),)).fetchone()[0] == 1

    # Drafts confirmed at most once.
    assert max(confirmed.values(), default=0) <= 1
    n_confirmed = db.execute("SELECT count(*) FROM agentdb_private.drafts "
                             "WHERE status = 'confirmed'").fetchone()[0]
    assert n_confirmed == len(confirmed)

    result = reconcile(db, reap=True)
    assert result.ok, str(result)

    losses = 0  # every check above is an assert: reaching here means none
    record("concurrency", threads=THREADS, seconds=int(SECONDS), calls=sum(ops.values()),
        receipts=len(receipts), steps=steps_run,
        conflicts=conflicts, duplicates=sum(v for (t, o, _), v in outcomes.items() if o == "duplicate"),
        replays=ops["shared"] - len(shared_steps), drafts_confirmed=n_confirmed,
        confirm_attempts=ops["confirm"], actions_run=len(worker_ran), gate_verdicts=sum(gate.values()),
        lost_updates=losses, duplicate_rows=0)
    detail("concurrency", {"ops": dict(ops),
                           "outcomes": {f"{k[0]}:{k[1]}:{k[2]}": v for k, v in outcomes.items()},
                           "gate": dict(gate), "reconcile": result.counts})
