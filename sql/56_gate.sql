-- The exit gate: the execution report, the prompt rules and finalize_reply.

-- Each step of a task in everyday words, for the model's final wording.
DROP FUNCTION IF EXISTS agentdb_private.report_steps(uuid);
CREATE OR REPLACE FUNCTION agentdb_private.report_steps(p_user text, p_task uuid)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'seq', s.seq,
        'label', s.receipt ->> 'label',
        'succeeded', s.outcome = 'success' AND s.verified,
        'verified', s.verified,
        'created', s.outcome = 'success' AND s.verified AND s.action = 'insert',
        'outcome', s.outcome,
        'detail', s.receipt ->> 'detail'
    ) ORDER BY s.seq), '[]')
      FROM agentdb_private.steps AS s
     WHERE s.user_id = p_user AND s.task_id = p_task AND s.refusal IS DISTINCT FROM 'closed');
END
$$;

-- The rules for the final wording, in the task's language.
CREATE OR REPLACE FUNCTION agentdb_private.report_rules(p_lang text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_array(
        agentdb_private.msg('report.rule.closed', p_lang),
        agentdb_private.msg('report.rule.successes', p_lang),
        agentdb_private.msg('report.rule.failures', p_lang),
        agentdb_private.msg('report.rule.not_created', p_lang))
$$;

-- Close a task: no tool may run in it afterwards (invoke refuses it as
-- "closed"). The row stays locked to the end of the transaction. NULL for an
-- unknown task. The report and the reply both end the work this way. p_user
-- NULL: the task found by its id alone (the task-only entry points).
DROP FUNCTION IF EXISTS agentdb_private.close_task(uuid);
CREATE OR REPLACE FUNCTION agentdb_private.close_task(p_user text, p_task uuid)
RETURNS agentdb_private.tasks
LANGUAGE plpgsql
-- No SET clause: called only by report and finalize_reply, both with a pinned
-- search_path.
AS $$
DECLARE
    v_task agentdb_private.tasks;
    -- A value, not a call: on Citus an UPDATE takes no VOLATILE function.
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_user IS NULL THEN
        UPDATE agentdb_private.tasks AS t SET closed_at = coalesce(t.closed_at, v_now)
         WHERE t.id = p_task
        RETURNING * INTO v_task;
    ELSE
        UPDATE agentdb_private.tasks AS t SET closed_at = coalesce(t.closed_at, v_now)
         WHERE t.user_id = p_user AND t.id = p_task
        RETURNING * INTO v_task;
    END IF;
    RETURN v_task;
END
$$;

-- Take the execution report. Taking it closes the task's tools: any later
-- invoke in this task is refused as "closed", so nothing is written twice.
CREATE OR REPLACE FUNCTION agentdb_private.report_core(p_user text, p_task uuid)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_task agentdb_private.tasks;
    v_steps jsonb;
BEGIN
    v_task := agentdb_private.close_task(p_user, p_task);
    IF v_task.id IS NULL THEN
        RAISE EXCEPTION 'report: no task %', p_task USING ERRCODE = 'no_data_found';
    END IF;
    v_steps := agentdb_private.report_steps(v_task.user_id, v_task.id);
    RETURN jsonb_build_object(
        'task_id', v_task.id,
        'lang', v_task.lang,
        'tools_closed', true,
        'steps', v_steps,
        'succeeded', (SELECT count(*) FROM jsonb_array_elements(v_steps) AS s WHERE (s ->> 'succeeded')::boolean),
        'failed', (SELECT count(*) FROM jsonb_array_elements(v_steps) AS s WHERE NOT (s ->> 'succeeded')::boolean),
        'rules', agentdb_private.report_rules(v_task.lang));
END
$$;

CREATE OR REPLACE FUNCTION agentdb.report(task uuid)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.report_core(NULL, report.task);
END
$$;

-- The report as text for the model's prompt.
CREATE OR REPLACE FUNCTION agentdb_private.report_text_core(p_user text, p_task uuid, p_lang text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_report jsonb := agentdb_private.report_core(p_user, p_task);
    v_lang text := coalesce(p_lang, v_report ->> 'lang');
    v_lines text [];
BEGIN
    v_lines := ARRAY[agentdb_private.msg('report.title', v_lang)];
    IF jsonb_array_length(v_report -> 'steps') = 0 THEN
        v_lines := v_lines || agentdb_private.msg('report.no_steps', v_lang);
    END IF;
    v_lines := v_lines || ARRAY(
        SELECT format('%s. %s', s ->> 'seq', agentdb_private.msg(
                CASE WHEN (s ->> 'succeeded')::boolean THEN 'report.step.ok' ELSE 'report.step.failed' END,
                v_lang, jsonb_build_object('label', s ->> 'label', 'detail', s ->> 'detail')))
          FROM jsonb_array_elements(v_report -> 'steps') AS s
         ORDER BY (s ->> 'seq')::int);
    v_lines := v_lines || agentdb_private.msg('report.rules_title', v_lang)
        || ARRAY(SELECT '- ' || r FROM jsonb_array_elements_text(agentdb_private.report_rules(v_lang)) AS r);
    RETURN array_to_string(v_lines, E'\n');
END
$$;

CREATE OR REPLACE FUNCTION agentdb.report_text(task uuid, lang text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.report_text_core(NULL, report_text.task, report_text.lang);
END
$$;

-- Prompt-layer rules from database facts. They lower the odds of a false
-- "done"; finalize_reply is the guarantee.
CREATE OR REPLACE FUNCTION agentdb.context_rules(task uuid, lang text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task agentdb_private.tasks;
    v_lang text;
    v_rules text [] := '{}';
BEGIN
    SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.id = context_rules.task;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'context_rules: no task %', context_rules.task USING ERRCODE = 'no_data_found';
    END IF;
    v_lang := coalesce(context_rules.lang, v_task.lang);
    IF v_task.status <> 'running' OR v_task.closed_at IS NOT NULL THEN
        v_rules := v_rules || agentdb_private.msg('rules.closed', v_lang);
    END IF;
    IF NOT v_task.authenticated THEN
        v_rules := v_rules || agentdb_private.msg('rules.not_authenticated', v_lang);
    ELSE
        v_rules := v_rules || ARRAY(
            SELECT agentdb_private.msg('rules.no_permission', v_lang, jsonb_build_object(
                       'label', CASE WHEN v_lang = 'en' THEN tl.label_en ELSE tl.label_zh END))
              FROM agentdb_private.tools AS tl
             WHERE NOT agentdb_private.has_permission(v_task.user_id,
                       CASE WHEN tl.action = 'delete' THEN 'DELETE' ELSE 'WRITE' END, tl.name, tl.target)
             ORDER BY tl.name);
    END IF;
    RETURN v_rules || agentdb_private.msg('rules.claims', v_lang);
END
$$;

-- The state of a task's books, from its committed steps (steps refused
-- because the task was already closed are not part of the work):
--   empty     no step at all;
--   troubled  some step is not a verified success (refused, invalid,
--             duplicate, conflict, failed, unverified, needs_confirmation);
--   clean     at least one step, every one of them verified.
-- failed: how many steps are not verified successes.
DROP FUNCTION IF EXISTS agentdb_private.book_state(uuid);
CREATE OR REPLACE FUNCTION agentdb_private.book_state(
    p_user text, p_task uuid, OUT state text, OUT steps integer, OUT failed integer
)
LANGUAGE plpgsql STABLE
-- plpgsql: its plan is kept for the session. No SET clause: only finalize_reply,
-- with a pinned search_path, calls it.
AS $$
BEGIN
    SELECT count(*)::integer, count(*) FILTER (WHERE NOT (s.outcome = 'success' AND s.verified))::integer
      INTO steps, failed
      FROM agentdb_private.steps AS s
     WHERE s.user_id = p_user AND s.task_id = p_task AND s.refusal IS DISTINCT FROM 'closed';
    state := CASE WHEN steps = 0 THEN 'empty' WHEN failed > 0 THEN 'troubled' ELSE 'clean' END;
END
$$;

-- Why a reply may not be delivered in a troubled task or an empty action turn,
-- or NULL when it may. Fail closed by positive recognition: every clause must
-- carry a label the document's "accept" lists for the state (in a troubled
-- task a clause holding a claim, which is then backed, counts too); a troubled
-- reply needs an "ack" clause per failed step, or an "ack_all" clause; an
-- empty action turn needs a clause labelled as one of "needs" (a question, an
-- offer, a draft, a plain "nothing was done"). The clauses are a runtime's
-- reading (with labels) or frames of clause_frames, asked through clause_has
-- only what the answer needs.
DROP FUNCTION IF EXISTS agentdb_private.reply_unacceptable(jsonb, jsonb, text, integer);
CREATE OR REPLACE FUNCTION agentdb_private.reply_unacceptable(
    p_text text, p_clauses jsonb, p_claims jsonb, p_state text, p_failed integer
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: only finalize_reply, with a pinned search_path, calls it.
AS $$
DECLARE
    v_accept text [];
    v_needs text [];
    v_clause jsonb;
    v_ok boolean;
    v_ack boolean;
    v_need boolean;
    v_acks integer := 0;
    v_needed boolean := false;
BEGIN
    v_accept := ARRAY(SELECT jsonb_array_elements_text(
        coalesce(agentdb_private.claim_doc_compiled() -> 'accept' -> p_state, '[]')));
    v_needs := ARRAY(SELECT jsonb_array_elements_text(
        coalesce(agentdb_private.claim_doc_compiled() -> 'needs' -> p_state, '[]')));
    IF jsonb_typeof(p_clauses) IS DISTINCT FROM 'array' OR jsonb_array_length(p_clauses) = 0 THEN
        RETURN 'nothing in the reply could be read';
    END IF;
    FOR v_clause IN SELECT c FROM jsonb_array_elements(p_clauses) AS c LOOP
        -- Asked in turn, each only when the ones before left the answer open.
        v_ack := p_state = 'troubled' AND agentdb_private.clause_has(p_text, v_clause, 'ack');
        v_need := cardinality(v_needs) > 0 AND agentdb_private.clause_has(p_text, v_clause, p_state || '.needs');
        v_ok := (v_ack AND 'ack' = ANY (v_accept)) OR v_need;
        IF NOT v_ok THEN
            v_ok := agentdb_private.clause_has(p_text, v_clause, p_state || '.rest');
        END IF;
        IF NOT v_ok AND p_state = 'troubled' THEN
            v_ok := EXISTS (SELECT 1 FROM jsonb_array_elements(p_claims) AS k
                             WHERE (k ->> 'start')::integer >= (v_clause ->> 'start')::integer
                               AND (k ->> 'start')::integer < (v_clause ->> 'end')::integer);
        END IF;
        -- "inert" accepts a clause without a word of doing.
        IF NOT v_ok AND 'inert' = ANY (v_accept) THEN
            v_ok := NOT agentdb_private.clause_has(p_text, v_clause, 'action');
        END IF;
        IF NOT v_ok THEN
            RETURN format('the clause at %s-%s is not recognised as acceptable here',
                          v_clause ->> 'start', v_clause ->> 'end');
        END IF;
        v_acks := v_acks + CASE WHEN v_ack THEN 1 ELSE 0 END;
        v_needed := v_needed OR v_need;
    END LOOP;
    IF p_state = 'troubled' AND v_acks < p_failed AND NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(p_clauses) AS c
             WHERE agentdb_private.clause_has(p_text, c, 'ack_all')) THEN
        RETURN format('%s failed step(s), %s acknowledged', p_failed, v_acks);
    END IF;
    IF cardinality(v_needs) > 0 AND NOT v_needed THEN
        RETURN 'not a question, an offer, a draft or a plain "nothing was done"';
    END IF;
    RETURN NULL;
END
$$;

-- The honest message built from the task's steps (and the drafts it proposed),
-- replacing a false reply.
CREATE OR REPLACE FUNCTION agentdb_private.honest_text(p_task agentdb_private.tasks)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_steps jsonb := agentdb_private.report_steps(p_task.user_id, p_task.id);
    v_drafts text [];
    v_lines text [] := '{}';
    v_ok integer;
    v_total integer := jsonb_array_length(v_steps);
BEGIN
    v_drafts := ARRAY(
        SELECT '- ' || agentdb_private.msg('draft.proposed', p_task.lang, jsonb_build_object(
                   'ordinal', d.ordinal, 'summary', CASE WHEN p_task.lang = 'en' THEN d.summary_en ELSE d.summary_zh END))
          FROM agentdb_private.drafts AS d
         WHERE d.user_id = p_task.user_id AND d.task_id = p_task.id AND d.status = 'proposed'
         ORDER BY d.ordinal);
    IF v_total = 0 AND cardinality(v_drafts) = 0 THEN
        -- In an action turn the user already said what to do: nothing was done
        -- yet, and the next step is to ask again.
        RETURN agentdb_private.msg(CASE WHEN p_task.expects_action THEN 'gate.not_done_yet' ELSE 'gate.no_tool' END,
                                   p_task.lang);
    END IF;
    SELECT count(*) FILTER (WHERE (s ->> 'succeeded')::boolean) INTO v_ok FROM jsonb_array_elements(v_steps) AS s;
    v_lines := ARRAY[agentdb_private.msg(
        CASE WHEN v_ok = v_total THEN 'gate.correction' WHEN v_ok > 0 THEN 'gate.partial' ELSE 'gate.none_done' END,
        p_task.lang)];
    v_lines := v_lines || ARRAY(
        SELECT '- ' || (s ->> 'detail') FROM jsonb_array_elements(v_steps) AS s ORDER BY (s ->> 'seq')::int);
    IF cardinality(v_drafts) > 0 THEN
        v_lines := v_lines || agentdb_private.msg('gate.drafts', p_task.lang) || v_drafts;
    END IF;
    RETURN array_to_string(v_lines, E'\n');
END
$$;

-- The exit gate. Stores the claims, decides deliver or replace from the
-- database alone, keeps only the delivered text as history and the model's
-- text only in the audit row. A second call returns the first verdict. p_user
-- NULL: the task found by its id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.finalize_core(p_user text, task uuid, model_text text, claims jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_task agentdb_private.tasks;
    v_prior agentdb_private.replies;
    v_claims jsonb;
    v_source text;
    v_claims_from text;
    v_pending jsonb;
    v_verdict text;
    v_text text;
    v_clauses jsonb;
    v_facts jsonb;
    v_norm text;
    v_books record;
    v_reason text;
BEGIN
    -- The verdict is judged from the committed steps. A REPEATABLE READ or
    -- SERIALIZABLE snapshot may have been taken before a step of this task
    -- committed (a failure it would not see): such a caller is refused.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'finalize_reply must judge from every committed step, and this % transaction''s snapshot may predate some',
            current_setting('transaction_isolation')
            USING HINT = 'Call finalize_reply in a READ COMMITTED transaction (the default), e.g. its own autocommit call.',
                  ERRCODE = 'invalid_transaction_state';
    END IF;
    -- The reply ends the turn: the task is closed, and locked against a
    -- concurrent finalize_reply. In READ COMMITTED every later statement sees
    -- the steps of calls that held the task's lock before.
    v_task := agentdb_private.close_task(p_user, finalize_core.task);
    IF v_task.id IS NULL THEN
        INSERT INTO agentdb_private.audit (task_id, user_id, action, status, outcome, refusal, detail, payload)
        VALUES (finalize_core.task, p_user, 'reply', 'REFUSED', 'replace', 'unknown_task', 'no such task',
                jsonb_build_object('model_text', left(model_text, 100000)));
        RETURN jsonb_build_object('verdict', 'replace', 'text', agentdb_private.msg('gate.unknown_task', 'zh')
            || E'\n' || agentdb_private.msg('gate.unknown_task', 'en'), 'pending', '[]'::jsonb,
            'error', 'unknown_task');
    END IF;

    SELECT * INTO v_prior FROM agentdb_private.replies AS r WHERE r.user_id = v_task.user_id AND r.task_id = v_task.id;
    IF FOUND THEN
        RETURN jsonb_build_object('verdict', v_prior.verdict, 'text', v_prior.delivered_text,
                                  'pending', v_prior.pending, 'repeated', true, 'book_state', v_prior.book_state);
    END IF;

    -- Declared claims are trusted for their shape only; anything odd counts
    -- as a generic "done", the strictest claim to back.
    IF jsonb_typeof(finalize_core.claims) = 'array' THEN
        v_source := 'declared';
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'kind', CASE WHEN c ->> 'kind' IN ('create', 'update', 'delete', 'done') THEN c ->> 'kind'
                                ELSE 'done' END,
                   'text', left(CASE WHEN jsonb_typeof(c) = 'object' THEN c ->> 'text' ELSE c #>> '{}' END, 500),
                   'tool', CASE WHEN jsonb_typeof(c) = 'object' THEN left(c ->> 'tool', 200) END)
                   || CASE WHEN jsonb_typeof(c) = 'object' AND agentdb_private.known_class(c ->> 'class') IS NOT NULL
                           THEN jsonb_build_object('class', c ->> 'class') ELSE '{}'::jsonb END), '[]')
          INTO v_claims
          FROM jsonb_array_elements(finalize_core.claims) AS c;
    ELSIF jsonb_typeof(finalize_core.claims -> 'claims') = 'array'
        AND finalize_core.claims ->> 'patterns' = (
            SELECT r.fingerprint FROM agentdb_private.claim_rules AS r WHERE r.id = 1) THEN
        -- Detected by the runtime with the very patterns loaded here, which
        -- agree with this database's detector line by line (both take the
        -- leftmost-longest match), without the regex work here. Trusted as far
        -- as declared claims are: the runtime is the app. Shape still checked.
        v_source := 'runtime';
        -- The runtime's reading of the clauses, when it sent one.
        v_clauses := CASE WHEN jsonb_typeof(finalize_core.claims -> 'clauses') = 'array'
                          THEN finalize_core.claims -> 'clauses' END;
        v_facts := CASE WHEN jsonb_typeof(finalize_core.claims -> 'facts') = 'array'
                        THEN finalize_core.claims -> 'facts' END;
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'kind', CASE WHEN c ->> 'kind' IN ('create', 'update', 'delete', 'done') THEN c ->> 'kind'
                                ELSE 'done' END,
                   'text', left(c ->> 'text', 500),
                   'start', CASE WHEN jsonb_typeof(c -> 'start') = 'number'
                                  AND (c -> 'start')::numeric BETWEEN 0 AND 100000 THEN (c -> 'start')::numeric::int END,
                   'end', CASE WHEN jsonb_typeof(c -> 'end') = 'number'
                                AND (c -> 'end')::numeric BETWEEN 0 AND 100000 THEN (c -> 'end')::numeric::int END,
                   'lang', left(c ->> 'lang', 16))
                   || CASE WHEN agentdb_private.known_class(c ->> 'class') IS NOT NULL
                           THEN jsonb_build_object('class', c ->> 'class') ELSE '{}'::jsonb END ORDER BY n), '[]')
          INTO v_claims
          FROM jsonb_array_elements(finalize_core.claims -> 'claims') WITH ORDINALITY AS x (c, n);
        -- A runtime that sent claims without a reading of the clauses or the
        -- facts (an older one) is read here for what it did not send.
        IF v_clauses IS NULL OR v_facts IS NULL THEN
            v_norm := agentdb_private.normalise_reply(left(model_text, agentdb_private.max_reply()));
            v_clauses := coalesce(v_clauses, agentdb_private.clause_frames(v_norm));
        END IF;
    ELSE
        -- NULL, or a runtime's claims detected with other patterns than the
        -- loaded ones: detect here, in the text as normalised (claims' offsets
        -- refer to it). The clauses are framed, not labelled: the checks below
        -- ask each only what the books need, and read facts only where they count.
        v_source := 'detected';
        v_norm := agentdb_private.normalise_reply(left(model_text, agentdb_private.max_reply()));
        v_clauses := agentdb_private.clause_frames(v_norm);
        v_claims := agentdb_private.classify_claims(v_norm, agentdb_private.detect_claims_in(v_norm, NULL), v_clauses);
    END IF;

    v_claims_from := CASE v_source WHEN 'detected' THEN 'database' ELSE v_source END;
    INSERT INTO agentdb_private.claims (user_id, task_id, kind, claim_text, span_start, span_end, tool, source, claim_class)
    SELECT v_task.user_id, v_task.id, c ->> 'kind', c ->> 'text', (c ->> 'start')::int, (c ->> 'end')::int, c ->> 'tool', v_source,
           c ->> 'class'
      FROM jsonb_array_elements(v_claims) AS c;

    -- The claims just stored that no step backs: what pending_claims shows for
    -- this task, computed from them directly (the view would read them back).
    SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object('kind', c.c ->> 'kind', 'text', c.c ->> 'text',
                                                                   'class', c.c ->> 'class'))
                              || jsonb_build_object('tool', c.c ->> 'tool') ORDER BY c.n), '[]')
      INTO v_pending
      FROM jsonb_array_elements(v_claims) WITH ORDINALITY AS c (c, n)
     WHERE NOT agentdb_private.claim_is_backed_as(v_task.user_id, v_task.id, c.c ->> 'kind', c.c ->> 'class',
                                                  c.c ->> 'tool');

    -- The books decide first. A troubled task, and an empty one in an action
    -- turn, deliver only a reply recognised as acceptable for its state;
    -- otherwise (and in a clean task) the claims must all be backed.
    v_books := agentdb_private.book_state(v_task.user_id, v_task.id);
    IF jsonb_array_length(v_pending) > 0 THEN
        v_reason := 'unbacked claim';
    ELSIF v_books.state = 'troubled' OR (v_books.state = 'empty' AND v_task.expects_action) THEN
        v_reason := agentdb_private.reply_unacceptable(v_norm, coalesce(v_clauses, '[]'), v_claims,
            CASE WHEN v_books.state = 'troubled' THEN 'troubled' ELSE 'empty_action' END, v_books.failed);
    END IF;
    -- The facts a reply states (times, dates, counts, amounts) must be what
    -- was written: in a clean task every stating clause's, in a troubled one
    -- those of the clauses holding its (backed) claims.
    -- Another thing of a class ("…and your other reminders too") needs one
    -- more verified step or affected row of it.
    IF v_reason IS NULL AND v_books.state <> 'empty' AND v_clauses IS NOT NULL THEN
        v_reason := agentdb_private.claims_outnumber(v_task.user_id, v_task.id, v_norm, v_clauses, v_claims);
    END IF;
    IF v_reason IS NULL AND v_books.state <> 'empty' AND v_clauses IS NOT NULL THEN
        v_reason := agentdb_private.facts_mismatch(v_task, v_norm, v_clauses, v_facts, v_claims,
                                                   v_books.state = 'troubled');
    END IF;

    IF v_reason IS NOT NULL THEN
        v_verdict := 'replace';
        v_text := agentdb_private.honest_text(v_task);
    ELSE
        -- Never more than was checked: a longer reply is cut where reading stopped.
        v_verdict := 'deliver';
        v_text := left(coalesce(model_text, ''), agentdb_private.max_reply());
    END IF;

    INSERT INTO agentdb_private.replies (task_id, conversation_id, user_id, verdict, delivered_text, pending, book_state)
    VALUES (v_task.id, v_task.conversation_id, v_task.user_id, v_verdict, v_text, v_pending, v_books.state);
    INSERT INTO agentdb_private.audit (task_id, user_id, action, status, outcome, detail, payload)
    VALUES (v_task.id, v_task.user_id, 'reply', CASE WHEN v_verdict = 'deliver' THEN 'SUCCESS' ELSE 'REFUSED' END,
            v_verdict, format('%s claim(s), %s pending', jsonb_array_length(v_claims), jsonb_array_length(v_pending)),
            jsonb_build_object('model_text', left(model_text, 100000), 'claims', v_claims, 'pending', v_pending,
                               'claims_from', v_claims_from, 'book_state', v_books.state, 'reason', v_reason));
    -- Either text shows this task's draft summaries: they now count as seen.
    PERFORM agentdb_private.mark_shown(v_task.user_id, v_task.id);

    RETURN jsonb_build_object('verdict', v_verdict, 'text', v_text, 'pending', v_pending, 'claims', v_claims,
                              'claims_from', v_claims_from, 'book_state', v_books.state)
        || CASE WHEN v_reason IS NULL THEN '{}' ELSE jsonb_build_object('reason', v_reason) END
        || CASE WHEN char_length(model_text) > agentdb_private.max_reply() AND v_verdict = 'deliver'
                THEN '{"cut": true}'::jsonb ELSE '{}'::jsonb END;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.finalize_reply(task uuid, model_text text, claims jsonb DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.finalize_core(NULL, finalize_reply.task, finalize_reply.model_text, finalize_reply.claims);
END
$$;

-- The conversation history: what users were actually shown.
CREATE OR REPLACE VIEW agentdb.v_conversation AS
SELECT
    r.conversation_id,
    r.user_id,
    r.task_id,
    r.verdict,
    r.delivered_text,
    r.pending,
    r.delivered_at
FROM agentdb_private.replies AS r;

GRANT EXECUTE ON FUNCTION agentdb.report(uuid), agentdb.report_text(uuid, text)
TO agentdb_app, agentdb_agent;
GRANT EXECUTE ON FUNCTION agentdb.context_rules(uuid, text), agentdb.finalize_reply(uuid, text, jsonb)
TO agentdb_app;
GRANT SELECT ON agentdb.v_conversation TO agentdb_app, agentdb_auditor;
