"""Benchmark: agentdb.invoke_for on a Citus cluster (through its coordinator) against one node.

For each target (--dsn: a database on a Citus coordinator with its workers registered;
--single-dsn: a database on one plain PostgreSQL) and each client count (--clients 1,8,32),
every client has its own connection and its own user (so the clients are spread over the
tenants, and over the workers), and runs, in rounds:

  raw     INSERT INTO public.reminders (user_id, content, remind_at) ... RETURNING *
  invoke  SELECT agentdb.invoke_for(user_id => ..., task => ..., tool => 'add_reminder', args => ...)
          (the user_id-first form: on Citus one statement, delegated to the user's worker)

for --seconds each, alternating. Reported per target and client count: calls/s, p50/p99 of
each call, invoke/raw ratios within the same run, and the server CPU per call summed over the
nodes (--data-dirs: the data directories of the target's nodes on this machine; user+system
time of their processes, read from /proc), which does not depend on the machine's load the
way latencies do.

    python bench/scaling.py --dsn postgresql://postgres@127.0.0.1:9700/bench_citus \\
        --data-dirs /work/citus-local/coord,/work/citus-local/worker1,/work/citus-local/worker2 \\
        --single-dsn postgresql://postgres@127.0.0.1:9700/bench_single \\
        --single-data-dirs /work/citus-local/coord --clients 1,8,32 --json out.json

Each database is prepared on first use: agentdb installed, the reminders table (keyed by its
owner, as docs/scaling.md says), its tool, and on Citus `pyagentdb distribute` with the table.
All nodes of a local cluster share this machine's CPUs: the figures show the coordinator hop's
cost and the work per call, not the throughput two real workers would add.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
from common import load_line, machine, pct, write_report
from psycopg.types.json import Jsonb

from pyagentdb import distribute, install

REMINDERS = """
CREATE TABLE IF NOT EXISTS public.reminders (
    id bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL,
    content text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 500),
    remind_at timestamptz NOT NULL,
    done boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_id, id)
);
CREATE INDEX IF NOT EXISTS reminders_owner_time_idx ON public.reminders (user_id, remind_at);
"""
TOOL = """SELECT agentdb.register_tool(
    name => 'add_reminder', action => 'insert', target => 'public.reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder', owner_column => 'user_id',
    dedup_columns => ARRAY['content', 'remind_at'])"""
RAW = "INSERT INTO public.reminders (user_id, content, remind_at) VALUES (%s, %s, %s) RETURNING *"
INVOKE = "SELECT agentdb.invoke_for(user_id => %s, task => %s, tool => 'add_reminder', args => %s)"
CALLS_PER_TASK = 20


def prepare(dsn: str) -> str:
    """Install, create the table and its tool (distributed on Citus); 'citus' or 'single'."""
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        on_citus = distribute.cluster(conn)["citus"] is not None
        conn.execute(REMINDERS)
        if on_citus and not distribute.cluster(conn)["distributed"]:
            distribute.distribute(dsn, ["public.reminders:user_id"])
        if on_citus:
            conn.execute("SET citus.enable_unsafe_triggers TO on")
        tools = conn.execute("SELECT count(*) FROM agentdb_private.tools WHERE name = 'add_reminder'")
        if not tools.fetchone()[0]:
            conn.execute(TOOL)
    return "citus" if on_citus else "single"


def server_cpu(data_dirs: list[str]) -> float | None:
    """CPU seconds used so far by the servers of these data directories: their live processes
    and what each postmaster collected from children that exited."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        masters = {int(Path(d, "postmaster.pid").read_text().split()[0]) for d in data_dirs}
    except (OSError, ValueError, IndexError):
        return None
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        own, children = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        if int(entry) in masters:
            total += own + children
        elif int(fields[1]) in masters:
            total += own
    return total / tick


