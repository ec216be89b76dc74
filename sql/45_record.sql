-- Step and audit rows, and the receipt built from them. The helpers here run
-- only inside agentdb's own functions, whose search_path is pinned: they have
-- no SET clause of their own (a configuration change per call costs more than
-- they do).

-- Sentences of the write path's own refusals (same rules as sql/60_messages.sql:
-- no internal names).
INSERT INTO agentdb_private.messages AS m (code, lang, body) VALUES
('detail.refused.isolation_level', 'zh', '没能{label}:这次请求的方式无法安全核对,所以没有执行,什么都没有改动。'),
('detail.refused.isolation_level', 'en', 'Couldn''t {label}: it was sent in a way that can''t be checked safely, so it was not carried out and nothing was changed.'),
('detail.invalid.lossy_value', 'zh', '没能{label}:有一项数值比能保存的更精确(比如小数位太多),请核对后再试。什么都没有改动。'),
('detail.invalid.lossy_value', 'en', 'Couldn''t {label}: a value is more precise than can be stored (for example, too many decimal places). Please check it and try again; nothing was changed.'),
('detail.refused.stale_tool', 'zh', '没能{label}:这项功能正在更新,暂时用不了,什么都没有改动,请稍后再试。'),
('detail.refused.stale_tool', 'en', 'Couldn''t {label}: this action is being updated and isn''t available right now, so nothing was changed. Please try again later.')
ON CONFLICT (code, lang) DO UPDATE SET body = excluded.body;

