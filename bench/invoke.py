"""Benchmark: agentdb.invoke against raw inserts and the app-level write-verify-audit pattern.

One run, one server, commit per operation (autocommit), the figures of issue 12:

  raw_plain   INSERT INTO bench_plain ... RETURNING *   a copy of reminders that is not watched
  raw         INSERT INTO reminders ... RETURNING *     the watched table invoke writes
  app         BEGIN; INSERT ... RETURNING id; SELECT ... WHERE id = ?;
              INSERT INTO bench_app_audit ...; COMMIT   (psycopg transaction: 5 round trips)
  invoke      SELECT agentdb.invoke(task, 'add_reminder', args, call_id => ...)   (1 round trip)
  --bulk      one invoke of a 100-row where/set update against the same UPDATE sent raw

The workloads are interleaved in chunks inside each round and their order rotates from round to
round, so machine noise hits all of them alike. Each round gives ops/s, p50/p99 and the server
CPU per call (the backend's user+system time, read from /proc: the server's own work, whatever
else the machine runs); the report shows medians over the rounds, and every ratio is computed
within a round, then its median taken.

    python bench/invoke.py                                   # embedded server, defaults
    python bench/invoke.py --rounds 7 --bulk --json out.json # + the bulk update
    python bench/invoke.py --one-way-ms 0.5                  # 1 ms round trip through a proxy
    python bench/invoke.py --clients 8                       # 8 concurrent clients, one user each
    python bench/invoke.py --rows 1000000                    # tables prefilled with 1 M rows

The aims (issue 12): p50 invoke <= 2.0x raw_plain and <= 1.4x raw; CPU per call <= 3.5x
raw_plain's; at 1 ms round trip, invoke throughput >= 2.5x app's and p50 <= 1.5x raw_plain;
8 clients: invoke throughput >= 0.25x raw_plain's; flat from 1 k to 1 M rows; the 100-row bulk
update <= 2x the raw UPDATE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import psycopg
from common import (
    COUNT_SETTINGS,
    BackendCpu,
    add_common_args,
    bench_server,
    counts_available,
    facts,
    load_line,
    pct,
    prepare_reminders,
    print_counts,
    proxied_dsn,
    select1_ms,
    server_counts,
    write_report,
)
from psycopg.types.json import Jsonb

BENCH_USER = "bench-user"
RAW_INSERT = "INSERT INTO public.{} (user_id, content, remind_at) VALUES (%s, %s, %s) RETURNING *"
APP_INSERT = "INSERT INTO public.reminders (user_id, content, remind_at) VALUES (%s, %s, %s) RETURNING id"
APP_SELECT = "SELECT * FROM public.reminders WHERE id = %s"
APP_AUDIT = (
    "INSERT INTO public.bench_app_audit (user_id, action, target, row_id, status, payload) "
    "VALUES (%s, 'insert', 'public.reminders', %s, %s, %s)"
)
INVOKE = "SELECT agentdb.invoke(%s, %s, %s, call_id => %s, reason => %s)"
INVOKE_BULK = "SELECT agentdb.invoke(%s, 'bench_finish_items', %s, call_id => %s, expect_rows => %s)"
RAW_BULK = "UPDATE public.bench_items SET done = true WHERE user_id = %s AND done = false RETURNING id"
MAIN = ("raw_plain", "raw", "app", "invoke")


class Content:
    """Unique reminder texts and times, so no two calls share a dedup key."""

    def __init__(self, base_year: int = 2031) -> None:
        self.run = uuid.uuid4().hex[:8]
        self.i = 0
        self.base = datetime(base_year, 1, 1, tzinfo=UTC)

    def next(self) -> tuple[str, datetime]:
        self.i += 1
        return f"bench {self.run} #{self.i}", self.base + timedelta(minutes=self.i)


class Workloads:
    """One client: its connection, its user, its current task."""

    def __init__(
        self,
        conn: psycopg.Connection,
        user: str,
        tool: str,
        calls_per_task: int,
        bulk_rows: int,
        setup: psycopg.Connection,
    ) -> None:
        self.conn, self.user, self.tool = conn, user, tool
        self.setup = setup  # opens tasks (the trusted runtime's work) outside the timing
        self.calls_per_task, self.bulk_rows = calls_per_task, bulk_rows
        self.content = Content()
        self.task: str | None = None
        self.task_calls = 0
        self.bulk_users: list[str] = []
        self.bad: list[dict] = []
        self.cpu = BackendCpu(conn)

    def _task(self) -> str:
        if self.task is None or self.task_calls >= self.calls_per_task:
            self.task = self.setup.execute(
                "SELECT agentdb.begin_task(%s, %s, 'bench', authenticated => true)",
                (self.user, f"bench-{self.content.run}"),
            ).fetchone()[0]
            self.task_calls = 0
        self.task_calls += 1
        return self.task

    def raw_plain(self) -> float:
        return self._raw("bench_plain")

    def raw(self) -> float:
        return self._raw("reminders")

    def _raw(self, table: str) -> float:
        content, at = self.content.next()
        t0 = time.perf_counter_ns()
        row = self.conn.execute(RAW_INSERT.format(table), (self.user, content, at)).fetchone()
        t1 = time.perf_counter_ns()
        assert row is not None
        return (t1 - t0) / 1e6

    def app(self) -> float:
        content, at = self.content.next()
        t0 = time.perf_counter_ns()
        with self.conn.transaction():
            new_id = self.conn.execute(APP_INSERT, (self.user, content, at)).fetchone()[0]
            row = self.conn.execute(APP_SELECT, (new_id,)).fetchone()
            ok = row is not None and row[2] == content and row[3] == at
            self.conn.execute(
                APP_AUDIT,
                (
                    self.user,
                    new_id,
                    "SUCCESS" if ok else "FAILED",
                    Jsonb({"content": content, "remind_at": at.isoformat()}),
                ),
            )
        return (time.perf_counter_ns() - t0) / 1e6

    def invoke(self) -> float:
        content, at = self.content.next()
        task = self._task()
        args = Jsonb({"content": content, "remind_at": at.isoformat()})
        t0 = time.perf_counter_ns()
        receipt = self.conn.execute(
            INVOKE, (task, self.tool, args, f"c{self.content.i}", "bench")
        ).fetchone()[0]
        t1 = time.perf_counter_ns()
        if not (receipt["outcome"] == "success" and receipt["verified"]):
            self.bad.append(receipt)
        return (t1 - t0) / 1e6

    # Bulk: each op marks the --bulk-rows rows of one fresh owner as done.
    def prepare_bulk(self, count: int) -> None:
        users = [f"bulk-{self.content.run}-{len(self.bulk_users) + i}" for i in range(count)]
        with self.setup.transaction():
            for user in users:
                self.setup.execute(
                    "INSERT INTO public.bench_items (user_id, label) "
                    "SELECT %s, 'item ' || g FROM generate_series(1, %s) AS g",
                    (user, self.bulk_rows),
                )
                self.setup.execute(
                    "SELECT agentdb.grant_permission(%s, 'WRITE', 'bench_finish_items')", (user,)
                )
        self.setup.execute("ANALYZE public.bench_items")
        self.bulk_users.extend(users)

    def raw_bulk(self) -> float:
        user = self.bulk_users.pop()
        t0 = time.perf_counter_ns()
        rows = self.conn.execute(RAW_BULK, (user,)).fetchall()
        t1 = time.perf_counter_ns()
        assert len(rows) == self.bulk_rows, len(rows)
        return (t1 - t0) / 1e6

    def invoke_bulk(self) -> float:
        user = self.bulk_users.pop()
        task = self.setup.execute(
            "SELECT agentdb.begin_task(%s, 'bench-bulk', 'bench', authenticated => true)", (user,)
        ).fetchone()[0]
        args = Jsonb({"where": {"done": False}, "set": {"done": True}})
        t0 = time.perf_counter_ns()
        receipt = self.conn.execute(INVOKE_BULK, (task, args, "b1", self.bulk_rows)).fetchone()[0]
        t1 = time.perf_counter_ns()
        if not (
            receipt["outcome"] == "success"
            and receipt["verified"]
            and receipt["affected_rows"] == self.bulk_rows
        ):
            self.bad.append(receipt)
        return (t1 - t0) / 1e6


# ---------------------------------------------------------------------------- one client


def run_rounds(w: Workloads, args) -> list[dict]:
    funcs = {name: getattr(w, name) for name in (*MAIN, "raw_bulk", "invoke_bulk")}
    for name in MAIN:  # warm caches, prepared statements and plan caches
        for _ in range(args.warmup):
            funcs[name]()
    bulk = ["raw_bulk", "invoke_bulk"] if args.bulk else []
    if bulk:
        w.prepare_bulk(2 * min(args.warmup, 20))
        for name in bulk:
            for _ in range(min(args.warmup, 20)):
                funcs[name]()
    results = []
    for r in range(args.rounds):
        order = list(MAIN[r % len(MAIN) :] + MAIN[: r % len(MAIN)])
        lat: dict[str, list[float]] = defaultdict(list)
        spent: dict[str, float] = defaultdict(float)
        cpu: dict[str, float] = defaultdict(float)
        blocks = [(order, args.n, args.chunk)]
        if bulk:
            w.prepare_bulk(args.bulk_n * len(bulk))
            blocks.append((bulk if r % 2 == 0 else bulk[::-1], args.bulk_n, max(1, args.chunk // 10)))
        for names, n, chunk in blocks:
            done = 0
            while done < n:
                size = min(chunk, n - done)
                for name in names:
                    c0, t0 = w.cpu.read(), time.perf_counter()
                    lat[name].extend(funcs[name]() for _ in range(size))
                    spent[name] += time.perf_counter() - t0
                    if w.cpu.available:
                        cpu[name] += w.cpu.read() - c0
                done += size
        rows = w.setup.execute("SELECT count(*) FROM public.reminders").fetchone()[0]
        results.append(
            {"_rows_in_reminders": rows}
            | {
                name: {
                    "ops_per_s": len(lat[name]) / spent[name],
                    "p50_ms": pct(lat[name], 50),
                    "p99_ms": pct(lat[name], 99),
                    "mean_ms": statistics.fmean(lat[name]),
                }
                | ({"cpu_ms_per_call": cpu[name] * 1000 / len(lat[name])} if w.cpu.available else {})
                for name in lat
            }
        )
    return results


# ---------------------------------------------------------------------------- concurrent clients


def run_clients(dsn: str, setup_dsn: str, users: list[str], args) -> list[dict]:
    """Each round: every workload in turn, run by len(users) clients at once (one user each) for
    --seconds; throughput = completed calls / wall time of the phase."""
    clients = []
    for user in users:
        conn = psycopg.connect(dsn, autocommit=True)
        clients.append(
            Workloads(
                conn,
                user,
                args.tool,
                args.calls_per_task,
                args.bulk_rows,
                psycopg.connect(setup_dsn, autocommit=True),
            )
        )
    try:
        for w in clients:
            for name in ("raw_plain", "raw", "invoke"):
                for _ in range(min(args.warmup, 50)):
                    getattr(w, name)()
        results = []
        names = ["raw_plain", "raw", "invoke"]
        for r in range(args.rounds):
            round_result: dict = {}
            for name in names[r % 3 :] + names[: r % 3]:
                counts = [0] * len(clients)
                lat: list[list[float]] = [[] for _ in clients]
                stop = threading.Event()

                def client(i: int, w: Workloads, fn=name, stop=stop, lat=lat, counts=counts) -> None:
                    while not stop.is_set():
                        lat[i].append(getattr(w, fn)())
                        counts[i] += 1

                threads = [threading.Thread(target=client, args=(i, w)) for i, w in enumerate(clients)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                time.sleep(args.seconds)
                stop.set()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
                flat = [x for per in lat for x in per]
                round_result[name] = {
                    "ops_per_s": sum(counts) / wall,
                    "p50_ms": pct(flat, 50),
                    "p99_ms": pct(flat, 99),
                    "mean_ms": statistics.fmean(flat),
                }
            results.append(round_result)
        bad = [b for w in clients for b in w.bad]
        if bad:
            raise SystemExit(
                f"invoke did not succeed {len(bad)} time(s); first receipt:\n"
                f"{json.dumps(bad[0], ensure_ascii=False, indent=2)}"
            )
        return results
    finally:
        for w in clients:
            w.conn.close()
            w.setup.close()


# ---------------------------------------------------------------------------- summary

AIMS = {  # ratio name -> (comparison, bound): the aims of issue 12
    "invoke_vs_raw_plain_p50": ("<=", 2.0),
    "invoke_vs_raw_p50": ("<=", 1.4),
    "invoke_vs_raw_plain_cpu": ("<=", 3.5),
    "invoke_vs_app_throughput": (">=", 2.5),
    "invoke_bulk_vs_raw_bulk_p50": ("<=", 2.0),
    "invoke_vs_raw_plain_throughput": (">=", 0.25),
}


def summarise(results: list[dict], *, clients: int, delay: float) -> dict:
    names = [k for k in results[0] if not k.startswith("_")]
    med = {
        name: {k: statistics.median(r[name][k] for r in results) for k in results[0][name]} for name in names
    }

    def ratio(a: str, b: str, key: str) -> float | None:
        if a not in results[0] or b not in results[0] or key not in results[0][a]:
            return None
        return statistics.median(r[a][key] / r[b][key] for r in results)

    ratios = {
        "invoke_vs_raw_plain_p50": ratio("invoke", "raw_plain", "p50_ms"),
        "invoke_vs_raw_p50": ratio("invoke", "raw", "p50_ms"),
        "invoke_vs_raw_plain_cpu": ratio("invoke", "raw_plain", "cpu_ms_per_call"),
        "invoke_vs_raw_cpu": ratio("invoke", "raw", "cpu_ms_per_call"),
        "invoke_vs_app_throughput": ratio("invoke", "app", "ops_per_s"),
        "invoke_vs_raw_plain_throughput": ratio("invoke", "raw_plain", "ops_per_s"),
        "app_vs_raw_plain_p50": ratio("app", "raw_plain", "p50_ms"),
        "invoke_bulk_vs_raw_bulk_p50": ratio("invoke_bulk", "raw_bulk", "p50_ms"),
    }
    ratios = {k: v for k, v in ratios.items() if v is not None}
    # Which aims this run speaks to: the throughput aim only with clients or a delay.
    relevant = (
        {"invoke_vs_raw_plain_throughput"}
        if clients > 1
        else (
            {"invoke_vs_app_throughput", "invoke_vs_raw_plain_p50"}
            if delay
            else {
                "invoke_vs_raw_plain_p50",
                "invoke_vs_raw_p50",
                "invoke_vs_raw_plain_cpu",
                "invoke_bulk_vs_raw_bulk_p50",
            }
        )
    )
    # At 1 ms of round trip the latency aim is 1.5x raw_plain.
    aims_run = {**AIMS, "invoke_vs_raw_plain_p50": ("<=", 1.5)} if delay else AIMS
    aims = {}
    for name in relevant & set(ratios):
        op, bound = aims_run[name]
        aims[f"{name} {op} {bound}"] = ratios[name] <= bound if op == "<=" else ratios[name] >= bound
    return {"median": med, "ratios": ratios, "aims_met": aims}


def print_report(report: dict) -> None:
    f, p = report["facts"], report["params"]
    print(f"pyagentdb invoke benchmark  {f['when']}")
    print(
        f"  PostgreSQL {f['server_version']} ({f['server']}, {f['transport']}), fsync={f['fsync']}, "
        f"synchronous_commit={f['synchronous_commit']}, wal_sync_method={f['wal_sync_method']}, "
        f"jit={f['jit']}"
    )
    print(
        f"  round trip (SELECT 1 p50) {f['select1_p50_ms']:.3f} ms"
        + (f", with {p['one_way_ms']} ms added each way by a proxy" if p["one_way_ms"] else "")
    )
    print(f"  git {f['git_commit']}, sql/ sha256 {f['sql_sha256']}; {load_line(f)}")
    print(
        f"  n={p['n']} per workload per round, rounds={p['rounds']}, chunk={p['chunk']}, tool={p['tool']}, "
        f"calls per task={p['calls_per_task']}, clients={p['clients']}, prefilled rows={p['rows']}"
        + (f", bulk rows={p['bulk_rows']} x {p['bulk_n']}" if p["bulk"] else "")
    )
    print()
    print(
        f"  {'workload':<12} {'ops/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9} {'cpu ms':>8}"
        "   (median of rounds; cpu: server process per call)"
    )
    for name, m in report["summary"]["median"].items():
        cpu = f"{m['cpu_ms_per_call']:8.3f}" if "cpu_ms_per_call" in m else f"{'-':>8}"
        print(
            f"  {name:<12} {m['ops_per_s']:>9.0f} {m['p50_ms']:>9.3f} {m['p99_ms']:>9.3f} "
            f"{m['mean_ms']:>9.3f} {cpu}"
        )
    print()
    for k, v in report["summary"]["ratios"].items():
        print(f"  {k:<36} {v:6.2f}x")
    for k, v in report["summary"]["aims_met"].items():
        print(f"  aim {k:<40} {'met' if v else 'NOT met'}")
    if "counts" in report:
        c = {k: v for k, v in report["counts"].items() if not k.startswith("_")}
        print_counts(f"server work per call ({report['counts']['_n']} more calls each, counted: "
                     "pg_stat_statements, track_functions; counts do not depend on the load):", c)
        if "invoke" in c and "raw_plain" in c:
            inv, raw = c["invoke"], c["raw_plain"]
            stmts = inv["statements_per_call"] / raw["statements_per_call"]
            print(f"  invoke / raw_plain: statements {stmts:.1f}x, "
                  f"executor time {inv['exec_ms_per_call'] / raw['exec_ms_per_call']:.2f}x")
    end = " ".join(str(x) for x in report.get("loadavg_end", []))
    print(f"  load average at the end: {end}")
    if "rounds" in report and report["rounds"] and "_rows_in_reminders" in report["rounds"][0]:
        print("\n  per round (rows in reminders: invoke p50 / raw_plain p50 ms):")
        print(
            "   "
            + ", ".join(
                f"{r['_rows_in_reminders']}: {r['invoke']['p50_ms']:.3f}/{r['raw_plain']['p50_ms']:.3f}"
                for r in report["rounds"]
            )
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--n", type=int, default=1000, help="operations per workload per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=50, help="ops of one workload before switching")
    ap.add_argument("--warmup", type=int, default=200, help="untimed ops per workload first")
    ap.add_argument(
        "--tool",
        default="add_reminder",
        help="insert tool: add_reminder (default; dedup on content+remind_at) or "
        "bench_add_reminder_plain (no dedup columns)",
    )
    ap.add_argument(
        "--calls-per-task", type=int, default=10, help="invokes per task (opened outside the timing)"
    )
    ap.add_argument("--bulk", action="store_true", help="also time a bulk update through invoke")
    ap.add_argument("--bulk-rows", type=int, default=100)
    ap.add_argument("--bulk-n", type=int, default=50, help="bulk ops per kind per round")
    ap.add_argument(
        "--one-way-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="a proxy between client and server delays each direction by MS (0.5: 1 ms round trip)",
    )
    ap.add_argument(
        "--clients", type=int, default=1, help="concurrent clients, each its own user and connection"
    )
    ap.add_argument(
        "--seconds", type=float, default=3.0, help="with --clients: seconds per workload per round"
    )
    ap.add_argument(
        "--rows", type=int, default=0, help="prefill reminders and bench_plain with this many rows"
    )
    ap.add_argument(
        "--counts",
        type=int,
        default=200,
        metavar="N",
        help="one client: after the rounds, N more calls per workload counted by pg_stat_statements "
        "and track_functions (statements, function calls, executor and CPU time per call; 0: skip)",
    )
    args = ap.parse_args(argv)

    users = [BENCH_USER] if args.clients <= 1 else [f"{BENCH_USER}-{i}" for i in range(args.clients)]
    counts: dict | None = None
    with bench_server(args.dsn, "invoke", settings=COUNT_SETTINGS) as srv, srv.connect() as setup:
        prepare_reminders(setup, users, args.rows)
        bench_dsn, proxy = proxied_dsn(srv.dsn, args.one_way_ms) if args.one_way_ms > 0 else (srv.dsn, None)
        try:
            with psycopg.connect(bench_dsn, autocommit=True) as conn:
                rtt = statistics.median(select1_ms(conn) for _ in range(200))
                if args.clients > 1:
                    results = run_clients(bench_dsn, srv.dsn, users, args)
                else:
                    w = Workloads(conn, BENCH_USER, args.tool, args.calls_per_task, args.bulk_rows, setup)
                    results = run_rounds(w, args)
                    if args.counts and counts_available(conn):
                        counts = server_counts(conn, {name: getattr(w, name) for name in MAIN}, args.counts)
                    if w.bad:
                        print(
                            f"invoke did not succeed {len(w.bad)} time(s); first receipt:\n"
                            f"{json.dumps(w.bad[0], ensure_ascii=False, indent=2)}",
                            file=sys.stderr,
                        )
                        return 1
                report = {
                    "facts": facts(setup, srv, select1_p50_ms=rtt),
                    "params": {
                        k: getattr(args, k)
                        for k in (
                            "n",
                            "rounds",
                            "chunk",
                            "warmup",
                            "tool",
                            "calls_per_task",
                            "bulk",
                            "bulk_rows",
                            "bulk_n",
                            "one_way_ms",
                            "clients",
                            "seconds",
                            "rows",
                        )
                    },
                    "rounds": results,
                    "summary": summarise(results, clients=args.clients, delay=args.one_way_ms),
                    "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                }
                if counts:
                    report["counts"] = counts | {"_n": args.counts}
        finally:
            if proxy:
                proxy.close()
    if args.json == "-":
        write_report(report, "-")
    else:
        print_report(report)
        write_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