def run(dsn: str, clients: int, seconds: float, workload: str, data_dirs: list[str]) -> dict:
    """`clients` threads, one user each, `workload` for `seconds`: calls/s, p50/p99, CPU/call."""
    run_id = uuid.uuid4().hex[:6]
    conns, users = [], []
    for k in range(clients):
        conn = psycopg.connect(dsn, autocommit=True)
        user = f"bench-{run_id}-{k}"
        conn.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (user,))
        conns.append(conn)
        users.append(user)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start = threading.Barrier(clients + 1)

    def client(k: int) -> None:
        conn, user, mine = conns[k], users[k], latencies[k]
        task = None
        start.wait()
        stop = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < stop:
            if workload == "invoke" and n % CALLS_PER_TASK == 0:  # outside the timing
                task = conn.execute("SELECT agentdb.begin_task(%s, 'bench', 'b', authenticated => true)",
                                    (user,)).fetchone()[0]
            content, at = f"r{n}", "2030-01-01 08:00+00"
            t0 = time.perf_counter()
            if workload == "raw":
                conn.execute(RAW, (user, content, at)).fetchone()
            else:
                args = Jsonb({"content": content, "remind_at": at})
                r = conn.execute(INVOKE, (user, task, args)).fetchone()[0]
                if r["outcome"] != "success":
                    errors.append(r["outcome"])
            mine.append(time.perf_counter() - t0)
            n += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    cpu0 = server_cpu(data_dirs)
    wall0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall0
    cpu1 = server_cpu(data_dirs)
    for conn in conns:
        conn.close()
    flat = [x for mine in latencies for x in mine]
    calls = len(flat)
    return {"calls": calls, "per_s": round(calls / wall, 1), "p50_ms": round(1000 * pct(flat, 50), 3),
            "p99_ms": round(1000 * pct(flat, 99), 3), "errors": len(errors),
            "server_cpu_ms_per_call": None if cpu0 is None or cpu1 is None
            else round(1000 * (cpu1 - cpu0) / max(calls, 1), 3)}


def median_of(rounds: list[dict]) -> dict:
    keys = ("per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_call")
    out = {k: (round(statistics.median(r[k] for r in rounds), 3)
               if all(r[k] is not None for r in rounds) else None) for k in keys}
    out["calls"] = sum(r["calls"] for r in rounds)
    out["errors"] = sum(r["errors"] for r in rounds)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", required=True, help="a database on a Citus coordinator (workers registered)")
    ap.add_argument("--data-dirs", default="", help="comma-separated data directories of the cluster's nodes")
    ap.add_argument("--single-dsn", help="a database on one plain PostgreSQL, for comparison")
    ap.add_argument("--single-data-dirs", default="", help="its data directory")
    ap.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per workload per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the report here ('-': stdout)")
    args = ap.parse_args(argv)

    targets = [("citus", args.dsn, [d for d in args.data_dirs.split(",") if d])]
    if args.single_dsn:
        targets.append(("single", args.single_dsn, [d for d in args.single_data_dirs.split(",") if d]))
    report: dict = {"facts": machine() | {"seconds": args.seconds, "rounds": args.rounds}, "results": []}
    for name, dsn, dirs in targets:
        kind = prepare(dsn)
        if kind != name:
            print(f"{name} target {dsn} is a {kind} server", file=sys.stderr)
            return 2
        with psycopg.connect(dsn, autocommit=True) as conn:
            version = conn.execute("SELECT version()").fetchone()[0]
            citus = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()
        report["facts"][name] = {"server": version.split(" on ")[0], "citus": citus[0] if citus else None}
        for clients in [int(c) for c in args.clients.split(",")]:
            rounds: dict[str, list[dict]] = {"raw": [], "invoke": []}
            for r in range(args.rounds):
                order = ("raw", "invoke") if r % 2 == 0 else ("invoke", "raw")
                for workload in order:
                    rounds[workload].append(run(dsn, clients, args.seconds, workload, dirs))
            row = {"target": name, "clients": clients,
                   "raw": median_of(rounds["raw"]), "invoke": median_of(rounds["invoke"])}
            row["invoke_p50_over_raw"] = round(statistics.median(
                i["p50_ms"] / w["p50_ms"] for i, w in zip(rounds["invoke"], rounds["raw"], strict=True)), 2)
            report["results"].append(row)
            i = row["invoke"]
            print(f"{name:6} {clients:3} clients  invoke {i['per_s']:8.1f}/s p50 {i['p50_ms']:7.2f} ms "
                  f"p99 {i['p99_ms']:7.2f} ms cpu/call {i['server_cpu_ms_per_call']} ms  "
                  f"raw {row['raw']['per_s']:8.1f}/s p50 {row['raw']['p50_ms']:6.2f} ms  "
                  f"p50 ratio {row['invoke_p50_over_raw']}  errors {i['errors']}", flush=True)
    report["facts"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(load_line(report["facts"]), file=sys.stderr)
    write_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
