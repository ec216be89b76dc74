-- agentdb.invoke: the agent's only way to write. See docs/sql-api.md.
--
-- The envelope of every guarded call (invoke, confirm, the approval worker,
-- propose, request_approval and run_sql): step_open locks the task and finds a
-- replay, step_gate decides whether the call may run, and record_step
-- (sql/45_record.sql) writes the step and audit rows. Each rule lives in one
-- of them.

-- The step number is read by step_open's statement (callers hold the task row
-- lock, so seq stays continuous under concurrent calls).
DROP FUNCTION IF EXISTS agentdb_private.next_seq(uuid);
DROP FUNCTION IF EXISTS agentdb_private.next_seq(text, uuid);

-- The checks every entry point makes before touching a target: task known,
-- tool named and registered, task open, user logged in, permission held.
-- Returns a refusal result, or NULL when the call may go on.
CREATE OR REPLACE FUNCTION agentdb_private.gate_checks(
    p_task agentdb_private.tasks, p_tool_name text, p_tool agentdb_private.tools
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_needed text := CASE WHEN p_tool.action = 'delete' THEN 'DELETE' ELSE 'WRITE' END;
BEGIN
    RETURN CASE
        WHEN p_task.id IS NULL
            THEN agentdb_private.not_done('refused', 'unknown_task', 'no such task')
        WHEN coalesce(trim(p_tool_name), '') = ''
            THEN agentdb_private.not_done('refused', 'empty_tool', 'no tool name was given')
        WHEN p_tool.name IS NULL
            THEN agentdb_private.not_done('refused', 'unknown_tool', format('no tool named %s', left(p_tool_name, 200)))
        WHEN p_task.status <> 'running' OR p_task.closed_at IS NOT NULL
            THEN agentdb_private.not_done('refused', 'closed', 'the task is closed; its report was already taken or it was settled')
        WHEN NOT p_task.authenticated
            THEN agentdb_private.not_done('refused', 'not_authenticated', 'the user is not logged in')
        WHEN NOT agentdb_private.has_permission(p_task.user_id, v_needed, p_tool.name, p_tool.target)
            THEN agentdb_private.not_done('refused', 'no_permission',
                format('user %s lacks %s for %s', p_task.user_id, v_needed, p_tool.name),
                jsonb_build_object('permission', v_needed))
    END;
END
$$;

-- Open a guarded call on a task:
--   * outside READ COMMITTED the call is refused before anything is locked (an
--     older snapshot would hide a racing call's rows: a duplicate decided on
--     it, a step number taken twice); the task is read, not locked;
--   * the task row is locked (FOR UPDATE); an unknown task leaves task.id as
--     asked and seq NULL (the refusal is then audited without a step);
--   * prior: the receipt of an earlier call with this call_id (a replay);
--   * call_id: the call_id as stored: NULL when too long to be one, or when an
--     agent's call_id takes a prefix reserved for confirm and the worker
--     (draft:, action:), so it can never pose as a confirmation's step.
--   * p_user: the user the call is made for (the tenant-first entry points);
--     a task of another user reads as unknown and is audited under p_user.
--     NULL: the task-only entry points, which find the task by its id.
--   * p_tool (optional): the tool the call names, read in the statement that
--     reads the replay and the step number, with what gate_clear asks of it:
--     whether the user holds the permission it needs (permitted) and whether
--     DDL is watched (watched: agentdb_private.ddl_watched).
DROP FUNCTION IF EXISTS agentdb_private.step_open(uuid, text, boolean);
DROP FUNCTION IF EXISTS agentdb_private.step_open(text, uuid, text, boolean);
CREATE OR REPLACE FUNCTION agentdb_private.step_open(
    p_user text, p_task uuid, p_call_id text, p_confirmed boolean, p_tool text DEFAULT NULL,
    OUT task agentdb_private.tasks, OUT seq integer, OUT call_id text, OUT started timestamptz,
    OUT prior jsonb, OUT refusal jsonb, OUT tool agentdb_private.tools, OUT permitted boolean, OUT watched boolean
)
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
BEGIN
    started := clock_timestamp();
    call_id := CASE WHEN length(p_call_id) <= 200 AND (p_confirmed OR p_call_id !~ '^(draft|action):') THEN p_call_id END;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        task := agentdb_private.task_row(p_user, p_task, false);
        refusal := agentdb_private.not_done('refused', 'isolation_level',
            format('agentdb calls run in READ COMMITTED; this transaction is %s',
                   upper(current_setting('transaction_isolation'))));
    ELSIF p_user IS NULL THEN
        SELECT * INTO task FROM agentdb_private.tasks AS t WHERE t.id = p_task FOR UPDATE;
    ELSE
        SELECT * INTO task FROM agentdb_private.tasks AS t WHERE t.user_id = p_user AND t.id = p_task FOR UPDATE;
    END IF;
    IF task.id IS NULL THEN
        task.id := p_task;
        task.user_id := p_user;
        refusal := coalesce(refusal, agentdb_private.not_done('refused', 'unknown_task', format('no task %s', p_task)));
        RETURN;
    END IF;
    SELECT tl AS tool,
           CASE WHEN refusal IS NULL THEN (
               SELECT jsonb_build_object('step_id', s.id) || s.receipt || '{"replayed": true}'
                 FROM agentdb_private.steps AS s
                WHERE s.user_id = task.user_id AND s.task_id = task.id AND s.call_id = step_open.call_id) END AS prior,
           (SELECT coalesce(max(s.seq), 0) + 1 FROM agentdb_private.steps AS s
             WHERE s.user_id = task.user_id AND s.task_id = task.id) AS seq,
           tl.name IS NOT NULL AND EXISTS (
               SELECT 1 FROM agentdb_private.permissions AS p
                WHERE p.user_id = task.user_id
                  AND p.permission = CASE WHEN tl.action = 'delete' THEN 'DELETE' ELSE 'WRITE' END
                  AND (p.tool = tl.name OR p.target = tl.target OR (p.tool IS NULL AND p.target IS NULL))) AS permitted,
           EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger AS e
                    WHERE e.evtname = 'agentdb_ddl' AND e.evtenabled <> 'D')
           OR agentdb_private.on_citus_worker() AS watched
      INTO r
      FROM (SELECT 1) AS one
      LEFT JOIN agentdb_private.tools AS tl ON tl.name = p_tool;
    tool := r.tool;
    prior := r.prior;
    seq := r.seq;
    permitted := r.permitted;
    watched := r.watched;
