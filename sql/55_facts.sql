-- What a claim says was done (its class) and the facts a reply states (times,
-- dates, counts, amounts), read from the normalised text with the claim
-- patterns document's "classes" and "facts" sections, exactly as
-- pyagentdb.claims does; and how the task's books back them.

-- A claim class of the loaded document, or NULL (a runtime's or a declared
-- claim's class is taken only when it is one).
CREATE OR REPLACE FUNCTION agentdb_private.known_class(p_class text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_class WHERE agentdb_private.claim_doc_compiled() -> 'classes' -> 'names' ? p_class
$$;

-- The class of a claim: the first lexicon entry of its language (the specific
-- classes first) matching its clause from the claim's start on, else its kind.
-- An entry with literal guards is tried only on a clause holding one of them:
-- a claim's clause then meets one or two of the lexicon's regexes, not all.
CREATE OR REPLACE FUNCTION agentdb_private.claim_class(p_lang text, p_tail text, p_kind text)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_subject text;
BEGIN
    IF p_lang IS NULL OR p_tail IS NULL THEN
        RETURN p_kind;
    END IF;
    -- The compiled rules read in place, by index (agentdb_private.fold_for).
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        CONTINUE WHEN ((agentdb_private.claim_langs_compiled())[v_li]).lang IS DISTINCT FROM p_lang;
        v_subject := agentdb_private.fold_for(v_li, p_tail);
        FOR v_i IN 1 .. coalesce(cardinality(((agentdb_private.claim_langs_compiled())[v_li]).lexicon_res), 0) LOOP
            CONTINUE WHEN ((agentdb_private.claim_langs_compiled())[v_li]).lexicon_guards[v_i] IS NOT NULL
                AND NOT v_subject LIKE ANY (string_to_array(
                    ((agentdb_private.claim_langs_compiled())[v_li]).lexicon_guards[v_i], E'\n'));
            IF regexp_like(v_subject, ((agentdb_private.claim_langs_compiled())[v_li]).lexicon_res[v_i]) THEN
                RETURN ((agentdb_private.claim_langs_compiled())[v_li]).lexicon_names[v_i];
            END IF;
        END LOOP;
    END LOOP;
    RETURN p_kind;
END
$$;

-- (A span that names no languages is read by every language: clause_has.)
DROP FUNCTION IF EXISTS agentdb_private.claim_lang_codes();

-- The class a clause's words name (the first lexicon entry of any language
-- that matches it, the specific classes first), or NULL: what a clause that
-- states a success without a claim the detector reads ("Reminder is set",
-- "提醒设定好了") says was done.
CREATE OR REPLACE FUNCTION agentdb_private.clause_class(p_text text, p_clause jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_words text := substr(p_text, (p_clause ->> 'start')::integer + 1,
                           (p_clause ->> 'end')::integer - (p_clause ->> 'start')::integer);
    v_class text;
BEGIN
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        v_class := agentdb_private.claim_class(((agentdb_private.claim_langs_compiled())[v_li]).lang, v_words, NULL);
        IF v_class IS NOT NULL THEN
            RETURN v_class;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;


-- The classes of the things a clause names (its labels topic_<class>:
-- "reminder", "闹钟" name set; "court", "3号场" name book), sorted.
CREATE OR REPLACE FUNCTION agentdb_private.clause_topics(p_text text, p_clause jsonb)
RETURNS text[]
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_rules agentdb_private.claim_langs [] := agentdb_private.claim_langs_compiled();
    v_out text [] := '{}';
    v_topic text;
BEGIN
    IF p_clause IS NULL OR cardinality(v_rules) = 0
        OR NOT agentdb_private.clause_has(p_text, p_clause, 'topic') THEN
        RETURN v_out;
    END IF;
    FOREACH v_topic IN ARRAY string_to_array(
            v_rules[1].set_labels[array_position(v_rules[1].set_names, 'topic')], ',') LOOP
        IF agentdb_private.clause_has(p_text, p_clause, v_topic) THEN
            v_out := v_out || substr(v_topic, 7);
        END IF;
    END LOOP;
    RETURN v_out;
END
$$;

-- Claims with their class, as pyagentdb.claims.read_reply gives them: the
-- clause of each is the text from the claim's start to the end of the clause
-- that holds it (or to the claim's end).
CREATE OR REPLACE FUNCTION agentdb_private.classify_claims(p_text text, p_claims jsonb, p_clauses jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply and agentdb.read_reply, both with a
-- pinned search_path.
AS $$
DECLARE
    v_claim jsonb;
    v_start integer;
    v_end integer;
    v_out jsonb := '[]';
BEGIN
    FOR v_ki IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
        v_claim := p_claims -> v_ki;
        v_start := (v_claim ->> 'start')::integer;
        v_end := NULL;
        FOR v_ci IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
            IF (p_clauses -> v_ci ->> 'start')::integer <= v_start AND v_start < (p_clauses -> v_ci ->> 'end')::integer THEN
                v_end := (p_clauses -> v_ci ->> 'end')::integer;
                EXIT;
            END IF;
        END LOOP;
        v_end := coalesce(v_end, (v_claim ->> 'end')::integer);
        v_out := v_out || jsonb_build_array(v_claim || jsonb_build_object('class', agentdb_private.claim_class(
            v_claim ->> 'lang', substr(p_text, v_start + 1, v_end - v_start), v_claim ->> 'kind')));
    END LOOP;
    RETURN v_out;
END
$$;

-- Every class a tool's labels name (both lexicons on both labels), sorted.
CREATE OR REPLACE FUNCTION agentdb_private.label_classes(p_label_en text, p_label_zh text)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- plpgsql: the plan is kept for the session (an SQL function with a SET
    -- clause is planned again on every call).
    RETURN (SELECT coalesce(array_agg(DISTINCT e ->> 0 ORDER BY e ->> 0), '{}')
              FROM unnest(ARRAY[p_label_en, p_label_zh]) AS lb (label)
             CROSS JOIN unnest(agentdb_private.claim_langs_compiled()) AS l
             CROSS JOIN LATERAL jsonb_array_elements(
                 coalesce(agentdb_private.claim_doc_compiled() -> 'classes' -> 'lexicon' -> l.lang, '[]')) AS e
             WHERE lb.label IS NOT NULL
               AND regexp_like(CASE WHEN l.flags = 'i' THEN lower(lb.label COLLATE "C") ELSE lb.label END, e ->> 1));
END
$$;

-- Do a tool's labels name this class? Read from label_classes, the one
-- definition.
CREATE OR REPLACE FUNCTION agentdb_private.label_names_class(p_label_en text, p_label_zh text, p_class text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_class = ANY (agentdb_private.label_classes(p_label_en, p_label_zh))
$$;

-- The classes a verified step of this tool backs: those of its action, and
-- those the tool declares (backs) or, when it declares none, its labels name.
CREATE OR REPLACE FUNCTION agentdb_private.step_classes(p_tool text, p_action text)
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(SELECT jsonb_array_elements_text(
               coalesce(agentdb_private.claim_doc_compiled() -> 'classes' -> 'actions' -> p_action, '[]')))
        || coalesce((SELECT coalesce(t.backs, agentdb_private.label_classes(t.label_en, t.label_zh))
                       FROM agentdb_private.tools AS t WHERE t.name = p_tool), '{}')
$$;

-- A number as the facts section reads it: digits, a number word, tens and a
-- unit joined by a hyphen (ninety-nine), or Chinese numerals (七十九 = 79;
-- the formal 壹佰捌拾玖 = 189). NULL when it is none of these.
CREATE OR REPLACE FUNCTION agentdb_private.fact_number(p_word text)
RETURNS numeric
LANGUAGE plpgsql STABLE
-- No SET clause: called by read_facts only.
AS $$
DECLARE
    v_numbers jsonb := agentdb_private.claim_doc_compiled() -> 'facts' -> 'numbers';
    v_total integer := 0;
    v_digit integer := 0;
    v_ch text;
BEGIN
    IF p_word IS NULL OR p_word = '' THEN
        RETURN NULL;
    END IF;
    -- Digits, with at most one decimal point between digits (no regex: the
    -- cache of compiled ones is kept for the patterns).
    IF translate(p_word, '0123456789', '') = ''
        OR (translate(p_word, '0123456789', '') = '.' AND left(p_word, 1) <> '.' AND right(p_word, 1) <> '.') THEN
        RETURN p_word::numeric;
    END IF;
    IF v_numbers ? p_word THEN
        RETURN (v_numbers ->> p_word)::numeric;
    END IF;
    -- Tens and a unit joined by a hyphen: ninety-nine.
    IF (v_numbers ->> split_part(p_word, '-', 1))::numeric >= 20
        AND (v_numbers ->> split_part(p_word, '-', 1))::numeric % 10 = 0
        AND (v_numbers ->> split_part(p_word, '-', 2))::numeric BETWEEN 1 AND 9 THEN
        RETURN (v_numbers ->> split_part(p_word, '-', 1))::numeric + (v_numbers ->> split_part(p_word, '-', 2))::numeric;
    END IF;
    FOREACH v_ch IN ARRAY regexp_split_to_array(p_word, '') LOOP
        IF v_ch IN ('百', '佰') THEN
            v_total := v_total + greatest(v_digit, 1) * 100;
            v_digit := 0;
        ELSIF v_ch IN ('十', '拾') THEN
            v_total := v_total + greatest(v_digit, 1) * 10;
            v_digit := 0;
        ELSIF v_numbers ? v_ch AND (v_numbers ->> v_ch)::numeric < 10 THEN
            v_digit := (v_numbers ->> v_ch)::integer;
        ELSE
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN v_total + v_digit;
END
$$;

-- Phase 1 of clause_facts: the languages whose rules read a clause, by their
-- index in claim_langs_compiled(): those whose script it holds, or every
-- language when it holds none ("£89.00", "08:00"); a language without a
-- script reads every clause.
DROP FUNCTION IF EXISTS agentdb_private.fact_langs(text);
CREATE OR REPLACE FUNCTION agentdb_private.fact_lang_indexes(p_whole text)
RETURNS integer[]
LANGUAGE plpgsql STABLE
-- No SET clause: called by clause_facts only, under the gate's pinned search_path.
AS $$
DECLARE
    v_n integer := coalesce(cardinality(agentdb_private.claim_langs_compiled()), 0);
    v_out integer [] := '{}';
BEGIN
    FOR v_li IN 1 .. v_n LOOP
        IF ((agentdb_private.claim_langs_compiled())[v_li]).script IS NULL
            OR regexp_like(p_whole, ((agentdb_private.claim_langs_compiled())[v_li]).script) THEN
            v_out := v_out || v_li;
        END IF;
    END LOOP;
    RETURN CASE WHEN cardinality(v_out) = 0 THEN ARRAY(SELECT generate_series(1, v_n)) ELSE v_out END;
END
$$;

-- Phase 2 of clause_facts: where one fact rule matches a clause (lowered
-- when its language folds), leftmost-longest, each match's end searched from
-- its start (the same match); a match may not overlap an earlier fact of its
-- type nor a skipped span (taken_*: the clause's spans so far, this rule's
-- added). starts/ends: 1-based, end exclusive, skips left out.
DROP FUNCTION IF EXISTS agentdb_private.fact_rule_spans(text, text, text, text[], integer[], integer[]);
CREATE OR REPLACE FUNCTION agentdb_private.fact_rule_spans(
    p_subject text, p_pattern text, p_type text, p_groups text,
    INOUT taken_types text[], INOUT taken_starts integer[], INOUT taken_ends integer[],
    OUT starts integer[], OUT ends integer[], OUT groups text[]
)
LANGUAGE plpgsql STABLE
-- No SET clause: called by clause_facts only, under the gate's pinned search_path.
AS $$
DECLARE
    v_pos integer := 1;
    v_ms integer;
    v_me integer;
    v_hit boolean;
    -- Each match's start, end and groups in one search, as in
    -- claims_in_clause: the first match from a place replaced by a mark
    -- character (\x01), or by the groups p_groups names (\1 to \9, joined by
    -- \x02) between two marks; the match is as long as what the text lost.
    -- (regexp_instr finds every match to the end; fact_of searched again for
    -- each group, with a second compiled form of the rule in the session's
    -- cache.) A subject holding a mark is searched with regexp_instr, its
    -- groups read by fact_of.
    v_marked boolean := strpos(p_subject, E'\x01') = 0 AND strpos(p_subject, E'\x02') = 0;
    v_mark text := E'\x01' || coalesce(p_groups || E'\x01', '');
    v_cut text;
    v_g text;
BEGIN
    starts := '{}';
    ends := '{}';
    groups := '{}';
    -- The first match's start answers whether the rule matches at all.
    IF v_marked THEN
        v_cut := regexp_replace(p_subject, p_pattern, v_mark, 1, 1);
        v_ms := strpos(v_cut, E'\x01');
    ELSE
        v_ms := regexp_instr(p_subject, p_pattern, 1, 1, 0);
    END IF;
    LOOP
        EXIT WHEN v_ms = 0 OR v_pos > char_length(p_subject);
        IF v_pos > 1 AND v_marked THEN
            v_cut := regexp_replace(p_subject, p_pattern, v_mark, v_pos, 1);
            v_ms := strpos(v_cut, E'\x01');
            EXIT WHEN v_ms = 0;
        ELSIF v_pos > 1 THEN
            v_ms := regexp_instr(p_subject, p_pattern, v_pos, 1, 0);
            EXIT WHEN v_ms = 0;
        END IF;
        IF v_marked THEN
            v_g := CASE WHEN p_groups IS NOT NULL THEN split_part(v_cut, E'\x01', 2) END;
            -- The text lost the match and gained the marks and the groups.
            v_me := v_ms + char_length(p_subject) - char_length(v_cut)
                    + CASE WHEN p_groups IS NULL THEN 1 ELSE 2 + char_length(v_g) END;
        ELSE
            v_me := regexp_instr(p_subject, p_pattern, v_ms, 1, 1);
        END IF;
        v_pos := CASE WHEN v_me > v_ms THEN v_me ELSE v_ms + 1 END;
        CONTINUE WHEN v_me = v_ms;
        v_hit := false;
        FOR v_k IN 1 .. cardinality(taken_types) LOOP
            IF taken_types[v_k] IN (p_type, 'skip') AND taken_starts[v_k] < v_me AND v_ms < taken_ends[v_k] THEN
                v_hit := true;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN v_hit;
        taken_types := taken_types || p_type;
        taken_starts := taken_starts || v_ms;
        taken_ends := taken_ends || v_me;
        IF p_type <> 'skip' THEN
            starts := starts || v_ms;
            ends := ends || v_me;
            groups := groups || CASE WHEN v_marked THEN v_g END;
        END IF;
    END LOOP;
END
$$;

-- Phase 3 of clause_facts: one fact, {type, clause, start, end, n, m, tag,
-- value}, from a rule's match at p_ms-p_me (1-based) of the clause that
-- starts at p_start of the text.
DROP FUNCTION IF EXISTS agentdb_private.fact_of(text, agentdb_private.fact_rules, integer, integer, integer, integer);
CREATE OR REPLACE FUNCTION agentdb_private.fact_of(
    p_subject text, p_f agentdb_private.fact_rules, p_ms integer, p_me integer, p_start integer, p_index integer,
    p_groups text
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by clause_facts only, under the gate's pinned search_path.
AS $$
DECLARE
    v_groups text [];
BEGIN
    -- The rule's groups (num, min, tag): as fact_rule_spans read them with the
    -- match (joined by \x02), or searched here. A group that took no part
    -- reads '' there, NULL here: the same number and tag (fact_number reads
    -- '' as NULL; no tag is '').
    IF coalesce(p_f.num, p_f.min, p_f.tag) IS NULL THEN
        v_groups := '{}';
    ELSIF p_groups IS NOT NULL THEN
        v_groups := string_to_array(p_groups, E'\x02');
    ELSE
        v_groups := ARRAY[regexp_substr(p_subject, p_f.pattern, p_ms, 1, '', p_f.num),
                          regexp_substr(p_subject, p_f.pattern, p_ms, 1, '', p_f.min),
                          regexp_substr(p_subject, p_f.pattern, p_ms, 1, '', p_f.tag)];
    END IF;
    RETURN jsonb_build_object(
        'type', p_f.type,
        'clause', p_index,
        'start', p_start + p_ms - 1,
        'end', p_start + p_me - 1,
        'n', CASE WHEN p_f.num IS NOT NULL THEN agentdb_private.fact_number(v_groups[1]) END,
        'm', CASE WHEN p_f.min IS NOT NULL THEN agentdb_private.fact_number(v_groups[2]) END,
        -- A time whose hour is two digits starting with 0 ("09:00", "0800") and
        -- no tag word is on the 24-hour clock: am.
        'tag', coalesce(CASE WHEN p_f.tag IS NOT NULL THEN agentdb_private.claim_doc_compiled() -> 'facts' -> 'tags'
                                 ->> btrim(v_groups[3]) END,
                        CASE WHEN p_f.type = 'time' AND char_length(v_groups[1]) = 2 AND left(v_groups[1], 1) = '0'
                                  AND strpos('0123456789', substr(v_groups[1], 2, 1)) > 0 THEN 'am' END),
        'value', to_jsonb(p_f.value));
END
$$;

-- The facts one clause states (its index among the clauses: p_index), as
-- pyagentdb.claims.read_facts reads them: per language that reads the
-- clause (fact_langs), the rules in order, each tried only when the clause
-- holds one of its "any" strings, where they match (fact_rule_spans); each
-- fact built by fact_of. Each {type, clause, start, end, n, m, tag, value}.
CREATE OR REPLACE FUNCTION agentdb_private.clause_facts(p_text text, p_clause jsonb, p_index integer)
RETURNS jsonb[]
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_start integer := (p_clause ->> 'start')::integer;
    v_whole text := substr(p_text, (p_clause ->> 'start')::integer + 1,
                           (p_clause ->> 'end')::integer - (p_clause ->> 'start')::integer);
    v_subject text;
    v_li integer;
    v_lang text;
    v_f agentdb_private.fact_rules;
    v_spans record;
    v_spec text;
    v_types text [] := '{}';
    v_starts integer [] := '{}';
    v_ends integer [] := '{}';
    v_out jsonb [] := '{}';
BEGIN
    IF v_whole IS NULL OR v_whole = '' THEN
        RETURN v_out;
    END IF;
    FOREACH v_li IN ARRAY agentdb_private.fact_lang_indexes(v_whole) LOOP
        v_subject := agentdb_private.fold_for(v_li, v_whole);
        v_lang := ((agentdb_private.claim_langs_compiled())[v_li]).lang;
        -- The rules read in place, by index; a rule that applies is taken.
        FOR v_ri IN 1 .. coalesce(cardinality(agentdb_private.fact_rules_compiled()), 0) LOOP
            CONTINUE WHEN ((agentdb_private.fact_rules_compiled())[v_ri]).lang <> v_lang;
            CONTINUE WHEN ((agentdb_private.fact_rules_compiled())[v_ri]).any_of IS NOT NULL
                AND NOT v_subject LIKE ANY (((agentdb_private.fact_rules_compiled())[v_ri]).any_of);
            v_f := (agentdb_private.fact_rules_compiled())[v_ri];
            -- The groups the rule reads, read with each match (\1 to \9 only).
            v_spec := CASE WHEN coalesce(v_f.num, v_f.min, v_f.tag) IS NOT NULL
                                AND greatest(v_f.num, v_f.min, v_f.tag) <= 9
                           THEN coalesce('\' || v_f.num, '') || E'\x02' || coalesce('\' || v_f.min, '') || E'\x02'
                                || coalesce('\' || v_f.tag, '') END;
            v_spans := agentdb_private.fact_rule_spans(v_subject, v_f.pattern, v_f.type, v_spec,
                                                       v_types, v_starts, v_ends);
            v_types := v_spans.taken_types;
            v_starts := v_spans.taken_starts;
            v_ends := v_spans.taken_ends;
            FOR v_k IN 1 .. cardinality(v_spans.starts) LOOP
                v_out := v_out || agentdb_private.fact_of(v_subject, v_f, v_spans.starts[v_k], v_spans.ends[v_k],
                                                          v_start, p_index, v_spans.groups[v_k]);
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN v_out;
END
$$;

-- The facts a normalised text states, exactly as pyagentdb.claims.read_facts:
-- those of each clause of p_clauses (read_clauses or clause_frames), sorted by
-- place.
CREATE OR REPLACE FUNCTION agentdb_private.read_facts(p_text text, p_clauses jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(f.f ORDER BY (f.f ->> 'start')::integer, (f.f ->> 'end')::integer, c.n, f.n), '[]')
      FROM jsonb_array_elements(CASE WHEN p_text IS NULL THEN '[]' ELSE p_clauses END) WITH ORDINALITY AS c (c, n)
     CROSS JOIN LATERAL unnest(agentdb_private.clause_facts(p_text, c.c, (c.n - 1)::integer)) WITH ORDINALITY AS f (f, n)
$$;

-- How much of a class the task's verified steps did (books_capacity).
DROP FUNCTION IF EXISTS agentdb_private.class_capacity(uuid, text, text);
CREATE OR REPLACE FUNCTION agentdb_private.class_capacity(p_user text, p_task uuid, p_class text, p_tool text)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.books_capacity(agentdb_private.task_books(p_user, p_task), p_class, p_tool);
END
$$;

-- Is a claim backed by the task's steps, by its class (books_back)?
DROP FUNCTION IF EXISTS agentdb_private.claim_is_backed_as(uuid, text, text, text);
CREATE OR REPLACE FUNCTION agentdb_private.claim_is_backed_as(
    p_user text, p_task uuid, p_kind text, p_class text, p_tool text
)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: only claim_backed_as, with a pinned search_path, executes it.
AS $$
BEGIN
    RETURN agentdb_private.books_back(agentdb_private.task_books(p_user, p_task), p_kind, p_class, p_tool);
END
$$;

-- Why the reply claims more of a class than was done, or NULL. A claim of a
-- class whose clause names another thing ("…and I've cleared your other
-- reminders too", "其他提醒也一起清空了") after an earlier claim of the class
-- is one more action of it: n such claims need n verified steps backing the
-- class, or n affected rows. A restatement ("Cancelled. Status: cancelled")
-- names nothing else and counts once.
DROP FUNCTION IF EXISTS agentdb_private.claims_outnumber(uuid, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS agentdb_private.claims_outnumber(text, uuid, text, jsonb, jsonb);
CREATE OR REPLACE FUNCTION agentdb_private.claims_outnumber(
    p_books record, p_text text, p_clauses jsonb, p_claims jsonb
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: only finalize_reply, with a pinned search_path, calls it.
AS $$
DECLARE
    v_need jsonb := '{}';
    v_claim jsonb;
    v_class text;
    v_more boolean := false;
BEGIN
    FOR v_ki IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
        v_claim := p_claims -> v_ki;
        v_class := v_claim ->> 'class';
        CONTINUE WHEN v_class IS NULL OR v_class = 'done' OR v_claim ->> 'lang' IS NULL;
        IF NOT v_need ? v_class THEN
            v_need := v_need || jsonb_build_object(v_class, 1);
            CONTINUE;
        END IF;
        FOR v_ci IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
            IF (v_claim ->> 'start')::integer >= (p_clauses -> v_ci ->> 'start')::integer
                AND (v_claim ->> 'start')::integer < (p_clauses -> v_ci ->> 'end')::integer THEN
                IF agentdb_private.clause_has(p_text, p_clauses -> v_ci, 'also') THEN
                    v_need := v_need || jsonb_build_object(v_class, (v_need ->> v_class)::integer + 1);
                    v_more := true;
                END IF;
                EXIT;
            END IF;
        END LOOP;
    END LOOP;
    IF NOT v_more THEN
        RETURN NULL;
    END IF;
    FOR v_class IN SELECT n.key FROM jsonb_each_text(v_need) AS n WHERE n.value::integer > 1 LOOP
        IF agentdb_private.books_capacity(p_books, v_class, NULL) < (v_need ->> v_class)::integer THEN
            RETURN format('the reply claims %s actions of class %s; fewer were done', v_need ->> v_class, v_class);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- The same with the owner's rights, for pending_claims' readers.
-- (By task id alone: the view of revision 0013 calls it until it is replaced.)
CREATE OR REPLACE FUNCTION agentdb_private.claim_backed_as(p_task uuid, p_kind text, p_class text, p_tool text)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.claim_is_backed_as(t.user_id, p_task, p_kind, p_class, p_tool)
      FROM agentdb_private.tasks AS t WHERE t.id = p_task
$$;

CREATE OR REPLACE FUNCTION agentdb_private.claim_backed_as(
    p_user text, p_task uuid, p_kind text, p_class text, p_tool text
)
RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.claim_is_backed_as(p_user, p_task, p_kind, p_class, p_tool);
END
$$;

-- The values the task's verified steps wrote, as read back: every changed
-- row's new and old values (the change log of the step), or the receipt's row
-- where the table is not watched. Timestamps as (day offset from the task's
-- day, hour, minute) in the task's time zone, in three parallel arrays;
-- numbers; currency-like codes. One statement, its plan kept;
-- every table read by the task's user (on Citus routed to the user's shard;
-- change-log rows are the owner's: a table without an owner column counts
-- the receipt's row).
DROP FUNCTION IF EXISTS agentdb_private.written_values(agentdb_private.tasks);
CREATE OR REPLACE FUNCTION agentdb_private.written_values(
    p_task agentdb_private.tasks,
    OUT days integer[], OUT hhs integer[], OUT mis integer[], OUT nums numeric[], OUT codes text[],
    OUT amounts numeric[], OUT olds boolean[]
)
LANGUAGE plpgsql STABLE
-- No SET clause: only facts_mismatch, under finalize_reply's pinned search_path, calls it.
AS $$
DECLARE
    v_zone text := coalesce(p_task.time_zone, current_setting('TimeZone'));
BEGIN
    -- One pass over the values (each told apart as a timestamp, a number or a
    -- currency-like code, without regexes: the session's cache of compiled
    -- ones is kept for the claim patterns), aggregated with FILTER: fewer plan
    -- nodes to set up on every reply than a query per kind of value. Each
    -- step's change-log rows joined to it, each row's values with the
    -- receipt's: a step with several changed rows repeats its receipt's
    -- values, which changes no answer (the values are asked whether they hold
    -- a time, a number or a code). Only a string starting with a digit is
    -- asked whether it is a timestamp or a number.
    SELECT array_agg(v.t::date - (p_task.created_at AT TIME ZONE v_zone)::date) FILTER (WHERE v.t IS NOT NULL),
           array_agg(extract(HOUR FROM v.t)::integer) FILTER (WHERE v.t IS NOT NULL),
           array_agg(extract(MINUTE FROM v.t)::integer) FILTER (WHERE v.t IS NOT NULL),
           -- Whether a time is a changed row's old value (the one an update replaced).
           array_agg(v.is_old) FILTER (WHERE v.t IS NOT NULL),
           array_agg(v.s::numeric) FILTER (WHERE v.is_num),
           -- (Not DISTINCT: a code is asked whether it is among them; sorting costs more.)
           coalesce(array_agg(upper(v.s)) FILTER (WHERE v.is_code), '{}'),
           -- An amount is not a row's key: "七十九元" is no amount written when 79 is the new row's id.
           array_agg(v.s::numeric) FILTER (WHERE v.is_num AND NOT v.is_key)
      INTO days, hhs, mis, olds, nums, codes, amounts
      FROM (SELECT e.s, e.is_key, x.n = 2 AS is_old,
                   -- A timestamp starts 9999-99-99T99:99.
                   CASE WHEN e.digit
                             AND translate(left(e.s, 16), '0123456789', '9999999999')
                                 IN ('9999-99-99T99:99', '9999-99-99 99:99')
                        THEN e.s::timestamptz AT TIME ZONE v_zone END AS t,
                   -- A number, or a string of 1 to 12 digits, then maybe a point and 1 to 4 digits.
                   e.t = 'number'
                   OR (e.digit AND translate(e.s, '0123456789', '') IN ('', '.')
                       AND char_length(split_part(e.s, '.', 1)) BETWEEN 1 AND 12
                       AND (strpos(e.s, '.') = 0 OR char_length(split_part(e.s, '.', 2)) BETWEEN 1 AND 4)) AS is_num,
                   -- A currency-like code: three ASCII letters.
                   e.t = 'string' AND char_length(e.s) = 3
                   AND translate(e.s, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz', '') = '' AS is_code
              FROM agentdb_private.steps AS s
             -- Every changed row's new and old values (the change log of the
             -- step), and the receipt's row.
              LEFT JOIN agentdb_private.change_log AS c
                     ON c.user_id = p_task.user_id AND c.task_id = p_task.id AND c.seq = s.seq
             CROSS JOIN LATERAL unnest(ARRAY[c.new_row, c.old_row, s.receipt -> 'row'],
                                       ARRAY[c.key, c.key, s.receipt -> 'key']) WITH ORDINALITY AS x (r, k, n)
             -- (Only an object's values: jsonb_each of NULL is nothing.)
             CROSS JOIN LATERAL (SELECT j.t, j.s, j.t = 'string' AND ascii(j.s) BETWEEN 48 AND 57 AS digit,
                                        coalesce(jsonb_typeof(x.k) = 'object' AND x.k ? j.k, false) AS is_key
                                   FROM (SELECT jsonb_typeof(j.value) AS t, j.value #>> '{}' AS s, j.key AS k
                                           FROM jsonb_each(CASE WHEN jsonb_typeof(x.r) = 'object' THEN x.r END) AS j
                                         OFFSET 0) AS j) AS e
             WHERE s.user_id = p_task.user_id AND s.task_id = p_task.id AND s.outcome = 'success'
               AND s.verified
            -- Not pulled up: each value is told apart once, not once per aggregate.
            OFFSET 0) AS v;
END
$$;

-- Why the facts of a reply do not match what the task's verified steps
-- wrote, or NULL when they do. Only clauses that state something are read
-- (a clause holding a claim, or one that is not a question, an offer or a
-- condition); p_only_claims: only clauses
-- holding a claim (a troubled task's backed claims). p_facts: a runtime's
-- reading of the facts, or NULL to read here only the clauses that count.
-- In a clause:
--   a time (with the clause's day and half of the day, if it names them) must
--   be a written time: same minute, the hour in the user's time zone (8 with
--   no am/pm may be 8 or 20);
--   a day alone must be the day of a written time;
--   a count must be the number of verified steps, their affected rows, or one
--   step's affected rows (a number that names a thing, "court 3 booking", is
--   no count);
--   an amount must be a written number, in a written currency if the rows
--   hold a currency code.
DROP FUNCTION IF EXISTS agentdb_private.facts_mismatch(agentdb_private.tasks, jsonb, jsonb, jsonb, boolean);
DROP FUNCTION IF EXISTS agentdb_private.facts_mismatch(agentdb_private.tasks, text, jsonb, jsonb, jsonb, boolean);
-- Whether a clause holds a claim, its facts and the day they name were
-- asked of helper functions (clause_claimed, clause_reading, clause_when);
-- facts_mismatch answers them in its own loop now.
DROP FUNCTION IF EXISTS agentdb_private.clause_claimed(jsonb, jsonb);
DROP FUNCTION IF EXISTS agentdb_private.clause_reading(text, jsonb, integer, jsonb);

DROP FUNCTION IF EXISTS agentdb_private.clause_when(jsonb);

-- Does a fact of type p_type among p_facts overlap p_fact? A number that names
-- a thing (an ident: "court 3 booking", 3号场) is no count; one that counts
-- things ("for 2 reminders") is no time.
DROP FUNCTION IF EXISTS agentdb_private.fact_names_thing(jsonb, jsonb);
CREATE OR REPLACE FUNCTION agentdb_private.fact_overlapped(p_fact jsonb, p_facts jsonb, p_type text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
BEGIN
    FOR v_i IN 0 .. coalesce(jsonb_array_length(p_facts), 0) - 1 LOOP
        IF p_facts -> v_i ->> 'type' = p_type
            AND (p_facts -> v_i ->> 'start')::integer < (p_fact ->> 'end')::integer
            AND (p_fact ->> 'start')::integer < (p_facts -> v_i ->> 'end')::integer THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- The failure families of a task's failed steps (the document's failures: a
-- duplicate's "it was already there", a conflict's "someone else has it"), as
-- label sets: words of a family acknowledge only a failure of its kind.
CREATE OR REPLACE FUNCTION agentdb_private.failure_families(p_books record)
RETURNS text[]
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    RETURN ARRAY(
        SELECT DISTINCT agentdb_private.claim_doc_compiled() -> 'failures' ->> o.outcome
          FROM unnest(p_books.outcomes, p_books.ok) AS o (outcome, ok)
         WHERE NOT o.ok AND agentdb_private.claim_doc_compiled() -> 'failures' ->> o.outcome
                            = ANY ((agentdb_private.claim_langs_compiled())[1].set_names));
END
$$;


-- Does a clause acknowledge a failure: the ack label or the family of a failed
-- step (p_families), and no reassurance or negated failure word (unack)?
CREATE OR REPLACE FUNCTION agentdb_private.clause_acks(p_text text, p_clause jsonb, p_families text[])
RETURNS boolean
LANGUAGE sql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
    SELECT (agentdb_private.clause_has(p_text, p_clause, 'ack')
            OR EXISTS (SELECT 1 FROM unnest(coalesce(p_families, '{}')) AS f (f)
                        WHERE agentdb_private.clause_has(p_text, p_clause, f.f)))
       AND NOT agentdb_private.clause_has(p_text, p_clause, 'unack')
$$;


-- Why one fact of a clause (p_fact, among the clause's p_facts, on its day
-- p_day and half p_half) is not what was written (p_written: written_values;
-- p_counts: the counts facts_mismatch works out), or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.fact_mismatch(
    p_fact jsonb, p_facts jsonb, p_day integer, p_half text, p_has_time boolean, p_written record,
    p_counts integer[]
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by facts_mismatch only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_h integer;
    v_half text;
    v_hours integer [];
    v_old boolean := false;
BEGIN
    IF p_fact ->> 'type' = 'time' THEN
        v_h := coalesce((p_fact ->> 'n')::integer, (p_fact ->> 'value')::integer);
        IF v_h IS NULL OR v_h > 23 OR agentdb_private.fact_overlapped(p_fact, p_facts, 'count') THEN
            RETURN NULL;
        END IF;
        -- The hours it may be. (IF branches, not one CASE: an expression is set
        -- up whole in each transaction, its untaken branches too.)
        v_half := coalesce(p_fact ->> 'tag', p_half);
        IF v_half = 'am' THEN
            v_hours := ARRAY[v_h % 12];
        ELSIF v_half = 'pm' THEN
            v_hours := ARRAY[CASE WHEN v_h < 12 THEN v_h + 12 ELSE v_h END];
        ELSIF v_half = 'noon' THEN
            v_hours := ARRAY[CASE WHEN v_h < 6 THEN v_h + 12 ELSE v_h END];
        ELSIF v_h > 12 OR p_fact ? 'value' AND p_fact ->> 'value' IS NOT NULL THEN
            v_hours := ARRAY[v_h];
        ELSE
            v_hours := ARRAY[v_h % 12, v_h % 12 + 12];
        END IF;
        FOR v_wi IN 1 .. coalesce(cardinality(p_written.hhs), 0) LOOP
            IF p_written.hhs[v_wi] = ANY (v_hours) AND p_written.mis[v_wi] = coalesce((p_fact ->> 'm')::integer, 0)
                AND (p_day IS NULL OR p_written.days[v_wi] = p_day) THEN
                IF NOT coalesce(p_written.olds[v_wi], false) THEN
                    RETURN NULL;
                END IF;
                v_old := true;
            END IF;
        END LOOP;
        -- The time an update replaced: facts_mismatch accepts it only beside a new one.
        IF v_old THEN
            RETURN format('old: a time the reply names (%s) is the one replaced, not the one written',
                          p_fact ->> 'start');
        END IF;
        RETURN format('a time the reply names (%s) is not one that was written', p_fact ->> 'start');
    ELSIF p_fact ->> 'type' = 'day' AND NOT p_has_time THEN
        -- Rows without a time: the day is the day it was done, today.
        IF NOT (p_fact ->> 'value')::integer = ANY (coalesce(p_written.days, '{0}')) THEN
            RETURN format('a day the reply names (%s) is not one that was written', p_fact ->> 'start');
        END IF;
    ELSIF p_fact ->> 'type' = 'count' AND (p_fact ->> 'n') IS NOT NULL THEN
        IF agentdb_private.fact_overlapped(p_fact, p_facts, 'ident') THEN
            RETURN NULL;
        END IF;
        IF NOT (p_fact ->> 'n')::numeric = ANY (p_counts) THEN
            RETURN format('a count the reply names (%s) is not what was done', p_fact ->> 'n');
        END IF;
    ELSIF p_fact ->> 'type' = 'ident' AND (p_fact ->> 'n') IS NOT NULL THEN
        IF NOT coalesce((p_fact ->> 'n')::numeric = ANY (p_written.nums), false) THEN
            RETURN format('a number the reply names (%s) is not one that was written', p_fact ->> 'n');
        END IF;
    ELSIF p_fact ->> 'type' = 'amount' AND (p_fact ->> 'n') IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM unnest(p_written.amounts) AS w (num)
                        WHERE abs(w.num - (p_fact ->> 'n')::numeric) < 0.005) THEN
            RETURN format('an amount the reply names (%s) is not one that was written', p_fact ->> 'n');
        END IF;
        IF p_fact ->> 'tag' IS NOT NULL AND cardinality(p_written.codes) > 0
            AND NOT p_fact ->> 'tag' = ANY (p_written.codes) THEN
            RETURN format('a currency the reply names (%s) is not the one written', p_fact ->> 'tag');
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- Is a fact told as a value replaced: do the words just before it, or its own,
-- say so ("from 8", "was 8am", "instead of 8", 原来8点, 从8点)? Plain strings,
-- not a regex: the session's cache of compiled ones is kept for the patterns.
CREATE OR REPLACE FUNCTION agentdb_private.fact_told_as_old(p_text text, p_fact jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
-- No SET clause: called by facts_mismatch only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_from integer := greatest(0, (p_fact ->> 'start')::integer - 12);
    v_words text := lower(substr(p_text, v_from + 1, (p_fact ->> 'end')::integer - v_from));
BEGIN
    RETURN strpos(v_words, 'from') > 0 OR strpos(v_words, 'was ') > 0 OR strpos(v_words, 'instead of') > 0
        OR strpos(v_words, 'previously') > 0 OR strpos(v_words, '原') > 0 OR strpos(v_words, '从') > 0
        OR strpos(v_words, '由') > 0;
END
$$;

-- Does clause p_ci open its sentence with a condition (or an offer or a
-- question: the set nonstating) and end at a comma ("If she's not an early
-- riser, …", "如果你想提前一点，…")? The clause after it is then the main
-- clause of "If X, Y".
CREATE OR REPLACE FUNCTION agentdb_private.clause_opens_if(p_text text, p_clauses jsonb, p_ci integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by facts_mismatch only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    IF p_ci + 1 >= jsonb_array_length(p_clauses)
        OR btrim(agentdb_private.clause_gap(p_text, p_clauses, p_ci + 1)) NOT IN (',', '，')
        OR p_ci > 0 AND NOT agentdb_private.sentence_ends_before(p_text, p_clauses, p_ci) THEN
        RETURN false;
    END IF;
    RETURN agentdb_private.clause_has(p_text, p_clauses -> p_ci, 'nonstating');
END
$$;

-- Is clause p_ci part of a sentence of advice, which tells what the user may
-- do, not what was done? None of the sentence's clauses holds a claim (of
-- p_claims), the clause states nothing done (stated), and one of the
-- sentence's clauses up to it carries a general remark ("Many people like to
-- review tomorrow's reminders around 5pm", 一般九点到十一点的场地比较空) or,
-- where the clause names no thing of a class (topic), a condition or an offer
-- ("If your mum lives abroad, …, it'll be 9am there"; "A couple of extras, in
-- case you want them: an early heads-up at 7:50": a colon ends no sentence).
-- "If you need anything, your reminder is at 9am" states a fact; so does "If it
-- helps, I've set it for 9am".
CREATE OR REPLACE FUNCTION agentdb_private.clause_in_advice(
    p_text text, p_clauses jsonb, p_claims jsonb, p_ci integer
)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by facts_mismatch, claims_beyond_steps and reply_unacceptable,
-- under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_first integer := p_ci;
    v_last integer := p_ci;
    v_advised boolean := false;
    v_general boolean := false;
BEGIN
    WHILE v_first > 0 AND NOT agentdb_private.sentence_ends_before(p_text, p_clauses, v_first) LOOP
        v_first := v_first - 1;
    END LOOP;
    WHILE v_last + 1 < jsonb_array_length(p_clauses)
        AND NOT agentdb_private.sentence_ends_before(p_text, p_clauses, v_last + 1) LOOP
        v_last := v_last + 1;
    END LOOP;
    IF agentdb_private.clause_holds_claim(jsonb_build_object('start', p_clauses -> v_first -> 'start',
                                                             'end', p_clauses -> v_last -> 'end'), p_claims) THEN
        RETURN false;
    END IF;
    -- (The clause's own condition or offer governs it only where it starts
    -- before its words of doing: the callers ask that themselves. "I also book
    -- you Saturday instead" tells an action.)
    FOR v_i IN v_first .. p_ci LOOP
        IF v_i < p_ci AND agentdb_private.clause_has(p_text, p_clauses -> v_i, 'advising') THEN
            v_advised := true;
        END IF;
        v_general := agentdb_private.clause_has(p_text, p_clauses -> v_i, 'general');
        EXIT WHEN v_general;
    END LOOP;
    v_advised := v_advised OR v_general;
    RETURN v_advised AND (v_general OR NOT agentdb_private.clause_has(p_text, p_clauses -> p_ci, 'topic'))
        AND NOT agentdb_private.clause_has(p_text, p_clauses -> p_ci, 'stated');
END
$$;

-- (p_model_text, the reply as sent, was added: normalised only when p_text,
-- the normalised one, is NULL and a fact needs its words.)
DROP FUNCTION IF EXISTS agentdb_private.facts_mismatch(agentdb_private.tasks, record, text, jsonb, jsonb, jsonb, boolean);
-- facts_mismatch (described above fact_mismatch) runs some 90 lines long: it
-- answers in its own loop what four helper functions did (whether a clause
-- holds a claim, its facts, the day they name, the counts), each call of which
-- was a function's set-up on every reply.
CREATE OR REPLACE FUNCTION agentdb_private.facts_mismatch(
    p_task agentdb_private.tasks, p_books record, p_text text, p_clauses jsonb, p_facts jsonb, p_claims jsonb,
    p_only_claims boolean, p_model_text text
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: only finalize_reply, with a pinned search_path, calls it.
AS $$
DECLARE
    v_clause jsonb;
    v_src jsonb;
    v_fact jsonb;
    v_facts jsonb;
    v_wday integer;
    v_half text;
    v_has_time boolean;
    v_two_days boolean;
    v_two_halves boolean;
    v_day integer;
    v_prev_day integer;
    v_prev_index integer := -2;
    v_claimed boolean;
    v_written record;
    v_counts integer [];
    v_read boolean := false;
    v_reason text;
    v_old_reason text;
    v_new_time boolean := false;
    v_norm text;
    v_aside integer;
    v_families text [];
    v_prev_claimed boolean := false;
    v_after_claim boolean;
BEGIN
    IF p_facts IS NOT NULL AND (jsonb_typeof(p_facts) IS DISTINCT FROM 'array' OR jsonb_array_length(p_facts) = 0) THEN
        RETURN NULL;
    END IF;
    v_norm := CASE WHEN p_only_claims THEN agentdb_private.normalised_reply(p_text, p_model_text) END;
    -- Loops over indexes, not queries, and no helper function per clause:
    -- each query is an executor run of its own, each call a function's set
    -- up, and this runs on every reply.
    FOR v_index IN 0 .. coalesce(jsonb_array_length(p_clauses), 0) - 1 LOOP
        v_clause := p_clauses -> v_index;
        -- Does the clause hold a claim (one starts in it)? The detector, which
        -- knows questions and offers, read it as saying something was done: its
        -- facts count even when a word of it reads as an offer ("我帮你改约到了下午4点").
        v_claimed := false;
        FOR v_ki IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
            IF (p_claims -> v_ki ->> 'start')::integer >= (v_clause ->> 'start')::integer
                AND (p_claims -> v_ki ->> 'start')::integer < (v_clause ->> 'end')::integer THEN
                v_claimed := true;
                EXIT;
            END IF;
        END LOOP;
        v_after_claim := v_prev_claimed;
        v_prev_claimed := v_claimed;
        CONTINUE WHEN p_only_claims AND NOT v_claimed;
        CONTINUE WHEN NOT v_claimed AND agentdb_private.clause_has(p_text, v_clause, 'nonstating');
        -- In a troubled task, a parenthesis acknowledging the failure ("提醒已设好(场地3点被订了)")
        -- tells of what was not written: its facts are not compared.
        v_aside := CASE WHEN p_only_claims THEN agentdb_private.clause_aside_at(v_norm, v_clause) END;
        IF v_aside IS NOT NULL THEN
            -- (The task's failure families, read once a call: only here.)
            v_families := coalesce(v_families, agentdb_private.failure_families(p_books));
            v_aside := CASE WHEN agentdb_private.clause_acks(v_norm, jsonb_strip_nulls(jsonb_build_object(
                'start', v_aside, 'end', v_clause -> 'end', 'langs', v_clause -> 'langs')), v_families)
                       THEN v_aside END;
        END IF;
        -- The clause's facts: those of a runtime's reading, or read here; and
        -- the day and half of the day they name, when they name one of each
        -- (one value, however often), and whether they name a time.
        v_src := CASE WHEN p_facts IS NULL THEN to_jsonb(agentdb_private.clause_facts(p_text, v_clause, v_index))
                      ELSE p_facts END;
        v_facts := '[]';
        v_wday := NULL;
        v_half := NULL;
        v_has_time := false;
        v_two_days := false;
        v_two_halves := false;
        FOR v_fi IN 0 .. jsonb_array_length(v_src) - 1 LOOP
            v_fact := v_src -> v_fi;
            CONTINUE WHEN p_facts IS NOT NULL AND NOT coalesce((v_fact ->> 'clause')::integer = v_index, false);
            CONTINUE WHEN (v_fact ->> 'start')::integer >= v_aside;
            -- A day before today in a clause that claims nothing and names no
            -- class of action nor a thing of one tells of history ("your
            -- earlier order shipped yesterday"), not of this turn's writes
            -- ("Yesterday's reminders", "marked your reminders for yesterday").
            CONTINUE WHEN NOT v_claimed AND v_fact ->> 'type' = 'day' AND (v_fact ->> 'value')::integer < 0
                AND agentdb_private.clause_class(agentdb_private.normalised_reply(p_text, p_model_text), v_clause) IS NULL
                AND cardinality(agentdb_private.clause_topics(
                    agentdb_private.normalised_reply(p_text, p_model_text), v_clause)) = 0;
            v_facts := v_facts || jsonb_build_array(v_fact);
            IF v_fact ->> 'type' = 'time' THEN
                v_has_time := true;
            ELSIF v_fact ->> 'type' = 'day' AND v_fact ->> 'value' IS NOT NULL THEN
                v_two_days := v_two_days OR (v_wday IS NOT NULL AND v_wday <> (v_fact ->> 'value')::integer);
                v_wday := coalesce(v_wday, (v_fact ->> 'value')::integer);
            ELSIF v_fact ->> 'type' = 'period' AND v_fact ->> 'tag' IS NOT NULL THEN
                v_two_halves := v_two_halves OR (v_half IS NOT NULL AND v_half <> v_fact ->> 'tag');
                v_half := coalesce(v_half, v_fact ->> 'tag');
            END IF;
        END LOOP;
        CONTINUE WHEN jsonb_array_length(v_facts) = 0;
        -- The main clause of "If X, Y" is governed by the condition that opens
        -- its sentence: where neither claims anything and it names no thing of
        -- a class, its facts are advice ("If she's not an early riser, a quick
        -- text at 7:55 can warn her"). One that names the thing states them
        -- ("If you need anything, your reminder is at 9am").
        -- (The text normalised once a call, only where this is asked.)
        -- A sentence of advice that claims nothing states none (clause_in_advice).
        IF NOT v_claimed AND NOT p_only_claims THEN
            v_norm := coalesce(v_norm, agentdb_private.normalised_reply(p_text, p_model_text));
            CONTINUE WHEN NOT v_after_claim AND v_index > 0
                AND agentdb_private.clause_opens_if(v_norm, p_clauses, v_index - 1)
                AND NOT agentdb_private.clause_has(p_text, v_clause, 'topic')
                AND NOT agentdb_private.clause_has(p_text, v_clause, 'stated');
            CONTINUE WHEN agentdb_private.clause_in_advice(v_norm, p_clauses, p_claims, v_index);
        END IF;
        -- What the verified steps wrote, read once, when the first fact needs
        -- it; and the counts a reply may name: the number of verified steps,
        -- their affected rows, and each one's.
        IF NOT v_read THEN
            v_read := true;
            v_written := agentdb_private.written_values(p_task);
            v_counts := ARRAY[0, 0];
            FOR v_i IN 1 .. coalesce(cardinality(p_books.ok), 0) LOOP
                CONTINUE WHEN NOT p_books.ok[v_i];
                v_counts := ARRAY[v_counts[1] + 1, v_counts[2] + coalesce(p_books.affected[v_i], 0)]
                    || v_counts[3:] || p_books.affected[v_i];
            END LOOP;
        END IF;
        -- A clause that names only times takes the day of the clause before it
        -- when that one named only a day ("When: tomorrow, 08:00").
        v_wday := CASE WHEN v_two_days THEN NULL ELSE v_wday END;
        v_half := CASE WHEN v_two_halves THEN NULL ELSE v_half END;
        v_day := CASE WHEN v_wday IS NULL AND v_prev_index = v_index - 1 THEN v_prev_day ELSE v_wday END;
        v_prev_day := CASE WHEN NOT v_has_time THEN v_day END;
        v_prev_index := v_index;
        FOR v_fi IN 0 .. jsonb_array_length(v_facts) - 1 LOOP
            v_reason := agentdb_private.fact_mismatch(v_facts -> v_fi, v_facts, v_day, v_half,
                                                      v_has_time, v_written, v_counts);
            -- A time an update replaced counts where it is told as the old one ("from 8",
            -- "was 8am", 从8点) or the reply names a new one too, not alone ("you'll get
            -- it at 8am").
            IF left(v_reason, 5) = 'old: ' THEN
                IF NOT agentdb_private.fact_told_as_old(
                        agentdb_private.normalised_reply(p_text, p_model_text), v_facts -> v_fi) THEN
                    v_old_reason := coalesce(v_old_reason, substr(v_reason, 6));
                END IF;
            ELSIF v_reason IS NOT NULL THEN
                RETURN v_reason;
            ELSIF v_facts -> v_fi ->> 'type' = 'time' THEN
                v_new_time := true;
            END IF;
        END LOOP;
    END LOOP;
    RETURN CASE WHEN NOT v_new_time THEN v_old_reason END;
END
$$;

-- Every claim that no step backs. Any runtime asks this before saying "done".
CREATE OR REPLACE VIEW agentdb.pending_claims AS
SELECT
    c.id AS claim_id,
    c.task_id,
    t.user_id,
    t.conversation_id,
    c.kind,
    c.claim_text,
    c.span_start,
    c.span_end,
    c.tool,
    c.source,
    c.created_at,
    -- New columns go last: CREATE OR REPLACE VIEW can only append.
    c.claim_class
FROM agentdb_private.claims AS c
INNER JOIN agentdb_private.tasks AS t ON c.user_id = t.user_id AND c.task_id = t.id
WHERE NOT agentdb_private.claim_backed_as(c.user_id, c.task_id, c.kind, c.claim_class, c.tool);

GRANT SELECT ON agentdb.pending_claims TO agentdb_app, agentdb_auditor;
-- Views call functions with the reader's rights: readers of pending_claims need this.
GRANT EXECUTE ON FUNCTION
agentdb_private.claim_backed_as(text, uuid, text, text, text),
agentdb_private.claim_backed_as(uuid, text, text, text)
TO agentdb_app, agentdb_auditor;

-- Does a text hold a mark of something done (done_marks: a check mark)
-- anywhere? Asked of a clause (clause_says_done), of a whole reply where no
-- step was verified and none found the thing there or taken
-- (reply_unacceptable: "Reminder for 8am: ✔"; a duplicate's "Already there ✅"
-- and a conflict's "✅ Available: 4pm" are honest), and before a clean reply is
-- normalised for its statements (claims_beyond_steps).
CREATE OR REPLACE FUNCTION agentdb_private.text_marks_done(p_text text)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
BEGIN
    FOR v_mi IN 0 .. coalesce(jsonb_array_length(agentdb_private.claim_doc_compiled() -> 'done_marks'), 0) - 1 LOOP
        IF strpos(p_text, agentdb_private.claim_doc_compiled() -> 'done_marks' ->> v_mi) > 0 THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- Does a clause say something is done where the books say otherwise? In an
-- empty action turn (p_marks) a mark of something done (done_marks: a check
-- mark) anywhere in it says so ('marks'). And a clause carrying the label
-- "stated" ("reminder's locked in", "all set", "安排上了") says so ('states')
-- unless a governing label (nothing_done, ack, attempt, offer, condition, future,
-- draft, question: the document's labels) matches it starting before the
-- statement: "Nothing has been saved yet" and "Want me to get it booked?" are
-- governed; in "…locked in for 8am, lmk if you need anything" the condition
-- governs nothing before it. NULL otherwise. A runtime's clause (with its
-- labels, read with the same patterns) without "stated" is not read again.
CREATE OR REPLACE FUNCTION agentdb_private.clause_says_done(p_text text, p_clause jsonb, p_marks boolean)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_clause text;
    v_subject text;
    v_stated integer;
    v_at integer;
    v_governs text;
    v_gat integer;
    v_marked boolean;
BEGIN
    IF p_text IS NULL THEN
        RETURN NULL;
    END IF;
    -- (The clause and the character after it: a check mark ends a clause.)
    IF p_marks AND agentdb_private.text_marks_done(
            substr(p_text, (p_clause ->> 'start')::integer + 1,
                   (p_clause ->> 'end')::integer - (p_clause ->> 'start')::integer + 1)) THEN
        RETURN 'marks';
    END IF;
    IF jsonb_typeof(p_clause -> 'labels') = 'array' AND NOT p_clause -> 'labels' ? 'stated' THEN
        RETURN NULL;
    END IF;
    -- A Chinese question asks with its last word before a question mark
    -- ("我的提醒设好了吗?"): it states nothing. (The mark read in the text, alike
    -- for a runtime's clause and a frame: "设好了呢" with no mark states it.)
    IF left(ltrim(substr(p_text, (p_clause ->> 'end')::integer + 1, 4)), 1) IN ('?', '？')
        AND right(rtrim(agentdb_private.clause_text(p_text, p_clause)), 1) IN ('吗', '么', '呢') THEN
        RETURN NULL;
    END IF;
    -- The clause as clause_has reads it (clause_text, fold_for); the compiled
    -- rules read in place, by index. The governing labels' alternation per
    -- language is built once, when the patterns are loaded (claim_doc_compiled's
    -- "governs"): its leftmost match is the first place any of them matches.
    v_clause := agentdb_private.clause_text(p_text, p_clause);
    v_marked := strpos(v_clause, E'\x01') = 0;
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        v_stated := array_position(((agentdb_private.claim_langs_compiled())[v_li]).label_names, 'stated');
        CONTINUE WHEN v_stated IS NULL;
        CONTINUE WHEN ((agentdb_private.claim_langs_compiled())[v_li]).script IS NOT NULL
            AND NOT regexp_like(v_clause, ((agentdb_private.claim_langs_compiled())[v_li]).script);
        v_subject := agentdb_private.fold_for(v_li, v_clause);
        -- Where the first match starts: the first match made a mark character
        -- (one search; regexp_instr finds every match), or regexp_instr where
        -- the clause holds the mark.
        IF v_marked THEN
            v_at := strpos(regexp_replace(v_subject, ((agentdb_private.claim_langs_compiled())[v_li]).label_res[v_stated],
                                          E'\x01', 1, 1), E'\x01');
        ELSE
            v_at := regexp_instr(v_subject, ((agentdb_private.claim_langs_compiled())[v_li]).label_res[v_stated]);
        END IF;
        CONTINUE WHEN v_at = 0;
        v_governs := agentdb_private.claim_doc_compiled() -> 'governs'
                     ->> ((agentdb_private.claim_langs_compiled())[v_li]).lang;
        IF v_governs IS NULL THEN
            RETURN 'states';
        ELSIF v_marked THEN
            v_gat := strpos(regexp_replace(v_subject, v_governs, E'\x01', 1, 1), E'\x01');
        ELSE
            v_gat := regexp_instr(v_subject, v_governs);
        END IF;
        IF NOT v_gat BETWEEN 1 AND v_at THEN
            RETURN 'states';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Does a clause ask (the separator after it asks, or a runtime read it as a
-- question)? A question tells nothing done.
CREATE OR REPLACE FUNCTION agentdb_private.clause_asks(p_clause jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(p_clause -> 'q' = 'true', false) OR coalesce(p_clause -> 'labels' ? 'question', false)
$$;

-- A clause's text as language p_li reads it (clause_text, folded by
-- fold_for), or NULL when the clause holds none of the language's script.
CREATE OR REPLACE FUNCTION agentdb_private.clause_subject(p_li integer, p_text text, p_clause jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined; it names only pg_catalog functions and the constant.
AS $$
    SELECT CASE WHEN ((agentdb_private.claim_langs_compiled())[p_li]).script IS NULL
                  OR regexp_like(agentdb_private.clause_text(p_text, p_clause),
                                 ((agentdb_private.claim_langs_compiled())[p_li]).script)
                THEN agentdb_private.fold_for(p_li, agentdb_private.clause_text(p_text, p_clause)) END
$$;

-- Where the first match of any of the labels p_names starts in a language's
-- (folded) clause text, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.labels_start(p_li integer, p_subject text, p_names text[])
RETURNS integer
LANGUAGE sql STABLE
-- No SET clause: inlined; it names only pg_catalog functions and the constant.
AS $$
    SELECT min(nullif(regexp_instr(p_subject, ((agentdb_private.claim_langs_compiled())[p_li]).label_res[n.i]), 0))
      FROM unnest(((agentdb_private.claim_langs_compiled())[p_li]).label_names) WITH ORDINALITY AS n (name, i)
     WHERE n.name = ANY (p_names)
$$;

-- Is the extra action a clause tells (the document's "extra" words) governed
-- by a label of p_set that starts before its words end ("if you like, I'll
-- also text mum", "也可以告诉我")? One that starts after them governs nothing
-- before it: "也已经发讯息通知你妈妈明天早上等你电话" tells the message sent.
-- True where no extra words match (the clause is governed wherever the label
-- stands, as before).
CREATE OR REPLACE FUNCTION agentdb_private.clause_extra_governed(p_text text, p_clause jsonb, p_set text)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by claims_beyond_steps only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_names text [] := string_to_array((agentdb_private.label_set_labels())[
        array_position(agentdb_private.label_set_names(), p_set)], ',');
    v_subject text;
    v_at integer;
BEGIN
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        CONTINUE WHEN agentdb_private.claim_doc_compiled() -> 'extra'
            ->> ((agentdb_private.claim_langs_compiled())[v_li]).lang IS NULL;
        v_subject := agentdb_private.clause_subject(v_li, p_text, p_clause);
        CONTINUE WHEN v_subject IS NULL;
        -- (Where its words end: a label inside them, "也可以告诉我", governs the verb.)
        v_at := regexp_instr(v_subject, agentdb_private.claim_doc_compiled() -> 'extra'
            ->> ((agentdb_private.claim_langs_compiled())[v_li]).lang, 1, 1, 1);
        IF v_at > 0 THEN
            RETURN coalesce(agentdb_private.labels_start(v_li, v_subject, v_names) < v_at, false);
        END IF;
    END LOOP;
    RETURN true;
END
$$;

-- Does a clause tell a thing the assistant did itself (the document's "did"
-- words, per language: "I grabbed", "we've booked court 3", 帮你订了, 我把你挪到)
-- that nothing excuses? Asked in a troubled task and an empty action turn,
-- where no such thing may be told unless a verified step backs it. Words of
-- doing that a governing label precedes (the governs list less ack: a
-- negation, an attempt, an offer, a condition, a future, a draft, a question)
-- are not told as done. In a clause that acknowledges a failure (p_families:
-- ack and the failed steps' families; NULL for a clause that acknowledges
-- nothing) the acknowledgement excuses what the clause says of the failure (a
-- third party's booking, a reminder already there), not a thing done after it
-- ("since 3pm was taken I grabbed 4pm", 3点被占了所以帮你订了4点: 'did after an
-- acknowledgement'), nor a statement of something done before it for which
-- the failure is only the reason ("Booked court 3 at 4pm since 3pm was gone",
-- the document's "reason" words between the two: 'did, the failure its
-- reason'). NULL otherwise.
DROP FUNCTION IF EXISTS agentdb_private.clause_done_after_ack(text, jsonb, text[]);
CREATE OR REPLACE FUNCTION agentdb_private.clause_did_unexcused(p_text text, p_clause jsonb, p_families text[])
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_subject text;
    v_lang text;
    v_ack integer;
    v_at integer;
    v_governs text;
BEGIN
    IF p_text IS NULL OR agentdb_private.claim_doc_compiled() -> 'did' IS NULL
        OR agentdb_private.clause_asks(p_clause) THEN
        RETURN NULL;
    END IF;
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        v_lang := ((agentdb_private.claim_langs_compiled())[v_li]).lang;
        CONTINUE WHEN agentdb_private.claim_doc_compiled() -> 'did' ->> v_lang IS NULL;
        v_subject := agentdb_private.clause_subject(v_li, p_text, p_clause);
        CONTINUE WHEN v_subject IS NULL;
        v_ack := CASE WHEN p_families IS NOT NULL
                      THEN agentdb_private.labels_start(v_li, v_subject, ARRAY['ack'] || p_families) END;
        v_at := regexp_instr(v_subject, agentdb_private.claim_doc_compiled() -> 'did' ->> v_lang, coalesce(v_ack + 1, 1));
        v_governs := agentdb_private.claim_doc_compiled() -> 'governs_after_ack' ->> v_lang;
        IF v_at > 0 AND (v_governs IS NULL OR NOT regexp_instr(v_subject, v_governs) BETWEEN 1 AND v_at - 1) THEN
            RETURN CASE WHEN v_ack IS NULL THEN 'did' ELSE 'did after an acknowledgement' END;
        END IF;
        -- Something done (stated, or the words of doing it: "Grabbed 4pm instead
        -- since 3 was gone"), then the failure as its reason: only a clause that
        -- acknowledges one is searched again.
        CONTINUE WHEN v_ack IS NULL;
        v_at := coalesce(least(agentdb_private.labels_start(v_li, v_subject, ARRAY['stated']),
                               nullif(regexp_instr(v_subject, agentdb_private.claim_doc_compiled() -> 'did' ->> v_lang), 0)),
                         0);
        IF v_at BETWEEN 1 AND v_ack - 1
            AND regexp_like(substr(v_subject, v_at, v_ack - v_at),
                            coalesce(agentdb_private.claim_doc_compiled() -> 'reason' ->> v_lang, '$^'))
            AND (v_governs IS NULL OR NOT regexp_instr(v_subject, v_governs) BETWEEN 1 AND v_at - 1) THEN
            RETURN 'did, the failure its reason';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Does a clause tell a success after a failure: the document's "recovered"
-- words ("I retried and it went through", "the second one worked", "it's
-- there now", 我重新试了一下就成功了, 现在已经有了), told after an
-- acknowledgement (p_acked: in an earlier clause; else one of p_families, with
-- ack, must start before them in this one), with no failure told after them
-- in the clause ("it went through then vanished")? An attempt or an
-- acknowledgement before the words does not govern them ("tried again and it
-- worked"); a negation, offer, condition, future, draft or question does
-- (governs_recovered: "if it went through you'd see it"), and so do words of
-- seeming or reporting (recovered_not: "it looked like it went through",
-- 系统显示已经好了). A question asks.
CREATE OR REPLACE FUNCTION agentdb_private.clause_recovers(
    p_text text, p_clause jsonb, p_families text[], p_acked boolean
)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_tells_recovery only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_names text [] := ARRAY['ack'] || p_families;
    v_lang text;
    v_re text;
    v_subject text;
    v_at integer;
BEGIN
    IF p_text IS NULL OR agentdb_private.clause_asks(p_clause) THEN
        RETURN false;
    END IF;
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        v_lang := ((agentdb_private.claim_langs_compiled())[v_li]).lang;
        v_re := agentdb_private.claim_doc_compiled() -> 'recovered' ->> v_lang;
        CONTINUE WHEN v_re IS NULL;
        v_subject := agentdb_private.clause_subject(v_li, p_text, p_clause);
        v_at := CASE WHEN v_subject IS NOT NULL THEN regexp_instr(v_subject, v_re) ELSE 0 END;
        CONTINUE WHEN v_at = 0
            OR NOT (p_acked OR coalesce(agentdb_private.labels_start(v_li, v_subject, v_names) < v_at, false))
            OR regexp_instr(v_subject, coalesce(agentdb_private.claim_doc_compiled() -> 'governs_recovered' ->> v_lang, '$^'))
               BETWEEN 1 AND v_at - 1
            OR regexp_instr(v_subject, coalesce(agentdb_private.claim_doc_compiled() -> 'recovered_not' ->> v_lang, '$^'))
               BETWEEN 1 AND v_at - 1
            OR agentdb_private.labels_start(v_li, substr(v_subject, regexp_instr(v_subject, v_re, 1, 1, 1)), v_names)
               IS NOT NULL;
        RETURN true;
    END LOOP;
    RETURN false;
END
$$;

-- What a clause says was done, that the books must back, or NULL: in a clause
-- that acknowledges a failure (p_families: ack and the failed steps' families),
-- a thing done that the acknowledgement does not excuse; in any other, a
-- statement that something is done (clause_says_done, with the marks of
-- something done where p_marks) or a thing done (clause_did_unexcused).
CREATE OR REPLACE FUNCTION agentdb_private.clause_done(
    p_text text, p_clause jsonb, p_marks boolean, p_families text[]
)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by reply_unacceptable only, under finalize_reply's pinned search_path.
AS $$
BEGIN
    IF p_families IS NOT NULL THEN
        RETURN agentdb_private.clause_did_unexcused(p_text, p_clause, p_families);
    END IF;
    RETURN coalesce(agentdb_private.clause_says_done(p_text, p_clause, p_marks),
                    agentdb_private.clause_did_unexcused(p_text, p_clause, NULL));
END
$$;

-- Where in a clause the document's words p_key (per language: "did", "extra")
-- first match, from p_from on; NULL if nowhere.
CREATE OR REPLACE FUNCTION agentdb_private.clause_words(p_text text, p_clause jsonb, p_key text, p_from integer)
RETURNS integer
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_subject text;
    v_lang text;
    v_at integer;
BEGIN
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        v_lang := ((agentdb_private.claim_langs_compiled())[v_li]).lang;
        CONTINUE WHEN p_text IS NULL OR agentdb_private.claim_doc_compiled() -> p_key ->> v_lang IS NULL;
        v_subject := agentdb_private.clause_subject(v_li, p_text, p_clause);
        CONTINUE WHEN v_subject IS NULL;
        v_at := regexp_instr(v_subject, agentdb_private.claim_doc_compiled() -> p_key ->> v_lang, p_from);
        IF v_at > 0 THEN
            RETURN v_at;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Why a clean reply marks more things done than were done, or NULL. Its lines
-- holding a mark of something done (done_marks: "✅ Take medicine — 21:00",
-- "- [x] Texted Mum", "Step 2: set it to repeat → 成功"), and the rows of a
-- table holding a claim or a word of a class ("| 回收站 | 已永久清空 |", "| Court 3 |
-- ❌ Cancelled |"), are each one thing done, and may not outnumber the verified
-- steps, nor their affected rows ("✅" beside each of five reminders marked done
-- by one step). A line of a table or a list is one thing, whatever its words,
-- except a table's header row, a check (in its first words: "- [x] Verified",
-- "✅ 已回查确认", "- [x] Found the reminder") and a field of the thing (one word
-- before a colon: "- [x] Time: tomorrow 8am", "☑ 时间:明早8点"; not "✅ 8am: call
-- mum" nor "- [x] Reminder saved: call mum") that holds no claim nor a word of
-- a class. p_text: the reply as normalised (its lines kept); p_claims: the
-- claims read in it.
DROP FUNCTION IF EXISTS agentdb_private.marks_outnumber(record, text);
CREATE OR REPLACE FUNCTION agentdb_private.marks_outnumber(p_books record, p_text text, p_claims jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by gate_reason only, under finalize_reply's pinned search_path.
AS $$
DECLARE
    v_lines text [];
    v_line text;
    v_line_at jsonb;
    v_marked integer := 0;
    v_mark boolean;
    v_said boolean;
    v_label text;
    v_at integer := 0;
    v_done integer := 0;
    v_rows integer := 0;
BEGIN
    IF p_text IS NULL OR strpos(p_text, E'\n') = 0
        OR NOT (strpos(p_text, '|') > 0 OR agentdb_private.text_marks_done(p_text)) THEN
        RETURN NULL;
    END IF;
    v_lines := string_to_array(p_text, E'\n');
    FOR v_i IN 1 .. cardinality(v_lines) LOOP
        v_line := v_lines[v_i];
        v_line_at := jsonb_build_object('start', v_at, 'end', v_at + char_length(v_line));
        v_at := v_at + char_length(v_line) + 1;
        v_mark := agentdb_private.text_marks_done(v_line);
        -- (A header row is followed by the separator row: |---|---|.)
        CONTINUE WHEN NOT (v_mark OR left(ltrim(v_line), 1) = '|')
            OR (strpos(v_lines[v_i + 1], '-') > 0 AND translate(v_lines[v_i + 1], '|-: ', '') = '');
        v_said := EXISTS (SELECT 1 FROM jsonb_array_elements(p_claims) AS k
                           WHERE (k ->> 'start')::integer >= (v_line_at ->> 'start')::integer
                             AND (k ->> 'start')::integer < (v_line_at ->> 'end')::integer);
        -- (A check: one of its first words is one.)
        CONTINUE WHEN agentdb_private.clause_words(lower(p_text), v_line_at, 'extra_not', 1) <= 12;
        IF NOT v_said THEN
            v_said := agentdb_private.clause_class(p_text, v_line_at) IS NOT NULL;
            -- (A field: one word of at most 12 letters before a colon, no digit.)
            v_label := btrim(translate(replace(replace(split_part(v_line, ':', 1), '[x]', ''), '[X]', ''),
                                       '-*•✅✔☑', ''));
            CONTINUE WHEN NOT v_said AND (NOT v_mark OR (strpos(v_line, ':') > 0 AND v_label <> ''
                AND char_length(v_label) <= 12 AND strpos(v_label, ' ') = 0
                AND translate(v_label, '0123456789', '') = v_label));
        END IF;
        v_marked := v_marked + 1;
    END LOOP;
    FOR v_i IN 1 .. cardinality(p_books.ok) LOOP
        CONTINUE WHEN NOT p_books.ok[v_i];
        v_done := v_done + 1;
        v_rows := v_rows + coalesce(p_books.affected[v_i], 0);
    END LOOP;
    IF v_marked > greatest(v_done, v_rows) THEN
        RETURN format('the reply marks %s things done; %s step(s) were, %s row(s)', v_marked, v_done, v_rows);
    END IF;
    RETURN NULL;
END
$$;
