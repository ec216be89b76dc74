"""Where does an agentdb.invoke spend its time?

Part 1, a ladder of single statements (autocommit, p50 of each rung, median of rounds; the rungs
alternate inside a round so machine noise hits them alike):
  SELECT 1                          the round trip from Python
  raw INSERT into bench_plain       one row written and committed, no trigger
  raw INSERT into reminders         the same into the watched table (change log + hash chain)
  3 inserts in one statement        the write volume of invoke (row + audit rows), no PL/pgSQL
  invoke refused (unknown tool)     the envelope alone: task lock, replay check, seq, audit row
  invoke, insert tool without dedup plus the compiled write (checks, insert, read-back)
  invoke, add_reminder (dedup)      plus the duplicate check

Part 2, server time per function for one invoke of add_reminder (track_functions = 'all':
total and self microseconds per call of every agentdb function; robust to a busy client).

Part 3, table size: the raw insert and the invoke again with reminders and bench_plain
prefilled with --rows rows (half of them other users'), to see that the invoke stays flat.

Part 4 (--callgrind K), instructions per call, which no other work on the machine changes: a
single-user backend under valgrind's callgrind runs K and 2K calls of raw_plain, raw, invoke
(add_reminder) and refused (an unknown tool: the envelope, step and audit rows only).

    python bench/breakdown.py                      # embedded server in a temp dir
    python bench/breakdown.py --rows 1000000 --dsn postgresql:///scratch
    python bench/breakdown.py --rows 0 --n 50 --rounds 1 --profile 0 --callgrind 60
    python bench/breakdown.py --n 0 --callgrind 40 --patch bench/whatif/no_chain_notes.sql

--patch FILE (repeatable) runs an SQL file on part 4's scratch cluster after the setup: what a
change would save, counted before it is made (bench/whatif/ holds the ones of docs/performance.md).
--n 0 skips parts 1-3 (no timing: part 4 alone needs no quiet machine).

Needs a superuser (track_functions, pg_stat_reset). See bench/invoke.py for the figures of
issue 12 (ratios, CPU per call, delay, clients); this one is for finding the next thing to fix.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from common import (
    add_common_args,
    bench_server,
    callgrind_counts,
    facts,
    load_line,
    prepare_reminders,
    print_function_times,
    track_functions,
    write_report,
)
from psycopg.types.json import Jsonb

USER = "bench-user"


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
                "SELECT agentdb.begin_task(%s, 'bench', 'bench', authenticated => true)", (USER,)
            ).fetchone()[0]
        return self.task

    def select1(self) -> float:
        return self._timed("SELECT 1")[0]

    def raw(self, table: str) -> float:
        return self._timed(f"INSERT INTO public.{table} (user_id, content, remind_at) "
                           "VALUES (%s, %s, %s) RETURNING *",
                           (USER, f"r {self.run} {self.i}", self.base + timedelta(minutes=self.i)))[0]

    def three_inserts(self) -> float:
        return self._timed(
            "WITH a AS (INSERT INTO public.bench_plain (user_id, content, remind_at) "
            "VALUES (%s, %s, now()) RETURNING id), "
            "s AS (INSERT INTO public.bench_app_audit (user_id, action, target, row_id, status, payload) "
            "SELECT %s, 'insert', 'public.reminders', id, 'SUCCESS', %s FROM a), "
            "u AS (INSERT INTO public.bench_app_audit (user_id, action, target, row_id, status) "
            "SELECT %s, 'insert', 'public.reminders', id, 'SUCCESS' FROM a) SELECT id FROM a",
            (USER, f"r {self.run} {self.i}", USER, Jsonb({"receipt": "x" * 500}), USER))[0]

    def invoke(self, tool: str, expect: str = "success") -> float:
        task = self._task()
        ms, row = self._timed("SELECT agentdb.invoke(%s, %s, %s, call_id => %s)",
                              (task, tool, self._args(), f"c{self.i}"))
        if row[0]["outcome"] != expect:
            raise SystemExit(f"unexpected receipt: {row[0]}")
        return ms

    def p50(self, fn, n: int, warm: int = 20) -> float:
        lat = []
        for k in range(n + warm):
            self.i += 1
            ms = fn()
            if k >= warm:
                lat.append(ms)
        return statistics.median(lat)


def ladder(b: Bench, rungs: dict, n: int, rounds: int) -> dict[str, float]:
    res: dict[str, list[float]] = {}
    for r in range(rounds):
        names = list(rungs)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            res.setdefault(name, []).append(b.p50(rungs[name], n))
    return {name: statistics.median(res[name]) for name in rungs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--rows", type=int, default=100_000, help="rows prefilled for part 3 (0: skip)")
    ap.add_argument("--n", type=int, default=200, help="timed calls per rung")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=int, default=200, help="invokes attributed in part 2 (0: skip)")
    ap.add_argument("--callgrind", type=int, default=0, metavar="K",
                    help="part 4: instructions per call from K and 2K calls under callgrind (0: skip)")
    ap.add_argument("--patch", action="append", default=[], metavar="FILE",
                    help="part 4: an SQL file run on its scratch cluster after the setup (repeatable)")
    args = ap.parse_args(argv)
    if args.patch and not args.callgrind:
        ap.error("--patch applies to part 4: give --callgrind K")
    missing = [p for p in args.patch if not os.path.isfile(p)]
    if missing:
        ap.error(f"no such file: {', '.join(missing)}")

    report: dict = {"params": vars(args) | {"dsn": None}}
    with bench_server(args.dsn, "breakdown") as srv, srv.connect() as conn:
        report["facts"] = facts(conn, srv)
        if args.n > 0:
            timed(conn, args, report)
    if args.callgrind:
        report["callgrind"] = callgrind_counts(["raw_plain", "raw", "invoke", "refused"], args.callgrind,
                                               args.patch)
    print_report(report)
    write_report(report, args.json)
    return 0


def timed(conn: psycopg.Connection, args: argparse.Namespace, report: dict) -> None:
    """Parts 1-3 (wall clock and server time)."""
    prepare_reminders(conn, [USER], 0)
    b = Bench(conn)
    rungs = {
        "SELECT 1": b.select1,
        "raw INSERT into bench_plain": lambda: b.raw("bench_plain"),
        "raw INSERT into reminders (watched)": lambda: b.raw("reminders"),
        "3 inserts in one statement": b.three_inserts,
        "invoke refused (unknown tool)": lambda: b.invoke("no_such_tool", "refused"),
        "invoke, insert tool without dedup": lambda: b.invoke("bench_add_reminder_plain"),
        "invoke, add_reminder (dedup)": lambda: b.invoke("add_reminder"),
    }
    report["ladder"] = ladder(b, rungs, args.n, args.rounds)
    if args.profile:
        with track_functions(conn) as times:
            for _ in range(args.profile):
                b.i += 1
                b.invoke("add_reminder")
            report["profile"] = times(args.profile)
    if args.rows:
        conn.execute(
            """INSERT INTO public.reminders (user_id, content, remind_at)
               SELECT CASE WHEN g %% 2 = 0 THEN 'other' || (g %% 1000) ELSE %s END,
                      'prefill ' || g, timestamptz '2040-01-01' + g * interval '1 minute'
                 FROM generate_series(1, %s) AS g""", (USER, args.rows))
        conn.execute("INSERT INTO public.bench_plain (user_id, content, remind_at) "
                     "SELECT user_id, content, remind_at FROM public.reminders")
        conn.execute("ANALYZE public.reminders")
        conn.execute("ANALYZE public.bench_plain")
        sized = {k: rungs[k] for k in ("raw INSERT into bench_plain",
                                       "raw INSERT into reminders (watched)",
                                       "invoke, add_reminder (dedup)")}
        report["sized"] = ladder(b, sized, args.n, args.rounds)
        report["rows_at_end"] = conn.execute("SELECT count(*) FROM public.reminders").fetchone()[0]


def print_report(report: dict) -> None:
    f, p = report["facts"], report["params"]
    print(f"PostgreSQL {f['server_version']} ({f['server']}), {load_line(f)}, commit {f['git_commit']}")
    if "ladder" in report:
        print(f"\npart 1: ladder (p50 ms, median of {p['rounds']} rounds of {p['n']} calls)")
        base = report["ladder"]["raw INSERT into bench_plain"]
        for name, ms in report["ladder"].items():
            print(f"  {name:<40} {ms:7.3f}   {ms / base:5.2f}x raw into bench_plain")
    if "profile" in report:
        print_function_times("part 2: server time per invoke of add_reminder", report["profile"])
    if "sized" in report:
        print(f"\npart 3: with {p['rows']:,} rows prefilled "
              f"({report['rows_at_end']:,} in reminders at the end)")
        for name, ms in report["sized"].items():
            print(f"  {name:<40} {ms:7.3f}   (empty: {report['ladder'][name]:7.3f})")
    if "callgrind" in report:
        cg = report["callgrind"]
        print(f"\npart 4: instructions per call (callgrind, single-user backend, {p['callgrind']} calls"
              + "".join(f", with {patch}" for patch in p["patch"]) + ")")
        for name, ins in cg.items():
            print(f"  {name:<12} {ins / 1e6:6.3f} M   {ins / cg['raw_plain']:5.2f}x raw_plain   "
                  f"{ins / cg['raw']:5.2f}x raw")


if __name__ == "__main__":
    sys.exit(main())