END
$$;

-- The task-only form (one node): the task found by its id.
CREATE OR REPLACE FUNCTION agentdb_private.step_open(
    p_task uuid, p_call_id text, p_confirmed boolean,
    OUT task agentdb_private.tasks, OUT seq integer, OUT call_id text, OUT started timestamptz,
    OUT prior jsonb, OUT refusal jsonb
)
LANGUAGE sql
AS $$
    SELECT s.task, s.seq, s.call_id, s.started, s.prior, s.refusal
      FROM agentdb_private.step_open(NULL::text, p_task, p_call_id, p_confirmed) AS s
$$;

-- Is the call clear to run, by what step_open read (one small expression, SQL:
-- inlined into the caller's)? true only when step_gate would find nothing to
-- refuse; anything else (NULL included) goes through step_gate, which says why.
-- A tool is clear only while DDL is watched: otherwise step_gate compares its
-- signature.
CREATE OR REPLACE FUNCTION agentdb_private.gate_clear(
    p_task agentdb_private.tasks, p_tool agentdb_private.tools, p_call_id text, p_confirmed boolean,
    p_permitted boolean, p_watched boolean
)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_task.status = 'running' AND p_task.closed_at IS NULL AND p_task.authenticated
       AND p_tool.name IS NOT NULL AND p_permitted AND p_watched
       AND p_tool.stale_reason IS NULL AND p_tool.compiled_sig IS NOT NULL
       AND coalesce(length(p_call_id) <= 200, true)
       AND (p_confirmed OR (coalesce(p_call_id !~ '^(draft|action):', true)
                            AND NOT p_tool.needs_confirm AND p_tool.risk <> 'irreversible'))
$$;

-- May this call run? The gate checks, then the call_id rules, then whether
-- the tool needs the user's confirmation (p_confirmed: it has it), then
-- whether its compiled code is current. p_permission_later: the caller checks
-- the permission itself once it knows the table (run_sql). NULL: it may run.
CREATE OR REPLACE FUNCTION agentdb_private.step_gate(
    p_task agentdb_private.tasks, p_tool_name text, p_tool agentdb_private.tools, p_call_id text,
    p_confirmed boolean, p_permission_later boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_refusal jsonb := agentdb_private.gate_checks(p_task, p_tool_name, p_tool);
    v_stale text;
BEGIN
    IF p_permission_later AND v_refusal ->> 'refusal' = 'no_permission' THEN
        v_refusal := NULL;
    END IF;
    IF v_refusal IS NOT NULL THEN
        RETURN v_refusal;
    ELSIF length(p_call_id) > 200 THEN
        RETURN agentdb_private.not_done('invalid', 'bad_call_id', 'call_id is longer than 200 characters');
    ELSIF NOT p_confirmed AND p_call_id ~ '^(draft|action):' THEN
        RETURN agentdb_private.not_done('invalid', 'bad_call_id',
            'call_ids starting with draft: or action: are reserved for confirm and the approval worker');
    ELSIF NOT p_confirmed AND (p_tool.needs_confirm OR p_tool.risk = 'irreversible') THEN
        RETURN agentdb_private.not_done('needs_confirmation', 'needs_confirmation',
            'this tool needs the user''s confirmation: propose a draft instead');
    END IF;
    -- A registered tool (run_sql's stand-in has no created_at) runs only through current code.
    IF p_tool.created_at IS NOT NULL THEN
        v_stale := agentdb_private.tool_stale(p_tool);
    END IF;
    IF v_stale IS NOT NULL THEN
        RETURN agentdb_private.not_done('refused', 'stale_tool',
            format('tool %s is stale (%s): re-register it or SELECT agentdb.compile_tools()', p_tool.name, v_stale));
    END IF;
    RETURN NULL;
END
$$;

-- Run a tool's compiled write (a dry run: only its checks). The compiled code
-- turns whatever happens into a result; a tool without compiled code is refused.
CREATE OR REPLACE FUNCTION agentdb_private.step_run(
    p_tool agentdb_private.tools, p_task agentdb_private.tasks, p_args jsonb, p_expect_rows integer,
    p_version bigint, p_call text, p_dry boolean
)
RETURNS jsonb
LANGUAGE sql
AS $$
    SELECT coalesce(
        agentdb_tools._run(p_tool.name, p_task.user_id, p_args, p_expect_rows, p_version, p_call, p_dry, p_task.lang),
        agentdb_private.not_done('refused', 'stale_tool',
            format('tool %s has no compiled function: SELECT agentdb.compile_tools()', p_tool.name)))
$$;

-- One guarded call through a compiled tool, shared by invoke, confirm and the
-- approval worker. p_confirmed: the user already confirmed this exact call (a
-- draft or an approved action), so a tool that needs confirmation may run.
DROP FUNCTION IF EXISTS agentdb_private.invoke_core(uuid, text, jsonb, text, text, integer, bigint, boolean);
CREATE OR REPLACE FUNCTION agentdb_private.invoke_core(
    p_user text,
    p_task uuid,
    p_tool text,
    p_args jsonb,
    p_call_id text,
    p_reason text,
    p_expect_rows integer,
    p_expected_version bigint,
    p_confirmed boolean
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s record;
    v_tool agentdb_private.tools;
    v_result jsonb;
BEGIN
    s := agentdb_private.step_open(p_user, p_task, p_call_id, p_confirmed,
                                   CASE WHEN coalesce(trim(p_tool), '') <> '' THEN p_tool END);
    IF s.prior IS NOT NULL THEN
        RETURN s.prior;
    END IF;
    v_tool := s.tool;
    IF s.refusal IS NULL
       AND agentdb_private.gate_clear(s.task, v_tool, p_call_id, p_confirmed, s.permitted, s.watched) THEN
        v_result := NULL;
    ELSE
        v_result := coalesce(s.refusal, agentdb_private.step_gate(s.task, p_tool, v_tool, p_call_id, p_confirmed));
    END IF;
    IF v_result IS NULL THEN
        v_result := agentdb_private.step_run(v_tool, s.task, p_args, p_expect_rows, p_expected_version,
                                             (s.task).id::text || ':' || s.seq, false);
    END IF;
    RETURN agentdb_private.record_step(s.task, s.seq, left(p_tool, 200), v_tool, p_args, p_reason, s.call_id,
                                       s.started, v_result);
END
$$;

-- The agent's write. Tools that need confirmation are refused here
-- (outcome needs_confirmation): they go through propose/confirm instead.
CREATE OR REPLACE FUNCTION agentdb.invoke(
    task uuid,
    tool text,
    args jsonb,
    call_id text DEFAULT NULL,
    reason text DEFAULT NULL,
    expect_rows integer DEFAULT NULL,
    expected_version bigint DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.invoke_core(
        NULL, invoke.task, invoke.tool, invoke.args, invoke.call_id, invoke.reason,
        invoke.expect_rows, invoke.expected_version, false
    );
END
$$;
