-- Tamper evidence: the audit rows and the change-log rows are hash-chained.
--
-- Each chained row stores its place (chain_stripe, chain_seq) and
--     hash = sha256(previous row's hash || content)
-- where content is the row as jsonb without NULLs and without hash, as UTF-8
-- text (rendered with TimeZone UTC, so the bytes do not depend on the session),
-- and the first row of a stripe follows 32 zero bytes. Editing a row breaks its
-- own link; deleting one leaves a gap in chain_seq; recomputing an edited row's
-- hash breaks the next row's link.
--
-- Concurrency: a chain has 16 stripes. A transaction appends to stripe
-- (xid mod 16) and first updates that stripe's row in chain_heads; the row lock
-- is held to commit, so appends within a stripe are serial (the next writer
-- reads the tail only after the previous one committed) while writers in other
-- stripes proceed. Under REPEATABLE READ a conflicting append fails with a
-- serialization error (40001) rather than forking the chain.

CREATE OR REPLACE FUNCTION agentdb_private.chain_genesis()
RETURNS bytea
LANGUAGE sql IMMUTABLE
AS $$ SELECT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea $$;

-- The bytes a row contributes to its link. Inlined where it is used (no SET
-- clause); callers pin TimeZone to UTC.
CREATE OR REPLACE FUNCTION agentdb_private.chain_content(p_row jsonb)
RETURNS bytea
LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.convert_to(pg_catalog.jsonb_strip_nulls(p_row - 'hash')::text, 'UTF8') $$;

CREATE OR REPLACE FUNCTION agentdb_private.chain_step(p_state bytea, p_content bytea)
RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT pg_catalog.sha256(p_state || p_content) $$;

-- Running link over rows in chain order: the first input is the previous
-- hash (it becomes the state as is), each later input a row's content.
CREATE OR REPLACE AGGREGATE agentdb_private.chain_agg (bytea)(
    sfunc = agentdb_private.chain_step,
    stype = bytea
);

-- Take this transaction's stripe of a chain ('audit' or 'change') and return
-- its tail: the stripe, the last chain_seq (0 when empty) and the last hash.
CREATE OR REPLACE FUNCTION agentdb_private.chain_claim(
    p_chain text, OUT stripe smallint, OUT last_seq bigint, OUT last_hash bytea
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_xid xid8 := pg_current_xact_id();
BEGIN
    stripe := (v_xid::text::bigint % 16)::smallint;
    -- Once per transaction (afterwards the condition is false and nothing is
    -- written); waits while another open transaction holds the stripe.
    UPDATE agentdb_private.chain_heads AS h SET locked_by = v_xid
     WHERE h.stripe = chain_claim.stripe AND h.locked_by IS DISTINCT FROM v_xid;
    -- A fresh snapshot (READ COMMITTED): the previous holder's rows are visible.
    IF p_chain = 'audit' THEN
        SELECT a.chain_seq, a.hash INTO last_seq, last_hash
          FROM agentdb_private.audit AS a
         WHERE a.chain_stripe = chain_claim.stripe
         ORDER BY a.chain_seq DESC
         LIMIT 1;
    ELSIF p_chain = 'change' THEN
        SELECT c.chain_seq, c.hash INTO last_seq, last_hash
          FROM agentdb_private.change_log AS c
         WHERE c.chain_stripe = chain_claim.stripe
         ORDER BY c.chain_seq DESC
         LIMIT 1;
    ELSE
        RAISE EXCEPTION 'no chain named %', p_chain USING ERRCODE = 'invalid_parameter_value';
    END IF;
    last_seq := coalesce(last_seq, 0);
    last_hash := coalesce(last_hash, agentdb_private.chain_genesis());
END
$$;

-- BEFORE INSERT on audit: link the new row into its stripe.
CREATE OR REPLACE FUNCTION agentdb_private.chain_audit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
AS $$
DECLARE
    v_tail record;
BEGIN
    v_tail := agentdb_private.chain_claim('audit');
    NEW.chain_stripe := v_tail.stripe;
    NEW.chain_seq := v_tail.last_seq + 1;
    NEW.hash := NULL;
    NEW.hash := sha256(v_tail.last_hash || agentdb_private.chain_content(to_jsonb(NEW)));
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER audit_chain
BEFORE INSERT ON agentdb_private.audit
FOR EACH ROW EXECUTE FUNCTION agentdb_private.chain_audit();

-- Every broken link of a chain ('audit' or 'change'), in id order:
--   altered        the row's content or its hash no longer match its link
--   gap            rows are missing before this one in its stripe
--   not_chained    a row without a link, written after the chain began
-- p_anchor (from agentdb.chain_anchor(), kept outside the database) also finds
-- rows removed from the end of a stripe:
--   anchor_missing the anchored tail row is gone or differs
CREATE OR REPLACE FUNCTION agentdb.verify_chain(chain text DEFAULT 'audit', anchor jsonb DEFAULT NULL)
RETURNS TABLE (id bigint, problem text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
AS $$
DECLARE
    v_table text;
BEGIN
    v_table := CASE verify_chain.chain
        WHEN 'audit' THEN 'agentdb_private.audit'
        WHEN 'change' THEN 'agentdb_private.change_log'
    END;
    IF v_table IS NULL THEN
        RAISE EXCEPTION 'no chain named %', coalesce(verify_chain.chain, 'NULL')
            USING HINT = 'The chains are audit and change.', ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format($q$
        WITH links AS (
            SELECT r.id, r.chain_seq, r.hash,
                   lag(r.chain_seq) OVER w AS prev_seq,
                   lag(r.hash) OVER w AS prev_hash,
                   agentdb_private.chain_content(to_jsonb(r)) AS content
              FROM %1$s AS r
             WHERE r.chain_seq IS NOT NULL
            WINDOW w AS (PARTITION BY r.chain_stripe ORDER BY r.chain_seq)
        )
        SELECT l.id,
               CASE WHEN l.chain_seq <> coalesce(l.prev_seq, 0) + 1 THEN 'gap' ELSE 'altered' END
          FROM links AS l
         WHERE l.chain_seq <> coalesce(l.prev_seq, 0) + 1
            OR l.hash IS DISTINCT FROM sha256(coalesce(l.prev_hash, agentdb_private.chain_genesis()) || l.content)
        UNION ALL
        SELECT r.id, 'not_chained'
          FROM %1$s AS r
         WHERE r.chain_seq IS NULL
           AND r.id > (SELECT min(c.id) FROM %1$s AS c WHERE c.chain_seq IS NOT NULL)
        UNION ALL
        SELECT (t.value ->> 'id')::bigint, 'anchor_missing'
          FROM jsonb_each(coalesce($1 -> %2$L, '{}')) AS t
         WHERE NOT EXISTS (
               SELECT 1 FROM %1$s AS r
                WHERE r.chain_stripe = t.key::smallint
                  AND r.chain_seq = (t.value ->> 'seq')::bigint
                  AND r.id = (t.value ->> 'id')::bigint
                  AND encode(r.hash, 'hex') = t.value ->> 'hash')
         ORDER BY 1
    $q$, v_table, verify_chain.chain) USING verify_chain.anchor;
END
$$;

-- The first broken link of the audit chain (its id), or NULL when it holds.
CREATE OR REPLACE FUNCTION agentdb.verify_audit_chain(anchor jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT min(v.id) FROM agentdb.verify_chain('audit', verify_audit_chain.anchor) AS v $$;

-- The same for the change log.
CREATE OR REPLACE FUNCTION agentdb.verify_change_chain(anchor jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT min(v.id) FROM agentdb.verify_chain('change', verify_change_chain.anchor) AS v $$;

-- The current tail of every stripe of both chains, to keep outside the
-- database (a file, another system): {"audit": {"<stripe>": {"id", "seq",
-- "hash"}}, "change": {...}}. Passed back to verify_chain, it shows rows
-- removed from the end, which no chain can show by itself.
CREATE OR REPLACE FUNCTION agentdb.chain_anchor()
RETURNS jsonb
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'audit', coalesce((
            SELECT jsonb_object_agg(h.stripe, jsonb_build_object('id', a.id, 'seq', a.chain_seq,
                                                                 'hash', encode(a.hash, 'hex')))
              FROM agentdb_private.chain_heads AS h
             CROSS JOIN LATERAL (
                   SELECT x.id, x.chain_seq, x.hash FROM agentdb_private.audit AS x
                    WHERE x.chain_stripe = h.stripe ORDER BY x.chain_seq DESC LIMIT 1) AS a), '{}'),
        'change', coalesce((
            SELECT jsonb_object_agg(h.stripe, jsonb_build_object('id', c.id, 'seq', c.chain_seq,
                                                                 'hash', encode(c.hash, 'hex')))
              FROM agentdb_private.chain_heads AS h
             CROSS JOIN LATERAL (
                   SELECT x.id, x.chain_seq, x.hash FROM agentdb_private.change_log AS x
                    WHERE x.chain_stripe = h.stripe ORDER BY x.chain_seq DESC LIMIT 1) AS c), '{}'),
        'at', clock_timestamp())
$$;

GRANT EXECUTE ON FUNCTION
agentdb.verify_chain(text, jsonb),
agentdb.verify_audit_chain(jsonb),
agentdb.verify_change_chain(jsonb),
agentdb.chain_anchor()
TO agentdb_auditor;