-- "提醒时间 / when to remind": an app-given text in both languages, zh first; the
-- part for p_lang (or the whole text when it has no ' / ').
CREATE OR REPLACE FUNCTION agentdb_private.in_lang(p_text text, p_lang text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_text LIKE '% / %'
        THEN trim(split_part(p_text, ' / ', CASE WHEN p_lang = 'en' THEN 2 ELSE 1 END))
        ELSE p_text END
$$;

-- The user-facing sentence for a result: the most specific catalogue entry
-- (detail.<outcome>.<refusal>) or the outcome's general one. A field with a
-- column comment is named by that comment (its everyday name, "zh / en"); a conflict
-- check's suggested alternative is offered.
DROP FUNCTION IF EXISTS agentdb_private.detail_text(jsonb, text, text);
CREATE OR REPLACE FUNCTION agentdb_private.detail_text(
    p_result jsonb, p_label text, p_lang text, p_target regclass DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_outcome text := p_result ->> 'outcome';
    v_refusal text := p_result ->> 'refusal';
    v_field text;
    v_code text;
BEGIN
    IF p_target IS NOT NULL AND p_result ? 'field' THEN
        SELECT d.description INTO v_field
          FROM pg_catalog.pg_attribute AS a
          JOIN pg_catalog.pg_description AS d
            ON d.objoid = a.attrelid AND d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid = a.attnum
         WHERE a.attrelid = p_target AND a.attname = p_result ->> 'field' AND NOT a.attisdropped;
        v_field := agentdb_private.in_lang(v_field, p_lang);
    END IF;
    v_code := CASE
        WHEN v_outcome = 'invalid' AND v_field IS NOT NULL THEN 'detail.invalid.named'
        WHEN v_outcome = 'conflict' AND coalesce(p_result #>> '{conflict,alternative}', '') <> ''
            THEN 'detail.conflict.alternative'
        -- A single row that never arrived reads better as the general sentence.
        WHEN v_refusal = 'row_count' AND coalesce((p_result ->> 'expected_rows')::int, 1) <= 1
            THEN 'detail.' || v_outcome
    END;
    IF v_code IS NULL THEN
        SELECT m.code INTO v_code FROM agentdb_private.messages AS m
         WHERE m.code = 'detail.' || v_outcome || '.' || v_refusal LIMIT 1;
    END IF;
    RETURN agentdb_private.msg(
        coalesce(v_code, 'detail.' || v_outcome),
        p_lang,
        jsonb_build_object(
            'label', p_label,
            'field', v_field,
            'attempts', coalesce(p_result ->> 'attempts', '1'),
            'expected', p_result ->> 'expected_rows',
            'matched', p_result ->> 'matched_rows',
            'reason', agentdb_private.in_lang(coalesce(p_result #>> '{conflict,reason}', ''), p_lang),
            'alternative', agentdb_private.in_lang(coalesce(p_result #>> '{conflict,alternative}', ''), p_lang)));
END
$$;

-- The receipt of one call, from its result (built once; record_step stores it).
-- The label and the verdict are spelled out where used; what only refusals
-- carry (a sentence made here, the field named, the row found) is added only
-- when the result has it, so a success builds one object.
CREATE OR REPLACE FUNCTION agentdb_private.receipt(
    p_task agentdb_private.tasks, p_seq integer, p_tool_name text, p_tool agentdb_private.tools, p_call_id text,
    p_result jsonb
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_receipt jsonb := jsonb_build_object(
        'task_id', p_task.id,
        'seq', p_seq,
        'call_id', p_call_id,
        'tool', p_tool_name,
        'action', p_tool.action,
        'label', coalesce(CASE WHEN p_task.lang = 'en' THEN p_tool.label_en ELSE p_tool.label_zh END,
                          CASE WHEN p_task.lang = 'en' THEN 'this action' ELSE '这个操作' END),
        'outcome', p_result ->> 'outcome',
        'refusal', p_result -> 'refusal',
        'verified', p_result ->> 'outcome' = 'success' AND coalesce((p_result ->> 'verified')::boolean, false),
        'affected_rows', CASE WHEN p_result ->> 'outcome' = 'success'
                              THEN coalesce((p_result ->> 'affected_rows')::int, 0) ELSE 0 END,
        'attempts', coalesce((p_result ->> 'attempts')::int, 0),
        'key', p_result -> 'key',
        'row', p_result -> 'row',
        -- A compiled tool's success carries its sentence, made at compile time.
        'detail', p_result ->> 'detail');
BEGIN
    IF v_receipt ->> 'detail' IS NULL THEN
        v_receipt := v_receipt || jsonb_build_object('detail', agentdb_private.detail_text(
            p_result, v_receipt ->> 'label', coalesce(p_task.lang, 'zh'), p_tool.target));
    END IF;
    IF p_result ?| ARRAY['field', 'existing', 'conflict', 'mismatched', 'expected_rows', 'matched_rows'] THEN
        v_receipt := v_receipt || jsonb_strip_nulls(jsonb_build_object(
            'field', p_result -> 'field',
            'existing', p_result -> 'existing',
            'conflict', p_result -> 'conflict',
            'mismatched', p_result -> 'mismatched',
            'expected_rows', p_result -> 'expected_rows',
            'matched_rows', p_result -> 'matched_rows'));
    END IF;
    RETURN v_receipt;
END
$$;

-- Write the step row and the audit row for one call and return its receipt.
-- p_seq is NULL for an unknown task (p_task then holds only the id asked
-- for): then only the audit row is written. A call refused for its isolation
-- level holds no task lock, so its rows may not be writable (a concurrent
-- call took the step number): the receipt then says "recorded": false.
CREATE OR REPLACE FUNCTION agentdb_private.record_step(
    p_task agentdb_private.tasks,
    p_seq integer,
    p_tool_name text,
    p_tool agentdb_private.tools,
    p_args jsonb,
    p_reason text,
    p_call_id text,
    p_started timestamptz,
    p_result jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_receipt jsonb := agentdb_private.receipt(p_task, p_seq, p_tool_name, p_tool, p_call_id, p_result);
BEGIN
    IF p_result ->> 'refusal' = 'isolation_level' THEN
        BEGIN
            RETURN agentdb_private.write_step(p_task, p_seq, p_tool_name, p_tool, p_args, p_reason, p_started,
                                              p_result, v_receipt);
        EXCEPTION WHEN OTHERS THEN
            RETURN v_receipt || '{"recorded": false}';
        END;
    END IF;
    RETURN agentdb_private.write_step(p_task, p_seq, p_tool_name, p_tool, p_args, p_reason, p_started,
                                      p_result, v_receipt);
END
$$;

-- The two rows of record_step. The audit status is SUCCESS only for a verified
-- success.
CREATE OR REPLACE FUNCTION agentdb_private.write_step(
    p_task agentdb_private.tasks, p_seq integer, p_tool_name text, p_tool agentdb_private.tools, p_args jsonb,
    p_reason text, p_started timestamptz, p_result jsonb, p_receipt jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_step_id bigint;
BEGIN
    IF p_seq IS NOT NULL THEN
        INSERT INTO agentdb_private.steps (
            user_id, task_id, seq, tool, action, args, reason, outcome, refusal, verified, attempts,
            error, affected_rows, call_id, receipt, started_at
        ) VALUES (
            p_task.user_id, p_task.id, p_seq, p_tool_name, p_tool.action,
            -- Oversized arguments are not stored whole: the refusal already says why.
            CASE WHEN octet_length(p_args::text) > agentdb_private.max_args_bytes()
                 THEN jsonb_build_object('_truncated', true, 'bytes', octet_length(p_args::text)) ELSE p_args END,
            left(p_reason, 500), p_receipt ->> 'outcome', p_result ->> 'refusal', (p_receipt ->> 'verified')::boolean,
            (p_receipt ->> 'attempts')::int, p_result ->> 'error', (p_receipt ->> 'affected_rows')::int,
            p_receipt ->> 'call_id', p_receipt, p_started
        ) RETURNING id INTO v_step_id;
    END IF;
    -- db_role: the role that logged in. Inside this SECURITY DEFINER call
    -- current_user (the column default) is always the installer.
    INSERT INTO agentdb_private.audit (
        task_id, step_id, user_id, tool, action, target, status, outcome, refusal, detail, db_role
    ) VALUES (
        p_task.id, v_step_id, coalesce(p_task.user_id, ''), p_tool_name, p_tool.action, p_tool.target::text,
        CASE WHEN (p_receipt ->> 'verified')::boolean THEN 'SUCCESS'
             WHEN p_receipt ->> 'outcome' IN ('refused', 'invalid', 'needs_confirmation', 'duplicate', 'conflict')
                 THEN 'REFUSED'
             ELSE 'FAILED' END,
        p_receipt ->> 'outcome', p_result ->> 'refusal', coalesce(p_result ->> 'error', p_receipt ->> 'detail'), session_user
    );
    -- Its note for the sealer (sql/64_chain.sql), in the same transaction.
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES (coalesce(p_task.user_id, ''), 'audit', currval('agentdb_private.audit_id_seq'::regclass));
    -- Steps are append-only, so the stored receipt has no step id of its own;
    -- the returned copy (and every replay) adds it from the row.
    RETURN CASE WHEN v_step_id IS NULL THEN p_receipt ELSE jsonb_build_object('step_id', v_step_id) || p_receipt END;
END
$$;

-- Earlier helpers, replaced by the envelope of sql/50_invoke_api.sql.
DROP FUNCTION IF EXISTS agentdb_private.record_refusal(
    agentdb_private.tasks, uuid, text, agentdb_private.tools, jsonb, text, jsonb
);
DROP FUNCTION IF EXISTS agentdb_private.refuse_isolation(uuid, text, jsonb, text);

-- The replay lookup is part of step_open's statement (sql/50_invoke_api.sql).
DROP FUNCTION IF EXISTS agentdb_private.prior_receipt(uuid, text);
DROP FUNCTION IF EXISTS agentdb_private.prior_receipt(text, uuid, text);
