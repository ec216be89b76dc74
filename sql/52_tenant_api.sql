-- The tenant-first entry points: the same calls, named <call>_for, with the
-- user they act for as the first argument (a name of their own: an overload
-- would make a call with untyped arguments ambiguous). On one node they are the task-only forms plus a check
-- that the task is that user's (another user's task reads as unknown, and the
-- refusal is audited under the user named). On Citus they are what makes a
-- call run on one worker: `pyagentdb distribute` distributes every function
-- taking user_id first by that argument, co-located with the tasks, so the
-- coordinator hands the whole call to the worker that holds the user's rows
-- (docs/scaling.md). Every statement behind them names the user.

-- The user a call is made for, as stored: a user id no task can have (NULL,
-- longer than begin_task allows) is no user (''), so the refusal's audit row
-- can be written.
CREATE OR REPLACE FUNCTION agentdb_private.tenant_of(p_user text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN length(p_user) <= 200 THEN p_user ELSE '' END $$;

-- agentdb.invoke for user_id (sql/50_invoke_api.sql).
CREATE OR REPLACE FUNCTION agentdb.invoke_for(
    user_id text,
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
        agentdb_private.tenant_of(invoke_for.user_id), invoke_for.task, invoke_for.tool, invoke_for.args, invoke_for.call_id,
        invoke_for.reason, invoke_for.expect_rows, invoke_for.expected_version, false
    );
END
$$;

GRANT EXECUTE ON FUNCTION
agentdb.invoke_for(text, uuid, text, jsonb, text, text, integer, bigint)
TO agentdb_agent;

-- The exit gate for user_id (sql/56_gate.sql).
CREATE OR REPLACE FUNCTION agentdb.report_for(user_id text, task uuid)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.report_core(agentdb_private.tenant_of(report_for.user_id), report_for.task);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.report_text_for(user_id text, task uuid, lang text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.report_text_core(agentdb_private.tenant_of(report_text_for.user_id), report_text_for.task,
                                            report_text_for.lang);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.finalize_reply_for(
    user_id text, task uuid, model_text text, claims jsonb DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.finalize_core(agentdb_private.tenant_of(finalize_reply_for.user_id), finalize_reply_for.task,
                                         finalize_reply_for.model_text, finalize_reply_for.claims);
END
$$;

-- Settling a task for user_id (sql/30_tasks.sql).
CREATE OR REPLACE FUNCTION agentdb.finish_task_for(user_id text, task uuid)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.finish_core(agentdb_private.tenant_of(finish_task_for.user_id), finish_task_for.task);
END
$$;

GRANT EXECUTE ON FUNCTION
agentdb.report_for(text, uuid),
agentdb.report_text_for(text, uuid, text)
TO agentdb_app, agentdb_agent;
GRANT EXECUTE ON FUNCTION
agentdb.finalize_reply_for(text, uuid, text, jsonb),
agentdb.finish_task_for(text, uuid)
TO agentdb_app;

-- Drafts for user_id (sql/57_drafts.sql).
CREATE OR REPLACE FUNCTION agentdb.propose_for(
    user_id text, task uuid, tool text, args jsonb, reason text DEFAULT NULL, expect_rows integer DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.propose_core(agentdb_private.tenant_of(propose_for.user_id), propose_for.task, propose_for.tool,
                                        propose_for.args, propose_for.reason, propose_for.expect_rows);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.confirm_for(user_id text, task uuid, draft_ref text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.confirm_core(agentdb_private.tenant_of(confirm_for.user_id), confirm_for.task, confirm_for.draft_ref);
END
$$;

GRANT EXECUTE ON FUNCTION
agentdb.propose_for(text, uuid, text, jsonb, text, integer),
agentdb.confirm_for(text, uuid, text)
TO agentdb_agent;
