-- Drafts: risky tools are proposed, shown to the user, and run only when the
-- user confirms in a later message. The boundary lives here, not in a prompt.

-- A user-facing summary of a call: the tool's label and the values asked for,
-- in table column order (values only: column names never reach the user).
CREATE OR REPLACE FUNCTION agentdb_private.summarize(p_tool agentdb_private.tools, p_args jsonb, p_lang text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH flat AS (
        SELECT CASE WHEN p_args ? 'where' AND jsonb_typeof(p_args -> 'where') = 'object'
                    THEN coalesce(p_args -> 'set', '{}') || (p_args -> 'where') ELSE p_args END AS a
    )
    SELECT CASE WHEN p_lang = 'en' THEN p_tool.label_en ELSE p_tool.label_zh END
        || coalesce(CASE WHEN p_lang = 'en' THEN ': ' ELSE ':' END || string_agg(
            left(flat.a ->> c.column_name, 80), CASE WHEN p_lang = 'en' THEN ', ' ELSE ',' END
            ORDER BY c.ordinal), '')
      FROM flat
      LEFT JOIN LATERAL (
          SELECT t.column_name, row_number() OVER () AS ordinal
            FROM agentdb_private.table_columns(p_tool.target) AS t
      ) AS c ON flat.a ? c.column_name AND c.column_name IS DISTINCT FROM p_tool.owner_column
             AND jsonb_typeof(flat.a -> c.column_name) NOT IN ('null', 'object', 'array')
     GROUP BY flat.a
$$;

CREATE OR REPLACE FUNCTION agentdb_private.args_hash(p_args jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT encode(sha256(convert_to(coalesce(p_args::text, 'null'), 'UTF8')), 'hex') $$;

-- Find a draft by id (uuid text) or by its ordinal in the task's conversation
-- ("第二个吧" -> '2'). Returns NULL and a refusal code when it cannot be used.
CREATE OR REPLACE FUNCTION agentdb_private.resolve_draft(
    p_task agentdb_private.tasks, p_ref text, OUT draft agentdb_private.drafts, OUT refusal text
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    refusal := NULL;
    IF p_ref ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        SELECT * INTO draft FROM agentdb_private.drafts AS d
         WHERE d.user_id = p_task.user_id AND d.id = p_ref::uuid FOR UPDATE;
        -- Another user's draft (read, not locked: on Citus it lives on another shard).
        IF draft.id IS NULL AND EXISTS (SELECT 1 FROM agentdb_private.drafts AS d WHERE d.id = p_ref::uuid) THEN
            refusal := 'draft_not_yours';
            RETURN;
        END IF;
    ELSIF trim(p_ref) ~ '^[0-9]{1,9}$' THEN
        SELECT * INTO draft FROM agentdb_private.drafts AS d
         WHERE d.user_id = p_task.user_id AND d.conversation_id = p_task.conversation_id
           AND d.ordinal = trim(p_ref)::integer
        FOR UPDATE;
    END IF;
    IF draft.id IS NULL THEN
        refusal := 'draft_not_found';
    ELSIF draft.user_id <> p_task.user_id THEN
        refusal := 'draft_not_yours';
    ELSIF draft.conversation_id <> p_task.conversation_id THEN
        refusal := 'draft_other_conversation';
    END IF;
END
$$;

-- Store a draft: ordinals count per user and conversation (1, 2, 3 ... as the
-- user sees them), serialised by an advisory lock of that conversation.
CREATE OR REPLACE FUNCTION agentdb_private.store_draft(
    p_task agentdb_private.tasks, p_tool agentdb_private.tools, p_args jsonb, p_expect_rows integer
)
RETURNS agentdb_private.drafts
LANGUAGE plpgsql
AS $$
DECLARE
    v_draft agentdb_private.drafts;
    v_ordinal integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('agentdb-draft|' || p_task.user_id || '|' || p_task.conversation_id, 0));
    -- Read first (Citus takes no subquery in INSERT ... VALUES).
    SELECT coalesce(max(d.ordinal), 0) + 1 INTO v_ordinal FROM agentdb_private.drafts AS d
     WHERE d.user_id = p_task.user_id AND d.conversation_id = p_task.conversation_id;
    INSERT INTO agentdb_private.drafts (
        user_id, conversation_id, task_id, ordinal, tool, args, args_hash, expect_rows,
        summary_zh, summary_en, expires_at
    ) VALUES (
        p_task.user_id, p_task.conversation_id, p_task.id, v_ordinal,
        p_tool.name, p_args, agentdb_private.args_hash(p_args), p_expect_rows,
        agentdb_private.summarize(p_tool, p_args, 'zh'), agentdb_private.summarize(p_tool, p_args, 'en'),
        clock_timestamp() + p_tool.confirm_ttl
    ) RETURNING * INTO v_draft;
    INSERT INTO agentdb_private.audit (task_id, user_id, tool, action, target, status, outcome, detail)
    VALUES (p_task.id, p_task.user_id, p_tool.name, 'propose', p_tool.target::text, 'SUCCESS', 'proposed',
            format('draft %s (%s), expires %s', v_draft.ordinal, v_draft.id, v_draft.expires_at));
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES (p_task.user_id, 'audit', currval('agentdb_private.audit_id_seq'::regclass));
    RETURN v_draft;
END
$$;

-- Propose a call of a tool that needs confirmation. Nothing is written to the
-- target: the call is checked by a dry run of the compiled tool that stops
-- before the statement (arguments, duplicate, conflict), so no trigger of the
-- target runs. Refusals are steps, as for invoke.
-- p_user NULL: the task found by its id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.propose_core(
    p_user text, task uuid, tool text, args jsonb, reason text, expect_rows integer
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s record;
    v_tool agentdb_private.tools;
    v_dry jsonb;
    v_draft agentdb_private.drafts;
    v_lang text;
    v_summary text;
BEGIN
    s := agentdb_private.step_open(p_user, propose_core.task, NULL, true);
    SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = propose_core.tool;
    v_dry := coalesce(s.refusal, agentdb_private.step_gate(s.task, propose_core.tool, v_tool, NULL, true));
    IF v_dry IS NULL THEN
        v_dry := agentdb_private.step_run(v_tool, s.task, propose_core.args, propose_core.expect_rows, NULL, NULL, true);
        IF v_dry ->> 'outcome' = 'success' THEN
            v_dry := NULL;
        END IF;
    END IF;
    IF v_dry IS NOT NULL THEN
        RETURN agentdb_private.record_step(s.task, s.seq, left(propose_core.tool, 200), v_tool, propose_core.args,
                                           propose_core.reason, NULL, s.started, v_dry);
    END IF;

    v_draft := agentdb_private.store_draft(s.task, v_tool, propose_core.args, propose_core.expect_rows);
    v_lang := (s.task).lang;
    v_summary := CASE WHEN v_lang = 'en' THEN v_draft.summary_en ELSE v_draft.summary_zh END;
    RETURN jsonb_build_object(
        'outcome', 'proposed',
        'draft_id', v_draft.id,
        'ordinal', v_draft.ordinal,
        'tool', v_tool.name,
        'label', CASE WHEN v_lang = 'en' THEN v_tool.label_en ELSE v_tool.label_zh END,
        'summary', v_summary,
        'expires_at', v_draft.expires_at,
        'verified', false,
        'detail', agentdb_private.msg('draft.proposed', v_lang,
                                      jsonb_build_object('ordinal', v_draft.ordinal, 'summary', v_summary)),
        'instruction', agentdb_private.msg('draft.instruction', v_lang,
            jsonb_build_object('ordinal', v_draft.ordinal)));
END
$$;
CREATE OR REPLACE FUNCTION agentdb.propose(
    task uuid, tool text, args jsonb, reason text DEFAULT NULL, expect_rows integer DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.propose_core(NULL, propose.task, propose.tool, propose.args, propose.reason,
                                        propose.expect_rows);
END
$$;


-- Record that a task's delivered reply showed its drafts to the user. The gate
-- calls this on delivery; runtimes without the gate may call it themselves.
DROP FUNCTION IF EXISTS agentdb_private.mark_shown(uuid);
CREATE OR REPLACE FUNCTION agentdb_private.mark_shown(p_user text, p_task uuid)
RETURNS integer
LANGUAGE plpgsql
-- No SET clause: called by finalize_reply and mark_drafts_shown, both with a
-- pinned search_path, and by no one else; a configuration change per call
-- would cost more than the update.
AS $$
DECLARE
    v_count integer;
    v_now timestamptz := clock_timestamp();  -- a value: Citus takes no VOLATILE call in an UPDATE
BEGIN
    UPDATE agentdb_private.drafts AS d SET shown_in_task = d.task_id, shown_at = v_now
     WHERE d.user_id = p_user AND d.task_id = p_task AND d.status = 'proposed' AND d.shown_in_task IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.mark_drafts_shown(task uuid)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.mark_shown(
        (SELECT t.user_id FROM agentdb_private.tasks AS t WHERE t.id = mark_drafts_shown.task), mark_drafts_shown.task);
END
$$;

-- Why a resolved draft may not be confirmed in this task, or NULL. The order
-- matters: the most telling reason first.
CREATE OR REPLACE FUNCTION agentdb_private.draft_refusal(
    p_task agentdb_private.tasks, p_draft agentdb_private.drafts, p_tool agentdb_private.tools
)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- PL/pgSQL, every read by the user: on Citus a query in an SQL function
    -- with parameters is not routed to the user's shard.
    RETURN CASE
        WHEN p_draft.status IN ('confirmed', 'failed') THEN 'draft_used'
        WHEN p_draft.status = 'superseded' THEN 'draft_superseded'
        WHEN p_draft.status = 'rejected' THEN 'draft_rejected'
        WHEN p_draft.status = 'expired' OR p_draft.expires_at < clock_timestamp() THEN 'draft_expired'
        WHEN p_draft.task_id = p_task.id OR p_draft.shown_in_task = p_task.id THEN 'draft_same_turn'
        WHEN p_draft.shown_in_task IS NULL THEN 'draft_not_shown'
        -- The confirming message was written before the draft was shown to the user.
        WHEN p_draft.shown_at > p_task.created_at THEN 'draft_not_shown'
        WHEN (SELECT t.created_at FROM agentdb_private.tasks AS t
               WHERE t.user_id = p_draft.user_id AND t.id = p_draft.shown_in_task)
             >= p_task.created_at THEN 'draft_same_turn'
        WHEN p_draft.args_hash <> agentdb_private.args_hash(p_draft.args) THEN 'draft_tampered'
        -- A step under this draft's call_id that confirm did not make (the draft is still
        -- proposed) was planted, e.g. by run_sql: confirm would replay it as the draft's write.
        WHEN EXISTS (SELECT 1 FROM agentdb_private.steps AS s
                      WHERE s.user_id = p_task.user_id AND s.task_id = p_task.id
                        AND s.call_id = 'draft:' || p_draft.id::text)
            THEN 'draft_tampered'
        WHEN p_tool.name IS NULL THEN 'unknown_tool'
    END;
END
$$;

-- Confirm a draft: run it once, through the same guarded call as invoke
-- (invoke_core, call_id 'draft:<id>'), only if every condition of the
-- boundary holds. Each refusal is a step with its own reason and honest message.
CREATE OR REPLACE FUNCTION agentdb_private.confirm_core(p_user text, task uuid, draft_ref text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s record;
    v_tool agentdb_private.tools;
    v_draft agentdb_private.drafts;
    v_refusal jsonb;
    v_found record;
    v_receipt jsonb;
    v_ref jsonb := jsonb_build_object('draft', left(draft_ref, 200));
    -- A value, not a call: on Citus an UPDATE takes no VOLATILE function.
    v_now timestamptz := clock_timestamp();
BEGIN
    s := agentdb_private.step_open(p_user, confirm_core.task, NULL, true);
    IF s.refusal IS NOT NULL THEN
        RETURN agentdb_private.record_step(s.task, s.seq, NULL, NULL, v_ref, 'confirm', NULL, s.started, s.refusal);
    END IF;
    SELECT * INTO v_found FROM agentdb_private.resolve_draft(s.task, coalesce(draft_ref, ''));
    v_draft := v_found.draft;
    IF v_found.refusal IS NULL THEN
        SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = v_draft.tool;
        -- A repeated confirm in the same task returns the first receipt (no double write).
        IF v_draft.status = 'confirmed' AND v_draft.closed_in_task = (s.task).id THEN
            RETURN agentdb_private.invoke_core((s.task).user_id, (s.task).id, v_draft.tool, v_draft.args, 'draft:' || v_draft.id,
                NULL, v_draft.expect_rows, NULL, true);
        END IF;
    END IF;
    v_refusal := to_jsonb(coalesce(v_found.refusal, agentdb_private.draft_refusal(s.task, v_draft, v_tool)));
    IF v_refusal #>> '{}' = 'draft_expired' AND v_draft.status = 'proposed' THEN
        UPDATE agentdb_private.drafts AS d SET status = 'expired', closed_at = v_now
         WHERE d.user_id = v_draft.user_id AND d.id = v_draft.id;
    END IF;
    IF v_refusal IS NOT NULL THEN
        RETURN agentdb_private.record_step(s.task, s.seq, coalesce(v_draft.tool, 'confirm'), v_tool, v_ref, 'confirm',
            NULL, s.started, agentdb_private.not_done('refused', v_refusal #>> '{}',
                format('draft %s: %s', left(draft_ref, 200), v_refusal #>> '{}'),
                jsonb_build_object('ordinal', v_draft.ordinal) || CASE WHEN v_refusal #>> '{}' = 'draft_superseded'
                    THEN jsonb_build_object('new_ordinal', (SELECT d.ordinal FROM agentdb_private.drafts AS d
                                                             WHERE d.user_id = v_draft.user_id
                                                               AND d.id = v_draft.superseded_by)) ELSE '{}' END));
    END IF;

    v_receipt := agentdb_private.invoke_core((s.task).user_id, (s.task).id, v_draft.tool, v_draft.args, 'draft:' || v_draft.id,
        format('confirmed draft %s', v_draft.ordinal), v_draft.expect_rows, NULL, true);
    UPDATE agentdb_private.drafts AS d
       SET status = CASE WHEN v_receipt ->> 'outcome' = 'success' THEN 'confirmed' ELSE 'failed' END,
           closed_in_task = (s.task).id, closed_at = v_now,
           step_id = (v_receipt ->> 'step_id')::bigint
     WHERE d.user_id = v_draft.user_id AND d.id = v_draft.id;
    RETURN v_receipt || jsonb_build_object('draft_id', v_draft.id, 'ordinal', v_draft.ordinal);
END
$$;
CREATE OR REPLACE FUNCTION agentdb.confirm(task uuid, draft_ref text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.confirm_core(NULL, confirm.task, confirm.draft_ref);
END
$$;


-- "改到周五再确认": a revision supersedes the draft with a new one (new ordinal).
-- p_user NULL: the task found by its id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.revise_core(
    p_user text, task uuid, draft_ref text, args jsonb, reason text
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    s record;
    v_draft agentdb_private.drafts;
    v_refusal text;
    v_found record;
    v_new jsonb;
    v_tool agentdb_private.tools;
    -- A value, not a call: on Citus an UPDATE takes no VOLATILE function.
    v_now timestamptz := clock_timestamp();
BEGIN
    s := agentdb_private.step_open(p_user, revise_core.task, NULL, true);
    IF s.refusal IS NOT NULL THEN
        RETURN agentdb_private.propose_core(p_user, revise_core.task, NULL, revise_core.args, revise_core.reason, NULL);
    END IF;
    SELECT * INTO v_found FROM agentdb_private.resolve_draft(s.task, coalesce(draft_ref, ''));
    v_draft := v_found.draft;
    v_refusal := v_found.refusal;
    IF v_refusal IS NULL AND v_draft.status <> 'proposed' THEN
        v_refusal := CASE v_draft.status WHEN 'superseded' THEN 'draft_superseded' WHEN 'rejected' THEN 'draft_rejected'
                          WHEN 'expired' THEN 'draft_expired' ELSE 'draft_used' END;
    END IF;
    IF v_refusal IS NOT NULL THEN
        -- Into a variable: a query pushed to a shard would pass the shard's row type.
        SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = v_draft.tool;
        RETURN agentdb_private.record_step(s.task, s.seq, coalesce(v_draft.tool, 'revise'),
            v_tool,
            jsonb_build_object('draft', left(draft_ref, 200)), 'revise', NULL, s.started,
            agentdb_private.not_done('refused', v_refusal, format('draft %s: %s', left(draft_ref, 200), v_refusal)));
    END IF;
    v_new := agentdb_private.propose_core((s.task).user_id, (s.task).id, v_draft.tool, revise_core.args,
                                          coalesce(revise_core.reason, 'revision'), v_draft.expect_rows);
    IF v_new ->> 'outcome' = 'proposed' THEN
        UPDATE agentdb_private.drafts AS d
           SET status = 'superseded', superseded_by = (v_new ->> 'draft_id')::uuid,
               closed_in_task = (s.task).id, closed_at = v_now
         WHERE d.user_id = v_draft.user_id AND d.id = v_draft.id;
        v_new := v_new || jsonb_build_object('supersedes', v_draft.ordinal);
    END IF;
    RETURN v_new;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.revise(task uuid, draft_ref text, args jsonb, reason text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.revise_core(NULL, revise.task, revise.draft_ref, revise.args, revise.reason);
END
$$;

-- "算了": close a draft without running it. p_user NULL: the task found by
-- its id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.reject_core(p_user text, task uuid, draft_ref text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_task agentdb_private.tasks;
    v_draft agentdb_private.drafts;
    v_refusal text;
    v_found record;
    -- A value, not a call: on Citus an UPDATE takes no VOLATILE function.
    v_now timestamptz := clock_timestamp();
BEGIN
    v_task := agentdb_private.task_row(p_user, reject_core.task, false);
    IF v_task.id IS NULL THEN
        RETURN jsonb_build_object('outcome', 'refused', 'refusal', 'unknown_task');
    END IF;
    SELECT * INTO v_found FROM agentdb_private.resolve_draft(v_task, coalesce(draft_ref, ''));
    v_draft := v_found.draft;
    v_refusal := v_found.refusal;
    IF v_refusal IS NULL AND v_draft.status <> 'proposed' THEN
        v_refusal := 'draft_closed';
    END IF;
    IF v_refusal IS NOT NULL THEN
        RETURN jsonb_build_object('outcome', 'refused', 'refusal', v_refusal,
            'detail', agentdb_private.msg('detail.refused.' || v_refusal, v_task.lang, '{}'));
    END IF;
    UPDATE agentdb_private.drafts AS d SET status = 'rejected', closed_in_task = v_task.id, closed_at = v_now
     WHERE d.user_id = v_draft.user_id AND d.id = v_draft.id;
    INSERT INTO agentdb_private.audit (task_id, user_id, tool, action, status, outcome, detail)
    VALUES (v_task.id, v_task.user_id, v_draft.tool, 'reject', 'SUCCESS', 'rejected', format('draft %s', v_draft.ordinal));
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES (v_task.user_id, 'audit', currval('agentdb_private.audit_id_seq'::regclass));
    RETURN jsonb_build_object('outcome', 'rejected', 'draft_id', v_draft.id, 'ordinal', v_draft.ordinal,
        'detail', agentdb_private.msg('draft.rejected', v_task.lang, jsonb_build_object('ordinal', v_draft.ordinal)));
END
$$;

CREATE OR REPLACE FUNCTION agentdb.reject(task uuid, draft_ref text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.reject_core(NULL, reject.task, reject.draft_ref);
END
$$;

-- Expire drafts and actions whose time is up. Schedule it (pg_cron, or the worker).
CREATE OR REPLACE FUNCTION agentdb.sweep_drafts()
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_drafts integer;
    v_actions integer;
    -- One value for the sweep: Citus takes no VOLATILE call in an UPDATE of many shards.
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE agentdb_private.drafts AS d SET status = 'expired', closed_at = v_now
     WHERE d.status = 'proposed' AND d.expires_at < v_now;
    GET DIAGNOSTICS v_drafts = ROW_COUNT;
    UPDATE agentdb_private.actions AS a SET status = 'expired', finished_at = v_now
     WHERE a.status = 'pending' AND a.expires_at < v_now;
    GET DIAGNOSTICS v_actions = ROW_COUNT;
    RETURN v_drafts + v_actions;
END
$$;

CREATE OR REPLACE VIEW agentdb.drafts AS
SELECT
    d.id AS draft_id,
    d.user_id,
    d.conversation_id,
    d.ordinal,
    d.tool,
    d.args,
    d.summary_zh,
    d.summary_en,
    d.status,
    d.created_at,
    d.expires_at,
    d.shown_at,
    d.closed_at,
    d.step_id,
    d.task_id AS proposed_in_task,
    d.shown_in_task,
    d.closed_in_task,
    n.ordinal AS superseded_by_ordinal
FROM agentdb_private.drafts AS d
LEFT JOIN agentdb_private.drafts AS n ON d.superseded_by = n.id;

GRANT EXECUTE ON FUNCTION
agentdb.propose(uuid, text, jsonb, text, integer),
agentdb.confirm(uuid, text),
agentdb.revise(uuid, text, jsonb, text),
agentdb.reject(uuid, text)
TO agentdb_agent;
GRANT EXECUTE ON FUNCTION agentdb.mark_drafts_shown(uuid), agentdb.sweep_drafts() TO agentdb_app;
GRANT SELECT ON agentdb.drafts TO agentdb_app, agentdb_auditor;
