"""Benchmark: what the ledger costs. Watched vs unwatched inserts, and agentdb.invoke
throughput under concurrent clients with and without the change log and the hash chains.

Part 1, inserts (one connection over the server's socket):

  single   INSERT of one row, autocommit (a commit per row)
  in_tx    INSERT of one row, --in-tx statements inside one transaction (no commit in the
           timing: the per-statement cost of the triggers alone)
  bulk     one INSERT ... SELECT of --bulk-rows rows

  each against bench_unwatched (no triggers) and bench_watched (agentdb.watch); the two tables
  alternate in small chunks and the order rotates each round. Per round: rows/s of each and
  the ratio watched/plain; the report shows medians over the rounds.

Part 2, invoke throughput: --clients threads, each with its own connection and its own tasks
(opened before the timing), each making --calls invokes of add_reminder; throughput = all
invokes / wall time. Three configurations, in rotating order each round:

  bare     reminders not watched, audit chain trigger disabled (the guarded write as before
           the ledger)
  chain    reminders not watched, audit rows chained
  ledger   reminders watched (change log + its chain + guard) and audit rows chained
           (as installed)

Part 3, server-side attribution (robust to a busy client machine): with track_functions =
'all', --profile single-row inserts into the watched table in one transaction, then --profile
invokes (reminders watched): the time per call spent in each agentdb function (total and
self), from pg_stat_user_functions.

Part 4: the time agentdb.verify_audit_chain() / verify_change_chain() take over the rows
the run wrote.

Without --dsn an embedded PostgreSQL is started in a temporary data dir and deleted after.

    python bench/watch.py
    python bench/watch.py --rounds 7 --clients 1 4 8 --json bench/results/watch.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from common import bench_server, facts, load_line, print_function_times, track_functions, write_report
from psycopg.types.json import Jsonb

from pyagentdb import examples

TABLES_SQL = """
CREATE TABLE IF NOT EXISTS public.bench_unwatched (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    content text NOT NULL,
    at timestamptz NOT NULL,
    n integer
);
CREATE TABLE IF NOT EXISTS public.bench_watched (LIKE public.bench_unwatched INCLUDING ALL);
SELECT agentdb.watch('public.bench_watched');
"""
INSERT = "INSERT INTO public.{} (user_id, content, at, n) VALUES (%s, %s, now(), %s)"
BULK = ("INSERT INTO public.{} (user_id, content, at, n) "
        "SELECT 'bulk', 'row ' || g, now(), g FROM generate_series(1, %s) AS g")
INVOKE = "SELECT agentdb.invoke(%s, 'add_reminder', %s)"
USER = "bench-user"


# ---------------------------------------------------------------------------- part 1

def insert_round(conn: psycopg.Connection, args, r: int) -> dict:
    order = ["bench_unwatched", "bench_watched"]
    if r % 2:
        order.reverse()
    spent = {("single", t): 0.0 for t in order} | {("in_tx", t): 0.0 for t in order} \
        | {("bulk", t): 0.0 for t in order}
    done = {k: 0 for k in spent}
    i = 0
    while done[("single", order[0])] < args.n:
        for table in order:
            sql = INSERT.format(table)
            t0 = time.perf_counter()
            for _ in range(args.chunk):
                i += 1
                conn.execute(sql, (USER, f"c{i}", i))
            spent[("single", table)] += time.perf_counter() - t0
            done[("single", table)] += args.chunk
    for _ in range(args.tx_rounds):
        for table in order:
            sql = INSERT.format(table)
            with conn.transaction():
                t0 = time.perf_counter()
                for _ in range(args.in_tx):
                    i += 1
                    conn.execute(sql, (USER, f"c{i}", i))
                spent[("in_tx", table)] += time.perf_counter() - t0
            done[("in_tx", table)] += args.in_tx
    for _ in range(args.bulk_n):
        for table in order:
            t0 = time.perf_counter()
            conn.execute(BULK.format(table), (args.bulk_rows,))
            spent[("bulk", table)] += time.perf_counter() - t0
            done[("bulk", table)] += args.bulk_rows
    out: dict = {}
    for kind in ("single", "in_tx", "bulk"):
        plain = done[(kind, "bench_unwatched")] / spent[(kind, "bench_unwatched")]
        watched = done[(kind, "bench_watched")] / spent[(kind, "bench_watched")]
        out[kind] = {"plain_rows_per_s": plain, "watched_rows_per_s": watched,
                     "watched_over_plain": watched / plain,
                     "extra_us_per_row": (1 / watched - 1 / plain) * 1e6}
    return out


# ---------------------------------------------------------------------------- part 2

def configure(conn: psycopg.Connection, config: str) -> None:
    if config == "ledger":
        conn.execute("SELECT agentdb.watch('public.reminders')")
    else:
        conn.execute("SELECT agentdb.unwatch('public.reminders')")
    trigger = "DISABLE" if config == "bare" else "ENABLE"
    conn.execute(f"ALTER TABLE agentdb_private.audit {trigger} TRIGGER audit_chain")


def invoke_run(dsn: str, clients: int, calls: int, calls_per_task: int, run: str) -> dict:
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(clients)]
    base = datetime(2031, 1, 1, tzinfo=UTC)
    try:
        tasks = []
        for c in conns:
            tasks.append([c.execute("SELECT agentdb.begin_task(%s, %s, 'bench', authenticated => true)",
                                    (USER, f"bench-{run}")).fetchone()[0]
                          for _ in range(-(-calls // calls_per_task))])
        barrier = threading.Barrier(clients + 1)
        bad: list = []
        ends: list[float] = []

        def client(k: int) -> None:
            conn = conns[k]
            barrier.wait()
            for i in range(calls):
                args = Jsonb({"content": f"{run}-{k}-{i}",
                              "remind_at": (base + timedelta(minutes=i)).isoformat()})
                receipt = conn.execute(INVOKE, (tasks[k][i // calls_per_task], args)).fetchone()[0]
                if not (receipt["outcome"] == "success" and receipt["verified"]):
                    bad.append(receipt)
            ends.append(time.perf_counter())

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = max(ends) - t0
    finally:
        for c in conns:
            c.close()
    if bad:
        raise RuntimeError(f"{len(bad)} invoke(s) did not succeed; first: {bad[0]}")
    return {"invokes_per_s": clients * calls / wall, "wall_s": wall}


# ---------------------------------------------------------------------------- part 3

def profile(conn: psycopg.Connection, dsn: str, n: int) -> dict:
    out: dict = {}
    configure(conn, "ledger")
    with track_functions(conn) as times:
        with conn.transaction():
            for i in range(n):
                conn.execute(INSERT.format("bench_watched"), (USER, f"p{i}", i))
        out["insert_in_tx"] = times(n)
        base = datetime(2032, 1, 1, tzinfo=UTC)
        task = None
        for i in range(n):
            if i % 10 == 0:
                task = conn.execute("SELECT agentdb.begin_task(%s, 'profile', 'bench', "
                                    "authenticated => true)", (USER,)).fetchone()[0]
            args = Jsonb({"content": f"profile {i}", "remind_at": (base + timedelta(minutes=i)).isoformat()})
            receipt = conn.execute(INVOKE, (task, args)).fetchone()[0]
            assert receipt["outcome"] == "success", receipt
        # begin_task ran inside the window too; print_function_times leaves it out
        out["invoke"] = times(n)
    return out


# ---------------------------------------------------------------------------- the run

def med(values: list[float]) -> float:
    return statistics.median(values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="a scratch database (default: embedded server in a temp dir)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1000, help="single-row autocommit inserts per table per round")
    ap.add_argument("--chunk", type=int, default=50)
    ap.add_argument("--in-tx", type=int, default=500, help="single-row inserts per transaction")
    ap.add_argument("--tx-rounds", type=int, default=2, help="such transactions per table per round")
    ap.add_argument("--bulk-rows", type=int, default=10000)
    ap.add_argument("--bulk-n", type=int, default=3, help="bulk inserts per table per round")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--calls", type=int, default=150, help="invokes per client per run")
    ap.add_argument("--calls-per-task", type=int, default=10)
    ap.add_argument("--profile", type=int, default=500, metavar="N", help="calls to attribute (0: skip)")
    ap.add_argument("--skip-inserts", action="store_true")
    ap.add_argument("--skip-invoke", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write the full report as JSON")
    args = ap.parse_args(argv)

    report: dict = {"params": vars(args) | {"dsn": None}}
    with bench_server(args.dsn, "watch") as srv:
        dsn = srv.dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            examples.install_reminders(conn)
            conn.execute(TABLES_SQL)
            conn.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (USER,))
            report["facts"] = facts(conn, srv)

            if not args.skip_inserts:
                insert_round(conn, argparse.Namespace(**{**vars(args), "n": 200, "tx_rounds": 1,
                                                         "bulk_n": 1}), 0)  # warm-up
                rounds = [insert_round(conn, args, r) for r in range(args.rounds)]
                report["inserts"] = {"rounds": rounds, "median": {
                    kind: {k: med([r[kind][k] for r in rounds]) for k in rounds[0][kind]}
                    for kind in rounds[0]}}

            if not args.skip_invoke:
                configs = ["bare", "chain", "ledger"]
                results: dict = {}
                run = uuid.uuid4().hex[:6]
                for clients in args.clients:
                    configure(conn, "ledger")
                    invoke_run(dsn, clients, min(args.calls, 30), args.calls_per_task, f"{run}w{clients}")
                    per: dict = {c: [] for c in configs}
                    for r in range(args.rounds):
                        order = configs[r % 3:] + configs[:r % 3]
                        for config in order:
                            configure(conn, config)
                            per[config].append(invoke_run(dsn, clients, args.calls, args.calls_per_task,
                                                          f"{run}-{clients}-{r}-{config}"))
                    configure(conn, "ledger")
                    def ratio(config: str, per: dict = per) -> float:
                        return med([per[config][i]["invokes_per_s"] / per["bare"][i]["invokes_per_s"]
                                    for i in range(args.rounds)])

                    results[str(clients)] = {
                        "median_invokes_per_s": {c: med([x["invokes_per_s"] for x in per[c]])
                                                 for c in configs},
                        "ledger_over_bare": ratio("ledger"),
                        "chain_over_bare": ratio("chain"),
                        "rounds": per,
                    }
                report["invoke"] = results

            if args.profile:
                report["profile"] = profile(conn, dsn, args.profile)

            verify: dict = {}
            for fn, table in (("verify_audit_chain", "audit"), ("verify_change_chain", "change_log")):
                rows = conn.execute(f"SELECT count(*) FROM agentdb_private.{table} "
                                    "WHERE chain_seq IS NOT NULL").fetchone()[0]
                t0 = time.perf_counter()
                first = conn.execute(f"SELECT agentdb.{fn}()").fetchone()[0]
                verify[fn] = {"rows": rows, "seconds": time.perf_counter() - t0, "first_break": first}
            report["verify"] = verify

    print_report(report)
    write_report(report, args.json)
    return 0


def print_report(report: dict) -> None:
    f = report["facts"]
    print(f"PostgreSQL {f['server_version']} ({f['server']}), {load_line(f)}, fsync={f['fsync']}, "
          f"synchronous_commit={f['synchronous_commit']}, commit {f['git_commit']}")
    if "inserts" in report:
        print(f"\ninserts, median of {len(report['inserts']['rounds'])} rounds:")
        print(f"  {'workload':<8} {'plain rows/s':>14} {'watched rows/s':>15} {'watched/plain':>14} "
              f"{'extra us/row':>13}")
        for kind, m in report["inserts"]["median"].items():
            print(f"  {kind:<8} {m['plain_rows_per_s']:>14,.0f} {m['watched_rows_per_s']:>15,.0f} "
                  f"{m['watched_over_plain']:>14.2f} {m['extra_us_per_row']:>13.1f}")
    if "invoke" in report:
        print("\ninvoke throughput (invokes/s, median of rounds; ratios are medians of per-round ratios):")
        print(f"  {'clients':>7} {'bare':>9} {'chain':>9} {'ledger':>9} {'chain/bare':>11} "
              f"{'ledger/bare':>12}")
        for clients, x in report["invoke"].items():
            m = x["median_invokes_per_s"]
            print(f"  {clients:>7} {m['bare']:>9,.0f} {m['chain']:>9,.0f} {m['ledger']:>9,.0f} "
                  f"{x['chain_over_bare']:>11.2f} {x['ledger_over_bare']:>12.2f}")
    if "profile" in report:
        for name, rows in report["profile"].items():
            print_function_times(f"server time per {name.replace('_', ' ')}", rows)
    print("\nverification:")
    for fn, v in report["verify"].items():
        print(f"  agentdb.{fn}() over {v['rows']:,} chained rows: {v['seconds'] * 1000:.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
