-- Claims: what a reply says was done. Detection reads the same patterns as the
-- Python detector (sql/claim_patterns.json, loaded by the installer).

-- Every regex of a claim patterns document, with its language and flags (the
-- clause separator has neither): what the loader checks.
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_regexes(p_doc jsonb)
RETURNS TABLE (lang text, flags text, re text)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT NULL, NULL, p_doc ->> 'clause_split'
    UNION ALL
    SELECT l.key, l.value ->> 'flags', x.re
      FROM jsonb_each(p_doc -> 'languages') AS l
     CROSS JOIN LATERAL (
         SELECT l.value ->> 'script' AS re
         UNION ALL SELECT e FROM jsonb_array_elements_text(l.value -> 'exclude') AS e
         UNION ALL SELECT c ->> 'pattern' FROM jsonb_array_elements(l.value -> 'claims') AS c
         UNION ALL SELECT r.value FROM jsonb_each_text(l.value -> 'labels') AS r) AS x
     WHERE x.re IS NOT NULL
    UNION ALL
    SELECT l.key, NULL, e.value ->> 1
      FROM jsonb_each(CASE WHEN jsonb_typeof(p_doc -> 'classes' -> 'lexicon') = 'object'
                           THEN p_doc -> 'classes' -> 'lexicon' ELSE '{}' END) AS l
     CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(l.value) = 'array' THEN l.value ELSE '[]' END) AS e
     WHERE jsonb_typeof(e.value) = 'array'
    UNION ALL
    SELECT l.key, NULL, r.value ->> 'pattern'
      FROM jsonb_each(CASE WHEN jsonb_typeof(p_doc -> 'facts' -> 'languages') = 'object'
                           THEN p_doc -> 'facts' -> 'languages' ELSE '{}' END) AS l
     CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(l.value) = 'array' THEN l.value ELSE '[]' END) AS r
     WHERE jsonb_typeof(r.value) = 'object'
    UNION ALL
    SELECT NULL, NULL, p_doc ->> 'question_sep' WHERE p_doc ? 'question_sep'
    UNION ALL
    SELECT NULL, NULL, w ->> 0
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_doc -> 'normalise' -> 'rewrite') = 'array'
                                     THEN p_doc -> 'normalise' -> 'rewrite' ELSE '[]' END) AS w
    UNION ALL
    SELECT d.key, NULL, d.value
      FROM unnest(ARRAY['did', 'extra', 'extra_not', 'reason', 'arranged', 'recovered', 'recovered_not']) AS k (k)
     CROSS JOIN LATERAL jsonb_each_text(CASE WHEN jsonb_typeof(p_doc -> k.k) = 'object' THEN p_doc -> k.k ELSE '{}' END) AS d
$$;

