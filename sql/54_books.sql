-- The books of a task, as the exit gate reads them: its committed steps, read
-- in one statement into one value (task_books), and what that value backs.
-- Every question the gate asks of the steps (the state of the books, whether a
-- claim is backed, how many of a class were done, the counts a reply may name)
-- is answered from that value, without another query: the gate runs on every
-- reply. pending_claims asks the same functions, so there is one definition.

-- The books: the task's steps (steps refused because the task was already
-- closed are not part of the work), in order, as parallel arrays:
--   state     empty (no step), troubled (some step is not a verified success:
--             refused, invalid, duplicate, conflict, failed, unverified,
--             needs_confirmation) or clean (at least one step, all verified);
--   steps, failed   how many steps, how many not verified successes;
--   tools, actions, ok (verified success), affected (rows);
--   backs     the classes the step's tool declares, joined by commas (NULL
--             when it declares none: its labels' classes count then);
--   label_en, label_zh   the tool's labels;
--   outcomes  each step's outcome (success, refused, duplicate, conflict…);
--   drafts    whether the task has proposed drafts (shown by the reply).
-- Read by the task's user (on Citus, routed to the user's shard).
DROP FUNCTION IF EXISTS agentdb_private.task_books(uuid);
-- Its OUT columns grew (outcomes): a changed row type needs a DROP first.
DO $$
BEGIN
    IF to_regprocedure('agentdb_private.task_books(text, uuid)') IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_proc AS p
             WHERE p.oid = to_regprocedure('agentdb_private.task_books(text, uuid)')
               AND 'outcomes' = ANY (p.proargnames)) THEN
        DROP FUNCTION agentdb_private.task_books(text, uuid);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION agentdb_private.task_books(
    p_user text, p_task uuid,
    OUT state text, OUT steps integer, OUT failed integer,
    OUT tools text[], OUT actions text[], OUT ok boolean[], OUT affected integer[],
    OUT backs text[], OUT label_en text[], OUT label_zh text[], OUT drafts boolean,
    OUT outcomes text[]
)
LANGUAGE plpgsql STABLE
-- plpgsql: its plan is kept for the session. No SET clause: called by the
-- gate's functions, all with a pinned search_path.
AS $$
BEGIN
    SELECT count(*)::integer, count(*) FILTER (WHERE NOT b.ok)::integer,
           coalesce(array_agg(b.tool ORDER BY b.seq), '{}'), coalesce(array_agg(b.action ORDER BY b.seq), '{}'),
           coalesce(array_agg(b.ok ORDER BY b.seq), '{}'), coalesce(array_agg(b.affected_rows ORDER BY b.seq), '{}'),
           coalesce(array_agg(b.backs ORDER BY b.seq), '{}'), coalesce(array_agg(b.label_en ORDER BY b.seq), '{}'),
           coalesce(array_agg(b.label_zh ORDER BY b.seq), '{}'),
           coalesce(array_agg(b.outcome ORDER BY b.seq), '{}'),
           EXISTS (SELECT 1 FROM agentdb_private.drafts AS d
                    WHERE d.user_id = p_user AND d.task_id = p_task AND d.status = 'proposed')
      INTO steps, failed, tools, actions, ok, affected, backs, label_en, label_zh, outcomes, drafts
      FROM (SELECT s.seq, s.tool, s.action, s.outcome = 'success' AND s.verified AS ok, s.affected_rows, s.outcome,
                   array_to_string(t.backs, ',') AS backs, t.label_en, t.label_zh
              FROM agentdb_private.steps AS s
              LEFT JOIN agentdb_private.tools AS t ON t.name = s.tool
             WHERE s.user_id = p_user AND s.task_id = p_task AND s.refusal IS DISTINCT FROM 'closed') AS b;
    state := CASE WHEN steps = 0 THEN 'empty' WHEN failed > 0 THEN 'troubled' ELSE 'clean' END;
END
$$;

