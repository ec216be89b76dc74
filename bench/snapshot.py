"""Benchmark: agentdb.snapshot + agentdb.diff on a large table, against a plain count(*) of
the same table in the same run.

The table (--rows, default 1 M) has a bigint key, two texts, a numeric, a timestamptz and a
text that is NULL in one row of seven. Each round, on a warm cache:

  count        SELECT count(*) FROM the table
  snapshot     agentdb.snapshot(ARRAY[table]) before the change
  (change)     update --changes rows, insert and delete --changes/10 each   (not timed)
  snapshot'    agentdb.snapshot(ARRAY[table]) after the change
  diff         agentdb.diff(before, after)     (--changes changed rows to list)
  diff_same    agentdb.diff(after, after)      (checksums equal: nothing to list)

"watched": the table is watched, so a snapshot keeps only the count and the checksum, and
the diff reads the rows from the change log. "stored" (--stored): the table is not watched,
so each snapshot also copies every row (key, hash, values) and the diff compares the copies;
it is much slower and runs --stored-rounds rounds.

Reported: the median of each timing over the rounds, and the ratios (medians of per-round
ratios) snapshot/count, (snapshot + diff)/count and (2 snapshots + diff)/count. The aim is
snapshot + diff within 3x of count(*).

Without --dsn an embedded PostgreSQL is started in a temporary data dir and deleted after.

    python bench/snapshot.py
    python bench/snapshot.py --rows 1000000 --rounds 7 --stored --json bench/results/snapshot.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg
from common import bench_server, facts, load_line, write_report

TABLE_SQL = """
DROP TABLE IF EXISTS public.{t};
CREATE TABLE public.{t} (
    id bigint PRIMARY KEY,
    user_id text NOT NULL,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL,
    created_at timestamptz NOT NULL,
    note text
);
INSERT INTO public.{t}
SELECT g, 'user' || (g %% 1000), (g %% 10000) / 100.0,
       CASE WHEN g %% 3 = 0 THEN 'paid' ELSE 'open' END,
       timestamptz '2030-01-01 00:00+00' - g * interval '1 minute',
       CASE WHEN g %% 7 = 0 THEN NULL ELSE 'note ' || g END
  FROM generate_series(1, %(rows)s) AS g;