-- Why a regex does not compile, or NULL when it does.
CREATE OR REPLACE FUNCTION agentdb_private.regex_error(p_re text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM regexp_like('', p_re);
    RETURN NULL;
EXCEPTION WHEN invalid_regular_expression THEN
    RETURN SQLERRM;
END
$$;

-- A string as a LIKE pattern matching any text that holds it: the literal
-- guards of claims, lexicon entries and facts rules are tested with LIKE ANY.
CREATE OR REPLACE FUNCTION agentdb_private.holding(p_literal text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '%' || replace(replace(replace(p_literal, '\', '\\'), '%', '\%'), '_', '\_') || '%'
$$;

-- Is this a JSON array of non-empty strings?
CREATE OR REPLACE FUNCTION agentdb_private.is_string_list(p_value jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_typeof(p_value) = 'array'
       AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_value) AS v
                        WHERE jsonb_typeof(v) <> 'string' OR v #>> '{}' = '')
$$;

-- The order in which the kinds' alternations are tried: the document's
-- kind_order, or create, update, delete, done.
CREATE OR REPLACE FUNCTION agentdb_private.kind_order(p_doc jsonb)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN jsonb_typeof(p_doc -> 'kind_order') = 'array'
                THEN ARRAY(SELECT jsonb_array_elements_text(p_doc -> 'kind_order'))
                ELSE ARRAY['create', 'update', 'delete', 'done'] END
$$;

-- The labels of a document, in any language, whose names start with a prefix:
-- topic_<class> (a thing of a class: "reminder", "court") and fail_<family>
-- (a failure of one kind: fail_dup "already there", fail_taken "someone else
-- has it"), asked one by one.
CREATE OR REPLACE FUNCTION agentdb_private.prefixed_labels(p_doc jsonb, p_prefix text)
RETURNS SETOF text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT DISTINCT k.k
      FROM jsonb_each(coalesce(p_doc -> 'languages', '{}')) AS l
     CROSS JOIN LATERAL jsonb_object_keys(CASE WHEN jsonb_typeof(l.value -> 'labels') = 'object'
                                               THEN l.value -> 'labels' ELSE '{}' END) AS k (k)
     WHERE left(k.k, char_length(p_prefix)) = p_prefix
$$;

-- The sets of labels the gate asks a clause about (agentdb_private.clause_has),
-- each with its label names, sorted: ack, ack_all, unack, action and draft alone; nonstating
-- (a question, an offer, a condition, or that nothing was done or changed:
-- "unaffected", 照旧; a clause that states no fact of what was written); also
-- (a clause that names another thing: "other", "too", 其他, 也); advising (a
-- condition, an offer or a general remark: "many people", "as a tip", 一般,
-- 很多人; clause_in_advice); future, general, stated and yes alone; and
-- per state of accept (troubled, empty_action) its needs (and its needs but
-- ack, for a clause whose ack is negated: unack), and the rest of what
-- it accepts (without ack, asked on its own, and the pseudo-label inert); and
-- the things a clause names (labels topic_<class>: "reminder", "court"), each
-- alone and all of them as topic; and each failure family (fail_<family>).
CREATE OR REPLACE FUNCTION agentdb_private.label_sets(p_doc jsonb)
RETURNS TABLE (name text, labels text[])
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT v.name, v.labels
      FROM (VALUES ('ack', ARRAY['ack']), ('ack_all', ARRAY['ack_all']), ('action', ARRAY['action']),
                   ('advising', ARRAY['condition', 'general', 'offer']),
                   ('also', ARRAY['also']), ('draft', ARRAY['draft']), ('future', ARRAY['future']),
                   ('general', ARRAY['general']),
                   ('nonstating', ARRAY['condition', 'nothing_done', 'offer', 'question']),
                   ('pending', ARRAY['condition', 'draft', 'nothing_done', 'offer']),
                   ('stated', ARRAY['stated']), ('yes', ARRAY['yes']),
                   ('unack', ARRAY['unack'])) AS v (name, labels)
    UNION ALL
    SELECT st.state || '.needs',
           ARRAY(SELECT n FROM jsonb_array_elements_text(coalesce(p_doc -> 'needs' -> st.state, '[]')) AS n
                  ORDER BY n COLLATE "C")
      FROM unnest(ARRAY['troubled', 'empty_action']) AS st (state)
    UNION ALL
    SELECT st.state || '.needs_noack',
           ARRAY(SELECT n FROM jsonb_array_elements_text(coalesce(p_doc -> 'needs' -> st.state, '[]')) AS n
                  WHERE n <> 'ack' ORDER BY n COLLATE "C")
      FROM unnest(ARRAY['troubled', 'empty_action']) AS st (state)
    UNION ALL
    SELECT st.state || '.rest',
           ARRAY(SELECT a FROM jsonb_array_elements_text(coalesce(p_doc -> 'accept' -> st.state, '[]')) AS a
                  WHERE a NOT IN ('ack', 'inert') AND NOT coalesce(p_doc -> 'needs' -> st.state, '[]') ? a
                  ORDER BY a COLLATE "C")
      FROM unnest(ARRAY['troubled', 'empty_action']) AS st (state)
    UNION ALL
    SELECT 'topic', ARRAY(SELECT t.t FROM agentdb_private.prefixed_labels(p_doc, 'topic_') AS t (t)
                           ORDER BY t.t COLLATE "C")
    UNION ALL
    SELECT t.t, ARRAY[t.t] FROM agentdb_private.prefixed_labels(p_doc, 'topic_') AS t (t)
    UNION ALL
    SELECT t.t, ARRAY[t.t] FROM agentdb_private.prefixed_labels(p_doc, 'fail_') AS t (t)
$$;

-- Phases of load_claim_patterns. 1: why a document's languages, their
-- claims, exclusions and labels cannot be read, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_problem_languages(p_doc jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_doc IS NULL OR jsonb_typeof(p_doc -> 'languages') IS DISTINCT FROM 'object'
            OR NOT EXISTS (SELECT 1 FROM jsonb_object_keys(p_doc -> 'languages'))
            THEN 'claim patterns document has no languages'
        WHEN jsonb_typeof(p_doc -> 'clause_split') IS DISTINCT FROM 'string'
            THEN 'clause_split must be a regex string'
        WHEN p_doc ? 'max_clause' AND NOT (jsonb_typeof(p_doc -> 'max_clause') = 'number'
                                          AND p_doc ->> 'max_clause' ~ '^[0-9]{1,6}$'
                                          AND (p_doc ->> 'max_clause')::integer BETWEEN 1 AND 100000)
            THEN 'max_clause must be a whole number from 1 to 100000'
        WHEN p_doc ? 'max_per_kind' AND NOT (jsonb_typeof(p_doc -> 'max_per_kind') = 'number'
                                            AND p_doc ->> 'max_per_kind' ~ '^[0-9]{1,4}$'
                                            AND (p_doc ->> 'max_per_kind')::integer BETWEEN 1 AND 1000)
            THEN 'max_per_kind must be a whole number from 1 to 1000'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l
                      WHERE jsonb_typeof(l.value) <> 'object'
                         OR jsonb_typeof(l.value -> 'claims') IS DISTINCT FROM 'array'
                         OR jsonb_array_length(l.value -> 'claims') = 0
                         OR jsonb_typeof(l.value -> 'exclude') IS DISTINCT FROM 'array'
                         OR (l.value ? 'script' AND jsonb_typeof(l.value -> 'script') <> 'string')
                         OR (l.value ? 'precheck' AND jsonb_typeof(l.value -> 'precheck') <> 'boolean'))
            THEN 'each language needs a non-empty claims array, an exclude array, and a string script '
                 || 'and boolean precheck if given'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l
                      WHERE l.value ? 'flags' AND (jsonb_typeof(l.value -> 'flags') <> 'string'
                                                   OR l.value ->> 'flags' NOT IN ('', 'i')))
            THEN 'claim pattern flags must be empty or i'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l,
                                   jsonb_array_elements(l.value -> 'claims') AS c
                      WHERE jsonb_typeof(c) <> 'object'
                         OR c ->> 'kind' IS NULL OR c ->> 'kind' NOT IN ('create', 'update', 'delete', 'done')
                         OR jsonb_typeof(c -> 'pattern') IS DISTINCT FROM 'string'
                         OR (c ? 'any' AND NOT agentdb_private.is_string_list(c -> 'any'))
                         OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(
                                        CASE WHEN jsonb_typeof(c -> 'any') = 'array' THEN c -> 'any' ELSE '[]' END) AS w
                                     WHERE strpos(w, E'\n') > 0))
            THEN 'each claim needs a kind (create, update, delete or done) and a pattern string, '
                 || 'and its "any" must be a list of non-empty strings without a newline'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l,
                                   jsonb_array_elements(l.value -> 'exclude') AS e
                      WHERE jsonb_typeof(e) <> 'string')
            THEN 'each exclusion must be a pattern string'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l
                      WHERE l.value ? 'labels' AND (jsonb_typeof(l.value -> 'labels') <> 'object'
                          OR EXISTS (SELECT 1 FROM jsonb_each(l.value -> 'labels') AS r
                                      WHERE jsonb_typeof(r.value) <> 'string' OR r.key !~ '^[a-z][a-z_]{0,30}$')))
            THEN 'labels must map label names (lower-case words) to pattern strings'
    END
$$;

-- 2: why its other sections (question_sep, accept and needs, normalise,
-- done_marks, failures, kind_order, the class lexicon, the facts rules) cannot
-- be, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_problem_sections(p_doc jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_doc ? 'question_sep' AND jsonb_typeof(p_doc -> 'question_sep') <> 'string'
            THEN 'question_sep must be a regex string'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(coalesce(p_doc -> 'accept', '{}') || coalesce(p_doc -> 'needs', '{}')) AS a
                      WHERE a.key NOT IN ('troubled', 'empty_action') OR jsonb_typeof(a.value) <> 'array'
                         OR EXISTS (SELECT 1 FROM jsonb_array_elements(a.value) AS x WHERE jsonb_typeof(x) <> 'string'))
            OR (p_doc ? 'accept' AND jsonb_typeof(p_doc -> 'accept') <> 'object')
            OR (p_doc ? 'needs' AND jsonb_typeof(p_doc -> 'needs') <> 'object')
            THEN 'accept and needs map troubled and empty_action to lists of label names'
        WHEN p_doc ? 'normalise' AND (jsonb_typeof(p_doc -> 'normalise') <> 'object'
                OR EXISTS (SELECT 1 FROM unnest(ARRAY['strip', 'spaces', 'hant', 'hans']) AS k
                            WHERE jsonb_typeof(p_doc -> 'normalise' -> k) IS DISTINCT FROM 'string')
                OR char_length(p_doc -> 'normalise' ->> 'hant') <> char_length(p_doc -> 'normalise' ->> 'hans')
                OR jsonb_typeof(p_doc -> 'normalise' -> 'rewrite') IS DISTINCT FROM 'array'
                OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_doc -> 'normalise' -> 'rewrite') AS w
                            WHERE jsonb_typeof(w) <> 'array' OR jsonb_array_length(w) NOT IN (2, 3)
                               OR jsonb_typeof(w -> 0) <> 'string' OR jsonb_typeof(w -> 1) <> 'string'
                               OR w ->> 1 !~ '^([^\\]|\\[1-9])*$'
                               OR (jsonb_array_length(w) = 3 AND NOT agentdb_private.is_string_list(w -> 2))))
            THEN 'normalise needs strip, spaces, hant and hans strings (hant and hans of one length) and a '
                 || 'rewrite list of [regex, replacement] or [regex, replacement, [string, ...]] whose '
                 || 'replacements use only \1 to \9'
        WHEN p_doc ? 'done_marks' AND NOT agentdb_private.is_string_list(p_doc -> 'done_marks')
            THEN 'done_marks must be a list of non-empty strings'
        WHEN p_doc ? 'governs' AND NOT agentdb_private.is_string_list(p_doc -> 'governs')
            THEN 'governs must be a list of label names'
        WHEN p_doc ? 'extra_any' AND (jsonb_typeof(p_doc -> 'extra_any') <> 'object'
                OR EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'extra_any') AS a
                            WHERE NOT agentdb_private.is_string_list(a.value)
                               OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(a.value) AS w
                                           WHERE w <> lower(w COLLATE "C"))))
            THEN 'extra_any must map language codes to lists of lower-case strings'
        WHEN EXISTS (SELECT 1 FROM unnest(ARRAY['did', 'extra', 'extra_not', 'reason', 'arranged', 'recovered', 'recovered_not']) AS k
                      WHERE p_doc ? k AND (jsonb_typeof(p_doc -> k) <> 'object'
                          OR EXISTS (SELECT 1 FROM jsonb_each(p_doc -> k) AS d WHERE jsonb_typeof(d.value) <> 'string')))
            THEN 'did, extra, extra_not, reason, arranged, recovered and recovered_not must map language codes to pattern strings'
        WHEN p_doc ? 'failures' AND (jsonb_typeof(p_doc -> 'failures') <> 'object'
                OR EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'failures') AS f
                            WHERE f.key <> 'comment' AND (jsonb_typeof(f.value) <> 'string'
                                                          OR f.value #>> '{}' !~ '^fail_[a-z_]+$')))
            THEN 'failures must map step outcomes to fail_ label names'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(CASE WHEN jsonb_typeof(p_doc -> 'needs') = 'object'
                                                   THEN p_doc -> 'needs' ELSE '{}' END) AS n,
                                   jsonb_array_elements_text(n.value) AS x
                      WHERE NOT coalesce(p_doc -> 'accept' -> n.key, '[]') ? x)
            THEN 'every label a state needs must also be one it accepts'
        WHEN p_doc ? 'kind_order' AND NOT (jsonb_typeof(p_doc -> 'kind_order') = 'array'
                AND (SELECT array_agg(k ORDER BY k) FROM jsonb_array_elements_text(p_doc -> 'kind_order') AS k)
                    = ARRAY['create', 'delete', 'done', 'update'])
            THEN 'kind_order must list create, update, delete and done, each once'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(CASE WHEN jsonb_typeof(p_doc -> 'classes' -> 'lexicon') = 'object'
                                                   THEN p_doc -> 'classes' -> 'lexicon' ELSE '{}' END) AS l
                      CROSS JOIN LATERAL jsonb_array_elements(
                          CASE WHEN jsonb_typeof(l.value) = 'array' THEN l.value ELSE '[null]' END) AS e
                      WHERE jsonb_typeof(e.value) IS DISTINCT FROM 'array'
                         OR jsonb_array_length(e.value) NOT IN (2, 3)
                         OR jsonb_typeof(e.value -> 0) <> 'string' OR jsonb_typeof(e.value -> 1) <> 'string'
                         OR (jsonb_array_length(e.value) = 3 AND NOT agentdb_private.is_string_list(e.value -> 2))
                         OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(
                                        CASE WHEN jsonb_array_length(e.value) = 3 THEN e.value -> 2 ELSE '[]' END) AS w
                                     WHERE strpos(w, E'\n') > 0))
            THEN 'each lexicon entry is [class, regex] or [class, regex, [string, ...]] (strings without a newline)'
        WHEN EXISTS (SELECT 1 FROM jsonb_each(CASE WHEN jsonb_typeof(p_doc -> 'facts' -> 'languages') = 'object'
                                                   THEN p_doc -> 'facts' -> 'languages' ELSE '{}' END) AS l
                      CROSS JOIN LATERAL jsonb_array_elements(
                          CASE WHEN jsonb_typeof(l.value) = 'array' THEN l.value ELSE '[{}]' END) AS r
                      WHERE jsonb_typeof(r.value -> 'pattern') IS DISTINCT FROM 'string'
                         OR (r.value ? 'any' AND NOT agentdb_private.is_string_list(r.value -> 'any')))
            THEN 'each facts rule needs a pattern string, and "any" must be a list of non-empty strings'
    END
