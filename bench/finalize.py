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

    python bench/finalize.py                     # embedded server in a temp dir
    python bench/finalize.py --audit-rows 200000 --n 600 --json
"""

from __future__ import annotations

import argparse
import json
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


def run(dsn: str, audit_rows: int, n: int) -> dict:
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
            if way == "declared":
                claims = Jsonb([{"kind": "create"}])
            elif way == "runtime":
                reading = read_reply(REPLIES[lang])
                sent = {k: reading[k] for k in ("claims", "clauses", "facts")}
                claims = Jsonb({"patterns": fingerprint, **sent})
            else:
                claims = None
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
    result = run(dsn, args.audit_rows, args.n)
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


if __name__ == "__main__":
    main()
