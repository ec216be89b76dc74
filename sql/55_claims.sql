-- Claims: what a reply says was done. Detection reads the same patterns as the
-- Python detector (sql/claim_patterns.json, loaded by the installer).

CREATE OR REPLACE FUNCTION agentdb_private.load_claim_patterns(p_doc jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_doc jsonb;
BEGIN
    IF p_doc IS NULL OR jsonb_typeof(p_doc -> 'languages') <> 'object' THEN
        RAISE EXCEPTION 'claim patterns document has no languages' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_each(p_doc -> 'languages') AS l
                WHERE coalesce(l.value ->> 'flags', '') NOT IN ('', 'i')) THEN
        RAISE EXCEPTION 'claim pattern flags must be empty or i' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Precompute, per language, one alternation of all exclusions and, per kind,
    -- one of its claim patterns (a guard). A pattern is tried on a clause only
    -- when its kind's guard matches: most clauses hold no claim, and the few hot
    -- regexes stay in PostgreSQL's per-session cache of 32 compiled ones.
    SELECT jsonb_set(p_doc, '{languages}', jsonb_object_agg(l.key, l.value || jsonb_build_object(
               'any_exclude', (SELECT string_agg('(?:' || e || ')', '|')
                                 FROM jsonb_array_elements_text(l.value -> 'exclude') AS e),
               'guards', (SELECT jsonb_object_agg(g.kind, g.re) FROM (
                              SELECT c ->> 'kind' AS kind, string_agg('(?:' || (c ->> 'pattern') || ')', '|') AS re
                                FROM jsonb_array_elements(l.value -> 'claims') AS c
                               GROUP BY c ->> 'kind') AS g))))
      INTO v_doc
      FROM jsonb_each(p_doc -> 'languages') AS l;
    INSERT INTO agentdb_private.claim_rules AS r (id, doc) VALUES (1, v_doc)
    ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, loaded_at = now()
    WHERE r.doc IS DISTINCT FROM excluded.doc;
END
$$;

