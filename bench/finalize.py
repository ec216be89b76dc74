"""Benchmark: latency of agentdb.finalize_reply with a large audit table present.

Fills agentdb_private.audit with --audit-rows rows (default 1,000,000; inserted
directly as the owner, which the append-only trigger allows), then for each
measured call opens a task, invokes one write and calls finalize_reply with a
reply that claims it (half zh, half en; every fourth a lie on a task with no
step, so both verdicts are measured). Pairs of calls rotate through three ways of
finding the reply's claims:

  detected   claims NULL: the database detects them (agentdb.detect_claims)
  runtime    what pyagentdb.Gate does: pyagentdb.detect_claims finds them here and
             passes them with the patterns' fingerprint (the Python detection is timed too)
  declared   the runtime declares [{"kind": "create"}]

Only the gate's work is timed, server round trip included; its COMMIT (the WAL
flush, which any durable write pays) is timed apart and reported as
finalize_reply_with_commit. Reports p50/p90/p99 per way, per language, per verdict
and overall, and for agentdb.detect_claims alone.

Then, since wall clock on a shared machine says little, counts that depend less on load, per
way, each way on a backend of its own and the calls interleaved (--count-calls per way): the
backend's CPU time per call (/proc/<pid>/schedstat, when the server runs on this machine), and
the statements it ran per call, nested ones included (when pg_stat_statements is loaded with
pg_stat_statements.track = all). The machine's load average is reported with the figures.

    python bench/finalize.py                     # embedded server in a temp dir
    python bench/finalize.py --audit-rows 200000 --n 600 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
from psycopg.types.json import Jsonb

from pyagentdb import examples, install, resources
from pyagentdb.claims import read_reply

WAYS = ("detected", "runtime", "declared")

REPLIES = {
    "zh": "好的,已为您设置明天早上8点的提醒,记得带上购物袋。还有别的需要吗?",
    "en": "Sure — I've set a reminder for 8am tomorrow. Anything else I can help with?",
}


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 4),
        "p90_ms": round(pick(0.90), 4),
        "p99_ms": round(pick(0.99), 4),
    }


def fill_audit(conn: psycopg.Connection, rows: int) -> int:
    have = conn.execute("SELECT count(*) FROM agentdb_private.audit").fetchone()[0]
    if have < rows:
        conn.execute(
            "INSERT INTO agentdb_private.audit"
            " (task_id, user_id, tool, action, target, status, outcome, detail)"
            " SELECT gen_random_uuid(), 'filler-' || (g %% 5000), 'add_reminder', 'insert',"
            " 'public.reminders', CASE WHEN g %% 7 = 0 THEN 'FAILED' ELSE 'SUCCESS' END, 'success', 'filler'"
            " FROM generate_series(1, %s) AS g",
            (rows - have,),
        )
        conn.execute("VACUUM ANALYZE agentdb_private.audit")
    return conn.execute("SELECT count(*) FROM agentdb_private.audit").fetchone()[0]


def claims_for(way: str, lang: str, fingerprint: str):
    """The claims argument of one way (the runtime's Python reading is done here, timed)."""
    if way == "declared":
        return Jsonb([{"kind": "create"}])
    if way == "runtime":
        reading = read_reply(REPLIES[lang])
        return Jsonb({"patterns": fingerprint, **{k: reading[k] for k in ("claims", "clauses", "facts")}})
    return None


def _backend_cpu_ns(pid: int) -> int | None:
    """CPU time a local backend has used (ns), or None when it is not on this machine."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def counts(dsn: str, n: int, at_eight: str, fingerprint: str) -> dict:
    """Per way: backend CPU ms per call and statements per call, calls interleaved across ways."""
    conns = {way: psycopg.connect(dsn, autocommit=True) for way in WAYS}
    setup = psycopg.connect(dsn, autocommit=True)
    try:
        tracked = setup.execute(
            "SELECT count(*) = 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
        ).fetchone()[0] and setup.execute("SHOW pg_stat_statements.track").fetchone()[0] == "all"
        tasks = {way: [] for way in WAYS}
        extra = min(n, 100) if tracked else 0
        for way in WAYS:
            for i in range(n + 4 + extra):
                lang = "zh" if i % 2 else "en"
                task = setup.execute(
                    "SELECT agentdb.begin_task('bench', 'k-' || %s, 'remind', authenticated => true,"
                    " lang => %s, time_zone => 'Asia/Shanghai')",
                    (i, lang),
                ).fetchone()[0]
                if i % 4 != 3:
                    args = {"content": f"count {way} {i} {time.time()}", "remind_at": at_eight}
                    setup.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s)", (task, Jsonb(args)))
                tasks[way].append((task, lang))

        def call(way: str, task, lang: str) -> None:
            claims = claims_for(way, lang, fingerprint)
            conns[way].execute(
                "SELECT agentdb.finalize_reply(%s, %s, %s)", (task, REPLIES[lang], claims)
            ).fetchone()

        for way in WAYS:  # warm: plans and compiled regexes of each backend
            for task, lang in tasks[way][:4]:
                call(way, task, lang)
        pids = {way: conns[way].execute("SELECT pg_backend_pid()").fetchone()[0] for way in WAYS}
        before = {way: _backend_cpu_ns(pids[way]) for way in WAYS}
        if tracked:
            setup.execute("SELECT pg_stat_statements_reset()")
        for i in range(n):
            for way in WAYS:
                call(way, *tasks[way][4 + i])
        out: dict = {"calls_per_way": n, "load_average": [round(x, 2) for x in os.getloadavg()]}
        for way in WAYS:
            after = _backend_cpu_ns(pids[way])
            out[f"backend_cpu_ms_per_call_{way}"] = (
                None if before[way] is None or after is None else round((after - before[way]) / n / 1e6, 4)
            )
        if tracked:
            # pg_stat_statements does not keep backends apart: each way is counted in a run of its own.
            for way in WAYS:
                rest = tasks[way][4 + n :]
                setup.execute("SELECT pg_stat_statements_reset()")
                for task, lang in rest:
                    call(way, task, lang)
                total = setup.execute(
                    "SELECT sum(calls) FROM pg_stat_statements WHERE query NOT LIKE '%%pg_stat_statements%%'"
                ).fetchone()[0]
                out[f"statements_per_call_{way}"] = round(float(total) / len(rest), 1)
        return out
    finally:
        for c in conns.values():
            c.close()
        setup.close()


def run(dsn: str, audit_rows: int, n: int, count_calls: int = 200) -> dict:
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        examples.install_reminders(conn)
        conn.execute("SELECT agentdb.grant_permission('bench', 'WRITE')")
        total_audit = fill_audit(conn, audit_rows)
        # The replies say "tomorrow at 8am": the reminders are written then, in the users' zone.
        zone = ZoneInfo("Asia/Shanghai")
        tomorrow = datetime.now(zone).date() + timedelta(days=1)
        at_eight = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 8, tzinfo=zone).isoformat()
        fingerprint = conn.execute(
            "SELECT agentdb.claim_patterns_fingerprint(%s::jsonb)", (resources.claim_patterns_text(),)
        ).fetchone()[0]
        assert fingerprint, "the database's claim patterns are not this package's"
        timings: dict[str, list[float]] = {
            "deliver": [],
            "replace": [],
            "detect_claims": [],
            "with_commit": [],
        }
        for way in WAYS:
            timings[way] = []
            for code in REPLIES:
                timings[f"{way}_{code}"] = []
        for i in range(n):
            lang = "zh" if i % 2 else "en"
            task = conn.execute(
                "SELECT agentdb.begin_task('bench', 'c-' || %s, 'remind', authenticated => true, lang => %s,"
                " time_zone => 'Asia/Shanghai')",
                (i, lang),
            ).fetchone()[0]
            lie = i % 4 == 3
            if not lie:
                args = {"content": f"bench {i} {tomorrow}", "remind_at": at_eight}
                conn.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s)", (task, Jsonb(args)))
            way = WAYS[(i // 2) % len(WAYS)]
            # Timed apart: the call inside an open transaction, then its COMMIT (the WAL flush).
            conn.execute("BEGIN")
            start = time.perf_counter()
            claims = claims_for(way, lang, fingerprint)
            verdict = conn.execute(
                "SELECT agentdb.finalize_reply(%s, %s, %s)", (task, REPLIES[lang], claims)
            ).fetchone()[0]
            elapsed = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            conn.execute("COMMIT")
            commit = (time.perf_counter() - start) * 1000
            assert verdict["verdict"] == ("replace" if lie else "deliver"), verdict
            assert verdict["claims_from"] == {"runtime": "runtime", "detected": "database"}.get(way, way)
            timings[verdict["verdict"]].append(elapsed)
            timings[way].append(elapsed)
            timings[f"{way}_{lang}"].append(elapsed)
            timings["with_commit"].append(elapsed + commit)
            start = time.perf_counter()
            conn.execute("SELECT agentdb.detect_claims(%s)", (REPLIES[lang],)).fetchone()
            timings["detect_claims"].append((time.perf_counter() - start) * 1000)
        version = conn.execute("SHOW server_version").fetchone()[0]
    load = [round(x, 2) for x in os.getloadavg()]
    counted = counts(dsn, count_calls, at_eight, fingerprint) if count_calls > 0 else {}
    overall = timings["deliver"] + timings["replace"]
    result = {
        "server_version": version,
        "audit_rows": total_audit,
        "finalize_reply": percentiles(overall),
        "deliver": percentiles(timings["deliver"]),
        "replace": percentiles(timings["replace"]),
        "detect_claims": percentiles(timings["detect_claims"]),
        "finalize_reply_with_commit": percentiles(timings["with_commit"]),
        "target_p50_ms": 0.5,
        "load_average": load,
        "counts": counted,
    }
    for way in WAYS:
        result[f"finalize_reply_{way}"] = percentiles(timings[way])
        for code in REPLIES:
            result[f"finalize_reply_{way}_{code}"] = percentiles(timings[f"{way}_{code}"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="scratch database (default: embedded server in a temp dir)")
    parser.add_argument("--audit-rows", type=int, default=1_000_000)
    parser.add_argument("--n", type=int, default=1000, help="measured finalize_reply calls")
    parser.add_argument(
        "--count-calls", type=int, default=200, help="calls per way for the CPU and statement counts"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dsn = args.dsn
    if not dsn:
        from pyagentdb.server import _quiet_import_embedded

        # cleanup_mode "delete": the server is stopped and its temp dir removed at exit.
        server = _quiet_import_embedded().get_server(
            tempfile.mkdtemp(prefix="pyagentdb-bench-") + "/pg", cleanup_mode="delete"
        )
        dsn = server.get_uri()
    result = run(dsn, args.audit_rows, args.n, args.count_calls)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"PostgreSQL {result['server_version']}, {result['audit_rows']:,} audit rows")
    names = ["finalize_reply"]
    for way in WAYS:
        names += [f"finalize_reply_{way}", *(f"finalize_reply_{way}_{code}" for code in REPLIES)]
    for name in [*names, "deliver", "replace", "detect_claims", "finalize_reply_with_commit"]:
        r = result[name]
        print(
            f"{name:30} n={r['n']:5}  p50 {r['p50_ms']:.3f} ms"
            f"  p90 {r['p90_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms"
        )
    for name in ["finalize_reply", *(f"finalize_reply_{way}" for way in WAYS)]:
        met = "met" if result[name]["p50_ms"] < result["target_p50_ms"] else "NOT met"
        print(f"target p50 < {result['target_p50_ms']} ms, {name}: {met}")
    print(f"load average at the end of the timed calls: {result['load_average']}")
    counted = result["counts"]
    if counted:
        print(f"counts, {counted['calls_per_way']} calls per way (load {counted['load_average']}):")
        base = counted.get("backend_cpu_ms_per_call_declared")
        for way in WAYS:
            cpu = counted.get(f"backend_cpu_ms_per_call_{way}")
            ratio = f" ({cpu / base:.2f} x declared)" if cpu is not None and base else ""
            stmts = counted.get(f"statements_per_call_{way}")
            print(
                f"  {way:9} backend CPU {'-' if cpu is None else f'{cpu:.3f} ms'} per call{ratio}"
                + ("" if stmts is None else f", {stmts} statements per call")
            )


if __name__ == "__main__":
    main()
