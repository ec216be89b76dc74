"""The concurrent workload shared by tests/reliability/test_concurrency.py and bench/soak.py.

Many threads, each with its own agent, app and reader connections (real login roles), act on
the same few rows: adds from a tiny pool of values (racing dedup), edits by the version just read
(racing versions), deletes, bounded bulk updates, the same idempotent calls from several
connections, confirmations of the same drafts from several later turns, the approval worker,
and the exit gate at the end of every turn (checked against the receipts the thread got).

A thread whose connection is killed (pg_terminate_backend, server restart) reconnects and sends
the same call again with the same call_id: the receipt it then gets is the one it keeps.
verify() checks the outcome from the database alone (see test_concurrency.py).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import psycopg

FAR = "2030-11-30 08:00:00+08"
INVOKE = "SELECT agentdb.invoke(%s, %s, %s::jsonb, call_id => %s)"
BULK = "SELECT agentdb.invoke(%s, 'finish_reminders', %s::jsonb, call_id => %s, expect_rows => %s)"
POOL = [("water the plants", "2030-12-01 08:00:00+08"), ("call mum", "2030-12-01 09:00:00+08"),
        ("pay rent", "2030-12-02 10:00:00+08"), ("book dentist", "2030-12-03 11:00:00+08")]
APP_NAME = "rel-worker"
# Rows made by shared calls, drafts and actions are kept: the checks look for them at the end.
PICK_DELETABLE = """
    SELECT r.id FROM reminders AS r
     WHERE NOT EXISTS (
        SELECT 1 FROM agentdb_private.steps AS s
         WHERE s.action = 'insert' AND s.outcome = 'success' AND (s.receipt -> 'key' ->> 'id')::bigint = r.id
           AND (s.call_id LIKE 'shared-call-%' OR s.call_id LIKE 'draft:%' OR s.call_id LIKE 'action:%'))
     ORDER BY random() LIMIT 1"""


def begin(conn, conv: str, user: str = "u1") -> str:
    return str(conn.execute("SELECT agentdb.begin_task(%s, %s, 'race', authenticated => true, "
                            "lang => 'en')", (user, conv)).fetchone()[0])


def setup_schema(db) -> None:
    """On a database with the reminders example installed: the tool that needs confirmation."""
    db.execute("""SELECT agentdb.register_tool(
        name => 'book_reminder', action => 'insert', target => 'public.reminders',
        label_zh => '预约提醒', label_en => 'book a reminder', owner_column => 'user_id',
        needs_confirm => true)""")


@dataclass
class Workload:
    dsn: str
    agent: tuple[str, str]
    app: tuple[str, str]
    shared_calls: int = 12
    n_drafts: int = 6
    n_actions: int = 10
    reconnect_for: float = 60.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    receipts: list = field(default_factory=list)
    shared_steps: dict = field(default_factory=lambda: defaultdict(set))
    confirmed: Counter = field(default_factory=Counter)
    actions_seen: list = field(default_factory=list)
    gate: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)

    # -- setup ------------------------------------------------------------------------------------

    def setup(self, db) -> None:
        setup_task = begin(db, "setup")
        for i in range(6):
            r = db.execute(INVOKE, (setup_task, "add_reminder",
                                    json.dumps({"content": f"seed {i}", "remind_at": FAR}),
                                    f"seed-{i}")).fetchone()[0]
            assert r["outcome"] == "success", r
        db.execute("SELECT agentdb.finish_task(%s)", (setup_task,))
        self.shared = [(begin(db, f"shared-{i}"), f"shared-call-{i}", {"content": f"shared {i}",
                                                                       "remind_at": FAR})
                       for i in range(self.shared_calls)]
        proposing = begin(db, "drafts")
        self.drafts = []
        for i in range(self.n_drafts):
            d = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                           (proposing, json.dumps({"content": f"draft {i}", "remind_at": FAR}))).fetchone()[0]
            assert d["outcome"] == "proposed", d
            self.drafts.append(d["draft_id"])
        db.execute("SELECT agentdb.finalize_reply(%s, 'Shall I book these?')", (proposing,))
        asking = begin(db, "actions")
        self.actions = []
        for i in range(self.n_actions):
            a = db.execute("SELECT agentdb.request_approval(%s, 'add_reminder', %s::jsonb)",
                           (asking, json.dumps({"content": f"action {i}", "remind_at": FAR}))).fetchone()[0]
            db.execute("SELECT agentdb.approve(%s, 'u1')", (a["action_id"],))
            self.actions.append(a["action_id"])
        time.sleep(0.01)  # every confirming turn is strictly later than the turn that showed the drafts
        self.steps_before = db.execute("SELECT coalesce(max(id), 0) FROM agentdb_private.steps").fetchone()[0]

    # -- one thread -------------------------------------------------------------------------------

    def _connect(self, which: str, n: int) -> psycopg.Connection:
        kwargs = {"autocommit": True, "application_name": f"{APP_NAME}-{n}-{which}", "connect_timeout": 3}
        if which in ("agent", "app"):
            user, password = getattr(self, which)
            kwargs.update(user=user, password=password)
        deadline = time.monotonic() + self.reconnect_for
        while True:
            try:
                return psycopg.connect(self.dsn, **kwargs)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def worker(self, n: int, stop: threading.Event, seed: int = 0) -> None:
        rng = random.Random(seed * 7919 + n)
        conns = {w: self._connect(w, n) for w in ("agent", "app", "reader")}

        def call(which: str, query: str, params=()):
            """Run one call; on a lost connection reconnect and send the same call again."""
            while True:
                try:
                    row = conns[which].execute(query, params or None).fetchone()
                    return None if row is None else row[0] if len(row) == 1 else row
                except psycopg.OperationalError:
                    with self.lock:
                        self.ops["connection_lost"] += 1
                    with contextlib.suppress(Exception):  # already gone
                        conns[which].close()
                    conns[which] = self._connect(which, n)

        task, in_task, i = begin_r(call, f"conv-{n}"), [], 0

        def end_turn():
            # The model claims it created a reminder; the gate must agree with the receipts.
            created = any(r["tool"] == "add_reminder" and r["outcome"] == "success" and r["verified"]
                          for r in in_task)
            # A task with a failed step is troubled: "I've set it." acknowledges no failure (issue 11).
            troubled = any(not (r["outcome"] == "success" and r["verified"]) and r.get("refusal") != "closed"
                           for r in in_task)
            created = created and not troubled
            v = call("app", "SELECT agentdb.finalize_reply(%s, 'I''ve set it.', %s::jsonb)",
                     (task, json.dumps([{"kind": "create", "tool": "add_reminder"}])))
            call("app", "SELECT agentdb.finish_task(%s)", (task,))
            with self.lock:
                self.gate[v["verdict"]] += 1
                if (v["verdict"] == "deliver") != created:
                    self.failures.append(f"gate said {v['verdict']} but created={created}")

        def keep(receipt, sent):
            with self.lock:
                self.receipts.append({**receipt, "_sent": sent})
            in_task.append(receipt)

        try:
            while not stop.is_set():
                i += 1
                if i % 8 == 0:
                    end_turn()
                    task, in_task = begin_r(call, f"conv-{n}"), []
                roll = rng.random()
                call_id = f"t{seed}-{n}-{i}"
                if roll < 0.25:
                    content, at = rng.choice(POOL)
                    sent = ("add_reminder", {"content": content, "remind_at": at})
                elif roll < 0.50:
                    row = call("reader", "SELECT id, version FROM reminders ORDER BY random() LIMIT 1")
                    if not row:
                        continue
                    sent = ("edit_reminder", {"id": row[0], "content": f"edit {seed}-{n}-{i}",
                                              "version": row[1]})
                elif roll < 0.58:
                    rid = call("reader", PICK_DELETABLE)
                    if not rid:
                        continue
                    sent = ("delete_reminder", {"id": rid})
                elif roll < 0.64:
                    flag = rng.random() < 0.5
                    n_rows = call("reader",
                                  "SELECT count(*) FROM reminders WHERE user_id = 'u1' AND done = %s",
                                  (not flag,))
                    if not n_rows:
                        continue
                    receipt = call("agent", BULK, (task, json.dumps({"where": {"done": not flag},
                                                                      "set": {"done": flag}}), call_id,
                                                                      n_rows))
                    self.ops["bulk"] += 1
                    keep(receipt, ("finish_reminders", {"expect_rows": n_rows}))
                    continue
                elif roll < 0.80:
                    s_task, s_call, s_args = rng.choice(self.shared)
                    receipt = call("agent", INVOKE, (s_task, "add_reminder", json.dumps(s_args), s_call))
                    with self.lock:
                        self.ops["shared"] += 1
                        self.shared_steps[s_call].add(receipt["step_id"])
                        if receipt["outcome"] != "success":
                            self.failures.append(f"shared call {s_call}: {receipt['outcome']}")
                    continue
                elif roll < 0.90:
                    draft = rng.choice(self.drafts)
                    later = begin_r(call, "drafts")
                    receipt = call("agent", "SELECT agentdb.confirm(%s, %s)", (later, draft))
                    call("app", "SELECT agentdb.finish_task(%s)", (later,))
                    with self.lock:
                        self.ops["confirm"] += 1
                        self.receipts.append({**receipt, "_sent": ("confirm", draft)})
                        if receipt["outcome"] == "success":
                            # (a replay here is the retry of a confirm whose first answer was lost)
                            self.confirmed[draft] += 1
                        elif receipt.get("refusal") != "draft_used":
                            self.failures.append(f"confirm {draft}: {receipt['outcome']} "
                                                 f"{receipt.get('refusal')}")
                    continue
                else:
                    result = call("app", "SELECT agentdb.run_next_action()")
                    with self.lock:
                        self.ops["worker"] += 1
                        if result:
                            self.actions_seen.append(result["action_id"])
                            self.receipts.append({**result["receipt"], "_sent": ("action",
                                                                                 result["action_id"])})
                    continue
                receipt = call("agent", INVOKE, (task, sent[0], json.dumps(sent[1]), call_id))
                with self.lock:
                    self.ops[sent[0]] += 1
                keep(receipt, sent)
            end_turn()
        except Exception as exc:  # noqa: BLE001 - any error is a finding
            with self.lock:
                self.failures.append(f"thread {n}: {type(exc).__name__}: {exc}")
        finally:
            for c in conns.values():
                with contextlib.suppress(Exception):
                    c.close()

    def drain(self) -> None:
        """Run what is left in the action queue."""
        conn = self._connect("app", 999)
        try:
            while (result := conn.execute("SELECT agentdb.run_next_action()").fetchone()[0]) is not None:
                self.actions_seen.append(result["action_id"])
                self.receipts.append({**result["receipt"], "_sent": ("action", result["action_id"])})
        finally:
            conn.close()

    # -- checks -----------------------------------------------------------------------------------

    def verify(self, db) -> tuple[list[str], dict]:
        problems = list(self.failures)
        outcomes = Counter((r["_sent"][0], r["outcome"], r.get("refusal")) for r in self.receipts)

        # Every approved action ran exactly once, whether or not its worker lived to see the result.
        not_done = db.execute("SELECT count(*) FROM agentdb_private.actions WHERE id = ANY(%s) "
                              "AND status <> 'done'", (self.actions,)).fetchone()[0]
        if not_done or len(self.actions_seen) != len(set(self.actions_seen)):
            problems.append(f"actions: {not_done} not done, seen {len(self.actions_seen)} "
                            f"({len(set(self.actions_seen))} distinct)")

        # Every receipt is a step with that outcome; every step of the run was received by someone
        # (a worker killed after committing an action is the only one who may miss its receipt).
        ids = [r["step_id"] for r in self.receipts]
        if len(ids) != len(set(ids)):
            problems.append("two receipts share a step")
        in_db = dict(db.execute("SELECT id, outcome FROM agentdb_private.steps WHERE id = ANY(%s)",
                                (ids,)).fetchall())
        wrong = [r["step_id"] for r in self.receipts if in_db.get(r["step_id"]) != r["outcome"]]
        if wrong:
            problems.append(f"receipts that disagree with their step: {wrong[:5]}")
        unseen = db.execute("""
            SELECT count(*) FILTER (WHERE call_id NOT LIKE 'action:%%' OR call_id IS NULL),
                   count(*) FILTER (WHERE call_id LIKE 'action:%%')
              FROM agentdb_private.steps AS s WHERE id > %s AND NOT (id = ANY(%s))
               AND EXISTS (SELECT 1 FROM agentdb_private.tasks AS t
                            WHERE t.id = s.task_id AND t.user_id = 'u1')""",
                            (self.steps_before, ids + [sid for s in self.shared_steps.values() for sid in s])
                            ).fetchone()
        if unseen[0]:
            problems.append(f"{unseen[0]} steps no client received")
        steps_run = db.execute("SELECT count(*) FROM agentdb_private.steps AS s "
                               "JOIN agentdb_private.tasks AS t ON t.id = s.task_id "
                               "WHERE s.id > %s AND t.user_id = 'u1'",
                               (self.steps_before,)).fetchone()[0]

        # No lost update.
        edits = db.execute("""
            SELECT (args ->> 'id')::bigint, (args ->> 'version')::bigint, args ->> 'content'
              FROM agentdb_private.steps WHERE tool = 'edit_reminder' AND outcome = 'success' AND verified
             ORDER BY 1, 2""").fetchall()
        pairs = Counter((rid, v) for rid, v, _ in edits)
        if max(pairs.values(), default=1) > 1:
            problems.append("lost update: two verified edits from the same version of a row")
        last, per_row = {}, Counter()
        for rid, v, content in edits:
            per_row[rid] += 1
            last[rid] = (v, content)
        for rid, version, content in db.execute("SELECT id, version, content FROM reminders").fetchall():
            if version != 1 + per_row[rid] or (rid in last and (version, content) != (last[rid][0] + 1,
                                                                                      last[rid][1])):
                problems.append(f"lost update on row {rid}: version {version}, {per_row[rid]} verified edits")
        conflicts = sum(v for (t, o, _), v in outcomes.items() if t == "edit_reminder" and o == "conflict")
        if any(t == "edit_reminder" and o == "conflict" and r != "stale_version" for (t, o, r) in outcomes):
            problems.append("a conflict that is not a stale version")

        # No duplicate from racing dedup.
        dupes = db.execute("SELECT content FROM reminders GROUP BY user_id, content, remind_at "
                           "HAVING count(*) > 1").fetchall()
        if dupes:
            problems.append(f"duplicate rows: {dupes[:5]}")

        # Idempotent call_ids across connections.
        for s_task, s_call, _ in self.shared:
            if s_call not in self.shared_steps:
                continue
            steps = db.execute("SELECT id, receipt -> 'key' ->> 'id' FROM agentdb_private.steps "
                               "WHERE task_id = %s AND call_id = %s", (s_task, s_call)).fetchall()
            if len(self.shared_steps[s_call]) != 1 or len(steps) != 1 or db.execute(
                    "SELECT count(*) FROM reminders WHERE id = %s", (int(steps[0][1]),)).fetchone()[0] != 1:
                problems.append(f"shared call {s_call}: steps {self.shared_steps[s_call]} / {steps}")

        # Drafts confirmed at most once.
        n_confirmed = db.execute("SELECT count(*) FROM agentdb_private.drafts WHERE id = ANY(%s::uuid[]) "
                                 "AND status = 'confirmed'", (self.drafts,)).fetchone()[0]
        if max(self.confirmed.values(), default=0) > 1 or n_confirmed < len(self.confirmed):
            problems.append(f"drafts: {dict(self.confirmed)} vs {n_confirmed} confirmed")

        figures = {
            "calls": sum(v for k, v in self.ops.items() if k != "connection_lost"),
            "receipts": len(self.receipts), "steps": steps_run, "conflicts": conflicts,
            "duplicates": sum(v for (_, o, _), v in outcomes.items() if o == "duplicate"),
            "replays": self.ops["shared"] - len(self.shared_steps), "drafts_confirmed": n_confirmed,
            "confirm_attempts": self.ops["confirm"], "actions_run": len(self.actions),
            "gate_verdicts": sum(self.gate.values()), "connections_lost": self.ops["connection_lost"],
            "lost_updates": sum("lost update" in p for p in problems),
            "duplicate_rows": len(dupes),
        }
        return problems, figures

    def outcome_table(self) -> dict:
        return {f"{k[0]}:{k[1]}:{k[2]}": v for k, v in
                sorted(Counter((r["_sent"][0], r["outcome"],
                                r.get("refusal")) for r in self.receipts).items())}


def begin_r(call, conv: str) -> str:
    return str(call("app", "SELECT agentdb.begin_task('u1', %s, 'race', authenticated => true, lang => 'en')",
                    (conv,)))


def chaos(dsn: str, stop: threading.Event, every: float, counter: Counter, seed: int = 0) -> None:
    """Terminate a random worker connection every `every` seconds (as the owner)."""
    rng = random.Random(seed)
    while not stop.wait(every * (0.5 + rng.random())):
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
                killed = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE %s AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1",
                    (f"{APP_NAME}-%",)).fetchone()
                if killed and killed[0]:
                    counter["kills"] += 1
        except psycopg.OperationalError:
            pass  # the server is restarting