$$;

-- 3: every regex of the document in the subset both detectors read alike,
-- compiling, and the clause separator sound; raises otherwise.
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_check_regexes(p_doc jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_problem text;
    v_re text;
BEGIN
    -- Flag i is applied by lowering the clause's ASCII letters: an upper-case
    -- letter in such a language's pattern could never match (the script is
    -- matched on the clause as written).
    IF EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l
                CROSS JOIN LATERAL (
                    SELECT e AS re FROM jsonb_array_elements_text(l.value -> 'exclude') AS e
                    UNION ALL
                    SELECT c ->> 'pattern' FROM jsonb_array_elements(l.value -> 'claims') AS c
                    UNION ALL
                    SELECT r.value FROM jsonb_each_text(l.value -> 'labels') AS r) AS p
                WHERE l.value ->> 'flags' = 'i' AND p.re ~ '[A-Z]') THEN
        RAISE EXCEPTION 'a claim pattern of a language with flag i has an upper-case letter'
            USING HINT = 'Write such patterns in lower case; escapes such as \S are not in the shared subset.',
                  ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Outside the subset both engines read alike: non-greedy quantifiers
    -- (PostgreSQL then prefers the shortest match), POSIX bracket classes,
    -- lookaround, embedded options and directors (which also stop working once
    -- a pattern is joined into an alternation).
    SELECT r.re INTO v_re FROM agentdb_private.claim_doc_regexes(p_doc) AS r
     WHERE r.re ~ '[*+?}]\?|\[\[:|\(\?[=!<a-zA-Z]|^\*\*\*'
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'claim pattern outside the subset both detectors read alike: %', left(v_re, 200)
            USING HINT = 'No non-greedy quantifiers, [[:class:]], lookaround, (?flags) or ***.',
                  ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Every regex must compile, and the separator must cut at a newline (so a
    -- clause holds none, where the engines read . and $ differently) and must
    -- not match an empty string (the two detectors would cut differently).
    SELECT r.re, agentdb_private.regex_error(r.re) INTO v_re, v_problem
      FROM agentdb_private.claim_doc_regexes(p_doc) AS r
     WHERE agentdb_private.regex_error(r.re) IS NOT NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'claim pattern is not a valid regex: %', left(v_re, 200)
            USING DETAIL = v_problem, ERRCODE = 'invalid_parameter_value';
    END IF;
    IF regexp_like('', p_doc ->> 'clause_split') THEN
        RAISE EXCEPTION 'clause_split matches an empty string' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT regexp_like(E'\n', p_doc ->> 'clause_split') THEN
        RAISE EXCEPTION 'clause_split must cut at a newline' USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- 4: the document stored, and compiled per language into claim_langs.
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_store(p_doc jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO agentdb_private.claim_rules AS r (id, doc, fingerprint)
    VALUES (1, p_doc, encode(sha256(convert_to(p_doc::text, 'UTF8')), 'hex'))
    -- excluded.loaded_at is now(): Citus takes no STABLE function in DO UPDATE SET.
    ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, fingerprint = excluded.fingerprint, loaded_at = excluded.loaded_at
    WHERE r.doc IS DISTINCT FROM excluded.doc OR r.fingerprint IS DISTINCT FROM excluded.fingerprint;

    -- Compiled per language: all exclusions in one alternation; per kind one
    -- alternation of its patterns, the kinds in kind_order (the guard columns
    -- hold the same: each alternation is its own guard); the labels, and per
    -- label set the gate asks about one alternation of the set's labels; the
    -- class lexicon's names, regexes and literal guards (joined by newlines:
    -- a clause holds none), an entry being tried only on a clause holding one
    -- of its strings. A reply then needs a few regexes per language, and they
    -- stay in PostgreSQL's per-session cache of 32 compiled ones.
    DELETE FROM agentdb_private.claim_langs;
    INSERT INTO agentdb_private.claim_langs
        (lang, clause_split, max_clause, max_per_kind, flags, script, exclude_re, guarded, guard_kinds,
         guard_res, claim_kinds, claim_res, label_names, label_res, question_sep,
         set_names, set_labels, set_res, lexicon_names, lexicon_res, lexicon_guards, claim_guards)
    SELECT
        l.key,
        p_doc ->> 'clause_split',
        (p_doc ->> 'max_clause')::integer,
        (p_doc ->> 'max_per_kind')::integer,
        coalesce(l.value ->> 'flags', ''),
        l.value ->> 'script',
        (SELECT string_agg('(?:' || e.re || ')', '|' ORDER BY e.n)
           FROM jsonb_array_elements_text(l.value -> 'exclude') WITH ORDINALITY AS e (re, n)),
        false,
        g.kinds,
        g.res,
        g.kinds,
        g.res,
        -- Labels in byte order of their names, as the Python reader takes them.
        ARRAY(SELECT r.key FROM jsonb_each_text(l.value -> 'labels') AS r ORDER BY r.key COLLATE "C"),
        ARRAY(SELECT r.value FROM jsonb_each_text(l.value -> 'labels') AS r ORDER BY r.key COLLATE "C"),
        p_doc ->> 'question_sep',
        ARRAY(SELECT t.name FROM agentdb_private.label_sets(p_doc) AS t ORDER BY t.name COLLATE "C"),
        ARRAY(SELECT array_to_string(t.labels, ',') FROM agentdb_private.label_sets(p_doc) AS t
               ORDER BY t.name COLLATE "C"),
        ARRAY(SELECT (SELECT string_agg('(?:' || (l.value -> 'labels' ->> x.label) || ')', '|' ORDER BY x.label)
                        FROM unnest(t.labels) AS x (label) WHERE l.value -> 'labels' ? x.label)
                FROM agentdb_private.label_sets(p_doc) AS t ORDER BY t.name COLLATE "C"),
        ARRAY(SELECT e.e ->> 0 FROM jsonb_array_elements(coalesce(p_doc -> 'classes' -> 'lexicon' -> l.key, '[]'))
                                    WITH ORDINALITY AS e (e, n) ORDER BY e.n),
        ARRAY(SELECT e.e ->> 1 FROM jsonb_array_elements(coalesce(p_doc -> 'classes' -> 'lexicon' -> l.key, '[]'))
                                    WITH ORDINALITY AS e (e, n) ORDER BY e.n),
        ARRAY(SELECT (SELECT string_agg(agentdb_private.holding(w), E'\n' ORDER BY wn)
                        FROM jsonb_array_elements_text(e.e -> 2) WITH ORDINALITY AS g (w, wn))
                FROM jsonb_array_elements(coalesce(p_doc -> 'classes' -> 'lexicon' -> l.key, '[]'))
                     WITH ORDINALITY AS e (e, n) ORDER BY e.n),
        g.guards
    FROM jsonb_each(p_doc -> 'languages') AS l
    CROSS JOIN LATERAL (
        SELECT array_agg(k.kind ORDER BY o.n) AS kinds, array_agg(k.re ORDER BY o.n) AS res,
               -- A kind's guard: its patterns' "any" strings as LIKE patterns, one
               -- a line; none when one of its patterns has no "any".
               array_agg(CASE WHEN k.all_any THEN
                   (SELECT string_agg(DISTINCT agentdb_private.holding(w), E'\n')
                      FROM jsonb_array_elements(l.value -> 'claims') AS c2,
                           jsonb_array_elements_text(c2 -> 'any') AS w
                     WHERE c2 ->> 'kind' = k.kind) END ORDER BY o.n) AS guards
          FROM (SELECT c ->> 'kind' AS kind, string_agg('(?:' || (c ->> 'pattern') || ')', '|' ORDER BY n) AS re,
                       bool_and(c ? 'any') AS all_any
                  FROM jsonb_array_elements(l.value -> 'claims') WITH ORDINALITY AS c (c, n)
                 GROUP BY c ->> 'kind') AS k
          JOIN unnest(agentdb_private.kind_order(p_doc)) WITH ORDINALITY AS o (kind, n) ON o.kind = k.kind) AS g;