VACUUM ANALYZE public.{t};
"""


def timed(conn: psycopg.Connection, sql: str, params=()) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = conn.execute(sql, params).fetchone()[0]
    return (time.perf_counter() - t0) * 1000, value


def one_round(conn: psycopg.Connection, table: str, rows: int, changes: int, r: int) -> dict:
    out: dict = {}
    out["count_ms"], n = timed(conn, f"SELECT count(*) FROM public.{table}")
    snapshot = "SELECT agentdb.snapshot(%s::regclass[])"
    out["snapshot_ms"], before = timed(conn, snapshot, ([f"public.{table}"],))
    # The change: --changes updated rows spread over the table, plus inserts and deletes.
    step = max(1, rows // changes)
    conn.execute(f"UPDATE public.{table} SET status = 'round {r}' WHERE id %% %s = %s AND id <= %s",
                 (step, r % step, step * changes))
    few = max(1, changes // 10)
    conn.execute(f"""INSERT INTO public.{table}
                     SELECT %s + g, 'new', 1, 'new', now(), NULL FROM generate_series(1, %s) AS g""",
                 (rows * (r + 10), few))
    conn.execute(f"DELETE FROM public.{table} WHERE id IN (SELECT id FROM public.{table} "
                 f"WHERE id %% %s = %s AND id <= %s LIMIT %s)", (step, (r + 1) % step, step * changes, few))
    out["snapshot2_ms"], after = timed(conn, snapshot, ([f"public.{table}"],))
    out["diff_ms"], found = timed(conn, "SELECT agentdb.diff(%s, %s)", (before, after))
    out["diff_same_ms"], same = timed(conn, "SELECT agentdb.diff(%s, %s)", (after, after))
    assert same == [], same
    (d,) = found
    out["listed"] = {"added": len(d["added"]), "removed": len(d["removed"]), "changed": len(d["changed"]),
                     "complete": d["complete"], "source": d["source"]}
    assert d["complete"] is True and len(d["added"]) == few and len(d["removed"]) == few, out["listed"]
    out["rows"] = n
    conn.execute("SELECT agentdb.forget_snapshot(%s), agentdb.forget_snapshot(%s)", (before, after))
    return out


def summarise(rounds: list[dict]) -> dict:
    def med(f) -> float:
        return statistics.median(f(x) for x in rounds)

    return {
        "count_ms": med(lambda x: x["count_ms"]),
        "snapshot_ms": med(lambda x: (x["snapshot_ms"] + x["snapshot2_ms"]) / 2),
        "diff_ms": med(lambda x: x["diff_ms"]),
        "diff_unchanged_ms": med(lambda x: x["diff_same_ms"]),
        "snapshot_over_count": med(lambda x: x["snapshot2_ms"] / x["count_ms"]),
        "snapshot_plus_diff_over_count": med(lambda x: (x["snapshot2_ms"] + x["diff_ms"]) / x["count_ms"]),
        "two_snapshots_plus_diff_over_count": med(
            lambda x: (x["snapshot_ms"] + x["snapshot2_ms"] + x["diff_ms"]) / x["count_ms"]),
        "changed_listed": rounds[0]["listed"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="a scratch database (default: embedded server in a temp dir)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=1000, help="rows updated between the snapshots")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stored", action="store_true", help="also time an unwatched (row-copying) table")
    ap.add_argument("--stored-rounds", type=int, default=2)
    ap.add_argument("--json", metavar="FILE", help="also write the full report as JSON")
    args = ap.parse_args(argv)

    report: dict = {"params": vars(args) | {"dsn": None}}
    with bench_server(args.dsn, "snapshot") as srv, srv.connect() as conn:
        settings = {k: conn.execute("SELECT current_setting(%s)", (k,)).fetchone()[0]
                    for k in ("max_parallel_workers_per_gather", "work_mem")}
        report["facts"] = facts(conn, srv, **settings)
        kinds = [("watched", "bench_ledger_watched", args.rounds)]
        if args.stored:
            kinds.append(("stored", "bench_ledger_stored", args.stored_rounds))
        for kind, table, rounds in kinds:
            t0 = time.perf_counter()
            for stmt in TABLE_SQL.format(t=table).split(";\n"):
                if stmt.strip():
                    conn.execute(stmt, {"rows": args.rows} if "%(rows)s" in stmt else None)
            if kind == "watched":
                conn.execute("SELECT agentdb.watch(%s::regclass)", (f"public.{table}",))
            load_s = time.perf_counter() - t0
            for _ in range(3):  # warm the cache
                conn.execute(f"SELECT count(*) FROM public.{table}").fetchone()
            results = [one_round(conn, table, args.rows, args.changes, r) for r in range(rounds)]
            report[kind] = {"load_s": load_s, "rounds": results, "summary": summarise(results)}
            conn.execute(f"DROP TABLE public.{table}")

    print_report(report)
    write_report(report, args.json)
    return 0


def print_report(report: dict) -> None:
    f, p = report["facts"], report["params"]
    print(f"PostgreSQL {f['server_version']} ({f['server']}), {load_line(f)}, "
          f"max_parallel_workers_per_gather={f['max_parallel_workers_per_gather']}, commit {f['git_commit']}")
    print(f"{p['rows']:,} rows, {p['changes']:,} rows updated (+{max(1, p['changes'] // 10)} inserted, "
          f"+{max(1, p['changes'] // 10)} deleted) between snapshots; medians of rounds")
    print(f"  {'table':<8} {'count ms':>9} {'snapshot ms':>12} {'diff ms':>8} {'diff same':>10} "
          f"{'snap/count':>11} {'(snap+diff)/count':>18} {'(2 snap+diff)/count':>20}")
    for kind in ("watched", "stored"):
        if kind not in report:
            continue
        s = report[kind]["summary"]
        print(f"  {kind:<8} {s['count_ms']:>9.1f} {s['snapshot_ms']:>12.1f} {s['diff_ms']:>8.1f} "
              f"{s['diff_unchanged_ms']:>10.1f} {s['snapshot_over_count']:>11.2f} "
              f"{s['snapshot_plus_diff_over_count']:>18.2f} {s['two_snapshots_plus_diff_over_count']:>20.2f}")


if __name__ == "__main__":
    sys.exit(main())
