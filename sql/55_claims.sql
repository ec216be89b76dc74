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
    -- Precompute, per language, one alternation of all claim patterns and one of
    -- all exclusions: most clauses hold no claim and are passed over with one
    -- regex test instead of dozens (PostgreSQL caches only 32 compiled regexes).
    SELECT jsonb_set(p_doc, '{languages}', jsonb_object_agg(l.key, l.value || jsonb_build_object(
               'any_claim', (SELECT string_agg('(?:' || (c ->> 'pattern') || ')', '|')
                               FROM jsonb_array_elements(l.value -> 'claims') AS c),
               'any_exclude', (SELECT string_agg('(?:' || e || ')', '|')
                                 FROM jsonb_array_elements_text(l.value -> 'exclude') AS e))))
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
    v_langs text [];
    v_lang text;
    v_spec jsonb;
    v_flags text;
    v_pos integer := 1;
    v_sep_start integer;
    v_sep_end integer;
    v_clause text;
    v_offset integer;
    v_claim jsonb;
    v_pattern text;
    v_n integer;
    v_ms integer;
    v_me integer;
    v_taken int4range [];
    v_found jsonb := '[]';
    v_len integer;
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
    v_split := v_doc ->> 'clause_split';
    v_langs := CASE WHEN lang IS NULL
        THEN ARRAY(SELECT k FROM jsonb_object_keys(v_doc -> 'languages') AS k ORDER BY k)
        ELSE ARRAY[lang] END;
    v_len := char_length(model_text);

    -- Walk the clauses between separators, as the Python detector does.
    WHILE v_pos <= v_len LOOP
        v_sep_start := regexp_instr(model_text, v_split, v_pos, 1, 0);
        IF v_sep_start = 0 THEN
            v_clause := substr(model_text, v_pos);
            v_offset := v_pos;
            v_pos := v_len + 1;
        ELSE
            v_sep_end := regexp_instr(model_text, v_split, v_pos, 1, 1);
            v_clause := substr(model_text, v_pos, v_sep_start - v_pos);
            v_offset := v_pos;
            v_pos := greatest(v_sep_end, v_sep_start + 1);
        END IF;
        CONTINUE WHEN v_clause = '';

        v_taken := '{}';
        FOREACH v_lang IN ARRAY v_langs LOOP
            v_spec := v_doc -> 'languages' -> v_lang;
            v_flags := coalesce(v_spec ->> 'flags', '');
            -- Same answer as testing each pattern, in two regex tests.
            -- A clause without the language's script cannot hold its claims (every
            -- pattern names words in that script); skipping keeps the regex cache warm.
            CONTINUE WHEN v_spec ? 'script' AND NOT regexp_like(v_clause, v_spec ->> 'script');
            -- The union pays off only where it is cheap to run (measured: zh yes, en no);
            -- skipping it never changes the answer.
            CONTINUE WHEN coalesce((v_spec ->> 'precheck')::boolean, false)
                AND NOT regexp_like(v_clause, v_spec ->> 'any_claim', v_flags);
            CONTINUE WHEN regexp_like(v_clause, v_spec ->> 'any_exclude', v_flags);
            FOR v_claim IN SELECT c FROM jsonb_array_elements(v_spec -> 'claims') AS c LOOP
                v_pattern := v_claim ->> 'pattern';
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
                        'lang', v_lang);
                END LOOP;
            END LOOP;
        END LOOP;
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