-- Does step i of the books back a claim class? The classes of its action (the
-- document's classes.actions), and those its tool declares (backs) or, when it
-- declares none, those its labels name (regex work: asked last).
CREATE OR REPLACE FUNCTION agentdb_private.books_step_backs(p_books record, p_i integer, p_class text)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
BEGIN
    RETURN coalesce(agentdb_private.claim_doc_compiled() -> 'classes' -> 'actions' -> p_books.actions[p_i] ? p_class,
                    false)
        OR CASE WHEN p_books.backs[p_i] IS NOT NULL THEN p_class = ANY (string_to_array(p_books.backs[p_i], ','))
                ELSE p_class = ANY (agentdb_private.label_classes(p_books.label_en[p_i], p_books.label_zh[p_i])) END;
END
$$;

-- How much of a class the books' verified steps did: the number of verified
-- steps (of p_tool, when given) that back the class, or their affected rows,
-- whichever is more (a bulk update backs "all 5").
CREATE OR REPLACE FUNCTION agentdb_private.books_capacity(p_books record, p_class text, p_tool text)
RETURNS integer
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_n integer := 0;
    v_rows integer := 0;
BEGIN
    FOR v_i IN 1 .. coalesce(cardinality(p_books.ok), 0) LOOP
        CONTINUE WHEN NOT p_books.ok[v_i] OR (p_tool IS NOT NULL AND p_books.tools[v_i] IS DISTINCT FROM p_tool);
        IF agentdb_private.books_step_backs(p_books, v_i, p_class) THEN
            v_n := v_n + 1;
            v_rows := v_rows + coalesce(p_books.affected[v_i], 0);
        END IF;
    END LOOP;
    RETURN greatest(v_n, v_rows);
END
$$;

-- Is a claim backed by the books? Only a step that succeeded AND was verified
-- backs one. A claim with a class (other than done) needs a verified step
-- backing its class; a claim without one (a declared claim) is read by its
-- kind: create, update and delete need a verified step of that action, done
-- needs every step verified (and one at least). p_tool: only that tool's
-- steps count.
CREATE OR REPLACE FUNCTION agentdb_private.books_back(p_books record, p_kind text, p_class text, p_tool text)
RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: called by the gate's functions, all with a pinned search_path.
AS $$
DECLARE
    v_action text := CASE p_kind WHEN 'create' THEN 'insert' WHEN 'update' THEN 'update'
                                 WHEN 'delete' THEN 'delete' END;
    v_seen boolean := false;
BEGIN
    IF p_class IS NOT NULL AND NOT (p_kind = 'done' AND p_class = 'done') THEN
        RETURN agentdb_private.books_capacity(p_books, p_class, p_tool) > 0;
    END IF;
    FOR v_i IN 1 .. coalesce(cardinality(p_books.ok), 0) LOOP
        CONTINUE WHEN p_tool IS NOT NULL AND p_books.tools[v_i] IS DISTINCT FROM p_tool;
        IF p_kind = 'done' THEN
            IF NOT p_books.ok[v_i] THEN
                RETURN false;
            END IF;
            v_seen := true;
        ELSIF p_books.ok[v_i] AND p_books.actions[v_i] = v_action THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN v_seen;
END
$$;

-- The claims (a JSON array of {kind, text, class, tool, ...}) that nothing in
-- the books backs, as pending_claims shows them: {kind, text, class, tool}.
CREATE OR REPLACE FUNCTION agentdb_private.books_pending(p_books record, p_claims jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
-- No SET clause: called by finalize_reply only, with a pinned search_path.
AS $$
DECLARE
    v_claim jsonb;
    v_out jsonb := '[]';
BEGIN
    FOR v_i IN 0 .. coalesce(jsonb_array_length(p_claims), 0) - 1 LOOP
        v_claim := p_claims -> v_i;
        CONTINUE WHEN agentdb_private.books_back(p_books, v_claim ->> 'kind', v_claim ->> 'class', v_claim ->> 'tool');
        v_out := v_out || jsonb_build_array(
            jsonb_strip_nulls(jsonb_build_object('kind', v_claim ->> 'kind', 'text', v_claim ->> 'text',
                                                 'class', v_claim ->> 'class'))
            || jsonb_build_object('tool', v_claim ->> 'tool'));
    END LOOP;
    RETURN v_out;
END
$$;

-- The counts a reply may name (books_counts) are worked out in facts_mismatch.
DROP FUNCTION IF EXISTS agentdb_private.books_counts(record);
