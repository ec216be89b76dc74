"""`pyagentdb doctor`: what a DBA checks first, in one command."""

from __future__ import annotations

import json
import re

import psycopg

from . import install, resources

HEAD_SHAPE = "head_shape.txt"  # in migrations/: the shape of tables and views at head
ROLES = ("agentdb_app", "agentdb_agent", "agentdb_auditor", "agentdb_sql_writer")


def _count(conn: psycopg.Connection, relation: str, where: str = "") -> int | None:
    """Row count of an agentdb view, or None when this schema version has no such view."""
    if conn.execute("SELECT to_regclass(%s)", (relation,)).fetchone()[0] is None:
        return None
    return conn.execute(f"SELECT count(*) FROM {relation} {where}").fetchone()[0]


def check(conn: psycopg.Connection, fix: str = "pyagentdb install") -> dict:
    """Everything a DBA checks first; `fix` is the install command for this database
    (with its --dsn or --data-dir), used in the recommended fixes."""
    head = install.head_revision()
    revision = install.current_revision(conn)
    report: dict = {
        "server_version": conn.execute("SHOW server_version").fetchone()[0],
        "database": conn.info.dbname,
        "schema_revision": revision,
        "head": head,
        "roles": {
            role: conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s)", (role,)
            ).fetchone()[0]
            for role in ROLES
        },
    }
    problems: list[str] = []
    if revision is None:
        problems.append(f"schema not installed: run `{fix}`")
    elif revision != head:
        problems.append(f"schema at {revision}, this package expects {head}: run `{fix}`")
    problems += [f"role {r} is missing: run `{fix}`" for r, ok in report["roles"].items() if not ok]
    if revision == head:
        problems += shape_problems(conn, report, fix)
    if revision is not None:
        report["tools"] = _count(conn, "agentdb.tools")
        report["running_tasks"] = _count(conn, "agentdb.v_tasks", "WHERE status = 'running'")
        report["stale_running_tasks"] = _count(
            conn, "agentdb.v_tasks", "WHERE status = 'running' AND created_at < now() - interval '1 hour'"
        )
        report["problem_steps"] = _count(conn, "agentdb.v_problems")
        report["pending_drafts"] = _count(conn, "agentdb.drafts", "WHERE status = 'proposed'")
        report["pending_actions"] = _count(conn, "agentdb.pending_actions")
        report["approved_actions_waiting"] = _count(conn, "agentdb.actions", "WHERE status = 'approved'")
        report["pending_claims"] = _count(conn, "agentdb.pending_claims")
        if conn.execute("SELECT to_regclass('agentdb.watched')").fetchone()[0] is not None:
            report["watched_tables"] = [
                r[0] for r in conn.execute("SELECT * FROM agentdb.watched").fetchall()
            ]
        problems += _claim_pattern_problems(conn, report)
        _temp_privilege_warning(conn, report)
        problems += _stale_tool_problems(conn, report)
        problems += _ledger_problems(conn, report)
        _client_check_warning(conn, report)
        if report.get("stale_running_tasks"):
            problems.append(
                f"{report['stale_running_tasks']} task(s) running for over an hour: "
                "schedule SELECT agentdb.reap_tasks('1 hour')"
            )
        if report.get("approved_actions_waiting"):
            problems.append("approved actions are waiting: is `pyagentdb worker` running?")
    report["problems"] = problems
    # Worth fixing, but nothing is wrong with the books: reported, exit code 0.
    report.setdefault("warnings", [])
    report["ok"] = not problems
    return report


def _claim_pattern_problems(conn: psycopg.Connection, report: dict) -> list[str]:
    """The database must detect claims with this package's patterns: pyagentdb.detect_claims
    reads them from the package, agentdb.detect_claims from what was last loaded."""
    if conn.execute("SELECT to_regclass('agentdb_private.claim_rules')").fetchone()[0] is None:
        return []
    row = conn.execute("SELECT doc FROM agentdb_private.claim_rules WHERE id = 1").fetchone()
    package = json.loads(resources.claim_patterns_text())
    report["claim_patterns_version"] = row[0].get("version") if row else None
    if row is None:
        return ["claim patterns are not loaded: run `pyagentdb install`"]
    if row[0] != package:
        return [
            "the database's claim patterns differ from this package's, so agentdb.detect_claims and "
            "pyagentdb.detect_claims may disagree: run `pyagentdb install --force`"
        ]
    return []


