-- Step and audit rows, and the receipt built from them.

-- Sentences of the write path's own refusals (same rules as sql/60_messages.sql:
-- no internal names).
INSERT INTO agentdb_private.messages AS m (code, lang, body) VALUES
('detail.refused.isolation_level', 'zh', '没能{label}:这次请求的方式无法安全核对,所以没有执行,什么都没有改动。'),
('detail.refused.isolation_level', 'en', 'Couldn''t {label}: it was sent in a way that can''t be checked safely, so it was not carried out and nothing was changed.'),
('detail.invalid.lossy_value', 'zh', '没能{label}:有一项数值比能保存的更精确(比如小数位太多),请核对后再试。什么都没有改动。'),
('detail.invalid.lossy_value', 'en', 'Couldn''t {label}: a value is more precise than can be stored (for example, too many decimal places). Please check it and try again; nothing was changed.')
ON CONFLICT (code, lang) DO UPDATE SET body = excluded.body;

-- "提醒时间 / when to remind": an app-given text in both languages, zh first; the
-- part for p_lang (or the whole text when it has no ' / ').
CREATE OR REPLACE FUNCTION agentdb_private.in_lang(p_text text, p_lang text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
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

-- Write the step row and the audit row for one call and return its receipt.
-- p_seq is NULL for an unknown task (p_task then holds only the id asked
-- for): then only the audit row is written.
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
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lang text := coalesce(p_task.lang, 'zh');
    v_label text := CASE WHEN v_lang = 'en' THEN p_tool.label_en ELSE p_tool.label_zh END;
    v_outcome text := p_result ->> 'outcome';
    v_verified boolean := coalesce((p_result ->> 'verified')::boolean, false);
    v_status text;
    v_step_id bigint;
    v_receipt jsonb;
    v_args jsonb := p_args;
BEGIN
    IF v_label IS NULL THEN
        v_label := CASE WHEN v_lang = 'en' THEN 'this action' ELSE '这个操作' END;
    END IF;
    -- Oversized arguments are not stored whole: the refusal already says why.
    IF v_args IS NOT NULL AND octet_length(v_args::text) > agentdb_private.max_args_bytes() THEN
        v_args := jsonb_build_object('_truncated', true, 'bytes', octet_length(p_args::text));
    END IF;
    v_status := CASE
        WHEN v_outcome = 'success' AND v_verified THEN 'SUCCESS'
        WHEN v_outcome IN ('refused', 'invalid', 'needs_confirmation', 'duplicate', 'conflict') THEN 'REFUSED'
        ELSE 'FAILED'
    END;

    v_receipt := jsonb_build_object(
        'task_id', p_task.id,
        'seq', p_seq,
        'call_id', p_call_id,
        'tool', p_tool_name,
        'action', p_tool.action,
        'label', v_label,
        'outcome', v_outcome,
        'refusal', p_result -> 'refusal',
        'verified', v_outcome = 'success' AND v_verified,
        'affected_rows', CASE WHEN v_outcome = 'success' THEN coalesce((p_result ->> 'affected_rows')::int, 0) ELSE 0 END,
        'attempts', coalesce((p_result ->> 'attempts')::int, 0),
        'key', p_result -> 'key',
        'row', p_result -> 'row',
        'detail', agentdb_private.detail_text(p_result, v_label, v_lang, p_tool.target)
    ) || jsonb_strip_nulls(jsonb_build_object(
        'field', p_result -> 'field',
        'existing', p_result -> 'existing',
        'conflict', p_result -> 'conflict',
        'mismatched', p_result -> 'mismatched',
        'expected_rows', p_result -> 'expected_rows',
        'matched_rows', p_result -> 'matched_rows'));

    IF p_seq IS NOT NULL THEN
        INSERT INTO agentdb_private.steps (
            task_id, seq, tool, action, args, reason, outcome, refusal, verified, attempts,
            error, affected_rows, call_id, receipt, started_at
        ) VALUES (
            p_task.id, p_seq, p_tool_name, p_tool.action, v_args, left(p_reason, 500), v_outcome,
            p_result ->> 'refusal', v_outcome = 'success' AND v_verified,
            coalesce((p_result ->> 'attempts')::int, 0), p_result ->> 'error',
            (v_receipt ->> 'affected_rows')::int, p_call_id, v_receipt, p_started
        ) RETURNING id INTO v_step_id;
        -- Steps are append-only, so the stored receipt has no step id of its
        -- own; the returned copy (and every replay) adds it from the row.
        v_receipt := jsonb_build_object('step_id', v_step_id) || v_receipt;
    END IF;

    -- db_role: the role that logged in. Inside this SECURITY DEFINER call
    -- current_user (the column default) is always the installer.
    INSERT INTO agentdb_private.audit (
        task_id, step_id, user_id, tool, action, target, status, outcome, refusal, detail, db_role
    ) VALUES (
        p_task.id, v_step_id, p_task.user_id, p_tool_name, p_tool.action, p_tool.target::text,
        v_status, v_outcome, p_result ->> 'refusal',
        coalesce(p_result ->> 'error', v_receipt ->> 'detail'), session_user
    );
    RETURN v_receipt;
END
$$;

-- A refusal from an entry point other than invoke_core (propose, confirm,
-- revise, request_approval): the next step of a known task, or, when the task
-- is unknown (p_task.id NULL), only an audit row under the id asked for.
CREATE OR REPLACE FUNCTION agentdb_private.record_refusal(
    p_task agentdb_private.tasks,
    p_asked uuid,
    p_tool_name text,
    p_tool agentdb_private.tools,
    p_args jsonb,
    p_reason text,
    p_result jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_seq integer;
BEGIN
    IF p_task.id IS NULL THEN
        p_task.id := p_asked;
    ELSE
        v_seq := agentdb_private.next_seq(p_task.id);
    END IF;
    RETURN agentdb_private.record_step(p_task, v_seq, left(p_tool_name, 200), p_tool, p_args, p_reason, NULL,
        clock_timestamp(), p_result);
END
$$;

-- A call made outside READ COMMITTED is refused before the task is locked: an
-- older snapshot would hide a racing call's rows (a duplicate decided on it, a
-- step number taken twice). The refusal is recorded when that is possible
-- without the lock (a concurrent call can make even that fail: then the receipt
-- says recorded false). NULL when the isolation level is READ COMMITTED.
CREATE OR REPLACE FUNCTION agentdb_private.refuse_isolation(
    p_task uuid, p_tool text, p_args jsonb, p_reason text
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task agentdb_private.tasks;
    v_tool agentdb_private.tools;
    v_result jsonb;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        RETURN NULL;
    END IF;
    v_result := agentdb_private.not_done('refused', 'isolation_level',
        format('agentdb calls run in READ COMMITTED; this transaction is %s',
               upper(current_setting('transaction_isolation'))));
    SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.id = p_task;
    SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = p_tool;
    BEGIN
        RETURN agentdb_private.record_refusal(v_task, p_task, coalesce(p_tool, ''), v_tool, p_args, p_reason, v_result);
    EXCEPTION WHEN OTHERS THEN
        RETURN v_result || jsonb_build_object('task_id', p_task, 'tool', left(p_tool, 200), 'recorded', false,
            'detail', agentdb_private.detail_text(v_result,
                CASE WHEN v_task.lang = 'en' THEN v_tool.label_en ELSE v_tool.label_zh END, v_task.lang));
    END;
END
$$;

-- The first receipt of a call_id in a task (marked replayed), or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.prior_receipt(p_task uuid, p_call_id text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('step_id', s.id) || s.receipt || '{"replayed": true}'
      FROM agentdb_private.steps AS s
     WHERE s.task_id = p_task AND s.call_id = p_call_id
$$;
