-- Process audit: the change log of the watched tables crossed with the steps
-- and with what replies claimed. For DBAs and auditors; see docs/ledger.md.

-- Changes no step made: written around agentdb.invoke (by the application,
-- a DBA, a migration, or an agent role before its table was guarded). Each is
-- either "done but not said" or an unexpected change.
CREATE OR REPLACE VIEW agentdb.v_unlogged_changes AS
SELECT
    c.id AS change_id,
    c.at,
    c.table_name,
    c.op,
    c.key,
    c.old_row,
    c.new_row,
    c.txid::text AS txid,
    c.db_role,
    c.task_id AS claimed_task_id,
    c.seq AS claimed_seq
FROM agentdb_private.change_log AS c
WHERE
    c.task_id IS NULL
    OR NOT EXISTS (
        SELECT 1 FROM agentdb_private.steps AS s
        WHERE s.task_id = c.task_id AND s.seq = c.seq
    );

-- Steps whose change log disagrees with their receipt. Only steps on a tool
-- whose table was watched when the step ran. problem:
--   no_change         success and verified, rows affected, but nothing logged
--   row_count         the rows logged on the tool's table <> affected_rows
--   wrong_operation   logged operations other than the tool's action
--   change_not_done   the step did not succeed, yet changes are logged for it
CREATE OR REPLACE VIEW agentdb.v_step_mismatches AS
WITH logged AS (
    SELECT
        c.task_id,
        c.seq,
        c.table_oid,
        count(*) AS changed_rows,
        array_agg(DISTINCT c.op ORDER BY c.op) AS ops
    FROM agentdb_private.change_log AS c
    WHERE c.task_id IS NOT NULL
    GROUP BY c.task_id, c.seq, c.table_oid
),

checked AS (
    SELECT
        s.id AS step_id,
        s.task_id,
        s.seq,
        s.tool,
        s.action,
        w.table_name AS target,
        s.outcome,
        s.verified,
        s.affected_rows,
        coalesce(l.changed_rows, 0) AS changed_rows,
        coalesce(l.ops, '{}') AS ops,
        s.started_at
    FROM agentdb_private.steps AS s
    INNER JOIN agentdb_private.tools AS t ON s.tool = t.name
    INNER JOIN agentdb_private.watched AS w ON t.target::oid = w.table_oid AND s.started_at >= w.watched_at
    LEFT JOIN logged AS l ON s.task_id = l.task_id AND s.seq = l.seq AND w.table_oid = l.table_oid
)

SELECT
    k.step_id,
    k.task_id,
    k.seq,
    k.tool,
    k.target,
    k.outcome,
    k.verified,
    k.affected_rows,
    k.changed_rows,
    k.ops,
    k.started_at,
    CASE
        WHEN k.outcome <> 'success' AND k.changed_rows > 0 THEN 'change_not_done'
        WHEN k.verified AND k.affected_rows > 0 AND k.changed_rows = 0 THEN 'no_change'
        WHEN k.changed_rows <> k.affected_rows THEN 'row_count'
        ELSE 'wrong_operation'
    END AS problem
FROM checked AS k
WHERE
    (k.outcome <> 'success' AND k.changed_rows > 0)
    OR (k.outcome = 'success' AND k.changed_rows <> k.affected_rows)
    OR (k.changed_rows > 0 AND k.ops <> ARRAY[upper(k.action)]);

-- Claims ("I've booked it") of tasks with no logged change behind any of
-- their steps (behind that tool's steps when the claim names a tool).
CREATE OR REPLACE VIEW agentdb.v_claims_without_change AS
SELECT
    c.id AS claim_id,
    c.task_id,
    t.user_id,
    t.conversation_id,
    c.kind,
    c.claim_text,
    c.tool,
    c.source,
    c.created_at,
    (
        SELECT count(*) FROM agentdb_private.steps AS s
        WHERE s.task_id = c.task_id AND s.outcome = 'success'
    ) AS successful_steps
FROM agentdb_private.claims AS c
INNER JOIN agentdb_private.tasks AS t ON c.task_id = t.id
WHERE NOT EXISTS (
    SELECT 1
    FROM agentdb_private.change_log AS l
    INNER JOIN agentdb_private.steps AS s ON l.task_id = s.task_id AND l.seq = s.seq
    WHERE
        l.task_id = c.task_id
        AND (c.tool IS NULL OR s.tool = c.tool)
);

GRANT SELECT ON agentdb.v_unlogged_changes, agentdb.v_step_mismatches, agentdb.v_claims_without_change
TO agentdb_auditor;
