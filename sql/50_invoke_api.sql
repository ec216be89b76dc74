-- agentdb.invoke: the agent's only way to write. See docs/sql-api.md.

-- The next step number of a task (callers hold the task row lock, so seq
-- stays continuous under concurrent calls).
CREATE OR REPLACE FUNCTION agentdb_private.next_seq(p_task uuid)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(max(s.seq), 0) + 1 FROM agentdb_private.steps AS s WHERE s.task_id = p_task
$$;

-- The checks every entry point makes before touching a target: task known,
-- tool named and registered, task open, user logged in, permission held.
-- Returns a refusal result, or NULL when the call may go on.
CREATE OR REPLACE FUNCTION agentdb_private.gate_checks(
    p_task agentdb_private.tasks, p_tool_name text, p_tool agentdb_private.tools
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
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

-- One guarded call, shared by invoke, confirm and the approval worker.
-- p_confirmed: the user already confirmed this exact call (a draft or an
-- approved action), so a tool that needs confirmation may run.
CREATE OR REPLACE FUNCTION agentdb_private.invoke_core(
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
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_started timestamptz := clock_timestamp();
    -- A call_id too long to be one is refused and not stored (it could not be indexed).
    -- 'draft:' and 'action:' call_ids belong to confirm and the worker: from an
    -- agent's call they are refused and not stored, so they cannot pose as a
    -- confirmation's step (a pre-seeded 'draft:<id>' would be replayed by confirm).
    v_call_id text := CASE WHEN length(p_call_id) <= 200 AND (p_confirmed OR p_call_id !~ '^(draft|action):')
                           THEN p_call_id END;
    v_task agentdb_private.tasks;
    v_tool agentdb_private.tools;
    v_seq integer;
    v_prior jsonb;
    v_result jsonb;
    v_state text;
    v_msg text;
BEGIN
    v_result := agentdb_private.refuse_isolation(p_task, p_tool, p_args, p_reason);
    IF v_result IS NOT NULL THEN
        RETURN v_result;
    END IF;
    -- Unknown task: nothing to attach a step to, but the attempt is audited
    -- under the id that was asked for (no step row: seq is NULL).
    SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        v_task.id := p_task;
        RETURN agentdb_private.record_step(v_task, NULL, left(p_tool, 200), NULL, p_args,
            p_reason, v_call_id, v_started,
            agentdb_private.not_done('refused', 'unknown_task', format('no task %s', p_task)));
    END IF;

    -- The same call_id in a task returns the first receipt and writes nothing.
    v_prior := agentdb_private.prior_receipt(v_task.id, v_call_id);
    IF v_prior IS NOT NULL THEN
        RETURN v_prior;
    END IF;

    v_seq := agentdb_private.next_seq(v_task.id);
    IF coalesce(trim(p_tool), '') <> '' THEN
        SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = p_tool;
    END IF;

    v_result := agentdb_private.gate_checks(v_task, p_tool, v_tool);
    IF v_result IS NULL AND p_call_id IS NOT NULL AND length(p_call_id) > 200 THEN
        v_result := agentdb_private.not_done('invalid', 'bad_call_id', 'call_id is longer than 200 characters');
    END IF;
    IF v_result IS NULL AND NOT p_confirmed AND p_call_id ~ '^(draft|action):' THEN
        v_result := agentdb_private.not_done('invalid', 'bad_call_id',
            'call_ids starting with draft: or action: are reserved for confirm and the approval worker');
    END IF;
    IF v_result IS NULL AND NOT p_confirmed AND (v_tool.needs_confirm OR v_tool.risk = 'irreversible') THEN
        v_result := agentdb_private.not_done('needs_confirmation', 'needs_confirmation',
            'this tool needs the user''s confirmation: propose a draft instead');
    END IF;

    IF v_result IS NULL THEN
        BEGIN
            v_result := agentdb_private.guarded_write(v_tool, v_task.user_id, p_args,
                                                      p_expect_rows, p_expected_version, v_task.id, v_seq);
        EXCEPTION WHEN OTHERS THEN
            -- A bug or an odd table must still end as a recorded, structured refusal.
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            v_result := agentdb_private.not_done('failed', 'error', format('%s (SQLSTATE %s)', v_msg, v_state));
        END;
    END IF;

    RETURN agentdb_private.record_step(v_task, v_seq, left(p_tool, 200), v_tool, p_args,
        p_reason, v_call_id, v_started, v_result);
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
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.invoke_core(
        invoke.task, invoke.tool, invoke.args, invoke.call_id, invoke.reason,
        invoke.expect_rows, invoke.expected_version, false
    )
$$;
