"""Benchmark: instructions per agentdb.finalize_reply call, per way, counted by callgrind.

Wall clock on a shared machine says little; instructions do not depend on load. This
prepares a scratch cluster (the embedded server, in a temp dir): installs, registers the
reminders example and opens --calls + 8 tasks per way (a verified reminder each, every fourth
task without a step: a lie, replaced), with the bench's two replies (bench/finalize.py).
It then stops the server and, per way, runs a single-user backend under valgrind's callgrind
twice, once finalizing 8 tasks and once 8 + --calls other tasks; the difference divided by
--calls is the instructions of one call (its transaction's commit included, the backend's
start and each function's first compilation excluded). Each call is an EXECUTE of a prepared
finalize_reply statement with the task, the reply and the claims as literals, as a client with
a prepared statement sends it (--table: each call selects its arguments from the bench's table,
as this bench did before 2026-12-02; that also counts, per call, planning the statement and
scanning the table, some 0.2 M instructions). The Python reader (the runtime way's
detection, done before the call) is counted the same way, in this process.

    python bench/finalize_instructions.py            # needs valgrind; about a minute
    python bench/finalize_instructions.py --calls 48 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
from psycopg.types.json import Jsonb

from pyagentdb import examples, install, resources
from pyagentdb.claims import read_reply

WAYS = ("declared", "runtime", "detected")
REPLIES = {
    "zh": "好的,已为您设置明天早上8点的提醒,记得带上购物袋。还有别的需要吗?",
    "en": "Sure — I've set a reminder for 8am tomorrow. Anything else I can help with?",
}


def _collected(stderr: str) -> int:
    found = re.findall(r"Collected : ([\d,]+)", stderr)
    if not found:
        raise RuntimeError(f"callgrind gave no count:\n{stderr[-2000:]}")
    return int(found[-1].replace(",", ""))


def prepare(dsn: str, per_way: int) -> None:
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        examples.install_reminders(conn)
        conn.execute("SELECT agentdb.grant_permission('bench', 'WRITE')")
        conn.execute("CREATE TABLE public.bench_calls (way text, i int, task uuid, arg jsonb, reply text)")
        fingerprint = conn.execute(
            "SELECT agentdb.claim_patterns_fingerprint(%s::jsonb)", (resources.claim_patterns_text(),)
        ).fetchone()[0]
        # The replies say "tomorrow at 8am": the reminders are written then, in the users' zone
        # (a fixed date made every verified task's reply a wrong fact, replaced, after that day).
        zone = ZoneInfo("Asia/Shanghai")
        tomorrow = datetime.now(zone).date() + timedelta(days=1)
        at_eight = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 8, tzinfo=zone).isoformat()
        for way in WAYS:
            for i in range(per_way):
                lang = "zh" if i % 2 else "en"
                task = conn.execute(
                    "SELECT agentdb.begin_task('bench', 'i-' || %s, 'remind', authenticated => true,"
                    " lang => %s, time_zone => 'Asia/Shanghai')",
                    (i, lang),
                ).fetchone()[0]
                if i % 4 != 3:
                    args = {"content": f"{way} {i} {time.time()}", "remind_at": at_eight}
                    conn.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s)", (task, Jsonb(args)))
                if way == "declared":
                    arg = Jsonb([{"kind": "create"}])
                elif way == "runtime":
                    reading = read_reply(REPLIES[lang])
                    arg = Jsonb({"patterns": fingerprint,
                                 **{k: reading[k] for k in ("claims", "clauses", "facts")}})
                else:
                    arg = None
                conn.execute(
                    "INSERT INTO public.bench_calls VALUES (%s, %s, %s, %s, %s)",
                    (way, i, task, arg, REPLIES[lang]),
                )


def call_lines(dsn: str) -> dict[str, list[str]]:
    """Per way, one statement per prepared task: EXECUTE of a prepared finalize_reply call with
    the task, the reply and the claims argument as literals, as a client with a prepared statement
    sends it (reading them from a table in each statement would count a scan of it too)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT way, format('EXECUTE gate(%L, %L, %L);', task, reply, arg)"
            " FROM public.bench_calls ORDER BY way, i"
        ).fetchall()
    out: dict[str, list[str]] = {}
    for way, line in rows:
        out.setdefault(way, []).append(line + "\n")
    return out


