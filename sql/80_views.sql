-- Views for runtimes (agentdb.tools) and for DBAs (v_*). Owned by the
-- installer, so readers need no rights on the private tables.

-- JSON Schema of a tool's arguments, derived from its table's column types.
-- A view runs its functions with the reader's rights, so this one is SECURITY
-- DEFINER and granted to the roles that read agentdb.tools (sql/90_grants.sql);
-- they still cannot name it, having no USAGE on agentdb_private.
CREATE OR REPLACE FUNCTION agentdb_private.args_schema(p_tool agentdb_private.tools)
RETURNS jsonb
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH cols AS (
        SELECT c.*,
               d.description AS comment
          FROM agentdb_private.table_columns(p_tool.target) AS c
          LEFT JOIN pg_catalog.pg_attribute AS a
            ON a.attrelid = p_tool.target AND a.attname = c.column_name
          LEFT JOIN pg_catalog.pg_description AS d
            ON d.objoid = p_tool.target AND d.classoid = 'pg_class'::regclass AND d.objsubid = a.attnum
         WHERE c.column_name IS DISTINCT FROM p_tool.owner_column
           AND (p_tool.action <> 'delete' OR c.column_name = ANY (p_tool.key_columns))
           -- Generated keys (identity, serial) are the database's to choose.
           AND (p_tool.action <> 'insert' OR NOT (a.attidentity <> '' OR a.attgenerated <> ''
                OR (c.has_default AND c.column_name = ANY (p_tool.key_columns))))
    )
    SELECT jsonb_build_object(
        'type', 'object',
        'properties', coalesce(jsonb_object_agg(
            cols.column_name,
            agentdb_private.json_schema_of(cols.type_oid, cols.type_name)
            || CASE WHEN cols.comment IS NULL THEN '{}' ELSE jsonb_build_object('description', cols.comment) END
        ), '{}'),
        'required', coalesce(jsonb_agg(cols.column_name) FILTER (
            WHERE CASE p_tool.action
                WHEN 'insert' THEN cols.not_null AND NOT cols.has_default
                ELSE cols.column_name = ANY (p_tool.key_columns)
                     OR cols.column_name IS NOT DISTINCT FROM p_tool.version_column
            END), '[]'),
        'additionalProperties', false
    )
      FROM cols
$$;

