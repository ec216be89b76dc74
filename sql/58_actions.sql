-- The action-confirmation centre: actions that wait for a human's approval,
-- approved ones queued for a worker that runs each through the guarded write
-- exactly once. Approvals live in the database, bound to the owner, the
-- arguments' hash and an expiry, never in process memory.

-- Ask for asynchronous approval of a call (instead of a chat confirmation).
-- p_user NULL: the task found by its id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.request_approval_core(
    p_user text, task uuid, tool text, args jsonb, reason text, expect_rows integer
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s record;
    v_tool agentdb_private.tools;
    v_refusal jsonb;
    v_action agentdb_private.actions;
    v_summary text;
BEGIN
    s := agentdb_private.step_open(p_user, request_approval_core.task, NULL, true);
    SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = request_approval_core.tool;
    v_refusal := coalesce(s.refusal, agentdb_private.step_gate(s.task, request_approval_core.tool, v_tool, NULL, true));
    IF v_refusal IS NULL AND (request_approval_core.args IS NULL OR jsonb_typeof(request_approval_core.args) <> 'object') THEN
        v_refusal := agentdb_private.not_done('invalid', 'not_an_object', 'arguments must be a JSON object');
    END IF;
    IF v_refusal IS NOT NULL THEN
        RETURN agentdb_private.record_step(s.task, s.seq, left(request_approval_core.tool, 200), v_tool, request_approval_core.args,
                                           request_approval_core.reason, NULL, s.started, v_refusal);
    END IF;
    INSERT INTO agentdb_private.actions (
        user_id, conversation_id, task_id, tool, args, args_hash, expect_rows, reason,
        summary_zh, summary_en, expires_at
    ) VALUES (
        (s.task).user_id, (s.task).conversation_id, (s.task).id, v_tool.name, request_approval_core.args,
        agentdb_private.args_hash(request_approval_core.args), request_approval_core.expect_rows,
        left(request_approval_core.reason, 500),
        agentdb_private.summarize(v_tool, request_approval_core.args, 'zh'),
        agentdb_private.summarize(v_tool, request_approval_core.args, 'en'),
        clock_timestamp() + greatest(v_tool.confirm_ttl, interval '1 day')
    ) RETURNING * INTO v_action;
    INSERT INTO agentdb_private.audit (task_id, user_id, tool, action, target, status, outcome, detail)
    VALUES ((s.task).id, (s.task).user_id, v_tool.name, 'request_approval', v_tool.target::text, 'SUCCESS',
            'pending_approval', format('action %s', v_action.id));
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES ((s.task).user_id, 'audit', currval('agentdb_private.audit_id_seq'::regclass));
    v_summary := CASE WHEN (s.task).lang = 'en' THEN v_action.summary_en ELSE v_action.summary_zh END;
    RETURN jsonb_build_object(
        'outcome', 'pending_approval', 'action_id', v_action.id, 'verified', false, 'summary', v_summary,
        'detail', agentdb_private.msg('action.pending', (s.task).lang, jsonb_build_object('summary', v_summary)));
END
$$;

CREATE OR REPLACE FUNCTION agentdb.request_approval(
    task uuid, tool text, args jsonb, reason text DEFAULT NULL, expect_rows integer DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.request_approval_core(NULL, request_approval.task, request_approval.tool,
        request_approval.args, request_approval.reason, request_approval.expect_rows);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.grant_approver(user_id text, approver text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_added boolean;
BEGIN
    -- Both ids form the table's key: refuse empty or very long ones with a clear error.
    IF coalesce(trim(grant_approver.user_id), '') = '' OR coalesce(trim(grant_approver.approver), '') = ''
            OR length(grant_approver.user_id) > 200 OR length(grant_approver.approver) > 200 THEN
        RAISE EXCEPTION 'grant_approver: user_id and approver are required, at most 200 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO agentdb_private.approvers (user_id, approver)
    VALUES (grant_approver.user_id, grant_approver.approver)
    ON CONFLICT DO NOTHING
    RETURNING true INTO v_added;
    RETURN v_added;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.revoke_approver(user_id text, approver text)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM agentdb_private.approvers AS a
         WHERE a.user_id = revoke_approver.user_id AND a.approver = revoke_approver.approver
        RETURNING 1
    )
    SELECT count(*) > 0 FROM gone
$$;

-- An action, locked; p_user NULL: found by its id alone (the forms without the user).
CREATE OR REPLACE FUNCTION agentdb_private.action_row(p_user text, p_action bigint)
RETURNS agentdb_private.actions
LANGUAGE plpgsql
AS $$
DECLARE
    v_action agentdb_private.actions;
BEGIN
    IF p_user IS NULL THEN
        SELECT * INTO v_action FROM agentdb_private.actions AS a WHERE a.id = p_action FOR UPDATE;
    ELSE
        SELECT * INTO v_action FROM agentdb_private.actions AS a
         WHERE a.user_id = p_user AND a.id = p_action FOR UPDATE;
    END IF;
    RETURN v_action;
END
$$;

-- The one decision function behind approve / approve_with_changes / reject_action
-- and their forms for a user (another user's action reads as not found).
DROP FUNCTION IF EXISTS agentdb_private.decide_action(bigint, text, boolean, jsonb, text);
CREATE OR REPLACE FUNCTION agentdb_private.decide_action(
    p_user text, p_action bigint, p_approver text, p_approve boolean, p_args jsonb, p_note text
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_action agentdb_private.actions := agentdb_private.action_row(p_user, p_action);
    v_refusal text;
    -- A value, not a call: on Citus an UPDATE takes no VOLATILE function.
    v_now timestamptz := clock_timestamp();
BEGIN
    v_refusal := CASE
        WHEN v_action.id IS NULL THEN 'action_not_found'
        WHEN coalesce(p_approver, '') = '' THEN 'approver_required'
        WHEN p_approver <> v_action.user_id AND NOT EXISTS (
                SELECT 1 FROM agentdb_private.approvers AS ap
                 WHERE ap.user_id = v_action.user_id AND ap.approver = p_approver) THEN 'not_an_approver'
        WHEN v_action.status = 'pending' AND v_action.expires_at < v_now THEN 'action_expired'
        WHEN v_action.status <> 'pending' THEN 'action_decided'
        WHEN p_args IS NOT NULL AND jsonb_typeof(p_args) <> 'object' THEN 'not_an_object'
    END;
    INSERT INTO agentdb_private.audit (task_id, user_id, tool, action, status, outcome, refusal, detail, payload)
    VALUES (v_action.task_id, coalesce(v_action.user_id, agentdb_private.tenant_of(p_user)), v_action.tool,
            CASE WHEN p_approve THEN 'approve' ELSE 'reject_action' END,
            CASE WHEN v_refusal IS NULL THEN 'SUCCESS' ELSE 'REFUSED' END,
            coalesce(v_refusal, CASE WHEN p_approve THEN 'approved' ELSE 'rejected' END), v_refusal,
            format('action %s by %s', p_action, p_approver),
            jsonb_build_object('approver', p_approver, 'args', p_args, 'note', p_note));
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES (coalesce(v_action.user_id, agentdb_private.tenant_of(p_user)), 'audit', currval('agentdb_private.audit_id_seq'::regclass));
    IF v_refusal IS NOT NULL THEN
        IF v_refusal = 'action_expired' THEN
            UPDATE agentdb_private.actions AS a SET status = 'expired', finished_at = v_now
             WHERE a.user_id = v_action.user_id AND a.id = p_action;
        END IF;
        RETURN jsonb_build_object('outcome', 'refused', 'refusal', v_refusal, 'action_id', p_action);
    END IF;
    UPDATE agentdb_private.actions AS a
       SET status = CASE WHEN p_approve THEN 'approved' ELSE 'rejected' END,
           approver = p_approver, approved_args = p_args, decided_at = v_now,
           decision_note = left(p_note, 500),
           finished_at = CASE WHEN p_approve THEN NULL ELSE v_now END
     WHERE a.user_id = v_action.user_id AND a.id = p_action;
    IF p_approve THEN
        -- Wakes a listening worker; delivered at commit, so it never sees an uncommitted job.
        -- Any role may LISTEN: the payload is empty, the worker reads the queue itself.
        PERFORM pg_notify('agentdb_actions', '');
    END IF;
    RETURN jsonb_build_object('outcome', CASE WHEN p_approve THEN 'approved' ELSE 'rejected' END,
                              'action_id', p_action);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.approve(action bigint, approver text)
RETURNS jsonb
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT agentdb_private.decide_action(NULL, approve.action, approve.approver, true, NULL, NULL) $$;

CREATE OR REPLACE FUNCTION agentdb.approve_with_changes(action bigint, approver text, args jsonb)
RETURNS jsonb
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.decide_action(
        NULL, approve_with_changes.action, approve_with_changes.approver, true, approve_with_changes.args, 'edited'
    )
$$;

CREATE OR REPLACE FUNCTION agentdb.reject_action(action bigint, approver text, reason text DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.decide_action(
        NULL, reject_action.action, reject_action.approver, false, NULL, reject_action.reason
    )
$$;

-- Take one approved action and run it, all in this transaction: a crash before
-- commit leaves it approved (retried later), a commit records it done (never
-- run twice). SKIP LOCKED lets several workers share the queue. p_user: only
-- that user's actions; NULL: any user's, the users in the order of their
-- oldest approved action (so the oldest action first), each user's taken by
-- user and lock (on Citus a locking read of every shard is refused; each
-- statement here reads one shard).
CREATE OR REPLACE FUNCTION agentdb_private.run_action_core(p_user text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_action agentdb_private.actions;
    v_lang text;
    v_exec uuid;
    v_receipt jsonb;
    v_now timestamptz;
    v_user text;
BEGIN
    IF p_user IS NULL THEN
        FOR v_user IN SELECT a.user_id FROM agentdb_private.actions AS a WHERE a.status = 'approved'
                       GROUP BY a.user_id ORDER BY min(a.id) LOOP
            v_receipt := agentdb_private.run_action_core(v_user);
            IF v_receipt IS NOT NULL THEN
                RETURN v_receipt;
            END IF;
        END LOOP;
        RETURN NULL;
    END IF;
    SELECT * INTO v_action FROM agentdb_private.actions AS a
     WHERE a.user_id = p_user AND a.status = 'approved'
     ORDER BY a.id
     LIMIT 1
     FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.lang INTO v_lang FROM agentdb_private.tasks AS t
     WHERE t.user_id = v_action.user_id AND t.id = v_action.task_id;
    -- The approval is the user's authentication for this one action.
    INSERT INTO agentdb_private.tasks (user_id, conversation_id, goal, authenticated, lang)
    VALUES (v_action.user_id, v_action.conversation_id, format('approved action %s', v_action.id), true,
            coalesce(v_lang, 'zh'))
    RETURNING id INTO v_exec;
    v_receipt := agentdb_private.invoke_core(v_action.user_id, v_exec, v_action.tool, coalesce(v_action.approved_args, v_action.args),
        'action:' || v_action.id, format('approved by %s', v_action.approver), v_action.expect_rows, NULL, true);
    v_now := clock_timestamp();  -- a value: Citus takes no VOLATILE call in an UPDATE
    UPDATE agentdb_private.actions AS a
       SET status = CASE WHEN v_receipt ->> 'outcome' = 'success' THEN 'done' ELSE 'failed' END,
           exec_task_id = v_exec, step_id = (v_receipt ->> 'step_id')::bigint, receipt = v_receipt,
           finished_at = v_now
     WHERE a.user_id = v_action.user_id AND a.id = v_action.id;
    PERFORM agentdb_private.finish_core(v_action.user_id, v_exec);
    RETURN jsonb_build_object('action_id', v_action.id, 'receipt', v_receipt);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.run_next_action()
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.run_action_core(NULL);
END
$$;

-- What waits for approval, per user, with the result of what was decided.
CREATE OR REPLACE VIEW agentdb.pending_actions AS
SELECT
    a.id AS action_id,
    a.user_id,
    a.conversation_id,
    a.tool,
    a.args,
    a.summary_zh,
    a.summary_en,
    a.reason,
    a.created_at,
    a.expires_at
FROM agentdb_private.actions AS a
WHERE a.status = 'pending' AND a.expires_at >= clock_timestamp();

CREATE OR REPLACE VIEW agentdb.actions AS
SELECT
    a.id AS action_id,
    a.user_id,
    a.conversation_id,
    a.tool,
    a.args,
    a.approved_args,
    a.summary_zh,
    a.summary_en,
    a.status,
    a.approver,
    a.decided_at,
    a.decision_note,
    a.receipt ->> 'outcome' AS outcome,
    a.receipt ->> 'detail' AS detail,
    a.step_id,
    a.created_at,
    a.finished_at
FROM agentdb_private.actions AS a;

GRANT EXECUTE ON FUNCTION agentdb.request_approval(uuid, text, jsonb, text, integer) TO agentdb_agent;
GRANT EXECUTE ON FUNCTION
agentdb.approve(bigint, text),
agentdb.approve_with_changes(bigint, text, jsonb),
agentdb.reject_action(bigint, text, text),
agentdb.run_next_action(),
agentdb.grant_approver(text, text),
agentdb.revoke_approver(text, text)
TO agentdb_app;
GRANT SELECT ON agentdb.pending_actions, agentdb.actions TO agentdb_app, agentdb_auditor;
