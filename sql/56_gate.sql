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
-- "done"; finalize_reply is the guarantee. p_user NULL: the task found by its
-- id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.context_rules_core(p_user text, p_task uuid, p_lang text)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_task agentdb_private.tasks := agentdb_private.task_row(p_user, p_task, false);
    v_lang text;
    v_rules text [] := '{}';
BEGIN
    IF v_task.id IS NULL THEN
        RAISE EXCEPTION 'context_rules: no task %', p_task USING ERRCODE = 'no_data_found';
    END IF;
    v_lang := coalesce(p_lang, v_task.lang);
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

CREATE OR REPLACE FUNCTION agentdb.context_rules(task uuid, lang text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.context_rules_core(NULL, context_rules.task, context_rules.lang);
END
$$;

-- The state of a task's books (agentdb_private.task_books) was read here
-- before the books were one value.
DROP FUNCTION IF EXISTS agentdb_private.book_state(uuid);
DROP FUNCTION IF EXISTS agentdb_private.book_state(text, uuid);
DROP FUNCTION IF EXISTS agentdb_private.gate_reason(agentdb_private.tasks, record, record, jsonb);

-- In a troubled task, the class of the verified step a clause speaks of, by
-- the things it names, or NULL: a clause that states a success in words that
-- name no class ("Reminder is in place", "提醒弄好了", "Reminder — done.")
-- is about the reminder that was set, not the court that was not booked.
-- Every thing it names must be of a class a verified step backs, and a class
-- its words name (the lexicon) must be backed too. A clause that names no
-- thing takes the things of the nearest clause before it on the same line
-- that names one ("1. Reminder — 8am — saved and confirmed."), or, when a
-- colon ends it or it is a heading in 【】 on its line, those of the clause
-- after it ("Done: reminder for 8am", "【已完成】⏎明天08:00 提醒…").
CREATE OR REPLACE FUNCTION agentdb_private.clause_topic(p_text text, p_clauses jsonb, p_ci integer, p_books record)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_clause jsonb := p_clauses -> p_ci;
    v_before jsonb := CASE WHEN p_ci > 0 THEN p_clauses -> (p_ci - 1) END;
    v_after jsonb := p_clauses -> (p_ci + 1);
    v_ci integer := p_ci;
    v_class text;
    v_named text [];
BEGIN
    IF p_text IS NULL OR v_clause IS NULL OR p_books.failed >= p_books.steps THEN
        RETURN NULL;
    END IF;
    v_class := agentdb_private.clause_class(p_text, v_clause);
    IF v_class IS NOT NULL AND agentdb_private.books_capacity(p_books, v_class, NULL) = 0 THEN
        RETURN NULL;
    END IF;
    v_named := agentdb_private.clause_topics(p_text, v_clause);
    -- Back along the line to the nearest clause that names a thing.
    WHILE cardinality(v_named) = 0 AND v_before IS NOT NULL
        AND strpos(substr(p_text, (v_before ->> 'end')::integer + 1,
                          (v_clause ->> 'start')::integer - (v_before ->> 'end')::integer), E'\n') = 0 LOOP
        v_named := agentdb_private.clause_topics(p_text, v_before);
        v_ci := v_ci - 1;
        v_clause := v_before;
        v_before := CASE WHEN v_ci > 0 THEN p_clauses -> (v_ci - 1) END;
    END LOOP;
    v_clause := p_clauses -> p_ci;
    IF cardinality(v_named) = 0 AND v_after IS NOT NULL
        AND (substr(p_text, (v_clause ->> 'end')::integer + 1, 1) IN (':', '：')
             OR substr(p_text, (v_clause ->> 'end')::integer, 1) = '】') THEN
        v_named := agentdb_private.clause_topics(p_text, v_after);
    END IF;
    IF cardinality(v_named) = 0 OR EXISTS (
            SELECT 1 FROM unnest(v_named) AS t (t) WHERE agentdb_private.books_capacity(p_books, t.t, NULL) = 0) THEN
        RETURN NULL;
    END IF;
    RETURN v_named[1];
END
$$;

-- In a troubled task, a generic claim of something done ("提醒弄好了",
-- "Reminder — done.", "Done: reminder for 8am") speaks of the verified step
-- the things of its clause name (clause_topic): it takes that step's class,
-- instead of done (which every step would have to back). A claim of another
-- class whose clause also names a thing no verified step backs, and does not
-- acknowledge the failure ("提醒和场地都已为您安排好", "Reminder and court are
-- both booked"), speaks of that thing too: it takes that thing's class.
CREATE OR REPLACE FUNCTION agentdb_private.claims_on_topic(p_text text, p_clauses jsonb, p_claims jsonb, p_books record)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply only, with a pinned search_path.
AS $$
DECLARE
    v_claim jsonb;
    v_class text;
    v_clause jsonb;
    v_out jsonb := '[]';
BEGIN
    FOR v_ki IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
        v_claim := p_claims -> v_ki;
        v_class := NULL;
        v_clause := NULL;
        FOR v_ci IN 0 .. CASE WHEN v_claim ? 'start' THEN jsonb_array_length(p_clauses) - 1 ELSE -1 END LOOP
            IF (p_clauses -> v_ci ->> 'start')::integer <= (v_claim ->> 'start')::integer
                AND (v_claim ->> 'start')::integer < (p_clauses -> v_ci ->> 'end')::integer THEN
                v_clause := p_clauses -> v_ci;
                IF coalesce(v_claim ->> 'class', v_claim ->> 'kind') = 'done' THEN
                    v_class := agentdb_private.clause_topic(p_text, p_clauses, v_ci, p_books);
                END IF;
                EXIT;
            END IF;
        END LOOP;
        IF v_clause IS NOT NULL AND coalesce(v_claim ->> 'class', v_claim ->> 'kind') <> 'done'
            AND NOT agentdb_private.clause_acks(p_text, v_clause, agentdb_private.failure_families(p_books)) THEN
            SELECT t.t INTO v_class FROM unnest(agentdb_private.clause_topics(p_text, v_clause)) AS t (t)
             WHERE agentdb_private.books_capacity(p_books, t.t, NULL) = 0 LIMIT 1;
        END IF;
        v_out := v_out || jsonb_build_array(v_claim || CASE WHEN v_class IS NOT NULL
                                                            THEN jsonb_build_object('class', v_class) ELSE '{}' END);
    END LOOP;
    RETURN v_out;
END
$$;

-- Does a clause hold one of the plain strings an extra action needs
-- (extra_any)? Only such a clause is searched for one (claims_beyond_steps).
CREATE OR REPLACE FUNCTION agentdb_private.clause_may_be_extra(p_text text, p_clause jsonb)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by claims_beyond_steps only, under finalize_reply's pinned search_path.
-- (Loops, not a query: each query is an executor run of its own.)
AS $$
DECLARE
    v_clause text := agentdb_private.clause_text(p_text, p_clause);
    v_words jsonb;
BEGIN
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        v_words := agentdb_private.claim_doc_compiled() -> 'extra_any'
                   -> ((agentdb_private.claim_langs_compiled())[v_li]).lang;
        FOR v_wi IN 0 .. coalesce(jsonb_array_length(v_words), 0) - 1 LOOP
            IF strpos(v_clause, v_words ->> v_wi) > 0 THEN
                RETURN true;
            END IF;
        END LOOP;
    END LOOP;
    RETURN false;
END
$$;

-- Where in a clause (1-based) the words of one more action start, or NULL:
-- only a clause holding a word such an action needs is searched, and one
-- that says it conditionally, or tells a check or product news (extra_not),
-- tells none. p_low: the normalised text in lower case.
CREATE OR REPLACE FUNCTION agentdb_private.clause_extra_at(p_low text, p_clause jsonb)
RETURNS integer
LANGUAGE sql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
    SELECT CASE WHEN agentdb_private.clause_may_be_extra(p_low, p_clause)
                     AND NOT agentdb_private.clause_has(p_low, p_clause, 'nonstating')
                     AND agentdb_private.clause_words(p_low, p_clause, 'extra_not', 1) IS NULL
                THEN agentdb_private.clause_words(p_low, p_clause, 'extra', 1) END
$$;

-- Is the claim that starts at p_start one of everything ("All set", "All
-- done", 都搞定了: of kind done)? It then stands for every verified step.
CREATE OR REPLACE FUNCTION agentdb_private.claims_open_with_all(p_claims jsonb, p_start integer)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
-- No SET clause: called by claims_beyond_steps only, under finalize_reply's pinned search_path.
-- (A loop, not a query: each query is an executor run of its own.)
AS $$
BEGIN
    FOR v_ki IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
        IF (p_claims -> v_ki ->> 'start')::integer = p_start AND p_claims -> v_ki ->> 'kind' = 'done' THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- The largest count clause p_ci states ("both", "all 5", 两条), or NULL: of
-- p_facts (a runtime's reading) or read here. A number that names a thing
-- ("court 2") is no count.
CREATE OR REPLACE FUNCTION agentdb_private.clause_count(p_text text, p_clauses jsonb, p_ci integer, p_facts jsonb)
RETURNS integer
LANGUAGE plpgsql STABLE
-- No SET clause: called by claims_beyond_steps only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_facts jsonb := coalesce(p_facts, to_jsonb(agentdb_private.clause_facts(p_text, p_clauses -> p_ci, p_ci)));
    v_n integer;
BEGIN
    FOR v_fi IN 0 .. coalesce(jsonb_array_length(v_facts), 0) - 1 LOOP
        IF v_facts -> v_fi ->> 'type' = 'count' AND (v_facts -> v_fi ->> 'clause')::integer = p_ci
            AND NOT agentdb_private.fact_overlapped(v_facts -> v_fi, v_facts, 'ident') THEN
            v_n := greatest(v_n, (v_facts -> v_fi ->> 'n')::integer);
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;

-- Why the reply claims more actions than steps were verified, or NULL. A
-- claim in a clause that says "also" ("…, and I've put it in your calendar
-- too", "并帮您重新下单了", "也顺手归档了"), after a claim in an earlier clause,
-- is one more action, of whatever class: 1 + n such clauses need as many
-- verified steps (affected rows do not count: "5条都勾了,也顺手归档了" after
-- one bulk step claims two actions). A count the first claim's clause states
-- is that many actions ("Both reminders are set, and I've shared one with your
-- carer": three; p_facts, the reply's facts).
DROP FUNCTION IF EXISTS agentdb_private.claims_beyond_steps(record, text, text, jsonb, jsonb);
-- (Some 80 lines long: its phases share the first claim's clause, the count of
-- extra actions and the text, read once; as functions each would take and
-- return all three.)
CREATE OR REPLACE FUNCTION agentdb_private.claims_beyond_steps(
    p_books record, p_norm text, p_model_text text, p_clauses jsonb, p_claims jsonb, p_facts jsonb
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: only gate_reason, with a pinned search_path, calls it.
AS $$
DECLARE
    v_text text;
    v_steps integer := p_books.steps - p_books.failed;
    v_start integer;
    v_first integer;
    v_worth boolean := false;
    v_extra integer := 0;
    v_base integer := 1;
    v_one_row boolean;
BEGIN
    -- (Loops, not queries, until a clause is worth reading: this runs on
    -- every reply, and each query is an executor run of its own.)
    FOR v_ki IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
        v_start := least(v_start, (p_claims -> v_ki ->> 'start')::integer);
    END LOOP;
    -- Worth reading only where a clause that is no question follows the
    -- first claim's (or, with no claim, the first clause).
    FOR v_ci IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
        IF v_first IS NULL AND coalesce(v_start < (p_clauses -> v_ci ->> 'end')::integer, true) THEN
            v_first := v_ci;
        ELSIF v_first IS NOT NULL AND NOT agentdb_private.clause_asks(p_clauses -> v_ci) THEN
            v_worth := true;
        END IF;
    END LOOP;
    -- ... or where the first claim's clause may itself be one more action
    -- after a statement before it ("All gone ✅ Removed it from your calendar
    -- too": it holds a word an extra action needs), or, with no claim, the
    -- first clause may hold one ("0800 tmrw ✓ + synced to Outlook").
    IF NOT v_worth AND (v_first > 0 OR v_first = 0 AND v_start IS NULL) AND p_books.state = 'clean' THEN
        v_text := agentdb_private.normalised_reply(p_norm, p_model_text);
        v_worth := agentdb_private.clause_may_be_extra(lower(v_text COLLATE "C"), p_clauses -> v_first);
    END IF;
    IF NOT v_worth THEN
        RETURN NULL;
    END IF;
    -- In a clean task, a statement of something done before the first claim
    -- ("All sorted ✅", 都搞定了, "Both reminders set, and I've put in ...")
    -- stands for the first claim, or where no claim is read.
    v_first := CASE WHEN v_start IS NOT NULL THEN v_first END;
    IF p_books.state = 'clean' AND jsonb_array_length(p_clauses) > 1 THEN
        FOR v_ci IN 0 .. coalesce(v_first, jsonb_array_length(p_clauses) - 1) - 1 LOOP
            -- (A runtime's clause without "stated", in a reply without a mark of
            -- something done, states nothing: the text is not normalised for it.)
            CONTINUE WHEN v_text IS NULL AND p_norm IS NULL AND NOT p_clauses -> v_ci -> 'labels' ? 'stated'
                AND NOT agentdb_private.text_marks_done(p_model_text);
            v_text := coalesce(v_text, agentdb_private.normalised_reply(p_norm, p_model_text));
            IF agentdb_private.clause_says_done(v_text, p_clauses -> v_ci, true) IS NOT NULL THEN
                v_first := v_ci;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    IF v_first IS NULL AND p_books.state <> 'clean' THEN
        RETURN NULL;
    END IF;
    -- The text as read (a runtime's reading came without it here).
    v_text := agentdb_private.normalised_reply(coalesce(v_text, p_norm), p_model_text);
    -- In a clean task the first clause stands for the verified steps where
    -- nothing is read as said done ("eight a.m. tomorrow, call mum. I've also
    -- blocked off half an hour in your calendar"), or where the first claim
    -- itself tells one more action ("两条都set好了,另外也给你加了个…的提醒").
    -- Where nothing is, one more action told inside the first clause after
    -- what it states ("0800 tmrw ✓ + synced to Outlook") counts too.
    -- (Asked only of a clause holding a word an extra action needs: each of
    -- these regexes costs a compilation where the session's cache lost it.)
    IF p_books.state = 'clean' AND v_first IS NULL THEN
        v_first := 0;
        v_extra := CASE WHEN agentdb_private.clause_extra_at(lower(v_text COLLATE "C"), p_clauses -> 0) > 1 THEN 1 ELSE 0 END;
    ELSIF p_books.state = 'clean' AND v_first > 0
        AND agentdb_private.clause_extra_at(lower(v_text COLLATE "C"), p_clauses -> v_first) IS NOT NULL THEN
        v_first := 0;
    END IF;
    -- Where each verified step wrote one row, a count is as many steps.
    v_one_row := NOT EXISTS (SELECT 1 FROM unnest(p_books.ok, p_books.affected) AS b (ok, n) WHERE b.ok AND b.n > 1);
    IF v_one_row THEN
        v_base := greatest(v_base, agentdb_private.clause_count(v_text, p_clauses, v_first, p_facts));
    END IF;
    -- A first claim of everything ("All set", 都搞定了) stands for every verified step.
    v_base := greatest(v_base, CASE WHEN agentdb_private.claims_open_with_all(p_claims, v_start) THEN v_steps END);
    -- (Enough steps for one action a clause: no clause need be read. A clause
    -- of one more action may count more where each step wrote one row.)
    IF v_steps >= v_base + v_extra - 1 + jsonb_array_length(p_clauses) - v_first AND NOT v_one_row THEN
        RETURN NULL;
    END IF;
    v_text := lower(v_text COLLATE "C");
    FOR v_ci IN v_first + 1 .. jsonb_array_length(p_clauses) - 1 LOOP
        -- A question tells nothing done; a clause without any of the words
        -- an extra action needs (extra_any, plain strings) is not searched.
        CONTINUE WHEN agentdb_private.clause_asks(p_clauses -> v_ci)
            OR NOT agentdb_private.clause_may_be_extra(v_text, p_clauses -> v_ci);
        IF (agentdb_private.clause_words(v_text, p_clauses -> v_ci, 'extra', 1) IS NOT NULL
                OR (agentdb_private.clause_has(v_text, p_clauses -> v_ci, 'also')
                    AND agentdb_private.clause_holds_claim(p_clauses -> v_ci, p_claims)))
            AND NOT (agentdb_private.clause_has(v_text, p_clauses -> v_ci, 'nonstating')
                     AND agentdb_private.clause_extra_governed(v_text, p_clauses -> v_ci, 'nonstating'))
            AND agentdb_private.clause_words(v_text, p_clauses -> v_ci, 'extra_not', 1) IS NULL
            -- Advice tells what the user may do, not what was done ("If you were
            -- sharing the court, let your partner know today").
            AND NOT agentdb_private.clause_in_advice(v_text, p_clauses, p_claims, v_ci) THEN
            -- ("I've also added both to your calendar": two more.)
            v_extra := v_extra + CASE WHEN v_one_row
                                      THEN coalesce(agentdb_private.clause_count(v_text, p_clauses, v_ci, p_facts), 1)
                                      ELSE 1 END;
        END IF;
    END LOOP;
    IF v_steps < v_base + v_extra THEN
        RETURN format('the reply claims %s actions; %s step(s) were verified', v_base + v_extra, v_steps);
    END IF;
    RETURN NULL;
END
$$;

-- Is a clause a heading: a colon ends it, it is short (24 characters at
-- most), names a thing (a topic label) and holds no claim? The clause after
-- it says what ("Court booking:", "订场:"). "都改完了:" names no thing: it is
-- no heading. The caller has made sure it states nothing done.
CREATE OR REPLACE FUNCTION agentdb_private.clause_is_heading(p_text text, p_clause jsonb, p_claims jsonb)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    RETURN p_text IS NOT NULL
       AND substr(p_text, (p_clause ->> 'end')::integer + 1, 1) IN (':', '：')
       AND (p_clause ->> 'end')::integer - (p_clause ->> 'start')::integer <= 24
       AND NOT agentdb_private.clause_holds_claim(p_clause, p_claims)
       AND agentdb_private.clause_has(p_text, p_clause, 'topic');
END
$$;

-- In a troubled task, the class of the verified step a clause states a
-- success of, or NULL: the class its words name (the lexicon), when a verified
-- step backs it, or else what the things it names say it speaks of
-- (clause_topic).
CREATE OR REPLACE FUNCTION agentdb_private.clause_success_class(
    p_text text, p_clauses jsonb, p_ci integer, p_books record
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_class text;
    v_clauses jsonb := p_clauses;
    v_aside integer;
BEGIN
    IF p_text IS NULL THEN
        RETURN NULL;
    END IF;
    -- The clause states what comes before its aside (clause_aside_at), read
    -- from its words on either path: a runtime's labels are the whole clause's.
    v_aside := agentdb_private.clause_aside_at(p_text, p_clauses -> p_ci);
    IF v_aside > (p_clauses -> p_ci ->> 'start')::integer THEN
        v_clauses := jsonb_set(p_clauses, ARRAY[p_ci::text],
                               (p_clauses -> p_ci) - 'labels' || jsonb_build_object('end', v_aside));
    END IF;
    v_class := agentdb_private.clause_class(p_text, v_clauses -> p_ci);
    IF v_class IS NOT NULL AND agentdb_private.books_capacity(p_books, v_class, NULL) > 0 THEN
        RETURN v_class;
    END IF;
    v_class := agentdb_private.clause_topic(p_text, v_clauses, p_ci, p_books);
    RETURN CASE WHEN agentdb_private.books_capacity(p_books, v_class, NULL) > 0 THEN v_class END;
END
$$;

-- Is a failure told after clause p_ci, in its sentence (no . ! ? 。！？ or line
-- break between)? "It went through, but the check found nothing" tells the
-- failure last: the success is what seemed to happen, not a recovery.
CREATE OR REPLACE FUNCTION agentdb_private.sentence_acks_after(
    p_text text, p_clauses jsonb, p_ci integer, p_families text[]
)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_tells_recovery only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    FOR v_ci IN p_ci + 1 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
        EXIT WHEN agentdb_private.sentence_ends_before(p_text, p_clauses, v_ci);
        IF agentdb_private.clause_acks(p_text, p_clauses -> v_ci, p_families) THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- In a troubled task, does the reply tell a success after the failure that no
-- verified step backs ("Login expired, so I retried and it went through",
-- 刚才没存上,我重新试了一下就成功了, 回读一开始是空的,现在已经有了)? Such
-- a clause (clause_recovers), unless a failure is told after it in its
-- sentence (sentence_acks_after), must speak of a class a verified step backs
-- (clause_success_class: in a partial task, "the court was taken but the
-- reminder went through"). Not asked where every failure is a duplicate: the
-- row a reply says is there ("it's there", "your reminder is set") exists.
-- The reason, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.reply_tells_recovery(p_text text, p_clauses jsonb, p_books record)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by gate_reason only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_families text [];
    v_clause jsonb;
BEGIN
    IF agentdb_private.claim_doc_compiled() -> 'recovered' IS NULL THEN
        RETURN NULL;
    END IF;
    FOR v_ci IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
        v_clause := p_clauses -> v_ci;
        -- The words first (asked as if a failure came before), then the rest.
        CONTINUE WHEN NOT agentdb_private.clause_recovers(p_text, v_clause, NULL, true);
        v_families := coalesce(v_families, agentdb_private.failure_families(p_books));
        -- Where every failure is a duplicate, the row the reply says is there exists.
        EXIT WHEN v_families = ARRAY['fail_dup'];
        IF agentdb_private.clause_recovers(p_text, v_clause, v_families, EXISTS (
                SELECT 1 FROM generate_series(0, v_ci - 1) AS b (i)
                 WHERE agentdb_private.clause_acks(p_text, p_clauses -> b.i, v_families)))
            AND NOT agentdb_private.sentence_acks_after(p_text, p_clauses, v_ci, v_families)
            AND agentdb_private.clause_success_class(p_text, p_clauses, v_ci, p_books) IS NULL THEN
            RETURN format('the clause at %s-%s tells a success after the failure that no step backs',
                          v_clause ->> 'start', v_clause ->> 'end');
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- In an empty action turn, does the reply promise the asked-for effect as if it
-- were arranged ("you'll be reminded at 8", 会准时提醒你: the document's
-- "arranged" words) in a sentence none of whose clauses leaves the action
-- pending (label set pending: a condition, an offer, a draft, a plain "nothing
-- was done")? A courtesy question ("Anything else?") leaves nothing pending,
-- and a pending clause excuses only a promise of its own sentence: "You'll see
-- a notification at 8am. If you'd like it to repeat, let me know" and "If you
-- want it weekly, just say so. For now: you'll be reminded at 8" promise it
-- (each condition is about something else). The reason, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.reply_promises_arranged(p_text text, p_clauses jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by gate_reason only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_at integer;
    v_pending boolean := false;
BEGIN
    FOR v_ci IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
        -- A new sentence: a promise before it stays unexcused by what follows.
        IF v_ci > 0 AND agentdb_private.sentence_ends_before(p_text, p_clauses, v_ci) THEN
            EXIT WHEN v_at IS NOT NULL;
            v_pending := false;
        END IF;
        v_pending := v_pending OR agentdb_private.clause_has(p_text, p_clauses -> v_ci, 'pending');
        v_at := coalesce(v_at, CASE WHEN agentdb_private.clause_words(p_text, p_clauses -> v_ci, 'arranged', 1) IS NOT NULL
                                    THEN v_ci END);
        IF v_pending THEN
            v_at := NULL;
        END IF;
    END LOOP;
    RETURN CASE WHEN v_at IS NOT NULL
                THEN format('the clause at %s-%s promises it as arranged; nothing was done',
                            p_clauses -> v_at ->> 'start', p_clauses -> v_at ->> 'end') END;
END
$$;

-- Is clause p_ci asked, though it holds no question word of its own: the
-- sentence's short tag question follows it ("明早8点提醒你打给妈妈,对吗?",
-- "call mum at 8, right?"), or it is what a draft's opening asks to confirm
-- ("先确认下:明早8点提醒你call妈妈"; "Please confirm: call mum, 8am")? The
-- caller asks only of a clause that states nothing done.
CREATE OR REPLACE FUNCTION agentdb_private.clause_asked_around(p_text text, p_clauses jsonb, p_ci integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    IF p_ci + 1 < jsonb_array_length(p_clauses)
        AND agentdb_private.clause_asks(p_clauses -> (p_ci + 1))
        AND char_length(btrim(agentdb_private.clause_text(p_text, p_clauses -> (p_ci + 1)))) <= 6
        AND NOT agentdb_private.sentence_ends_before(p_text, p_clauses, p_ci + 1) THEN
        RETURN true;
    END IF;
    RETURN p_ci > 0 AND btrim(agentdb_private.clause_gap(p_text, p_clauses, p_ci)) IN (':', '：')
        AND agentdb_private.clause_has(p_text, p_clauses -> (p_ci - 1), 'draft');
END
$$;

-- Does clause p_ci answer "yes" (label yes: "Yes —", "A: Yep", 是的, 对) to
-- the clause before it, a question asking whether a thing of a class is done
-- or in place ("**Is my reminder set?** Yes — call mum, 8am", "Is the court
-- booked? Yes, court 3")? Not one asking what will be ("Will I be charged?").
-- The answer then states what the question asks (reply_unacceptable).
CREATE OR REPLACE FUNCTION agentdb_private.clause_answers_yes(p_text text, p_clauses jsonb, p_ci integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    RETURN p_ci > 0
        AND agentdb_private.clause_asks(p_clauses -> (p_ci - 1))
        AND agentdb_private.clause_has(p_text, p_clauses -> p_ci, 'yes')
        AND NOT agentdb_private.clause_has(p_text, p_clauses -> (p_ci - 1), 'future')
        AND (agentdb_private.clause_class(p_text, p_clauses -> (p_ci - 1)) IS NOT NULL
             OR agentdb_private.clause_has(p_text, p_clauses -> (p_ci - 1), 'topic'));
END
$$;

-- Why a reply may not be delivered in a troubled task or an empty action turn
-- (reason), or NULL when it may. Fail closed by positive recognition: every
-- clause must carry a label the document's "accept" lists for the state; in a
-- troubled task a clause holding a claim (which is then backed) counts too,
-- and so does a clause that states a success in words the detector does not
-- read as a claim ("Reminder is set.") when the class its words name is
-- backed by a verified step: such clauses are returned (implied, as claims of
-- their clause) so that their facts are compared like a claim's. A troubled
-- reply needs an "ack" clause per failed step, or an "ack_all" clause; an
-- empty action turn needs a clause labelled as one of "needs" (a question, an
-- offer, a draft, a plain "nothing was done"); an acknowledgement is an "ack"
-- clause or one of the failure family of a failed step's outcome
-- (fail_dup for a duplicate, fail_taken for a conflict…). The clauses are a runtime's
-- reading (with labels) or frames of clause_frames, asked through clause_has
-- only what the answer needs.
DROP FUNCTION IF EXISTS agentdb_private.reply_unacceptable(jsonb, jsonb, text, integer);
DROP FUNCTION IF EXISTS agentdb_private.reply_unacceptable(text, jsonb, jsonb, text, integer);
-- (Some 80 lines long: one loop asks each clause the recognisers in turn, each
-- only where the ones before left it open.)
CREATE OR REPLACE FUNCTION agentdb_private.reply_unacceptable(
    p_text text, p_clauses jsonb, p_claims jsonb, p_state text, p_books record,
    OUT reason text, OUT implied jsonb
)
LANGUAGE plpgsql STABLE
-- No SET clause: only gate_reason, under finalize_reply's pinned search_path, calls it.
AS $$
DECLARE
    v_accept text [];
    v_needs text [];
    v_clause jsonb;
    v_class text;
    v_ok boolean;
    v_ack boolean;
    v_need boolean;
    v_done text;
    v_acks integer := 0;
    v_needed boolean := false;
    v_families text [] := CASE WHEN p_state = 'troubled' THEN agentdb_private.failure_families(p_books) END;
BEGIN
    implied := '[]';
    v_accept := ARRAY(SELECT jsonb_array_elements_text(
        coalesce(agentdb_private.claim_doc_compiled() -> 'accept' -> p_state, '[]')));
    v_needs := ARRAY(SELECT jsonb_array_elements_text(
        coalesce(agentdb_private.claim_doc_compiled() -> 'needs' -> p_state, '[]')));
    IF jsonb_typeof(p_clauses) IS DISTINCT FROM 'array' OR jsonb_array_length(p_clauses) = 0 THEN
        reason := 'nothing in the reply could be read';
        RETURN;
    END IF;
    -- Where no step was verified (nor was one a duplicate or a conflict, where
    -- "Already there ✅" is honest), a mark of something done anywhere in the
    -- reply says otherwise ("✅ Call mum · tomorrow · 8:00 AM").
    IF (p_state = 'empty_action' OR p_state = 'troubled' AND p_books.failed = p_books.steps
            AND NOT p_books.outcomes && ARRAY['duplicate', 'conflict'])
        AND agentdb_private.text_marks_done(p_text) THEN
        reason := 'the reply holds a mark of something done; no step was verified';
        RETURN;
    END IF;
    FOR v_ci IN 0 .. jsonb_array_length(p_clauses) - 1 LOOP
        v_clause := p_clauses -> v_ci;
        -- Where nothing was done, a mark of something done (a check mark), or a
        -- statement that it is done that nothing before it governs, says otherwise.
        v_done := CASE WHEN p_state = 'empty_action' THEN agentdb_private.clause_done(p_text, v_clause, true, NULL) END;
        IF v_done IS NOT NULL THEN
            reason := format('the clause at %s-%s %s something done', v_clause ->> 'start', v_clause ->> 'end', v_done);
            RETURN;
        END IF;
        -- Asked in turn, each only when the ones before left the answer open.
        -- A failure word negated ("no conflicts", "没有冲突") or a reassurance
        -- ("you won't miss it", "不用担心") acknowledges nothing.
        -- (Asked only of a clause that would acknowledge or meet a need.)
        v_ack := p_state = 'troubled' AND agentdb_private.clause_acks(p_text, v_clause, v_families);
        -- "Is my reminder set? Yes — …" says it is: where no verified step backs
        -- what the question asks, the answer is not acceptable (an answer to a
        -- question that acknowledges the failure, "Was it rejected? Yes, …", is).
        IF NOT v_ack AND agentdb_private.clause_answers_yes(p_text, p_clauses, v_ci)
            AND (p_state = 'empty_action'
                 OR NOT agentdb_private.clause_acks(p_text, p_clauses -> (v_ci - 1), v_families)
                    AND agentdb_private.clause_success_class(p_text, p_clauses, v_ci - 1, p_books) IS NULL) THEN
            reason := format('the clause at %s-%s answers yes to a question of something not done',
                             v_clause ->> 'start', v_clause ->> 'end');
            RETURN;
        END IF;
        v_need := cardinality(v_needs) > 0 AND agentdb_private.clause_has(p_text, v_clause, p_state || '.needs');
        IF v_need AND agentdb_private.clause_has(p_text, v_clause, 'unack') THEN
            v_need := agentdb_private.clause_has(p_text, v_clause, p_state || '.needs_noack');
        END IF;
        -- In a troubled task, a clause stating a success that nothing governs,
        -- or stating one after its acknowledgement, is accepted only as the
        -- statement of a backed one (below).
        v_done := CASE WHEN p_state = 'troubled'
                       THEN agentdb_private.clause_done(p_text, v_clause, true, CASE WHEN v_ack THEN v_families END) END;
        v_ok := (v_ack AND v_done IS NULL AND 'ack' = ANY (v_accept)) OR v_need;
        IF NOT v_ok AND v_done IS NULL THEN
            v_ok := agentdb_private.clause_has(p_text, v_clause, p_state || '.rest');
        END IF;
        IF NOT v_ok AND p_state = 'troubled' THEN
            v_ok := agentdb_private.clause_holds_claim(v_clause, p_claims);
        END IF;
        IF NOT v_ok AND v_done IS NULL THEN
            v_ok := agentdb_private.clause_is_heading(p_text, v_clause, p_claims);
        END IF;
        -- "inert" accepts a clause without a word of doing; one asked around is a
        -- question; in a troubled task, one in a sentence of advice tells what
        -- the user may do (where nothing was done, advice may be told as of a
        -- thing in place: "Once you've called, tap Done").
        IF NOT v_ok AND v_done IS NULL THEN
            v_ok := ('inert' = ANY (v_accept) AND NOT agentdb_private.clause_has(p_text, v_clause, 'action'))
                OR agentdb_private.clause_asked_around(p_text, p_clauses, v_ci)
                OR p_state = 'troubled' AND agentdb_private.clause_in_advice(p_text, p_clauses, p_claims, v_ci);
        END IF;
        IF NOT v_ok AND p_state = 'troubled' THEN
            v_class := agentdb_private.clause_success_class(p_text, p_clauses, v_ci, p_books);
            IF v_class IS NOT NULL THEN
                v_ok := true;
                implied := implied || jsonb_build_array(jsonb_build_object(
                    'kind', 'implied', 'class', v_class, 'start', v_clause -> 'start'));
            END IF;
        END IF;
        IF NOT v_ok THEN
            reason := format('the clause at %s-%s is not recognised as acceptable here',
                             v_clause ->> 'start', v_clause ->> 'end');
            RETURN;
        END IF;
        v_acks := v_acks + CASE WHEN v_ack THEN 1 ELSE 0 END;
        v_needed := v_needed OR v_need;
    END LOOP;
    IF p_state = 'troubled' AND v_acks < p_books.failed AND NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(p_clauses) AS c
             WHERE agentdb_private.clause_has(p_text, c, 'ack_all')
               AND NOT agentdb_private.clause_has(p_text, c, 'unack')) THEN
        reason := format('%s failed step(s), %s acknowledged', p_books.failed, v_acks);
    ELSIF cardinality(v_needs) > 0 AND NOT v_needed THEN
        reason := 'not a question, an offer, a draft or a plain "nothing was done"';
    END IF;
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

-- A claim's kind as the gate reads it: one of the four kinds, anything else
-- the generic "done", the strictest to back.
CREATE OR REPLACE FUNCTION agentdb_private.claim_kind(p_kind text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_kind IN ('create', 'update', 'delete', 'done') THEN p_kind ELSE 'done' END $$;

-- Declared claims are trusted for their shape only; anything odd counts as a
-- generic "done", the strictest claim to back. A class is kept when the
-- loaded document names it.
CREATE OR REPLACE FUNCTION agentdb_private.declared_claims(p_claims jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by gate_read only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_c jsonb;
    v_out jsonb := '[]';
BEGIN
    -- One claim after another, without a query: a query's executor run per
    -- reply costs more than the claims' own work.
    FOR v_i IN 0 .. jsonb_array_length(p_claims) - 1 LOOP
        v_c := p_claims -> v_i;
        v_out := v_out || jsonb_build_array(jsonb_build_object(
                     'kind', agentdb_private.claim_kind(v_c ->> 'kind'),
                     'text', left(CASE WHEN jsonb_typeof(v_c) = 'object' THEN v_c ->> 'text' ELSE v_c #>> '{}' END, 500),
                     'tool', CASE WHEN jsonb_typeof(v_c) = 'object' THEN left(v_c ->> 'tool', 200) END)
                     || CASE WHEN jsonb_typeof(v_c) = 'object'
                              AND agentdb_private.claim_doc_compiled() -> 'classes' -> 'names' ? (v_c ->> 'class')
                             THEN jsonb_build_object('class', v_c ->> 'class') ELSE '{}'::jsonb END);
    END LOOP;
    RETURN v_out;
END
$$;

-- A runtime's claims (detected with the loaded patterns), their shape checked:
-- kinds, offsets within the longest reply, a known class.
CREATE OR REPLACE FUNCTION agentdb_private.runtime_claims(p_claims jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by gate_read only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_c jsonb;
    v_out jsonb := '[]';
BEGIN
    -- One claim after another, in their order, without a query (as
    -- declared_claims). An offset is kept when it is a number from 0 to
    -- 100000: one JSON path each (strict, silent: nothing for a claim that is
    -- no object, or an offset that is no number), fewer functions to set up
    -- on every reply than jsonb_typeof, casts and comparisons.
    FOR v_i IN 0 .. jsonb_array_length(p_claims) - 1 LOOP
        v_c := p_claims -> v_i;
        v_out := v_out || jsonb_build_array(jsonb_build_object(
                     'kind', agentdb_private.claim_kind(v_c ->> 'kind'),
                     'text', left(v_c ->> 'text', 500),
                     'start', jsonb_path_query_first(
                         v_c, 'strict $.start ? (@.type() == "number" && @ >= 0 && @ <= 100000)', '{}', true
                     )::numeric::int,
                     'end', jsonb_path_query_first(
                         v_c, 'strict $.end ? (@.type() == "number" && @ >= 0 && @ <= 100000)', '{}', true
                     )::numeric::int,
                     'lang', left(v_c ->> 'lang', 16))
                     || CASE WHEN agentdb_private.claim_doc_compiled() -> 'classes' -> 'names' ? (v_c ->> 'class')
                             THEN jsonb_build_object('class', v_c ->> 'class') ELSE '{}'::jsonb END);
    END LOOP;
    RETURN v_out;
END
$$;

-- Phase 1 of the gate: the reply as read. source: declared (the runtime says
-- what the reply claims), runtime (detected by the runtime with the very
-- patterns loaded here, with its reading of the clauses and facts) or
-- detected (here). norm: the normalised text, where it was needed; clauses:
-- a runtime's reading (with labels) or frames of clause_frames, which the
-- checks ask only what the books need; facts: a runtime's reading, or NULL
-- (read here, only where they count).
CREATE OR REPLACE FUNCTION agentdb_private.gate_read(
    p_text text, p_claims jsonb,
    OUT source text, OUT claims jsonb, OUT clauses jsonb, OUT facts jsonb, OUT norm text
)
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply only, with a pinned search_path.
AS $$
BEGIN
    IF jsonb_typeof(p_claims) = 'array' THEN
        source := 'declared';
        claims := agentdb_private.declared_claims(p_claims);
        RETURN;
    END IF;
    IF jsonb_typeof(p_claims -> 'claims') = 'array'
        AND p_claims ->> 'patterns' = agentdb_private.claim_doc_compiled() ->> 'fingerprint' THEN
        -- They agree with this database's detector line by line (both take the
        -- leftmost-longest match). Trusted as far as declared claims are: the
        -- runtime is the app.
        source := 'runtime';
        claims := agentdb_private.runtime_claims(p_claims -> 'claims');
        clauses := CASE WHEN jsonb_typeof(p_claims -> 'clauses') = 'array' THEN p_claims -> 'clauses' END;
        facts := CASE WHEN jsonb_typeof(p_claims -> 'facts') = 'array' THEN p_claims -> 'facts' END;
        -- A runtime that sent no reading of the clauses or the facts (an older
        -- one) is read here for what it did not send.
        IF clauses IS NULL OR facts IS NULL THEN
            norm := agentdb_private.normalise_reply(left(p_text, agentdb_private.max_reply()));
            clauses := coalesce(clauses, agentdb_private.clause_frames(norm));
        END IF;
        RETURN;
    END IF;
    -- NULL, or a runtime's claims detected with other patterns than the loaded
    -- ones: detected here, in the text as normalised (offsets refer to it).
    source := 'detected';
    norm := agentdb_private.normalise_reply(left(p_text, agentdb_private.max_reply()));
    clauses := agentdb_private.clause_frames(norm);
    claims := agentdb_private.classify_claims(norm, agentdb_private.detect_claims_in(norm, NULL), clauses);
END
$$;

-- In small talk (no step, no action asked), a second line behind the claim
-- detector: a clause in the words of the assistant doing a thing itself (the
-- document's "did" words: "I grabbed you the 8am slot", 帮你设了) or of one
-- more action ("extra": "顺便给你设了个晒被子的提醒", "I've also booked…")
-- tells something done that no step did. The reason, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.reply_tells_an_action(p_text text, p_clauses jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by gate_reason only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_low text := lower(p_text COLLATE "C");
    v_clause jsonb;
BEGIN
    FOR v_ci IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
        v_clause := p_clauses -> v_ci;
        CONTINUE WHEN agentdb_private.clause_asks(v_clause);
        IF agentdb_private.clause_did_unexcused(p_text, v_clause, NULL) IS NOT NULL
            OR agentdb_private.clause_extra_at(v_low, v_clause) IS NOT NULL THEN
            RETURN format('the clause at %s-%s tells something done; no step was taken',
                          v_clause ->> 'start', v_clause ->> 'end');
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Phase 3 of the gate: why the reply may not be delivered, or NULL. The books
-- decide first: any pending claim replaces it; a troubled task, and an empty
-- one in an action turn, deliver only a reply recognised as acceptable for
-- its state; in small talk a clause telling a thing the assistant did is
-- replaced too (reply_tells_an_action). Then, where there are steps, another
-- thing of a class ("…and your other reminders too") needs one more verified
-- step or row of it, and the facts a reply states (times, dates, counts,
-- amounts) must be what was written: in a clean task every stating clause's,
-- in a troubled one those of the clauses holding its (backed) claims.
CREATE OR REPLACE FUNCTION agentdb_private.gate_reason(
    p_task agentdb_private.tasks, p_books record, p_read record, p_pending jsonb, p_model_text text
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply only, with a pinned search_path.
AS $$
DECLARE
    v_reason text;
    v_claims jsonb := p_read.claims;
    v_norm text := p_read.norm;
    v_read record;
BEGIN
    IF jsonb_array_length(p_pending) > 0 THEN
        RETURN 'unbacked claim';
    END IF;
    -- An empty reply tells the user nothing, whatever the books: the honest
    -- message (what was done, or not) replaces it. Empty as read: the text
    -- normalised (invisible and format characters deleted, other spaces made
    -- spaces), on either path. A text holding a letter or a Chinese character
    -- is not empty once normalised (nothing deletes one): it needs no
    -- normalising here.
    -- (A text holding a letter holds something other than spaces: the second
    -- regex is asked only of a text without one. Both regexes are those of
    -- the languages' scripts, '[A-Za-z]' and '[一-鿿]': the same entries of the
    -- session's cache of 32 compiled regexes, which the claim patterns fill.)
    IF p_model_text IS NULL THEN
        RETURN 'empty reply';
    END IF;
    IF NOT (p_model_text ~ '[A-Za-z]' OR p_model_text ~ '[一-鿿]') THEN
        IF p_model_text !~ '[^[:space:]]' THEN
            RETURN 'empty reply';
        END IF;
        v_norm := agentdb_private.normalised_reply(v_norm, p_model_text);
        IF coalesce(v_norm, '') !~ '[^[:space:]]' THEN
            RETURN 'empty reply';
        END IF;
    END IF;
    IF p_books.state = 'troubled' OR (p_books.state = 'empty' AND p_task.expects_action) THEN
        -- These clauses may be read for their words: the text as normalised,
        -- here too when a runtime sent its reading.
        v_norm := agentdb_private.normalised_reply(v_norm, p_model_text);
        v_read := agentdb_private.reply_unacceptable(v_norm, coalesce(p_read.clauses, '[]'), p_read.claims,
            CASE WHEN p_books.state = 'troubled' THEN 'troubled' ELSE 'empty_action' END, p_books);
        v_reason := coalesce(
            v_read.reason,
            CASE WHEN p_books.state = 'troubled'
                 THEN agentdb_private.reply_tells_recovery(v_norm, p_read.clauses, p_books) END,
            -- A promise of the effect ("you'll get your reminder at 8") where
            -- nothing was done, or where every step failed and none for a row
            -- that exists already ("Sorry, it didn't save. You'll get your
            -- reminder at 8"): it tells what nothing arranged.
            CASE WHEN p_books.state = 'empty'
                      OR (p_books.failed = p_books.steps AND NOT 'duplicate' = ANY (p_books.outcomes))
                 THEN agentdb_private.reply_promises_arranged(v_norm, coalesce(p_read.clauses, '[]')) END);
        v_claims := v_claims || v_read.implied;
    ELSIF p_books.state = 'empty' AND p_read.clauses IS NOT NULL THEN
        v_reason := agentdb_private.reply_tells_an_action(agentdb_private.normalised_reply(v_norm, p_model_text),
                                                          p_read.clauses);
    END IF;
    IF v_reason IS NULL AND p_books.state <> 'empty' AND p_read.clauses IS NOT NULL THEN
        v_reason := coalesce(
            agentdb_private.claims_outnumber(p_books, v_norm, p_read.clauses, p_read.claims),
            -- (Normalised only where it was, or where the model's text holds lines and a
            -- mark: normalising makes no line break.)
            CASE WHEN p_books.state = 'clean' AND (v_norm IS NOT NULL OR (
                          strpos(p_model_text, E'\n') > 0 AND (strpos(p_model_text, '|') > 0
                                                              OR agentdb_private.text_marks_done(p_model_text))))
                 THEN agentdb_private.marks_outnumber(p_books, agentdb_private.normalised_reply(v_norm, p_model_text),
                                                      p_read.claims)
            END,
            agentdb_private.claims_beyond_steps(p_books, v_norm, p_model_text, p_read.clauses, p_read.claims,
                                               p_read.facts),
            agentdb_private.facts_mismatch(p_task, p_books, v_norm, p_read.clauses, p_read.facts, v_claims,
                                           p_books.state = 'troubled', p_model_text));
    END IF;
    RETURN v_reason;
END
$$;

-- Phase 4 of the gate: the record. The claims, the delivered text as history
-- (the model's text only in the audit row), the drafts shown; the verdict.
CREATE OR REPLACE FUNCTION agentdb_private.gate_record(
    p_task agentdb_private.tasks, p_books record, p_read record, p_pending jsonb, p_reason text, p_model_text text
)
RETURNS jsonb
LANGUAGE plpgsql
-- No SET clause: called by finalize_reply only, with a pinned search_path.
AS $$
DECLARE
    v_verdict text := CASE WHEN p_reason IS NULL THEN 'deliver' ELSE 'replace' END;
    v_text text;
    v_from text := CASE p_read.source WHEN 'detected' THEN 'database' ELSE p_read.source END;
BEGIN
    IF jsonb_array_length(p_read.claims) > 0 THEN
        INSERT INTO agentdb_private.claims
            (user_id, task_id, kind, claim_text, span_start, span_end, tool, source, claim_class)
        SELECT p_task.user_id, p_task.id, c ->> 'kind', c ->> 'text', (c ->> 'start')::int, (c ->> 'end')::int,
               c ->> 'tool', p_read.source, c ->> 'class'
          FROM jsonb_array_elements(p_read.claims) AS c;
    END IF;
    -- An honest message built from the steps replaces a false reply; a reply
    -- delivered is never longer than what was checked.
    v_text := CASE WHEN p_reason IS NOT NULL THEN agentdb_private.honest_text(p_task)
                   ELSE left(coalesce(p_model_text, ''), agentdb_private.max_reply()) END;
    INSERT INTO agentdb_private.replies (task_id, conversation_id, user_id, verdict, delivered_text, pending, book_state)
    VALUES (p_task.id, p_task.conversation_id, p_task.user_id, v_verdict, v_text, p_pending, p_books.state);
    INSERT INTO agentdb_private.audit (task_id, user_id, action, status, outcome, detail, payload)
    VALUES (p_task.id, p_task.user_id, 'reply', CASE WHEN v_verdict = 'deliver' THEN 'SUCCESS' ELSE 'REFUSED' END,
            v_verdict, format('%s claim(s), %s pending', jsonb_array_length(p_read.claims), jsonb_array_length(p_pending)),
            jsonb_build_object('model_text', left(p_model_text, 100000), 'claims', p_read.claims, 'pending', p_pending,
                               'claims_from', v_from, 'book_state', p_books.state, 'reason', p_reason));
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES (p_task.user_id, 'audit', currval('agentdb_private.audit_id_seq'::regclass));
    -- Either text shows this task's draft summaries: they now count as seen.
    IF p_books.drafts THEN
        PERFORM agentdb_private.mark_shown(p_task.user_id, p_task.id);
    END IF;
    RETURN jsonb_build_object('verdict', v_verdict, 'text', v_text, 'pending', p_pending, 'claims', p_read.claims,
                              'claims_from', v_from, 'book_state', p_books.state)
        || CASE WHEN p_reason IS NULL THEN '{}' ELSE jsonb_build_object('reason', p_reason) END
        || CASE WHEN char_length(p_model_text) > agentdb_private.max_reply() AND v_verdict = 'deliver'
                THEN '{"cut": true}'::jsonb ELSE '{}'::jsonb END;
END
$$;

-- The exit gate. Stores the claims, decides deliver or replace from the
-- database alone, keeps only the delivered text as history and the model's
-- text only in the audit row. A second call returns the first verdict. p_user
-- NULL: the task found by its id alone (the task-only entry point). An
-- orchestrator over the phases: read the reply (gate_read), read the books
-- once (task_books), what they do not back (books_pending), why not deliver
-- (gate_reason), record (gate_record).
CREATE OR REPLACE FUNCTION agentdb_private.finalize_core(p_user text, task uuid, model_text text, claims jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_task agentdb_private.tasks;
    v_prior agentdb_private.replies;
    v_read record;
    v_books record;
    v_pending jsonb;
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
        VALUES (finalize_core.task, coalesce(p_user, ''), 'reply', 'REFUSED', 'replace', 'unknown_task', 'no such task',
                jsonb_build_object('model_text', left(model_text, 100000)));
        INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
        VALUES (coalesce(p_user, ''), 'audit', currval('agentdb_private.audit_id_seq'::regclass));
        RETURN jsonb_build_object('verdict', 'replace', 'text', agentdb_private.msg('gate.unknown_task', 'zh')
            || E'\n' || agentdb_private.msg('gate.unknown_task', 'en'), 'pending', '[]'::jsonb,
            'error', 'unknown_task');
    END IF;

    SELECT * INTO v_prior FROM agentdb_private.replies AS r WHERE r.user_id = v_task.user_id AND r.task_id = v_task.id;
    IF FOUND THEN
        RETURN jsonb_build_object('verdict', v_prior.verdict, 'text', v_prior.delivered_text,
                                  'pending', v_prior.pending, 'repeated', true, 'book_state', v_prior.book_state);
    END IF;

    v_read := agentdb_private.gate_read(finalize_core.model_text, finalize_core.claims);
    v_books := agentdb_private.task_books(v_task.user_id, v_task.id);
    -- A troubled task with a verified step: a generic "done" speaks of the step
    -- its clause's things name, any claim of a thing its clause names that no
    -- verified step backs (claims_on_topic).
    IF v_books.state = 'troubled' AND v_books.failed < v_books.steps AND v_read.clauses IS NOT NULL
        AND EXISTS (SELECT 1 FROM jsonb_array_elements(v_read.claims) AS k WHERE k ? 'start') THEN
        v_read.norm := coalesce(v_read.norm, agentdb_private.normalise_reply(
            left(finalize_core.model_text, agentdb_private.max_reply())));
        v_read.claims := agentdb_private.claims_on_topic(v_read.norm, v_read.clauses, v_read.claims, v_books);
    END IF;
    v_pending := agentdb_private.books_pending(v_books, v_read.claims);
    RETURN agentdb_private.gate_record(v_task, v_books, v_read, v_pending,
                                       agentdb_private.gate_reason(v_task, v_books, v_read, v_pending,
                                                                   finalize_core.model_text),
                                       finalize_core.model_text);
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
