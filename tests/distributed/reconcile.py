"""The reliability invariants of tests/reliability/invariants.py, written for a distributed
schema: every join pairs user_id, so Citus runs each check shard by shard on the workers.

  I1  every step has exactly one audit row, whose status matches the step;
  I2  a task's step numbers run 1..n; a call_id is used once per task;
  I3  every row of a business table was written by a verified insert step of its owner;
  I4  every logged change names a verified step of the same user (no partial write).

There is no cluster-wide snapshot on Citus: run it when the workload has stopped.
"""

from __future__ import annotations

CHECKS = {
    "step without exactly one audit row": """
        SELECT s.user_id, s.id FROM agentdb_private.steps AS s
          LEFT JOIN agentdb_private.audit AS a ON a.user_id = s.user_id AND a.step_id = s.id
         WHERE s.user_id = ANY (%(users)s)
         GROUP BY s.user_id, s.id HAVING count(a.id) <> 1""",
    "audit row disagrees with its step": """
        SELECT s.user_id, s.id, s.outcome, a.status FROM agentdb_private.steps AS s
          JOIN agentdb_private.audit AS a ON a.user_id = s.user_id AND a.step_id = s.id
         WHERE s.user_id = ANY (%(users)s)
           AND a.status <> CASE WHEN s.outcome = 'success' AND s.verified THEN 'SUCCESS'
                                WHEN s.outcome IN ('refused', 'invalid', 'needs_confirmation', 'duplicate',
                                                   'conflict') THEN 'REFUSED'
                                ELSE 'FAILED' END""",
    "task whose step numbers have a gap": """
        SELECT user_id, task_id FROM agentdb_private.steps WHERE user_id = ANY (%(users)s)
         GROUP BY user_id, task_id HAVING min(seq) <> 1 OR max(seq) <> count(*)""",
    "call_id used twice in a task": """
        SELECT user_id, task_id, call_id FROM agentdb_private.steps
         WHERE user_id = ANY (%(users)s) AND call_id IS NOT NULL
         GROUP BY user_id, task_id, call_id HAVING count(*) > 1""",
    "reminder with no verified insert step": """
        SELECT r.user_id, r.id FROM public.reminders AS r
         WHERE r.user_id = ANY (%(users)s) AND NOT EXISTS (
               SELECT 1 FROM agentdb_private.steps AS s
                WHERE s.user_id = r.user_id AND s.action = 'insert' AND s.outcome = 'success'
                  AND s.verified AND (s.receipt -> 'key' ->> 'id')::bigint = r.id)""",
    "logged change of a step that is not a verified success": """
        SELECT c.user_id, c.id, c.task_id, c.seq FROM agentdb_private.change_log AS c
         WHERE c.user_id = ANY (%(users)s) AND c.task_id IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM agentdb_private.steps AS s
                WHERE s.user_id = c.user_id AND s.task_id = c.task_id AND s.seq = c.seq
                  AND s.outcome = 'success' AND s.verified)""",
}


def reconcile(conn, users: list[str]) -> dict:
    """{'problems': {check: sample rows}, 'counts': {...}} for these users' rows."""
    problems = {}
    for name, query in CHECKS.items():
        found = conn.execute(query, {"users": users}).fetchall()
        if found:
            problems[name] = found[:5]
    counts = dict(zip(
        ("steps", "verified_steps", "audit_rows", "reminders", "changes"),
        conn.execute("""
            SELECT (SELECT count(*) FROM agentdb_private.steps WHERE user_id = ANY (%(u)s)),
                   (SELECT count(*) FROM agentdb_private.steps WHERE user_id = ANY (%(u)s)
                       AND outcome = 'success' AND verified),
                   (SELECT count(*) FROM agentdb_private.audit WHERE user_id = ANY (%(u)s)
                       AND step_id IS NOT NULL),
                   (SELECT count(*) FROM public.reminders WHERE user_id = ANY (%(u)s)),
                   (SELECT count(*) FROM agentdb_private.change_log WHERE user_id = ANY (%(u)s))""",
                     {"u": users}).fetchone(), strict=True))
    return {"problems": problems, "counts": counts}