# Where a value in pg_settings comes from the server (not from this session's role or database).
_SERVER_SOURCES = ("default", "configuration file", "command line", "environment variable", "override")


def _client_check_warning(conn: psycopg.Connection, report: dict) -> None:
    """A call whose client was killed runs to its end and commits, unless the server checks the
    client's socket while a statement runs: client_connection_check_interval (PostgreSQL 14+),
    set for the server, or for the database or the login roles of agentdb_app/agentdb_agent.
    A warning, not a problem: either way the call is all or nothing, and a retry with its
    call_id returns the stored receipt."""
    row = conn.execute("SELECT setting, source FROM pg_settings "
                       "WHERE name = 'client_connection_check_interval'").fetchone()
    if row is None:
        return
    setting, source = int(row[0]), row[1]
    overrides = [r[0] for r in conn.execute("""
        SELECT format('%s on %s: %s', coalesce(r.rolname, 'every role'),
                      coalesce(d.datname, 'every database'), split_part(c.cfg, '=', 2))
          FROM pg_db_role_setting AS s
          LEFT JOIN pg_roles AS r ON r.oid = s.setrole
          LEFT JOIN pg_database AS d ON d.oid = s.setdatabase,
               unnest(s.setconfig) AS c (cfg)
         WHERE c.cfg LIKE 'client_connection_check_interval=%'
           AND split_part(c.cfg, '=', 2) !~ '^0+(ms|s|min|h|d)?$'
           AND (d.datname IS NULL OR d.datname = current_database())
           AND (r.oid IS NULL OR pg_has_role(r.oid, 'agentdb_app', 'MEMBER')
                OR pg_has_role(r.oid, 'agentdb_agent', 'MEMBER'))
         ORDER BY 1""").fetchall()]
    server = setting if source in _SERVER_SOURCES else None
    report["client_connection_check_interval"] = {"ms": setting, "source": source, "set_for": overrides}
    if (server or 0) > 0 or overrides or source in ("database", "database user") and setting > 0:
        return
    report.setdefault("warnings", []).append(
        "client_connection_check_interval is 0: when an agent's client is killed during a call, the "
        "server still finishes the call and commits it. Set it (docs/dba-guide.md): "
        "ALTER SYSTEM SET client_connection_check_interval = '1s'; SELECT pg_reload_conf();"
    )


# -- the shape of tables and views against the head -----------------------------------
# One line per column, constraint and index of every table and view in agentdb and
# agentdb_private, so that a database at the right revision number with the wrong
# tables (a revision edited after it was installed) is seen, and a diff of two shapes
# names what differs.
_SHAPE_SQL = """
WITH rel AS (
    SELECT c.oid, c.relkind, format('%I.%I', n.nspname, c.relname) AS name
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname IN ('agentdb', 'agentdb_private') AND c.relkind IN ('r', 'p', 'v', 'm')
)
SELECT format('%s %s', CASE WHEN r.relkind = 'v' THEN 'view' WHEN r.relkind = 'm' THEN 'matview'
                            ELSE 'table' END, r.name)
  FROM rel AS r
UNION ALL
SELECT format('column %s %s %I %s%s%s%s%s', r.name,
              row_number() OVER (PARTITION BY r.oid ORDER BY a.attnum), a.attname,
              pg_catalog.format_type(a.atttypid, a.atttypmod),
              CASE WHEN a.attcollation NOT IN (0, t.typcollation) THEN ' collate ' || co.collname::text END,
              CASE WHEN a.attnotnull THEN ' not null' END,
              CASE WHEN a.attidentity = 'a' THEN ' generated always as identity'
                   WHEN a.attidentity = 'd' THEN ' generated by default as identity' END,
              ' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid),
              CASE WHEN r.relkind <> 'v' AND a.attstorage <> t.typstorage
                   THEN ' storage ' || a.attstorage::text END)
  FROM rel AS r
  JOIN pg_catalog.pg_attribute AS a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
  JOIN pg_catalog.pg_type AS t ON t.oid = a.atttypid
  LEFT JOIN pg_catalog.pg_collation AS co ON co.oid = a.attcollation
  LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
UNION ALL
SELECT format('constraint %s %I %s', r.name, k.conname, pg_catalog.pg_get_constraintdef(k.oid))
  FROM rel AS r JOIN pg_catalog.pg_constraint AS k ON k.conrelid = r.oid
 WHERE k.contype <> 'n'  -- PostgreSQL 18 lists NOT NULL as constraints: the column says it
UNION ALL
SELECT format('index %s %s', r.name, pg_catalog.pg_get_indexdef(i.indexrelid))
  FROM rel AS r JOIN pg_catalog.pg_index AS i ON i.indrelid = r.oid
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint AS k WHERE k.conindid = i.indexrelid
                                                              AND k.conrelid = r.oid)
"""


