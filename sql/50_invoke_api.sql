-- agentdb.invoke: the agent's only way to write. See docs/sql-api.md.

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
DECLARE
    v_started timestamptz := clock_timestamp();
    -- A call_id too long to be one is refused and not stored (it could not be indexed).
    v_call_id text := CASE WHEN length(invoke.call_id) <= 200 THEN invoke.call_id END;
    v_task agentdb_private.tasks;
    v_tool agentdb_private.tools;
    v_seq integer;
    v_prior jsonb;
    v_result jsonb;
    v_needed text;
    v_state text;
    v_msg text;
BEGIN
    -- Unknown task: nothing to attach a step to, but the attempt is audited
    -- under the id that was asked for (no step row: seq is NULL).
    SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.id = invoke.task FOR UPDATE;
    IF NOT FOUND THEN
        v_task.id := invoke.task;
        RETURN agentdb_private.record_step(v_task, NULL, left(invoke.tool, 200), NULL, invoke.args,
            invoke.reason, v_call_id, v_started,
            agentdb_private.not_done('refused', 'unknown_task', format('no task %s', invoke.task)));
    END IF;

    -- The same call_id in a task returns the first receipt and writes nothing.
    IF invoke.call_id IS NOT NULL THEN
        SELECT jsonb_build_object('step_id', s.id) || s.receipt || '{"replayed": true}'
          INTO v_prior
          FROM agentdb_private.steps AS s
         WHERE s.task_id = v_task.id AND s.call_id = invoke.call_id;
        IF FOUND THEN
            RETURN v_prior;
        END IF;
    END IF;

    -- The task row lock above makes seq continuous under concurrent calls.
    SELECT coalesce(max(s.seq), 0) + 1 INTO v_seq FROM agentdb_private.steps AS s WHERE s.task_id = v_task.id;

    IF coalesce(trim(invoke.tool), '') <> '' THEN
        SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = invoke.tool;
    END IF;

    v_result := CASE
        WHEN coalesce(trim(invoke.tool), '') = ''
            THEN agentdb_private.not_done('refused', 'empty_tool', 'no tool name was given')
        WHEN v_tool.name IS NULL
            THEN agentdb_private.not_done('refused', 'unknown_tool', format('no tool named %s', left(invoke.tool, 200)))
        WHEN v_task.status <> 'running' OR v_task.closed_at IS NOT NULL
            THEN agentdb_private.not_done('refused', 'closed', 'the task is closed; its report was already taken or it was settled')
        WHEN invoke.call_id IS NOT NULL AND length(invoke.call_id) > 200
            THEN agentdb_private.not_done('invalid', 'bad_call_id', 'call_id is longer than 200 characters')
        WHEN NOT v_task.authenticated
            THEN agentdb_private.not_done('refused', 'not_authenticated', 'the user is not logged in')
    END;

    IF v_result IS NULL THEN
        v_needed := CASE WHEN v_tool.action = 'delete' THEN 'DELETE' ELSE 'WRITE' END;
        IF NOT agentdb_private.has_permission(v_task.user_id, v_needed, v_tool.name, v_tool.target) THEN
            v_result := agentdb_private.not_done('refused', 'no_permission',
                format('user %s lacks %s for %s', v_task.user_id, v_needed, v_tool.name),
                jsonb_build_object('permission', v_needed));
        ELSIF v_tool.needs_confirm OR v_tool.risk = 'irreversible' THEN
            v_result := agentdb_private.not_done('needs_confirmation', 'needs_confirmation',
                'this tool needs the user''s confirmation: propose a draft instead');
        END IF;
    END IF;

    IF v_result IS NULL THEN
        BEGIN
            v_result := agentdb_private.guarded_write(v_tool, v_task.user_id, invoke.args,
                                                      invoke.expect_rows, invoke.expected_version);
        EXCEPTION WHEN OTHERS THEN
            -- A bug or an odd table must still end as a recorded, structured refusal.
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            v_result := agentdb_private.not_done('failed', 'error', format('%s (SQLSTATE %s)', v_msg, v_state));
        END;
    END IF;

    RETURN agentdb_private.record_step(v_task, v_seq, left(invoke.tool, 200), v_tool, invoke.args,
        invoke.reason, v_call_id, v_started, v_result);
END
$$;