PREPARE = "PREPARE gate(uuid, text, jsonb) AS SELECT agentdb.finalize_reply($1, $2, $3) IS NOT NULL;\n"


def single_user(bin_dir: Path, pgdata: Path, user: str | None, dbname: str, way: str, first: int,
                n: int, work: Path, lines: list[str] | None = None) -> int:
    script = work / f"{way}-{first}-{n}.sql"
    if lines is not None:
        script.write_text(PREPARE + "".join(lines[first:first + n]))
    else:  # --table: each call reads its arguments from public.bench_calls (the harness before 2026-12-02)
        script.write_text("".join(
            f"SELECT agentdb.finalize_reply(task, reply, arg) IS NOT NULL FROM public.bench_calls"
            f" WHERE way = '{way}' AND i = {i};\n" for i in range(first, first + n)))
    script.chmod(0o644)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           str(bin_dir / "postgres"), "--single", "-D", str(pgdata), dbname]
    if user:
        cmd = ["su", user, "-s", "/bin/sh", "-c", " ".join(cmd) + f" < {script}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
    else:
        with open(script, encoding="utf-8") as fh:
            done = subprocess.run(cmd, stdin=fh, capture_output=True, text=True)
    return _collected(done.stderr)


def python_reader(calls: int) -> int:
    """Instructions of one read_reply (the two replies in turn), from this interpreter under callgrind."""
    code = (
        f"import sys; from pyagentdb.claims import read_reply; R = {list(REPLIES.values())!r}\n"
        "for r in R: read_reply(r)\n"
        "for i in range(int(sys.argv[1])): read_reply(R[i % 2])\n"
    )
    counts = []
    for n in (8, 8 + calls):
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code,
             str(n)],
            capture_output=True, text=True,
        )
        counts.append(_collected(done.stderr))
    return (counts[1] - counts[0]) // calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=24, help="calls counted per way (a multiple of 4)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--table", action="store_true",
                        help="each call reads its arguments from a table, as this bench did before 2026-12-02"
                             " (that counts a scan of the table and a plan of the statement per call)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("finalize_instructions: valgrind is not installed")
    from pyagentdb.server import _quiet_import_embedded

    embedded = _quiet_import_embedded()
    work = Path(tempfile.mkdtemp(prefix="pyagentdb-instr-"))
    os.chmod(work, 0o755)
    server = embedded.get_server(str(work / "pg"), cleanup_mode="delete")
    print("preparing tasks...", file=sys.stderr)
    prepare(server.get_uri(), 8 + 8 + args.calls)
    lines = None if args.table else call_lines(server.get_uri())
    bin_dir = Path(embedded.__file__).parent / "pginstall" / "bin"
    pgdata, user = Path(server.pgdata), server.system_user
    stop = [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "stop", "-m", "fast"]
    subprocess.run(["su", user, "-s", "/bin/sh", "-c", " ".join(stop)] if user else stop,
                   check=True, capture_output=True)
    dbname = psycopg.conninfo.conninfo_to_dict(server.get_uri()).get("dbname") or "postgres"
    out: dict = {"calls_per_way": args.calls, "harness": "table" if args.table else "prepared"}
    for way in WAYS:
        print(f"counting {way}...", file=sys.stderr)
        few = single_user(bin_dir, pgdata, user, dbname, way, 0, 8, work, lines and lines[way])
        many = single_user(bin_dir, pgdata, user, dbname, way, 8, 8 + args.calls, work, lines and lines[way])
        if many <= few:
            sys.exit(f"finalize_instructions: the single-user backend did not run the calls ({few}, {many})")
        out[f"instructions_per_call_{way}"] = (many - few) // args.calls
    print("counting the Python reader...", file=sys.stderr)
    out["instructions_per_read_reply_python"] = python_reader(args.calls)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        base = out["instructions_per_call_declared"]
        for way in WAYS:
            n = out[f"instructions_per_call_{way}"]
            print(f"{way:9} {n / 1e6:6.2f} M instructions per finalize_reply call"
                  f" ({n / base:.2f} x declared)")
        print(f"runtime way's Python reader: {out['instructions_per_read_reply_python'] / 1e6:.2f} M"
              " instructions per read_reply")


if __name__ == "__main__":
    main()