END
$$;

-- 5: the facts rules stored; the joined forms detection uses checked.
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_store_facts(p_doc jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_problem text;
    v_re text;
BEGIN
    -- The facts rules, with their literal guards.
    DELETE FROM agentdb_private.fact_rules;
    INSERT INTO agentdb_private.fact_rules AS f (lang, n, type, pattern, num, min, tag, value, any_of)
    SELECT l.key, r.n, r.r ->> 'type', r.r ->> 'pattern', (r.r ->> 'num')::integer, (r.r ->> 'min')::integer,
           (r.r ->> 'tag')::integer, (r.r ->> 'value')::numeric,
           CASE WHEN r.r ? 'any'
                THEN ARRAY(SELECT agentdb_private.holding(w) FROM jsonb_array_elements_text(r.r -> 'any') AS w) END
      FROM jsonb_each(coalesce(p_doc -> 'facts' -> 'languages', '{}')) AS l
     CROSS JOIN LATERAL jsonb_array_elements(l.value) WITH ORDINALITY AS r (r, n);

    -- The joined forms detection uses must compile too.
    SELECT j.re, agentdb_private.regex_error(j.re) INTO v_re, v_problem
      FROM (SELECT l.exclude_re AS re FROM agentdb_private.claim_langs AS l WHERE l.exclude_re IS NOT NULL
            UNION ALL SELECT g FROM agentdb_private.claim_langs AS l, unnest(l.claim_res) AS g
            UNION ALL SELECT g FROM agentdb_private.claim_langs AS l, unnest(l.set_res) AS g WHERE g IS NOT NULL
            UNION ALL SELECT '(' || (p_doc ->> 'clause_split') || ')') AS j
     WHERE agentdb_private.regex_error(j.re) IS NOT NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'claim patterns do not compile once joined: %', left(v_re, 200)
            USING DETAIL = v_problem, ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- Per language, the one alternation of the labels that govern a statement
-- that something is done (agentdb_private.clause_says_done): the document's
-- "governs" list, or nothing_done, ack, attempt, offer, condition, future,
-- draft and question; those the language has, in that order, less p_without
-- (the list that governs a statement after an acknowledgement leaves out ack:
-- clause_did_unexcused; a success told after a failure, ack and attempt:
-- clause_recovers). Built when the patterns are loaded, not on every clause.
DROP FUNCTION IF EXISTS agentdb_private.claim_doc_governs(jsonb);
DROP FUNCTION IF EXISTS agentdb_private.claim_doc_governs(jsonb, text);
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_governs(p_doc jsonb, p_without text[] DEFAULT '{}')
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_object_agg(l.key, (
               SELECT string_agg('(?:' || (l.value -> 'labels' ->> g.g) || ')', '|' ORDER BY g.n)
                 FROM jsonb_array_elements_text(coalesce(
                          p_doc -> 'governs',
                          '["nothing_done", "ack", "attempt", "offer", "condition", "future", "draft", "question"]'))
                      WITH ORDINALITY AS g (g, n)
                WHERE l.value -> 'labels' ? g.g AND g.g <> ALL (p_without)))
      FROM jsonb_each(p_doc -> 'languages') AS l
$$;

-- The bracket expression normalise_reply asks a text before translating it:
-- any character the normalisation deletes, makes a space or makes simplified.
-- translate() compares each character of the text with each of its list
-- (some 300 of them), and most replies hold none: one regex of one bracket
-- says so in one pass. (One regex, not one per list: the session's cache of
-- compiled regexes holds 32, and the claim patterns need most of them.) NULL
-- (translate unasked) for empty lists. ] \ ^ - [ are escaped.
CREATE OR REPLACE FUNCTION agentdb_private.normalise_classes(p_spec jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'translated', '[' || nullif(regexp_replace(coalesce(p_spec ->> 'strip', '') || coalesce(p_spec ->> 'spaces', '')
                                                   || coalesce(p_spec ->> 'hant', ''),
                                                   '([][\\^-])', '\\\1', 'g'), '') || ']',
        -- One flag per rewrite, 1 where its regex holds a Chinese character:
        -- such a rewrite is for Chinese text and is applied only to a text
        -- holding one (pyagentdb.claims.normalise alike).
        'zh_rules', (SELECT string_agg(CASE WHEN w.value ->> 0 ~ '[一-鿿]' THEN '1' ELSE '0' END, '' ORDER BY w.ordinality)
                       FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_spec -> 'rewrite') = 'array'
                                                      THEN p_spec -> 'rewrite' ELSE '[]' END)
                            WITH ORDINALITY AS w (value, ordinality))))
$$;

-- 6: the compiled document as constant functions the gate reads on every
-- reply (no table read per call).
CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_publish(p_doc jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The document's other sections the gate reads on every reply, and its
    -- fingerprint, as a constant too.
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION agentdb_private.claim_doc_compiled() '
        'RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        format('SELECT %L::jsonb', jsonb_strip_nulls(jsonb_build_object(
            'normalise', p_doc -> 'normalise' || agentdb_private.normalise_classes(p_doc -> 'normalise'),
            'accept', p_doc -> 'accept', 'needs', p_doc -> 'needs',
            'classes', p_doc -> 'classes', 'facts', p_doc -> 'facts', 'done_marks', p_doc -> 'done_marks',
            'governs', agentdb_private.claim_doc_governs(p_doc),
            'governs_after_ack', agentdb_private.claim_doc_governs(p_doc, ARRAY['ack']),
            'governs_recovered', agentdb_private.claim_doc_governs(p_doc, ARRAY['ack', 'attempt']),
            'did', p_doc -> 'did',
            'extra', p_doc -> 'extra',
            'extra_any', p_doc -> 'extra_any',
            'extra_not', p_doc -> 'extra_not',
            'reason', p_doc -> 'reason',
            'arranged', p_doc -> 'arranged',
            'recovered', p_doc -> 'recovered',
            'recovered_not', p_doc -> 'recovered_not',
            'failures', p_doc -> 'failures',
            'fingerprint', encode(sha256(convert_to(p_doc::text, 'UTF8')), 'hex')))));

    -- And as a constant that detect_claims' cached plans hold (the function is
    -- inlined): reading the table on each call would cost more than the
    -- detection itself. Replacing the function invalidates those plans.
    -- Languages in byte order, as the Python detector sorts them.
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION agentdb_private.claim_langs_compiled() '
        'RETURNS agentdb_private.claim_langs [] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        format('SELECT %L::agentdb_private.claim_langs []',
               ARRAY(SELECT l FROM agentdb_private.claim_langs AS l ORDER BY l.lang COLLATE "C")));
    -- The facts rules too, languages in byte order, rules in document order.
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION agentdb_private.fact_rules_compiled() '
        'RETURNS agentdb_private.fact_rules [] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        format('SELECT %L::agentdb_private.fact_rules []',
               ARRAY(SELECT f FROM agentdb_private.fact_rules AS f ORDER BY f.lang COLLATE "C", f.n)));