-- The same by tool name. On Citus a view over the tools table that called a
-- function taking the table's row type would depend on itself through that
-- type ("circular dependencies"), and a query pushed to a shard hands the
-- function the shard's row type instead: the row is read into a variable first.
CREATE OR REPLACE FUNCTION agentdb_private.args_schema(p_name text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tool agentdb_private.tools;
BEGIN
    SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = p_name;
    RETURN CASE WHEN v_tool.name IS NOT NULL THEN agentdb_private.args_schema(v_tool) END;
END
$$;

CREATE OR REPLACE VIEW agentdb.tools AS
SELECT
    t.name,
    t.action,
    -- Schema-qualified whatever the reader's search_path.
    (
        SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class AS c
        INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid
        WHERE c.oid = t.target
    ) AS target,
    t.label_zh,
    t.label_en,
    coalesce(t.description, t.label_en) AS description,
    t.key_columns,
    t.owner_column,
    t.compare_columns,
    t.dedup_columns,
    t.conflict_check::text AS conflict_check,
    t.risk,
    t.version_column,
    t.needs_confirm OR t.risk = 'irreversible' AS needs_confirm,
    t.max_rows,
    agentdb_private.args_schema(t.name) AS args_schema,
    t.created_at,
    t.updated_at,
    -- New columns go last: CREATE OR REPLACE VIEW can only append.
    t.confirm_ttl,
    t.backs
FROM agentdb_private.tools AS t;

CREATE OR REPLACE VIEW agentdb.permissions AS
SELECT
    p.user_id,
    p.permission,
    p.tool,
    (
        SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class AS c
        INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid
        WHERE c.oid = p.target
    ) AS target,
    p.granted_at
FROM agentdb_private.permissions AS p;

CREATE OR REPLACE VIEW agentdb.v_tasks AS
SELECT
    t.id AS task_id,
    t.user_id,
    t.conversation_id,
    t.goal,
    t.authenticated,
    t.status,
    t.replans,
    t.closed_at,
    t.created_at,
    t.finished_at,
    t.settled_by,
    count(s.id) AS steps,
    count(s.id) FILTER (WHERE s.outcome = 'success' AND s.verified) AS verified_steps,
    count(s.id) FILTER (WHERE NOT (s.outcome = 'success' AND s.verified)) AS failed_steps
FROM agentdb_private.tasks AS t
LEFT JOIN agentdb_private.steps AS s ON t.user_id = s.user_id AND t.id = s.task_id
-- Every column named (not the key's functional dependency): the view then
-- does not hold on the tasks' primary key, which revision 0014 replaced.
GROUP BY
    t.user_id, t.id, t.conversation_id, t.goal, t.authenticated, t.status, t.replans, t.closed_at,
    t.created_at, t.finished_at, t.settled_by;

CREATE OR REPLACE VIEW agentdb.v_steps AS
SELECT
    s.id AS step_id,
    s.task_id,
    t.user_id,
    s.seq,
    s.tool,
    s.action,
    s.args,
    s.reason,
    s.outcome,
    s.refusal,
    s.verified,
    s.attempts,
    s.affected_rows,
    s.error,
    s.call_id,
    s.receipt ->> 'detail' AS detail,
    s.started_at,
    s.finished_at,
    s.finished_at - s.started_at AS duration
FROM agentdb_private.steps AS s
INNER JOIN agentdb_private.tasks AS t ON s.user_id = t.user_id AND s.task_id = t.id;

CREATE OR REPLACE VIEW agentdb.v_audit AS
SELECT
    a.id AS audit_id,
    a.at,
    a.task_id,
    a.step_id,
    a.user_id,
    a.tool,
    a.action,
    a.target,
    a.status,
    a.outcome,
    a.refusal,
    a.detail,
    a.db_role
FROM agentdb_private.audit AS a;

-- One row per step a DBA should look at.
CREATE OR REPLACE VIEW agentdb.v_problems AS
SELECT
    s.step_id,
    s.task_id,
    s.user_id,
    s.seq,
    s.tool,
    s.outcome,
    s.refusal,
    s.attempts,
    s.error,
    s.finished_at AS at,
    CASE
        WHEN s.outcome = 'unverified' THEN 'unverified'
        WHEN s.outcome = 'failed' THEN 'failed'
        WHEN s.outcome = 'success' AND s.attempts > 1 THEN 'second_attempt'
        ELSE 'refused'
    END AS problem
FROM agentdb.v_steps AS s
WHERE s.outcome IN ('unverified', 'failed') OR s.attempts > 1;

CREATE OR REPLACE VIEW agentdb.v_errors_by_tool AS
SELECT
    s.tool,
    s.outcome,
    s.refusal,
    count(*) AS steps,
    max(s.finished_at) AS last_at
FROM agentdb_private.steps AS s
WHERE NOT (s.outcome = 'success' AND s.verified)
GROUP BY s.tool, s.outcome, s.refusal;

-- One row per task: what the agent did for a user, what the model said, what
-- the user read, and the claims nothing backed. "What did the agent do for
-- user X yesterday, and which of its claims were false?" is
--   SELECT * FROM agentdb.v_turns
--    WHERE user_id = 'X' AND created_at >= DATE 'yesterday' AND created_at < DATE 'today';
-- answered through tasks (user_id, created_at), then per task steps (task_id,
-- seq), replies (task_id), claims (task_id) and audit (task_id).
CREATE OR REPLACE VIEW agentdb.v_turns AS
SELECT
    t.id AS task_id,
    t.user_id,
    t.conversation_id,
    t.goal,
    t.created_at,
    t.finished_at,
    t.status,
    coalesce(s.steps, 0) AS steps,
    coalesce(s.steps_ok, 0) AS steps_ok,
    coalesce(s.steps_failed, 0) AS steps_failed,
    s.tools,
    a.model_said,
    r.delivered_text AS user_read,
    r.verdict,
    a.book_state,
    a.replaced_because,
    c.claims,
    coalesce(r.pending, '[]'::jsonb) AS pending_claims
FROM agentdb_private.tasks AS t
LEFT JOIN LATERAL (
    SELECT
        count(*) AS steps,
        count(*) FILTER (WHERE st.outcome = 'success' AND st.verified) AS steps_ok,
        count(*) FILTER (WHERE NOT (st.outcome = 'success' AND st.verified)) AS steps_failed,
        array_agg(st.tool ORDER BY st.seq) AS tools
    FROM agentdb_private.steps AS st
    WHERE st.task_id = t.id
) AS s ON true
LEFT JOIN agentdb_private.replies AS r ON t.user_id = r.user_id AND t.id = r.task_id
LEFT JOIN LATERAL (
    SELECT
        au.payload ->> 'model_text' AS model_said,
        au.payload ->> 'book_state' AS book_state,
        au.payload ->> 'reason' AS replaced_because
    FROM agentdb_private.audit AS au
    WHERE au.task_id = t.id AND au.action = 'reply'
    ORDER BY au.id DESC
    LIMIT 1
) AS a ON true
LEFT JOIN LATERAL (
    SELECT
        jsonb_agg(
            jsonb_build_object('kind', cl.kind, 'text', cl.claim_text, 'tool', cl.tool, 'source', cl.source)
            ORDER BY cl.id
        ) AS claims
    FROM agentdb_private.claims AS cl
    WHERE cl.task_id = t.id
) AS c ON true;

GRANT SELECT ON agentdb.v_turns TO agentdb_app, agentdb_auditor;
