"""`pyagentdb doctor`: what a DBA checks first, in one command."""

from __future__ import annotations

import json

import psycopg

from . import install, resources

ROLES = ("agentdb_app", "agentdb_agent", "agentdb_auditor", "agentdb_sql_writer")


def _count(conn: psycopg.Connection, relation: str, where: str = "") -> int | None:
    """Row count of an agentdb view, or None when this schema version has no such view."""
    if conn.execute("SELECT to_regclass(%s)", (relation,)).fetchone()[0] is None:
        return None
    return conn.execute(f"SELECT count(*) FROM {relation} {where}").fetchone()[0]


def check(conn: psycopg.Connection) -> dict:
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
    problems = []
    if revision is None:
        problems.append("schema not installed: run `pyagentdb install` (same --dsn)")
    elif revision != head:
        problems.append(f"schema at {revision}, this package expects {head}: run `pyagentdb install`")
    problems += [
        f"role {r} is missing: run `pyagentdb install`" for r, ok in report["roles"].items() if not ok
    ]
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
        if report.get("stale_running_tasks"):
            problems.append(
                f"{report['stale_running_tasks']} task(s) running for over an hour: "
                "schedule SELECT agentdb.reap_tasks('1 hour')"
            )
        if report.get("approved_actions_waiting"):
            problems.append("approved actions are waiting: is `pyagentdb worker` running?")
    report["problems"] = problems
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