def shape(conn: psycopg.Connection) -> list[str]:
    """The installed tables and views, one sorted line per relation, column, constraint
    and index (what migrations/head_shape.txt holds for the head)."""
    return sorted((row[0] for row in conn.execute(_SHAPE_SQL)), key=_natural)


def _natural(line: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", line)]


def head_shape() -> list[str]:
    path = resources.migrations_dir() / HEAD_SHAPE
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")]


def write_head_shape(conn: psycopg.Connection) -> None:
    """Write the shape of `conn` (a fresh install at head) to migrations/head_shape.txt."""
    path = resources.migrations_dir() / HEAD_SHAPE
    header = ("# The tables and views of an agentdb schema at head, one line each, as\n"
              "# pyagentdb.doctor.shape() reads them. `pyagentdb doctor` compares a database\n"
              "# with it. After changing a revision or a view, regenerate it from a fresh\n"
              "# install: python -m pyagentdb.doctor --write-shape\n")
    path.write_text(header + "\n".join(shape(conn)) + "\n", encoding="utf-8")


def shape_diff(conn: psycopg.Connection) -> tuple[list[str], list[str]]:
    """(lines the head has and this database lacks, lines this database has beyond the head)."""
    have, want = set(shape(conn)), set(head_shape())
    return sorted(want - have), sorted(have - want)


def shape_problems(conn: psycopg.Connection, report: dict, fix: str = "pyagentdb install") -> list[str]:
    """A database at the head revision must also have the head's tables and views."""
    missing, extra = shape_diff(conn)
    report["shape"] = "ok" if not (missing or extra) else {"missing": missing, "unexpected": extra}
    if not (missing or extra):
        return []
    shown = [f"missing: {line}" for line in missing[:5]] + [f"unexpected: {line}" for line in extra[:5]]
    more = len(missing) + len(extra) - len(shown)
    return [
        f"the tables and views differ from this package's head in {len(missing) + len(extra)} place(s) "
        f"({'; '.join(shown)}{f'; and {more} more' if more > 0 else ''}): run `{fix} --repair`"
    ]


def _temp_privilege_warning(conn: psycopg.Connection, report: dict) -> None:
    """An agent session that may create temporary tables can shadow a table that a function
    with an unpinned search_path reads. register_tool refuses such conflict checks, so this is
    a warning (the second line), not a problem: PUBLIC holds TEMPORARY by default, and only a
    DBA can take it away without breaking other roles' temporary tables."""
    row = conn.execute(
        "SELECT has_database_privilege('agentdb_agent', current_database(), 'TEMPORARY'),"
        " current_database()"
    ).fetchone()
    report["agent_may_create_temp_tables"] = row[0]
    if not row[0]:
        return
    db = psycopg.sql.Identifier(row[1]).as_string(conn)
    report.setdefault("warnings", []).append(
        "members of agentdb_agent may create temporary tables (TEMPORARY is granted to PUBLIC): run "
        f"REVOKE TEMPORARY ON DATABASE {db} FROM PUBLIC; then GRANT TEMPORARY ON DATABASE {db} TO "
        "each role that needs temporary tables"
    )


SEAL_LAG_WARNING = 60  # seconds a committed ledger row may wait for its link before doctor warns


def _ledger_problems(conn: psycopg.Connection, report: dict) -> list[str]:
    """The sealer's lag (rows waiting for their chain link: a warning past a minute, since an
    edit in that window is not evidence yet) and audit rows naming a step that does not exist
    (the check a foreign key made before revision 0015)."""
    readable = conn.execute(
        "SELECT to_regclass('agentdb_private.chain_pending') IS NOT NULL"
        " AND has_table_privilege('agentdb_private.chain_pending', 'SELECT')"
        " AND has_table_privilege('agentdb_private.audit', 'SELECT')"
        " AND has_table_privilege('agentdb_private.change_log', 'SELECT')"
        " AND has_table_privilege('agentdb_private.steps', 'SELECT')").fetchone()[0]
    if not readable:
        return []
    waiting, oldest = conn.execute("""
        SELECT count(*), extract(epoch FROM clock_timestamp() - min(coalesce(a.at, c.at)))::int
          FROM agentdb_private.chain_pending AS p
          LEFT JOIN agentdb_private.audit AS a
            ON p.chain = 'audit' AND a.user_id = p.user_id AND a.id = p.row_id
          LEFT JOIN agentdb_private.change_log AS c
            ON p.chain = 'change' AND c.user_id = p.user_id AND c.id = p.row_id""").fetchone()
    report["unsealed_rows"] = waiting
    report["oldest_unsealed_seconds"] = oldest
    if waiting and oldest is not None and oldest > SEAL_LAG_WARNING:
        report.setdefault("warnings", []).append(
            f"{waiting} audit and change-log row(s) wait for their hash-chain link, the oldest for "
            f"{oldest} s: is `pyagentdb worker` running? Or schedule `pyagentdb seal` "
            "(SELECT agentdb.seal_chains()) every few seconds")
    dangling = conn.execute("""
        SELECT count(*) FROM agentdb_private.audit AS a
         WHERE a.step_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM agentdb_private.steps AS s
                            WHERE s.user_id = a.user_id AND s.id = a.step_id)""").fetchone()[0]
    if dangling:
        return [f"{dangling} audit row(s) name a step that does not exist: the evidence was edited "
                "around agentdb (see SELECT * FROM agentdb.verify_chain('audit'))"]
    return []


def _stale_tool_problems(conn: psycopg.Connection, report: dict) -> list[str]:
    """Tools whose compiled code no longer matches their table or conflict check: invoke
    refuses them until they are recompiled."""
    if conn.execute("SELECT to_regclass('agentdb.tool_status')").fetchone()[0] is None:
        return []
    rows = conn.execute(
        "SELECT tool, stale_reason FROM agentdb.tool_status WHERE stale ORDER BY tool"
    ).fetchall()
    report["stale_tools"] = [{"tool": tool, "reason": reason} for tool, reason in rows]
    return [
        f"tool {tool} is stale ({reason}), so invoke refuses it: re-register it, or run "
        "SELECT * FROM agentdb.compile_tools()"
        for tool, reason in rows
    ]


def main(argv: list[str] | None = None) -> int:
    """python -m pyagentdb.doctor --write-shape [--dsn DSN]: regenerate migrations/head_shape.txt
    from a fresh install (a new database on the given server, dropped afterwards)."""
    import argparse
    import uuid

    from psycopg.conninfo import make_conninfo

    from . import server

    parser = argparse.ArgumentParser(prog="python -m pyagentdb.doctor")
    parser.add_argument("--write-shape", action="store_true", required=True)
    parser.add_argument("--dsn", help="a server where a scratch database may be created "
                                      "(default: an embedded server in a temporary directory)")
    args = parser.parse_args(argv)
    if args.dsn:
        admin = args.dsn
    else:
        import tempfile

        admin = server.start_embedded(tempfile.mkdtemp(prefix="pyagentdb-shape-"), dbname="postgres").dsn
    name = f"shape_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        target = make_conninfo(admin, dbname=name)
        install.upgrade(target)
        with psycopg.connect(target) as conn:
            write_head_shape(conn)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    print(f"wrote {resources.migrations_dir() / HEAD_SHAPE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
