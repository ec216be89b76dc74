"""reconcile(conn): check from the database alone that nothing was lost and nothing false got through.

Used after every injected fault, after the concurrency run, after hostile inputs, and by
bench/soak.py. It reads the evidence as the owner and cross-checks four ledgers:

    target rows  <->  steps  <->  audit rows  <->  change log (when the ledger is installed)

Invariants (each violation is one line in Reconciliation.problems):

  I1  every step has exactly one audit row, and its status matches the step (SUCCESS iff
      success + verified);
  I2  step numbers of a task run 1..n with no gap; a call_id is used once per task;
  I3  every row of a tool's target table was created by a verified insert step (no target row
      without its step and audit row); keys deleted by a verified delete are gone;
  I4  change log: every logged change names a step that exists, succeeded and was verified, on
      that table (no partial write, no write by a failed or rolled-back step); every verified
      step that changed n rows has exactly n logged changes; no change outside a step unless
      allowed; replaying the log gives exactly the rows in the table;
  I5  no task is left `running` (after the reaper, when reap=True);
  I6  no claim in a delivered reply is unbacked, and every backing step's write is really there
      (logged changes, or the inserted row / its verified deletion);
  I7  a draft is confirmed at most once, a confirmed draft points at its own verified step; an
      action runs at most once, a `done` action has exactly one verified step;
  I8  the hash chains verify (when the ledger is installed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import dict_row


@dataclass
class Reconciliation:
    problems: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = "reconciled: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        if self.ok:
            return head
        return head + "\n" + "\n".join(f"  PROBLEM {p}" for p in self.problems)


def _rows(cur, sql: str, params=()) -> list[dict]:
    return cur.execute(sql, params).fetchall()


def _exists(cur, regclass: str) -> bool:
    return cur.execute("SELECT to_regclass(%s) IS NOT NULL AS x", (regclass,)).fetchone()["x"]


def _has_function(cur, name: str) -> bool:
    return cur.execute("SELECT to_regproc(%s) IS NOT NULL AS x", (name,)).fetchone()["x"]


def _key_expr(cur, keycols: list[str]) -> str:
    """SQL: the key of row t as jsonb, e.g. jsonb_build_object('id', t."id")."""
    parts = [f"{psycopg.sql.quote(k)}, t.{psycopg.sql.Identifier(k).as_string(cur)}" for k in keycols]
    return "jsonb_build_object(" + ", ".join(parts) + ")"


def has_ledger(conn) -> bool:
    """Is the change log (revision 0004) installed in this database?"""
    return conn.execute("SELECT to_regclass('agentdb_private.change_log') IS NOT NULL").fetchone()[0]


def reconcile(conn: psycopg.Connection, *, reap: bool = True, allow_direct: bool = False,
              sample_limit: int = 5) -> Reconciliation:
    """Check the invariants above on the database behind `conn` (an owner connection in
    autocommit). reap=True first settles every task still running (agentdb.reap_tasks with a zero
    age, as the reaper would once they are old enough). allow_direct=True accepts logged changes
    made outside a step (e.g. test setup by the owner). First, as the worker does every poll,
    it seals the hash chains (agentdb.seal_chains: the evidence committed so far gets its links;
    the check below runs in REPEATABLE READ, where sealing would not run). Never changes anything
    else."""
    out = Reconciliation()
    if reap:
        conn.execute("SELECT agentdb.reap_tasks('0 seconds')")
    if conn.execute("SELECT to_regprocedure('agentdb.seal_chains()') IS NOT NULL").fetchone()[0]:
        conn.execute("SELECT agentdb.seal_chains()")

    def problem(kind: str, found: list) -> None:
        if found:
            shown = found[:sample_limit]
            out.problems.append(f"{kind}: {len(found)} (e.g. {json.dumps(shown, default=str)[:800]})")

    with conn.cursor(row_factory=dict_row) as cur, conn.transaction():
        # One consistent picture of every table; values rendered as the change log renders them.
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET LOCAL timezone = 'UTC'")
        cur.execute("SET LOCAL extra_float_digits = 1")
        ledger = _exists(cur, "agentdb_private.change_log")

        counts = _rows(cur, """
            SELECT (SELECT count(*) FROM agentdb_private.tasks) AS tasks,
                   (SELECT count(*) FROM agentdb_private.tasks WHERE status = 'running') AS running,
                   (SELECT count(*) FROM agentdb_private.steps) AS steps,
                   (SELECT count(*) FROM agentdb_private.steps WHERE outcome = 'success' AND verified)
                       AS verified_steps,
                   (SELECT count(*) FROM agentdb_private.audit) AS audit_rows,
                   (SELECT count(*) FROM agentdb_private.claims) AS claims,
                   (SELECT count(*) FROM agentdb_private.drafts) AS drafts,
                   (SELECT count(*) FROM agentdb_private.actions) AS actions""")[0]
        out.counts.update(counts)

        # I1: one audit row per step, with the matching status.
        problem("step without audit row", _rows(cur, """
            SELECT s.id, s.task_id, s.seq, s.outcome FROM agentdb_private.steps AS s
             WHERE NOT EXISTS (SELECT 1 FROM agentdb_private.audit AS a WHERE a.step_id = s.id)"""))
        problem("step with more than one audit row", _rows(cur, """
            SELECT a.step_id, count(*) AS n FROM agentdb_private.audit AS a
             WHERE a.step_id IS NOT NULL GROUP BY a.step_id HAVING count(*) > 1"""))
        problem("audit row disagrees with its step", _rows(cur, """
            SELECT s.id, s.outcome, s.verified, a.status, a.task_id, s.task_id AS step_task
              FROM agentdb_private.steps AS s JOIN agentdb_private.audit AS a ON a.step_id = s.id
             WHERE a.status <> CASE WHEN s.outcome = 'success' AND s.verified THEN 'SUCCESS'
                                    WHEN s.outcome IN ('refused', 'invalid', 'needs_confirmation',
                                                       'duplicate', 'conflict') THEN 'REFUSED'
                                    ELSE 'FAILED' END
                OR a.task_id IS DISTINCT FROM s.task_id"""))
        problem("verified flag on a step that did not succeed", _rows(cur, """
            SELECT id, outcome FROM agentdb_private.steps WHERE verified AND outcome <> 'success'"""))

        # I2: continuous seq, call_id once per task.
        problem("task whose step numbers have a gap", _rows(cur, """
            SELECT task_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM agentdb_private.steps
             GROUP BY task_id HAVING min(seq) <> 1 OR max(seq) <> count(*)"""))
        problem("call_id used twice in a task", _rows(cur, """
            SELECT task_id, call_id, count(*) AS n FROM agentdb_private.steps WHERE call_id IS NOT NULL
             GROUP BY task_id, call_id HAVING count(*) > 1"""))

        # I3: target rows vs steps, per target table of the registered tools.
        targets = _rows(cur, """
            SELECT DISTINCT ON (t.target) t.target::oid AS oid, t.target::text AS name, t.key_columns AS keys
              FROM agentdb_private.tools AS t ORDER BY t.target, t.name""")
        total_rows = 0
        for tgt in targets:
            keycols = tgt["keys"]
            key_expr = _key_expr(cur, keycols)
            n = cur.execute(f"SELECT count(*) AS n FROM {tgt['name']} AS t").fetchone()["n"]
            total_rows += n
            out.counts[f"rows:{tgt['name']}"] = n
            # A row whose key no verified insert step returned (in its receipt, or as a logged
            # INSERT of a verified step: run_sql) was written outside invoke. Set-based: a hashed
            # anti-join, so it stays linear in rows + steps.
            logged_inserts = """
                UNION ALL
                SELECT c.key FROM agentdb_private.change_log AS c
                  JOIN agentdb_private.steps AS s2 ON s2.task_id = c.task_id AND s2.seq = c.seq
                 WHERE c.table_oid = %(oid)s AND c.op = 'INSERT' AND s2.outcome = 'success' AND s2.verified
            """ if ledger else ""
            orphan = _rows(cur, f"""
                WITH ins AS (
                    SELECT s.receipt -> 'key' AS key FROM agentdb_private.steps AS s
                      JOIN agentdb_private.tools AS tl ON tl.name = s.tool
                     WHERE tl.target::oid = %(oid)s AND s.action = 'insert' AND s.outcome = 'success'
                       AND s.verified
                    {logged_inserts}
                )
                SELECT {key_expr} AS key FROM {tgt['name']} AS t
                 WHERE {key_expr} NOT IN (SELECT ins.key FROM ins WHERE ins.key IS NOT NULL)""",
                           {"oid": tgt["oid"]})
            if not allow_direct:
                problem(f"row of {tgt['name']} with no verified insert step", orphan)
            # A key a verified single-row delete removed must be gone (unless inserted again).
            problem(f"row of {tgt['name']} still there after its verified delete", _rows(cur, f"""
                SELECT {key_expr} AS key FROM {tgt['name']} AS t
                  JOIN agentdb_private.steps AS d
                    ON d.action = 'delete' AND d.outcome = 'success' AND d.verified
                   AND d.receipt -> 'key' = {key_expr}
                  JOIN agentdb_private.tools AS tl ON tl.name = d.tool AND tl.target::oid = %s
                 WHERE NOT EXISTS (
                    SELECT 1 FROM agentdb_private.steps AS s
                     WHERE s.action = 'insert' AND s.outcome = 'success' AND s.verified
                       AND s.receipt -> 'key' = {key_expr} AND s.finished_at > d.finished_at)""",
                (tgt["oid"],)))
        out.counts["target_rows"] = total_rows

        # I4: the change log against the steps and the tables.
        if ledger:
            out.counts["change_log"] = cur.execute(
                "SELECT count(*) AS n FROM agentdb_private.change_log").fetchone()["n"]
            problem("logged change whose step does not exist", _rows(cur, """
                SELECT c.id, c.table_name, c.op, c.task_id, c.seq FROM agentdb_private.change_log AS c
                 WHERE c.task_id IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM agentdb_private.steps AS s
                     WHERE s.task_id = c.task_id AND s.seq = c.seq)"""))
            problem("logged change made by a step that is not a verified success (partial write)",
                    _rows(cur, """
                SELECT c.id, c.table_name, c.op, c.task_id, c.seq, s.outcome, s.refusal
                  FROM agentdb_private.change_log AS c
                  JOIN agentdb_private.steps AS s ON s.task_id = c.task_id AND s.seq = c.seq
                 WHERE NOT (s.outcome = 'success' AND s.verified)"""))
            problem("logged change on a table other than its step's target", _rows(cur, """
                SELECT c.id, c.table_name, s.tool FROM agentdb_private.change_log AS c
                  JOIN agentdb_private.steps AS s ON s.task_id = c.task_id AND s.seq = c.seq
                  JOIN agentdb_private.tools AS tl ON tl.name = s.tool
                 WHERE tl.target::oid <> c.table_oid"""))
            problem("verified step whose changed rows are not all in the change log", _rows(cur, """
                SELECT s.id, s.task_id, s.seq, s.tool, s.affected_rows,
                       (SELECT count(*) FROM agentdb_private.change_log AS c
                         WHERE c.task_id = s.task_id AND c.seq = s.seq) AS logged
                  FROM agentdb_private.steps AS s
                  JOIN agentdb_private.tools AS tl ON tl.name = s.tool
                  JOIN agentdb_private.watched AS w ON w.table_oid = tl.target::oid
                 WHERE s.outcome = 'success' AND s.verified AND s.action IN ('insert', 'update', 'delete')
                   AND s.finished_at > w.watched_at
                   AND s.affected_rows <> (SELECT count(*) FROM agentdb_private.change_log AS c
                                            WHERE c.task_id = s.task_id AND c.seq = s.seq)"""))
            direct = _rows(cur, """
                SELECT c.id, c.table_name, c.op, c.db_role FROM agentdb_private.change_log AS c
                 WHERE c.task_id IS NULL""")
            out.counts["changes_outside_steps"] = len(direct)
            if not allow_direct:
                problem("change outside any step", direct)
            for tgt in targets:
                watched = cur.execute("SELECT key_columns FROM agentdb_private.watched WHERE table_oid = %s",
                                      (tgt["oid"],)).fetchone()
                if not watched:
                    continue
                keycols = watched["key_columns"]
                key_expr = _key_expr(cur, keycols)
                # Replay: the last logged version of each key is the row in the table, or its absence.
                replay = f"""
                    WITH last AS (
                        SELECT DISTINCT ON (c.key) c.key, c.op, c.new_row
                          FROM agentdb_private.change_log AS c
                         WHERE c.table_oid = %(oid)s AND c.op <> 'TRUNCATE'
                         ORDER BY c.key, c.id DESC
                    ), now AS (
                        SELECT {key_expr} AS key, to_jsonb(t) AS row FROM {tgt['name']} AS t
                    )
                    SELECT coalesce(now.key, last.key) AS key, last.op,
                           last.new_row AS logged, now.row AS actual
                      FROM now FULL JOIN last ON last.key = now.key
                     WHERE (now.key IS NULL AND last.op <> 'DELETE')
                        OR (now.key IS NOT NULL AND (last.key IS NULL OR last.op = 'DELETE'
                                                     OR last.new_row IS DISTINCT FROM now.row))"""
                if cur.execute("SELECT count(*) AS n FROM agentdb_private.change_log "
                               "WHERE table_oid = %s AND op = 'TRUNCATE'", (tgt["oid"],)).fetchone()["n"]:
                    continue  # a truncate resets the replay; the tests never truncate a target
                problem(f"{tgt['name']}: table and replayed change log differ", _rows(cur, replay,
                                                                                    {"oid": tgt["oid"]}))

        # I5: no task left running.
        still = _rows(cur, "SELECT id, user_id, created_at FROM agentdb_private.tasks "
                           "WHERE status = 'running'")
        out.counts["running_after"] = len(still)
        if reap:
            problem("task left running after the reaper", still)

        # I6: claims of delivered replies are backed, and the backing writes are really there.
        problem("delivered reply with a pending claim", _rows(cur, """
            SELECT r.task_id, p.kind, p.claim_text FROM agentdb_private.replies AS r
              JOIN agentdb.pending_claims AS p ON p.task_id = r.task_id
             WHERE r.verdict = 'deliver'"""))
        backing = """
            SELECT r.task_id, c.kind, s.id AS step_id, s.action, s.affected_rows, s.receipt -> 'key' AS key,
                   tl.target::oid AS target
              FROM agentdb_private.replies AS r
              JOIN agentdb_private.claims AS c ON c.task_id = r.task_id
              JOIN agentdb_private.steps AS s
                ON s.task_id = r.task_id AND s.outcome = 'success' AND s.verified
              LEFT JOIN agentdb_private.tools AS tl ON tl.name = s.tool
             WHERE r.verdict = 'deliver'
               AND (c.kind = 'done' OR s.action = CASE c.kind WHEN 'create' THEN 'insert'
                                                           WHEN 'update' THEN 'update'
                                                           WHEN 'delete' THEN 'delete' END)
               AND (c.tool IS NULL OR c.tool = s.tool)"""
        if ledger:
            problem("claim backed by a step whose write is not in the change log", _rows(cur, backing + """
               AND s.affected_rows > (SELECT count(*) FROM agentdb_private.change_log AS l
                                       WHERE l.task_id = s.task_id AND l.seq = s.seq)
               AND EXISTS (SELECT 1 FROM agentdb_private.watched AS w
                            WHERE w.table_oid = tl.target::oid AND w.watched_at < s.started_at)"""))
        # A created row a delivered claim relies on is still there, or a verified delete removed it
        # (a single-row delete by key, a bulk delete, or a logged DELETE by a verified step).
        for tgt in targets:
            key_expr = _key_expr(cur, tgt["keys"])
            if ledger:  # every delete, single or bulk, is logged row by row with its step
                gone_sql = """
                    SELECT c.key FROM agentdb_private.change_log AS c
                      JOIN agentdb_private.steps AS s3 ON s3.task_id = c.task_id AND s3.seq = c.seq
                     WHERE c.table_oid = %(oid)s AND c.op = 'DELETE'
                       AND s3.outcome = 'success' AND s3.verified"""
            else:  # receipts name the key of a single-row delete; a bulk delete (NULL key) may be any
                gone_sql = """
                    SELECT d.receipt -> 'key' AS key FROM agentdb_private.steps AS d
                      JOIN agentdb_private.tools AS tl ON tl.name = d.tool AND tl.target::oid = %(oid)s
                     WHERE d.action = 'delete' AND d.outcome = 'success' AND d.verified"""
            problem(f"claim backed by an insert into {tgt['name']} whose row is not there "
                    "and was never deleted", _rows(cur, f"""
                WITH backed AS ({backing} AND s.action = 'insert' AND tl.target::oid = %(oid)s),
                gone AS ({gone_sql})
                SELECT b.task_id, b.kind, b.step_id, b.key FROM backed AS b
                 WHERE b.key NOT IN (SELECT {key_expr} FROM {tgt['name']} AS t)
                   AND b.key NOT IN (SELECT gone.key FROM gone WHERE gone.key IS NOT NULL)
                   AND NOT EXISTS (SELECT 1 FROM gone WHERE gone.key IS NULL)""", {"oid": tgt["oid"]}))

        # I7: drafts and actions run at most once.
        problem("draft with more than one verified step", _rows(cur, """
            SELECT substr(s.call_id, 7) AS draft, count(*) AS n FROM agentdb_private.steps AS s
             WHERE s.call_id LIKE 'draft:%%' AND s.outcome = 'success' AND s.verified
             GROUP BY s.call_id HAVING count(*) > 1"""))
        problem("confirmed draft without its own verified step", _rows(cur, """
            SELECT d.id, d.status, d.step_id, s.call_id, s.outcome FROM agentdb_private.drafts AS d
              LEFT JOIN agentdb_private.steps AS s ON s.id = d.step_id
             WHERE d.status = 'confirmed'
               AND (s.id IS NULL OR NOT (s.outcome = 'success' AND s.verified)
                    OR s.call_id IS DISTINCT FROM 'draft:' || d.id::text OR s.task_id <> d.closed_in_task
                    OR s.tool <> d.tool OR s.args IS DISTINCT FROM d.args)"""))
        problem("draft that ran but is not marked confirmed", _rows(cur, """
            WITH ran AS (
                SELECT s.call_id, s.tool FROM agentdb_private.steps AS s
                 WHERE s.call_id LIKE 'draft:%%' AND s.outcome = 'success' AND s.verified)
            SELECT d.id, d.status FROM agentdb_private.drafts AS d
              JOIN ran ON ran.call_id = 'draft:' || d.id::text AND ran.tool = d.tool
             WHERE d.status <> 'confirmed'"""))
        problem("action run more than once", _rows(cur, """
            SELECT s.call_id, count(*) AS n FROM agentdb_private.steps AS s
             WHERE s.call_id LIKE 'action:%%' AND s.outcome = 'success' AND s.verified
             GROUP BY s.call_id HAVING count(*) > 1"""))
        problem("action whose status disagrees with its steps", _rows(cur, """
            WITH ran AS (
                SELECT DISTINCT s.call_id FROM agentdb_private.steps AS s
                 WHERE s.call_id LIKE 'action:%%' AND s.outcome = 'success' AND s.verified)
            SELECT a.id, a.status, ran.call_id IS NOT NULL AS ran FROM agentdb_private.actions AS a
              LEFT JOIN ran ON ran.call_id = 'action:' || a.id
             WHERE (a.status = 'done') <> (ran.call_id IS NOT NULL)"""))

        # I8: the hash chains (agentdb.verify_chain lists every broken link; none when it holds).
        if _has_function(cur, "agentdb.verify_chain"):
            for chain in ("audit", "change"):
                broken = _rows(cur, "SELECT id, problem FROM agentdb.verify_chain(%s)", (chain,))
                out.counts[f"chain_{chain}_broken"] = len(broken)
                problem(f"{chain} hash chain broken", broken)
    return out


def assert_reconciled(conn, **kwargs) -> Reconciliation:
    result = reconcile(conn, **kwargs)
    assert result.ok, str(result)
    return result