END
$$;

CREATE OR REPLACE FUNCTION agentdb_private.load_claim_patterns(p_doc jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_problem text;
BEGIN
    -- A document either detector would read wrongly, or that would make every
    -- later detection fail, is refused here, before anything is replaced.
    v_problem := coalesce(agentdb_private.claim_doc_problem_languages(p_doc),
                          agentdb_private.claim_doc_problem_sections(p_doc));
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM agentdb_private.claim_doc_check_regexes(p_doc);
    PERFORM agentdb_private.claim_doc_store(p_doc);
    PERFORM agentdb_private.claim_doc_store_facts(p_doc);
    PERFORM agentdb_private.claim_doc_publish(p_doc);
END
$$;

-- The compiled patterns as a constant. A placeholder until load_claim_patterns
-- replaces it, created only where there is none: re-applying this file must
-- not empty the loaded patterns.
DO $placeholder$
BEGIN
    IF to_regprocedure('agentdb_private.claim_langs_compiled()') IS NULL THEN
        -- No SET clause: that would keep it from being inlined as a constant.
        -- Its body names nothing through the search path.
        CREATE FUNCTION agentdb_private.claim_langs_compiled()
        RETURNS agentdb_private.claim_langs []
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $body$ SELECT '{}'::agentdb_private.claim_langs [] $body$;
    END IF;
END
$placeholder$;

DO $placeholder$
BEGIN
    IF to_regprocedure('agentdb_private.fact_rules_compiled()') IS NULL THEN
        CREATE FUNCTION agentdb_private.fact_rules_compiled()
        RETURNS agentdb_private.fact_rules []
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $body$ SELECT '{}'::agentdb_private.fact_rules [] $body$;
    END IF;
END
$placeholder$;

-- The longest reply the gate reads (characters): a longer one is cut there,
-- so that nothing unread is delivered.
CREATE OR REPLACE FUNCTION agentdb_private.max_reply()
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT 100000 $$;

-- The loaded document's gate sections (normalise, accept, needs, classes,
-- facts) as a constant; a placeholder until load_claim_patterns replaces it.
DO $placeholder$
BEGIN
    IF to_regprocedure('agentdb_private.claim_doc_compiled()') IS NULL THEN
        CREATE FUNCTION agentdb_private.claim_doc_compiled()
        RETURNS jsonb
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $body$ SELECT '{}'::jsonb $body$;
    END IF;
END
$placeholder$;

