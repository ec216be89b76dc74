"""Benchmark: finalize_reply where the books show trouble (the database way).

bench/finalize.py times clean tasks and tasks without a step; the checks that run only when a
step failed (recognition of every clause, the recovery rule) are timed here. Per task shape
(unverified, partial) and language, --n tasks are built as bench/gate_shapes.py builds them and
each is finalized once with an honest acknowledgement (claims => NULL: the database reads the
reply); p50 of the calls after the first ten, server round trip included, in an open
autocommit session, so the COMMIT is included too. Wall clock: compare runs made in one sitting.

    python bench/finalize_troubled.py                 # embedded server in a temp dir
    python bench/finalize_troubled.py --n 300 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import gate_shapes
import psycopg
from common import bench_server

from pyagentdb import Client

REPLIES = {
    "en": "Sorry, your reminder could not be saved: the check afterwards found nothing, so I retried."
    " Want me to try again?",
    "zh": "抱歉,提醒没有保存成功,核对时没找到,我又试了一次。要我再试一次吗?",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="scratch database (default: embedded server in a temp dir)")
    parser.add_argument("--n", type=int, default=150, help="tasks per shape and language")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict = {}
    with bench_server(args.dsn, "troubled") as srv, psycopg.connect(srv.dsn, autocommit=True) as conn:
        gate_shapes.install(conn)
        client = Client(conn)
        for shape in ("unverified", "partial"):
            for lang in ("en", "zh"):
                tasks = [gate_shapes.build(client, shape, lang) for _ in range(args.n)]
                times = []
                for task in tasks:
                    start = time.perf_counter()
                    verdict = conn.execute(
                        "SELECT agentdb.finalize_reply(%s, %s, NULL)", (task, REPLIES[lang])
                    ).fetchone()[0]
                    times.append((time.perf_counter() - start) * 1000)
                    assert verdict["book_state"] == "troubled", verdict
                p50 = round(statistics.median(times[10:]), 3)
                out[f"{shape}_{lang}"] = {"n": len(times) - 10, "p50_ms": p50}
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, value in out.items():
            print(f"{key:<16} {value}")


if __name__ == "__main__":
    main()