-- Claims of completed actions in a text: a JSON array of
-- {kind, text, start, end, lang}, offsets 0-based with end exclusive, exactly
-- as pyagentdb.detect_claims returns them. lang NULL tries every language.
CREATE OR REPLACE FUNCTION agentdb.detect_claims(model_text text, lang text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_doc jsonb;
    v_split text;
    v_clauses text [];
    v_seps text [];
    v_langs text [];
    v_specs jsonb [];
    v_spec jsonb;
    v_flags text;
    v_li integer;
    v_ci integer;
    v_offset integer := 1;
    v_clause text;
    v_claim jsonb;
    v_pattern text;
    v_kinds text [];
    v_n integer;
    v_ms integer;
    v_me integer;
    v_taken int4range [];
    v_found jsonb := '[]';
BEGIN
    IF model_text IS NULL OR model_text = '' THEN
        RETURN '[]';
    END IF;
    SELECT r.doc INTO v_doc FROM agentdb_private.claim_rules AS r WHERE r.id = 1;
    IF v_doc IS NULL THEN
        RAISE EXCEPTION 'claim patterns are not loaded'
            USING HINT = 'Run pyagentdb install (it loads sql/claim_patterns.json).',
                  ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF lang IS NOT NULL AND NOT v_doc -> 'languages' ? lang THEN
        RAISE EXCEPTION 'no claim patterns for language %', lang USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_langs := CASE WHEN lang IS NULL
        THEN ARRAY(SELECT k FROM jsonb_object_keys(v_doc -> 'languages') AS k ORDER BY k)
        ELSE ARRAY[lang] END;
    v_specs := ARRAY(SELECT v_doc -> 'languages' -> u.k FROM unnest(v_langs) WITH ORDINALITY AS u (k, i) ORDER BY u.i);

    -- The clauses between separators, and the separators, each found in one
    -- pass over the text: the same cuts as the Python detector makes.
    v_split := v_doc ->> 'clause_split';
    v_clauses := regexp_split_to_array(model_text, v_split);
    v_seps := ARRAY(SELECT m[1] FROM regexp_matches(model_text, '(' || v_split || ')', 'g') AS m);

    FOR v_ci IN 1 .. cardinality(v_clauses) LOOP
        v_clause := v_clauses[v_ci];
        IF v_clause <> '' THEN
            v_taken := '{}';
            FOR v_li IN 1 .. cardinality(v_langs) LOOP
                v_spec := v_specs[v_li];
                v_flags := coalesce(v_spec ->> 'flags', '');
                -- A clause without the language's script cannot hold its claims.
                CONTINUE WHEN v_spec ? 'script' AND NOT regexp_like(v_clause, v_spec ->> 'script');
                -- The kinds whose guard matches. Testing for a match is cheap;
                -- finding positions (regexp_instr) is not, so that comes last.
                v_kinds := ARRAY(SELECT g.key FROM jsonb_each_text(v_spec -> 'guards') AS g
                                  WHERE regexp_like(v_clause, g.value, v_flags));
                CONTINUE WHEN cardinality(v_kinds) = 0
                    OR regexp_like(v_clause, v_spec ->> 'any_exclude', v_flags);
                FOR v_claim IN SELECT c FROM jsonb_array_elements(v_spec -> 'claims') AS c
                                WHERE c ->> 'kind' = ANY (v_kinds) LOOP
                    v_pattern := v_claim ->> 'pattern';
                    CONTINUE WHEN NOT regexp_like(v_clause, v_pattern, v_flags);
                    v_n := 1;
                    LOOP
                        v_ms := regexp_instr(v_clause, v_pattern, 1, v_n, 0, v_flags);
                        EXIT WHEN v_ms = 0;
                        v_me := regexp_instr(v_clause, v_pattern, 1, v_n, 1, v_flags);
                        v_n := v_n + 1;
                        CONTINUE WHEN v_me = v_ms
                            OR EXISTS (SELECT 1 FROM unnest(v_taken) AS t (r) WHERE t.r && int4range(v_ms, v_me));
                        v_taken := v_taken || int4range(v_ms, v_me);
                        v_found := v_found || jsonb_build_object(
                            'kind', v_claim ->> 'kind',
                            'text', substr(v_clause, v_ms, v_me - v_ms),
                            'start', v_offset + v_ms - 2,
                            'end', v_offset + v_me - 2,
                            'lang', v_langs[v_li]);
                    END LOOP;
                END LOOP;
            END LOOP;
        END IF;
        v_offset := v_offset + char_length(v_clause) + coalesce(char_length(v_seps[v_ci]), 0);
    END LOOP;

    RETURN coalesce(
        (SELECT jsonb_agg(f.c ORDER BY (f.c ->> 'start')::int, (f.c ->> 'end')::int)
           FROM jsonb_array_elements(v_found) AS f (c)),
        '[]');
END
$$;

-- Is a claim backed by the task's steps? Only a step that succeeded AND was
-- verified with the matching effect backs it; "done" needs every step verified.
-- Steps refused because the task was already closed are not part of the work.
CREATE OR REPLACE FUNCTION agentdb_private.claim_backed(p_task uuid, p_kind text, p_tool text)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE p_kind
        WHEN 'done' THEN coalesce((
            SELECT bool_and(s.outcome = 'success' AND s.verified)
              FROM agentdb_private.steps AS s
             WHERE s.task_id = p_task
               AND s.refusal IS DISTINCT FROM 'closed'
               AND (p_tool IS NULL OR s.tool = p_tool)), false)
        ELSE EXISTS (
            SELECT 1 FROM agentdb_private.steps AS s
             WHERE s.task_id = p_task
               AND s.outcome = 'success' AND s.verified
               AND s.action = CASE p_kind
                   WHEN 'create' THEN 'insert' WHEN 'update' THEN 'update' WHEN 'delete' THEN 'delete' END
               AND (p_tool IS NULL OR s.tool = p_tool))
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
    c.created_at
FROM agentdb_private.claims AS c
INNER JOIN agentdb_private.tasks AS t ON c.task_id = t.id
WHERE NOT agentdb_private.claim_backed(c.task_id, c.kind, c.tool);

GRANT EXECUTE ON FUNCTION agentdb.detect_claims(text, text) TO agentdb_app, agentdb_agent, agentdb_auditor;
GRANT SELECT ON agentdb.pending_claims TO agentdb_app, agentdb_auditor;
-- Views call functions with the reader's rights: readers of pending_claims need this.
GRANT EXECUTE ON FUNCTION agentdb_private.claim_backed(uuid, text, text) TO agentdb_app, agentdb_auditor;