-- A reply as the gate reads it (the document's "normalise" section): Unicode
-- NFKC; invisible and format characters deleted; other spaces made spaces;
-- traditional Chinese forms made simplified where the text holds Chinese;
-- then the rewrites (markdown, colons before Chinese, runs of spaces).
-- Exactly as pyagentdb.claims.normalise. A server whose encoding is not
-- UTF-8 skips NFKC.
CREATE OR REPLACE FUNCTION agentdb_private.normalise_reply(p_text text)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply and agentdb.read_reply, both with a
-- pinned search_path.
AS $$
DECLARE
    v_spec jsonb := agentdb_private.claim_doc_compiled() -> 'normalise';
    v_text text := p_text;
    v_rule jsonb;
    v_i integer;
    v_j integer;
    v_hit boolean;
    v_zh boolean;
BEGIN
    IF v_text IS NULL OR v_text = '' OR v_spec IS NULL THEN
        RETURN v_text;
    END IF;
    IF current_setting('server_encoding') = 'UTF8' THEN
        v_text := normalize(v_text, nfkc);
    END IF;
    -- The translations only where the text holds a character of their lists
    -- (the bracket expression of normalise_classes, published with the
    -- document; without it, always): translate() compares every character of
    -- the text with every one of its list, and most replies hold none.
    -- Whether the text holds Chinese, asked once: no translation below adds or
    -- takes away a Chinese character.
    v_zh := v_text ~ '[一-鿿]';
    IF v_spec ->> 'translated' IS NULL OR v_text ~ (v_spec ->> 'translated') THEN
        v_text := translate(v_text, v_spec ->> 'strip', '');
        v_text := translate(v_text, v_spec ->> 'spaces', repeat(' ', char_length(v_spec ->> 'spaces')));
        IF v_zh THEN
            v_text := translate(v_text, v_spec ->> 'hant', v_spec ->> 'hans');
        END IF;
    END IF;
    -- A rewrite with a third element (a list of strings) is applied only to a
    -- text holding one of them, as the rewrites before it left the text: most
    -- replies need one or two of the rewrites.
    -- (Loops over indexes, not queries: each query of a function is an executor
    -- run, and this one runs on every reply.)
    -- A rewrite for Chinese text (its regex holds a Chinese character: the
    -- flags zh_rules of normalise_classes) only where the text holds one:
    -- "book", "set" and "reminder" are its guards, and English replies hold
    -- them too.
    FOR v_i IN 0 .. coalesce(jsonb_array_length(v_spec -> 'rewrite'), 0) - 1 LOOP
        CONTINUE WHEN NOT v_zh AND substr(v_spec ->> 'zh_rules', v_i + 1, 1) = '1';
        v_rule := v_spec -> 'rewrite' -> v_i;
        v_hit := jsonb_array_length(v_rule) < 3;
        FOR v_j IN 0 .. coalesce(jsonb_array_length(v_rule -> 2), 0) - 1 LOOP
            v_hit := strpos(v_text, v_rule -> 2 ->> v_j) > 0;
            EXIT WHEN v_hit;
        END LOOP;
        CONTINUE WHEN NOT v_hit;
        v_text := regexp_replace(v_text, v_rule ->> 0, v_rule ->> 1, 'g');
    END LOOP;
    RETURN v_text;
END
$$;

-- The reply as the gate reads it: p_norm when the caller already has it, else
-- the first max_reply() characters of p_text normalised.
CREATE OR REPLACE FUNCTION agentdb_private.normalised_reply(p_norm text, p_text text)
RETURNS text
LANGUAGE sql STABLE
-- No SET clause: inlined into the gate's functions, all with a pinned search_path.
AS $$
    SELECT coalesce(p_norm, agentdb_private.normalise_reply(left(p_text, agentdb_private.max_reply())))
$$;

-- Claims of completed actions in a text: a JSON array of
-- {kind, text, start, end, lang}, offsets 0-based with end exclusive, exactly
-- as pyagentdb.detect_claims returns them. lang NULL tries every language.
-- Phases: the clauses (cut here), each clause's claims per language
-- (claims_in_clause), a clause too long to search, the claims in order.
-- The compiled rules are read in place, by language index, never copied
-- into a variable: claim_langs_compiled() is a constant of some 75 kB, and
-- assigning it (or one language's row) copies it on every call.
CREATE OR REPLACE FUNCTION agentdb_private.detect_claims_in(model_text text, lang text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by agentdb.detect_claims and finalize_reply, both with
-- a pinned search_path; a configuration change per call costs 10-20 us.
AS $$
DECLARE
    v_lis integer [];
    v_li integer;
    v_clauses text [];
    v_seps text [];
    v_offset integer := 1;
    v_clause text;
    v_step record;
    v_taken int4multirange;
    v_found jsonb [] := '{}';
    v_counts jsonb := '{}';
    v_cap integer;
    v_max integer;
BEGIN
    IF model_text IS NULL OR model_text = '' THEN
        RETURN '[]';
    END IF;
    v_lis := ARRAY(SELECT i FROM generate_subscripts(agentdb_private.claim_langs_compiled(), 1) AS i
                    WHERE detect_claims_in.lang IS NULL
                       OR ((agentdb_private.claim_langs_compiled())[i]).lang = detect_claims_in.lang ORDER BY i);
    IF cardinality(v_lis) = 0 THEN
        IF lang IS NOT NULL AND cardinality(agentdb_private.claim_langs_compiled()) > 0 THEN
            RAISE EXCEPTION 'no claim patterns for language %', lang USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RAISE EXCEPTION 'claim patterns are not loaded'
            USING HINT = 'Run pyagentdb install (it loads sql/claim_patterns.json).',
                  ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- The clauses between separators, and the separators, each found in one
    -- pass over the text: the same cuts as the Python detector makes. One
    -- regex for both (the split ignores the group).
    v_clauses := regexp_split_to_array(model_text,
                                       '(' || ((agentdb_private.claim_langs_compiled())[1]).clause_split || ')');
    IF cardinality(v_clauses) > 1 THEN
        v_seps := ARRAY(SELECT m[1] FROM regexp_matches(model_text,
            '(' || ((agentdb_private.claim_langs_compiled())[1]).clause_split || ')', 'g') AS m);
    END IF;

    -- No limit in the document: none here either.
    v_cap := coalesce(((agentdb_private.claim_langs_compiled())[1]).max_per_kind, 2147483647);
    v_max := ((agentdb_private.claim_langs_compiled())[1]).max_clause;
    FOR v_ci IN 1 .. cardinality(v_clauses) LOOP
        -- Only the clause's first max_clause characters are searched (as in
        -- Python): the work on a pathological text stays bounded.
        v_clause := CASE WHEN v_max IS NULL THEN v_clauses[v_ci] ELSE left(v_clauses[v_ci], v_max) END;
        IF v_clause <> '' THEN
            v_taken := '{}'::int4multirange;
            FOREACH v_li IN ARRAY v_lis LOOP
                -- A clause without the language's script cannot hold its claims.
                CONTINUE WHEN ((agentdb_private.claim_langs_compiled())[v_li]).script IS NOT NULL
                    AND NOT regexp_like(v_clause, ((agentdb_private.claim_langs_compiled())[v_li]).script);
                v_step := agentdb_private.claims_in_clause(v_li, v_clause, v_offset, v_cap, v_found, v_counts, v_taken);
                v_found := v_step.p_found;
                v_counts := v_step.p_counts;
                v_taken := v_step.p_taken;
            END LOOP;
            -- A clause longer than what is searched is itself a claim that
            -- something is done: no claim can hide beyond the searched part.
            IF char_length(v_clauses[v_ci]) > v_max AND coalesce((v_counts ->> 'done')::integer, 0) < v_cap THEN
                v_found := v_found || jsonb_build_object(
                    'kind', 'done',
                    'text', left(v_clauses[v_ci], 60),
                    'start', v_offset - 1,
                    'end', v_offset - 1 + least(60, char_length(v_clauses[v_ci])),
                    'lang', NULL);
                v_counts := jsonb_set(v_counts, '{done}',
                                      to_jsonb(coalesce((v_counts ->> 'done')::integer, 0) + 1));
            END IF;
        END IF;
        v_offset := v_offset + char_length(v_clauses[v_ci]) + coalesce(char_length(v_seps[v_ci]), 0);
    END LOOP;

    IF cardinality(v_found) = 0 THEN
        RETURN '[]';
    ELSIF cardinality(v_found) = 1 THEN
        RETURN jsonb_build_array(v_found[1]);
    END IF;
    RETURN (SELECT jsonb_agg(f.c ORDER BY (f.c ->> 'start')::int, (f.c ->> 'end')::int)
              FROM unnest(v_found) AS f (c));
END
$$;

-- The part-by-part claim search (claim_alts_compiled and its helpers) split
-- no kind of the document: each kind is one alternation again.
DROP FUNCTION IF EXISTS agentdb_private.kind_candidates(text, text, text, text);
DROP FUNCTION IF EXISTS agentdb_private.alts_match(text, text[], integer);
DROP FUNCTION IF EXISTS agentdb_private.claim_alts_compiled(text, text);
DROP FUNCTION IF EXISTS agentdb_private.claim_parts(jsonb);
DROP FUNCTION IF EXISTS agentdb_private.claims_in_clause(
    text, text, text, text[], text[], text[], text, integer, integer, jsonb[], jsonb, int4multirange
);

-- The claims of one clause in the language of index p_li of the compiled
-- rules, added to found, counts (per kind) and taken (the spans already
-- claimed in the clause). One alternation per kind, the kinds in kind_order;
-- matches one after another, each searched from where the last ended, as
-- Python's spans(); at most max_per_kind per kind. p_offset: the clause's
-- 1-based start in the text.
CREATE OR REPLACE FUNCTION agentdb_private.claims_in_clause(
    p_li integer, p_clause text, p_offset integer, p_cap integer,
    INOUT p_found jsonb[], INOUT p_counts jsonb, INOUT p_taken int4multirange
)
LANGUAGE plpgsql STABLE
-- No SET clause: called by detect_claims_in only, with a pinned search_path.
AS $$
DECLARE
    -- Flag i folds ASCII letters only, as the Python detector does. The clause
    -- is lowered instead of passing the flag: PostgreSQL runs a
    -- case-insensitive regex many times slower. lower() in the C collation
    -- lowers A-Z alone, as translate() from A-Z to a-z would, in one pass.
    v_subject text := CASE WHEN ((agentdb_private.claim_langs_compiled())[p_li]).flags = 'i'
        THEN lower(p_clause COLLATE "C") ELSE p_clause END;
    v_kind text;
    v_re text;
    v_ms integer;
    v_me integer;
    v_tries integer;
    v_pos integer;
    v_excluded boolean;
    -- A match's start and end in one search: regexp_replace from a place, its
    -- first match only, made one mark character; the match starts where the
    -- mark is, and is as long as what the text lost, plus one. (regexp_instr
    -- finds every match to the end of the clause, and was asked twice, for
    -- the start and the end.) A clause holding the mark is searched with
    -- regexp_instr.
    v_marked boolean := strpos(p_clause, E'\x01') = 0;
    v_hit text;
BEGIN
    FOR v_pi IN 1 .. cardinality(((agentdb_private.claim_langs_compiled())[p_li]).claim_kinds) LOOP
        v_kind := ((agentdb_private.claim_langs_compiled())[p_li]).claim_kinds[v_pi];
        CONTINUE WHEN coalesce((p_counts ->> v_kind)::integer, 0) >= p_cap;
        -- None of the kind's literals: none of its patterns can match.
        CONTINUE WHEN ((agentdb_private.claim_langs_compiled())[p_li]).claim_guards[v_pi] IS NOT NULL
            AND NOT v_subject LIKE ANY (string_to_array(
                ((agentdb_private.claim_langs_compiled())[p_li]).claim_guards[v_pi], E'\n'));
        v_re := ((agentdb_private.claim_langs_compiled())[p_li]).claim_res[v_pi];
        -- The first match's start answers whether the kind matches at all.
        IF v_marked THEN
            v_hit := regexp_replace(v_subject, v_re, E'\x01', 1, 1);
            v_ms := strpos(v_hit, E'\x01');
        ELSE
            v_ms := regexp_instr(v_subject, v_re, 1, 1, 0);
        END IF;
        CONTINUE WHEN v_ms = 0;
        -- The exclusions (one alternation, the costliest regex) are asked only
        -- of a clause some kind matches: most clauses hold no claim, and an
        -- excluded clause holds none.
        IF v_excluded IS NULL THEN
            v_excluded := ((agentdb_private.claim_langs_compiled())[p_li]).exclude_re IS NOT NULL
                AND regexp_like(v_subject, ((agentdb_private.claim_langs_compiled())[p_li]).exclude_re);
        END IF;
        EXIT WHEN v_excluded;
        v_pos := 1;
        v_tries := 0;
        LOOP
            EXIT WHEN v_tries >= p_cap OR v_pos > char_length(v_subject);
            IF v_tries > 0 AND v_marked THEN
                v_hit := regexp_replace(v_subject, v_re, E'\x01', v_pos, 1);
                v_ms := strpos(v_hit, E'\x01');
                EXIT WHEN v_ms = 0;
            ELSIF v_tries > 0 THEN
                v_ms := regexp_instr(v_subject, v_re, v_pos, 1, 0);
                EXIT WHEN v_ms = 0;
            END IF;
            IF v_marked THEN
                v_me := v_ms + char_length(v_subject) - char_length(v_hit) + 1;
            ELSE
                -- A match's end is searched from its start (the same match:
                -- the engine reads the whole string, wherever the search starts).
                v_me := regexp_instr(v_subject, v_re, v_ms, 1, 1);
            END IF;
            v_tries := v_tries + 1;
            v_pos := CASE WHEN v_me > v_ms THEN v_me ELSE v_ms + 1 END;
            CONTINUE WHEN v_me = v_ms OR p_taken && int4range(v_ms, v_me);
            p_taken := p_taken + int4range(v_ms, v_me)::int4multirange;
            p_found := p_found || jsonb_build_object(
                'kind', v_kind, 'text', substr(p_clause, v_ms, v_me - v_ms),
                'start', p_offset + v_ms - 2, 'end', p_offset + v_me - 2,
                'lang', ((agentdb_private.claim_langs_compiled())[p_li]).lang);
            p_counts := jsonb_set(p_counts, ARRAY[v_kind], to_jsonb(coalesce((p_counts ->> v_kind)::integer, 0) + 1));
            EXIT WHEN (p_counts ->> v_kind)::integer >= p_cap;
        END LOOP;
    END LOOP;
END
$$;

-- The clauses of a text as read_clauses cuts them, without their labels: a
-- JSON array of {start, end, langs, q, blank}: the languages whose script
-- the clause holds, whether the separator after it asks a question, whether
-- it holds no language's script. The gate asks such a frame only what its
-- task's books need (agentdb_private.clause_has), so that a reply needs few
-- of the label regexes. (The compiled rules are read in place, by index, as
-- in detect_claims_in.)
CREATE OR REPLACE FUNCTION agentdb_private.clause_frames(model_text text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called only by finalize_reply, with a pinned search_path.
AS $$
DECLARE
    v_n integer := cardinality(agentdb_private.claim_langs_compiled());
    v_split text;
    v_max integer;
    v_question text;
    v_clauses text [];
    v_seps text [];
    v_offset integer := 0;
    v_clause text;
    v_langs text [];
    v_out jsonb [] := '{}';
BEGIN
    IF model_text IS NULL OR model_text = '' OR coalesce(v_n, 0) = 0 THEN
        RETURN '[]';
    END IF;
    v_split := '(' || ((agentdb_private.claim_langs_compiled())[1]).clause_split || ')';
    v_max := coalesce(((agentdb_private.claim_langs_compiled())[1]).max_clause, 2147483647);
    v_question := ((agentdb_private.claim_langs_compiled())[1]).question_sep;
    v_clauses := regexp_split_to_array(model_text, v_split);
    IF cardinality(v_clauses) > 1 THEN
        v_seps := ARRAY(SELECT m[1] FROM regexp_matches(model_text, v_split, 'g') AS m);
    END IF;
    FOR v_ci IN 1 .. cardinality(v_clauses) LOOP
        v_clause := left(v_clauses[v_ci], v_max);
        IF btrim(v_clause) <> '' THEN
            v_langs := '{}';
            FOR v_li IN 1 .. v_n LOOP
                IF ((agentdb_private.claim_langs_compiled())[v_li]).script IS NULL
                    OR regexp_like(v_clause, ((agentdb_private.claim_langs_compiled())[v_li]).script) THEN
                    v_langs := v_langs || ((agentdb_private.claim_langs_compiled())[v_li]).lang;
                END IF;
            END LOOP;
            v_out := v_out || jsonb_build_object(
                'start', v_offset, 'end', v_offset + char_length(v_clauses[v_ci]), 'langs', to_jsonb(v_langs),
                'q', v_seps[v_ci] IS NOT NULL AND v_question IS NOT NULL AND regexp_like(v_seps[v_ci], v_question),
                'blank', cardinality(v_langs) = 0);
        END IF;
        v_offset := v_offset + char_length(v_clauses[v_ci]) + coalesce(char_length(v_seps[v_ci]), 0);
    END LOOP;
    RETURN to_jsonb(v_out);
END
$$;

-- How the gate reads a clause (clause_frames' frame or a runtime's clause
-- {start, end}): its text cut to max_clause (clause_text); then per
-- language, by its index in claim_langs_compiled(), lowered (A-Z alone: the
-- C collation's lower()) where the language's flags say i (fold_for). One
-- definition for clause_has, read_clauses and clause_says_done. Both are
-- inlined into their callers, and the constant's fields they read are
-- looked up in place: assigning claim_langs_compiled() (some 75 kB) or one
-- of its rows to a variable copies it on every call.
CREATE OR REPLACE FUNCTION agentdb_private.clause_text(p_text text, p_clause jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined; it names only pg_catalog functions and the constant.
AS $$
    SELECT left(substr(p_text, (p_clause ->> 'start')::integer + 1,
                       (p_clause ->> 'end')::integer - (p_clause ->> 'start')::integer),
                coalesce(((agentdb_private.claim_langs_compiled())[1]).max_clause, 2147483647))
$$;

-- The text between clause p_ci - 1 and clause p_ci: their separator.
CREATE OR REPLACE FUNCTION agentdb_private.clause_gap(p_text text, p_clauses jsonb, p_ci integer)
RETURNS text
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined; it names only pg_catalog functions.
AS $$
    SELECT substr(p_text, (p_clauses -> (p_ci - 1) ->> 'end')::integer + 1,
                  (p_clauses -> p_ci ->> 'start')::integer - (p_clauses -> (p_ci - 1) ->> 'end')::integer)
$$;

-- Does a sentence end between clause p_ci - 1 and clause p_ci (a . ! ? 。！？
-- or a line break between them)?
CREATE OR REPLACE FUNCTION agentdb_private.sentence_ends_before(p_text text, p_clauses jsonb, p_ci integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined, with clause_gap.
AS $$
    SELECT agentdb_private.clause_gap(p_text, p_clauses, p_ci) ~ '[.!?。！？\n]'
$$;

-- Where a clause's parenthesis opens, as an offset in the text, or NULL: what
-- it adds is an aside ("提醒已设好(场地3点被订了)": the clause states what
-- comes before it; clause_success_class, facts_mismatch).
CREATE OR REPLACE FUNCTION agentdb_private.clause_aside_at(p_text text, p_clause jsonb)
RETURNS integer
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined; it names only pg_catalog functions and clause_text.
AS $$
    SELECT (p_clause ->> 'start')::integer
           + nullif(strpos(agentdb_private.clause_text(p_text, p_clause), '('), 0) - 1
$$;

-- Does a claim start in this clause (or span: {start, end})?
CREATE OR REPLACE FUNCTION agentdb_private.clause_holds_claim(p_clause jsonb, p_claims jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_claims, '[]')) AS k
                    WHERE (k ->> 'start')::integer >= (p_clause ->> 'start')::integer
                      AND (k ->> 'start')::integer < (p_clause ->> 'end')::integer)
$$;

CREATE OR REPLACE FUNCTION agentdb_private.fold_for(p_li integer, p_s text)
RETURNS text
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined.
AS $$
    SELECT CASE WHEN ((agentdb_private.claim_langs_compiled())[p_li]).flags = 'i'
                THEN lower(p_s COLLATE "C") ELSE p_s END
$$;

-- The label sets the gate asks about (agentdb_private.label_sets) and each
-- one's labels joined by commas: small constants, folded from the compiled
-- rules when a plan is made.
CREATE OR REPLACE FUNCTION agentdb_private.label_set_names()
RETURNS text[]
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined.
AS $$ SELECT coalesce(((agentdb_private.claim_langs_compiled())[1]).set_names, '{}') $$;

CREATE OR REPLACE FUNCTION agentdb_private.label_set_labels()
RETURNS text[]
LANGUAGE sql IMMUTABLE
-- No SET clause: inlined.
AS $$ SELECT coalesce(((agentdb_private.claim_langs_compiled())[1]).set_labels, '{}') $$;

-- The clauses of a text and what each is recognised as: a JSON array of
-- {start, end, labels}, offsets as detect_claims_in gives them, labels in byte
-- order: every label whose regex matches the clause in a language whose
-- script it holds, "question" when the separator after it matches
-- question_sep, "blank" when it holds no language's script. Exactly as
-- pyagentdb.claims.read_clauses. Empty clauses (only spaces) are left out.
CREATE OR REPLACE FUNCTION agentdb_private.read_clauses(model_text text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply and agentdb.read_reply, both with a
-- pinned search_path.
AS $$
DECLARE
    v_frames jsonb := agentdb_private.clause_frames(model_text);
    v_frame jsonb;
    v_subject text;
    v_labels text [];
    v_out jsonb [] := '{}';
BEGIN
    FOR v_fi IN 0 .. jsonb_array_length(v_frames) - 1 LOOP
        v_frame := v_frames -> v_fi;
        v_labels := '{}';
        FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
            CONTINUE WHEN NOT v_frame -> 'langs' ? ((agentdb_private.claim_langs_compiled())[v_li]).lang;
            v_subject := agentdb_private.fold_for(v_li, agentdb_private.clause_text(model_text, v_frame));
            FOR v_pi IN 1 .. coalesce(cardinality(((agentdb_private.claim_langs_compiled())[v_li]).label_res), 0) LOOP
                IF NOT ((agentdb_private.claim_langs_compiled())[v_li]).label_names[v_pi] = ANY (v_labels)
                    AND regexp_like(v_subject, ((agentdb_private.claim_langs_compiled())[v_li]).label_res[v_pi]) THEN
                    v_labels := v_labels || ((agentdb_private.claim_langs_compiled())[v_li]).label_names[v_pi];
                END IF;
            END LOOP;
        END LOOP;
        IF v_frame -> 'blank' = 'true' THEN
            v_labels := v_labels || 'blank'::text;
        END IF;
        IF v_frame -> 'q' = 'true' AND NOT 'question' = ANY (v_labels) THEN
            v_labels := v_labels || 'question'::text;
        END IF;
        v_out := v_out || jsonb_build_object(
            'start', v_frame -> 'start', 'end', v_frame -> 'end',
            'labels', to_jsonb(ARRAY(SELECT x FROM unnest(v_labels) AS x ORDER BY x COLLATE "C")));
    END LOOP;
    RETURN to_jsonb(v_out);
END
$$;

-- Does a clause carry a label of the set p_set (agentdb_private.label_sets)?
-- A clause of a runtime's reading carries its labels; a frame of
-- clause_frames is asked here, with the set's one alternation per language
-- whose script it holds ("question" also when the separator after it asks
-- one, "blank" when it holds no script): the same answer as the labels
-- read_clauses gives, with one regex instead of one per label; a span that
-- names no languages (a clause of a runtime's reading cut by the gate, a line)
-- is asked in every language. The set's
-- labels come from a small constant (label_sets_compiled): a runtime's
-- clause is answered without the compiled rules.
CREATE OR REPLACE FUNCTION agentdb_private.clause_has(p_text text, p_clause jsonb, p_set text)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_i integer := array_position(agentdb_private.label_set_names(), p_set);
    v_names text [];
    v_clause text;
BEGIN
    IF v_i IS NULL THEN
        IF cardinality(agentdb_private.label_set_names()) = 0 THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'no label set %', p_set USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_names := string_to_array((agentdb_private.label_set_labels())[v_i], ',');
    IF jsonb_typeof(p_clause -> 'labels') = 'array' THEN
        RETURN p_clause -> 'labels' ?| v_names;
    END IF;
    IF 'blank' = ANY (v_names) AND p_clause -> 'blank' = 'true' THEN
        RETURN true;
    END IF;
    IF 'question' = ANY (v_names) AND p_clause -> 'q' = 'true' THEN
        RETURN true;
    END IF;
    v_clause := agentdb_private.clause_text(p_text, p_clause);
    FOR v_li IN 1 .. cardinality(agentdb_private.claim_langs_compiled()) LOOP
        CONTINUE WHEN NOT coalesce(p_clause -> 'langs' ? ((agentdb_private.claim_langs_compiled())[v_li]).lang, true)
            OR ((agentdb_private.claim_langs_compiled())[v_li]).set_res[v_i] IS NULL;
        IF regexp_like(agentdb_private.fold_for(v_li, v_clause),
                       ((agentdb_private.claim_langs_compiled())[v_li]).set_res[v_i]) THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.detect_claims(model_text text, lang text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.detect_claims_in(detect_claims.model_text, detect_claims.lang);
END
$$;

-- A reply as the exit gate reads it: the normalised text, its claims (with
-- their class), its clauses and its facts (offsets into the normalised text),
-- as pyagentdb.claims.read_reply. Defined here, called at run time: the
-- functions it calls load from 55_facts.sql.
CREATE OR REPLACE FUNCTION agentdb.read_reply(model_text text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := agentdb_private.normalise_reply(left(read_reply.model_text, agentdb_private.max_reply()));
    v_clauses jsonb := agentdb_private.read_clauses(v_text);
BEGIN
    RETURN jsonb_build_object('text', coalesce(v_text, ''),
                              'claims', agentdb_private.classify_claims(v_text,
                                  agentdb_private.detect_claims_in(v_text, NULL), v_clauses),
                              'clauses', v_clauses,
                              'facts', agentdb_private.read_facts(v_text, v_clauses));
END
$$;

-- The loaded patterns' fingerprint, if `doc` is the loaded document (NULL
-- asks for it unconditionally). A runtime that detects claims itself from the
-- same document (pyagentdb.detect_claims) passes its claims to finalize_reply
-- with this fingerprint; after a reload the fingerprint no longer matches and
-- the database detects again.
CREATE OR REPLACE FUNCTION agentdb.claim_patterns_fingerprint(doc jsonb DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.fingerprint FROM agentdb_private.claim_rules AS r
     WHERE r.id = 1 AND (claim_patterns_fingerprint.doc IS NULL OR r.doc = claim_patterns_fingerprint.doc)
$$;

-- register_tool's backs: the claim classes a tool backs beyond those of its
-- action. Each must be a class the claim patterns document names (its
-- "classes" section), so that a typo cannot quietly back nothing.
CREATE OR REPLACE FUNCTION agentdb_private.check_backs(p_tool text, p_backs text[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_known text [];
    v_bad text;
BEGIN
    IF p_backs IS NULL THEN
        RETURN;
    END IF;
    SELECT ARRAY(SELECT jsonb_object_keys(r.doc -> 'classes' -> 'names')) INTO v_known
      FROM agentdb_private.claim_rules AS r WHERE r.id = 1;
    SELECT b INTO v_bad FROM unnest(p_backs) AS b
     WHERE b IS NULL OR NOT b = ANY (coalesce(v_known, '{}')) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'tool %: % is not a claim class', p_tool, coalesce(quote_literal(v_bad), 'NULL')
            USING HINT = format('Claim classes: %s.', array_to_string(v_known, ', ')),
                  ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- Is a claim backed by the task's steps, by its kind? Only a step that
-- succeeded AND was verified with the matching effect backs it; "done" needs
-- every step verified (agentdb_private.books_back, the one definition).
-- pending_claims' readers go through claim_backed below.
DROP FUNCTION IF EXISTS agentdb_private.claim_is_backed(uuid, text, text);
CREATE OR REPLACE FUNCTION agentdb_private.claim_is_backed(p_user text, p_task uuid, p_kind text, p_tool text)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause (it costs a configuration change per call): only its caller,
-- with a pinned search_path, may execute it.
AS $$
BEGIN
    RETURN agentdb_private.books_back(agentdb_private.task_books(p_user, p_task), p_kind, NULL, p_tool);
END
$$;

-- The same, with the owner's rights: views call functions with the reader's
-- rights, and readers of pending_claims cannot read steps. (By task id alone:
-- the view of revision 0008 calls it.)
CREATE OR REPLACE FUNCTION agentdb_private.claim_backed(p_task uuid, p_kind text, p_tool text)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.claim_is_backed(t.user_id, p_task, p_kind, p_tool)
      FROM agentdb_private.tasks AS t WHERE t.id = p_task
$$;

GRANT EXECUTE ON FUNCTION agentdb.detect_claims(text, text) TO agentdb_app, agentdb_agent, agentdb_auditor;
GRANT EXECUTE ON FUNCTION agentdb.read_reply(text) TO agentdb_app, agentdb_agent, agentdb_auditor;
GRANT EXECUTE ON FUNCTION agentdb.claim_patterns_fingerprint(jsonb) TO agentdb_app;
-- Views call functions with the reader's rights: readers of pending_claims need this.
GRANT EXECUTE ON FUNCTION agentdb_private.claim_backed(uuid, text, text) TO agentdb_app, agentdb_auditor;
