"""Benchmark: one user's day from agentdb.v_turns with a large history.

Fills the books directly as the owner (the append-only triggers allow inserts): --tasks tasks
(default 250,000) of --users users (default 2,000) over --days days (default 30), each with
three steps (the third one failed), a reply (every fifth replaced, with a pending claim) and
their four audit rows, so the default is 1,000,000 audit rows. Then, for --queries random
(user, day) pairs, times

    SELECT * FROM agentdb.v_turns WHERE user_id = $1 AND created_at >= $2 AND created_at < $2 + 1 day

--rounds times each, server round trip included, and reports the median and p90 over all, the
rows a query returns and the plan of one of them (EXPLAIN ANALYZE, BUFFERS). The target is a
median under 50 ms.

    python bench/turns.py                        # embedded server in a temp dir
    python bench/turns.py --tasks 50000 --json out.json --dsn postgresql://...
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

import psycopg

from pyagentdb import install

BASE = datetime(2030, 1, 1, tzinfo=UTC)
QUERY = ("SELECT * FROM agentdb.v_turns WHERE user_id = %s"
         " AND created_at >= %s AND created_at < %s::timestamptz + interval '1 day'")

FILL = """
CREATE TEMPORARY TABLE bench_tasks AS
SELECT g, gen_random_uuid() AS id, 'user-' || (g % {users}) AS user_id,
       '{base}'::timestamptz + ((g / {users}) % {days}) * interval '1 day'
           + (g % 86000) * interval '1 second' AS at
  FROM generate_series(1, {tasks}) AS g;

INSERT INTO agentdb_private.tasks (id, user_id, conversation_id, goal, authenticated, lang, status,
                                   closed_at, created_at, finished_at, settled_by)
SELECT id, user_id, 'conv-' || g, 'bench turn ' || g, true, 'en', 'partial', at, at, at + interval '2 s',
       'finish_task'
  FROM bench_tasks;

INSERT INTO agentdb_private.steps (task_id, seq, tool, action, args, outcome, refusal, verified, attempts,
                                   affected_rows, call_id, receipt, started_at, finished_at)
SELECT b.id, s, 'add_reminder', 'insert', '{{"content": "x"}}',
       CASE WHEN s = 3 THEN 'failed' ELSE 'success' END,
       CASE WHEN s = 3 THEN 'write_failed' END, s < 3, 1, CASE WHEN s = 3 THEN 0 ELSE 1 END, 'call-' || s,
       '{{"outcome": "success"}}', b.at, b.at + interval '10 ms'
  FROM bench_tasks AS b, generate_series(1, 3) AS s;

INSERT INTO agentdb_private.replies (task_id, conversation_id, user_id, verdict, delivered_text, pending,
                                     delivered_at)
SELECT id, 'conv-' || g, user_id, CASE WHEN g % 5 = 0 THEN 'replace' ELSE 'deliver' END,
       'Set two reminders; the third did not go through.',
       CASE WHEN g % 5 = 0 THEN '[{{"kind": "done", "text": "all done", "tool": null}}]' ELSE '[]' END::jsonb,
       at + interval '2 s'
  FROM bench_tasks;

INSERT INTO agentdb_private.audit (task_id, step_id, user_id, tool, action, target, status, outcome,
                                   detail, at)
SELECT s.task_id, s.id, b.user_id, s.tool, s.action, 'public.reminders',
       CASE WHEN s.verified THEN 'SUCCESS' ELSE 'FAILED' END, s.outcome, 'bench', s.finished_at
  FROM agentdb_private.steps AS s JOIN bench_tasks AS b ON b.id = s.task_id;

INSERT INTO agentdb_private.audit (task_id, user_id, action, status, outcome, detail, payload, at)
SELECT id, user_id, 'reply', 'SUCCESS', 'deliver', 'bench',
       jsonb_build_object('model_text', 'All done!', 'book_state', 'troubled', 'reason', 'bench'),
       at + interval '2 s'
  FROM bench_tasks;
"""


def fill(conn: psycopg.Connection, tasks: int, users: int, days: int) -> None:
    have = conn.execute("SELECT count(*) FROM agentdb_private.tasks"
                        " WHERE goal LIKE 'bench turn %'").fetchone()[0]
    if have >= tasks:
        return
    with conn.transaction():
        conn.execute(FILL.format(tasks=int(tasks), users=int(users), days=int(days), base=BASE.isoformat()))
    for table in ("tasks", "steps", "replies", "audit", "claims"):
        conn.execute(f"VACUUM ANALYZE agentdb_private.{table}")


def run(dsn: str, tasks: int, users: int, days: int, queries: int, rounds: int) -> dict:
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        fill(conn, tasks, users, days)
        fill_seconds = time.perf_counter() - started
        audit_rows = conn.execute("SELECT count(*) FROM agentdb_private.audit").fetchone()[0]
        rng = random.Random(7)
        pairs = [(f"user-{rng.randrange(users)}", BASE + timedelta(days=rng.randrange(days)))
                 for _ in range(queries)]
        samples, counts = [], []
        for user, day in pairs:
            for _ in range(rounds):
                start = time.perf_counter()
                rows = conn.execute(QUERY, (user, day, day)).fetchall()
                samples.append((time.perf_counter() - start) * 1000)
            counts.append(len(rows))
        user, day = pairs[0]
        explain = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + QUERY
        plan = [r[0] for r in conn.execute(explain, (user, day, day))]
        version = conn.execute("SHOW server_version").fetchone()[0]
    ordered = sorted(samples)
    return {
        "server_version": version,
        "tasks": tasks, "users": users, "days": days, "audit_rows": audit_rows,
        "fill_seconds": round(fill_seconds, 1),
        "queries": queries, "rounds": rounds,
        "rows_per_query": {"min": min(counts), "median": statistics.median(counts), "max": max(counts)},
        "median_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "target_ms": 50,
        "load": os.getloadavg(),
        "plan": plan,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="a database to fill (default: an embedded server in a temp dir)")
    parser.add_argument("--tasks", type=int, default=250_000)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = parser.parse_args()
    if args.dsn:
        dsn = args.dsn
    else:
        from pyagentdb import server

        dsn = server.start_embedded(tempfile.mkdtemp(prefix="pyagentdb-bench-turns-")).dsn
    result = run(dsn, args.tasks, args.users, args.days, args.queries, args.rounds)
    for key, value in result.items():
        if key != "plan":
            print(f"{key:15} {value}")
    print("\n".join(result["plan"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
