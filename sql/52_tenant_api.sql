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

-- The other calls routed by a task, for user_id: drafts (sql/57_drafts.sql),
-- approvals (sql/58_actions.sql), the prompt rules (sql/56_gate.sql) and a
-- replan (sql/30_tasks.sql).
CREATE OR REPLACE FUNCTION agentdb.revise_for(
    user_id text, task uuid, draft_ref text, args jsonb, reason text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.revise_core(agentdb_private.tenant_of(revise_for.user_id), revise_for.task,
                                       revise_for.draft_ref, revise_for.args, revise_for.reason);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.reject_for(user_id text, task uuid, draft_ref text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.reject_core(agentdb_private.tenant_of(reject_for.user_id), reject_for.task,
                                       reject_for.draft_ref);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.mark_drafts_shown_for(user_id text, task uuid)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.mark_shown(agentdb_private.tenant_of(mark_drafts_shown_for.user_id),
                                      mark_drafts_shown_for.task);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.request_approval_for(
    user_id text, task uuid, tool text, args jsonb, reason text DEFAULT NULL, expect_rows integer DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.request_approval_core(
        agentdb_private.tenant_of(request_approval_for.user_id), request_approval_for.task, request_approval_for.tool,
        request_approval_for.args, request_approval_for.reason, request_approval_for.expect_rows
    );
END
$$;

-- An approver decides on an action of user_id (another user's action reads as
-- not found); a worker runs the next approved action of user_id.
CREATE OR REPLACE FUNCTION agentdb.approve_for(user_id text, action bigint, approver text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.decide_action(agentdb_private.tenant_of(approve_for.user_id), approve_for.action,
                                         approve_for.approver, true, NULL, NULL);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.approve_with_changes_for(user_id text, action bigint, approver text, args jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.decide_action(
        agentdb_private.tenant_of(approve_with_changes_for.user_id), approve_with_changes_for.action,
        approve_with_changes_for.approver, true, approve_with_changes_for.args, 'edited'
    );
END
$$;

CREATE OR REPLACE FUNCTION agentdb.reject_action_for(
    user_id text, action bigint, approver text, reason text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.decide_action(agentdb_private.tenant_of(reject_action_for.user_id), reject_action_for.action,
                                         reject_action_for.approver, false, NULL, reject_action_for.reason);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.run_next_action_for(user_id text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.run_action_core(agentdb_private.tenant_of(run_next_action_for.user_id));
END
$$;

CREATE OR REPLACE FUNCTION agentdb.context_rules_for(user_id text, task uuid, lang text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.context_rules_core(agentdb_private.tenant_of(context_rules_for.user_id),
                                              context_rules_for.task, context_rules_for.lang);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.replan_for(user_id text, task uuid)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.replan_core(agentdb_private.tenant_of(replan_for.user_id), replan_for.task);
END
$$;

GRANT EXECUTE ON FUNCTION
agentdb.revise_for(text, uuid, text, jsonb, text),
agentdb.reject_for(text, uuid, text),
agentdb.request_approval_for(text, uuid, text, jsonb, text, integer)
TO agentdb_agent;
GRANT EXECUTE ON FUNCTION
agentdb.mark_drafts_shown_for(text, uuid),
agentdb.approve_for(text, bigint, text),
agentdb.approve_with_changes_for(text, bigint, text, jsonb),
agentdb.reject_action_for(text, bigint, text, text),
agentdb.run_next_action_for(text),
agentdb.context_rules_for(text, uuid, text),
agentdb.replan_for(text, uuid)
TO agentdb_app;
