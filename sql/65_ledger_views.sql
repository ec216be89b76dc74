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
        array_agg(DISTINCT c.op::text ORDER BY c.op::text) AS ops
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

-- Steps that changed a watched table other than their own target: a trigger
-- or a function on the tool's table that wrote elsewhere, under the step. The
-- step's receipt speaks of its target only, so these changes are nowhere in
-- it. One row per step and other table. target: the tool's table, or for a
-- run_sql step the table its statement wrote; NULL when it is not known.
CREATE OR REPLACE VIEW agentdb.v_step_side_changes AS
WITH logged AS (
    SELECT
        c.task_id,
        c.seq,
        c.table_oid,
        min(c.table_name) AS changed_table,
        count(*) AS changed_rows,
        array_agg(DISTINCT c.op::text ORDER BY c.op::text) AS ops,
        min(c.at) AS first_change_at
    FROM agentdb_private.change_log AS c
    WHERE c.task_id IS NOT NULL
    GROUP BY c.task_id, c.seq, c.table_oid
),

stepped AS (
    SELECT
        s.id AS step_id,
        s.task_id,
        s.seq,
        s.tool,
        s.action,
        s.outcome,
        s.verified,
        s.started_at,
        l.table_oid,
        l.changed_table,
        l.changed_rows,
        l.ops,
        l.first_change_at,
        coalesce(
            t.target::oid,
            (
                SELECT to_regclass(a.target)::oid FROM agentdb_private.audit AS a
                WHERE a.step_id = s.id AND s.tool = 'run_sql'
                ORDER BY a.id
                LIMIT 1
            )
        ) AS target_oid
    FROM logged AS l
    INNER JOIN agentdb_private.steps AS s ON l.task_id = s.task_id AND l.seq = s.seq
    LEFT JOIN agentdb_private.tools AS t ON s.tool = t.name
)

SELECT
    k.step_id,
    k.task_id,
    k.seq,
    k.tool,
    k.action,
    (
        SELECT format('%I.%I', n.nspname, r.relname)
        FROM pg_catalog.pg_class AS r
        INNER JOIN pg_catalog.pg_namespace AS n ON r.relnamespace = n.oid
        WHERE r.oid = k.target_oid
    ) AS target,
    k.changed_table,
    k.ops,
    k.changed_rows,
    k.outcome,
    k.verified,
    k.started_at,
    k.first_change_at
FROM stepped AS k
WHERE k.target_oid IS DISTINCT FROM k.table_oid;

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

GRANT SELECT ON agentdb.v_unlogged_changes, agentdb.v_step_mismatches, agentdb.v_step_side_changes,
agentdb.v_claims_without_change
TO agentdb_auditor;
