-- Tamper evidence: the audit rows and the change-log rows are hash-chained.
--
-- Each chained row stores its place (chain_tenant, chain_stripe, chain_seq) and
--     hash = sha256(previous row's hash || content)
-- where content is the row as jsonb without NULLs and without hash, as UTF-8
-- text (rendered with TimeZone UTC, so the bytes do not depend on the session),
-- and the first row of a stripe follows 32 zero bytes. Editing a row breaks its
-- own link; deleting one leaves a gap in chain_seq; recomputing an edited row's
-- hash breaks the next row's link.
--
-- Concurrency: per tenant, no shared append point. A chain is kept per tenant
-- (the user the row belongs to; '' for rows without one) in as many stripes as
-- that tenant has writers at once. A writer takes the first stripe of its
-- tenant that no other open transaction holds (FOR UPDATE SKIP LOCKED on its
-- row in chain_stripes, once per transaction for both chains), or opens a new
-- one (numbered from chain_stripe_seq), and holds it to commit; the tail is the stripe's last row. So no
-- transaction ever waits for another to append, whoever they act for: an agent
-- that holds transactions open holds only stripes of its own tenant, which
-- nobody else needs. Within a stripe appends are serial (the row lock), so a
-- stripe never forks; under REPEATABLE READ a stripe appended to since the
-- snapshot fails with a serialization error (40001) instead of forking.
--
-- Rows chained before revision 0011 (chain_tenant NULL) belong to the 16 global
-- stripes of that time; they are verified as they were.

CREATE OR REPLACE FUNCTION agentdb_private.chain_genesis()
RETURNS bytea
LANGUAGE sql IMMUTABLE
AS $$ SELECT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea $$;

-- The bytes a row contributes to its link. Inlined where it is used (no SET
-- clause); callers pin TimeZone to UTC. A user_id of '' ("no user", given by
-- revision 0014 to rows that had NULL) is left out where NULL was hashed
-- before: audit rows (a call that named no known task) and change-log rows
-- chained before 0011 (chain_tenant NULL). So old links hold.
CREATE OR REPLACE FUNCTION agentdb_private.chain_content(p_row jsonb)
RETURNS bytea
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.convert_to(pg_catalog.jsonb_strip_nulls(
        CASE WHEN p_row ->> 'user_id' = '' AND (p_row ? 'step_id' OR p_row ->> 'chain_tenant' IS NULL)
             THEN p_row - ARRAY['hash', 'user_id'] ELSE p_row - 'hash' END)::text, 'UTF8')
$$;

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

-- The 16 global stripes of revisions 0004-0010: replaced by chain_stripes.
DROP FUNCTION IF EXISTS agentdb_private.chain_claim(text);

-- Take a stripe of a tenant's chains for this transaction and return the tail
-- of one chain ('audit' or 'change') in it (last_seq 0 and the genesis hash for
-- an empty stripe). The transaction keeps the stripe (its row lock) to commit,
-- and remembers it (agentdb.chain_stripe, transaction-local, undone with a
-- rolled-back subtransaction like the lock): later rows of this tenant, in
-- either chain, follow in the same stripe. Never waits: a stripe another open
-- transaction holds is skipped; when all are held, a new stripe is opened
-- (numbers taken under a try-lock, so two openers never race for one number).
CREATE OR REPLACE FUNCTION agentdb_private.chain_claim(
    p_chain text, p_tenant text, OUT stripe integer, OUT last_seq bigint, OUT last_hash bytea
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_held text := current_setting('agentdb.chain_stripe', true);
BEGIN
    IF v_held IS NOT NULL AND v_held <> '' AND split_part(v_held, chr(31), 2) = p_tenant THEN
        stripe := split_part(v_held, chr(31), 1)::integer;
    ELSE
        SELECT x.stripe INTO stripe FROM agentdb_private.chain_stripes AS x
         WHERE x.tenant = p_tenant ORDER BY x.stripe LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF stripe IS NULL THEN
            -- A new stripe: its number from a sequence, so the insert never meets
            -- another writer's (an ON CONFLICT would wait for it) and no advisory
            -- lock is taken (run_sql refuses a statement that leaves one).
            INSERT INTO agentdb_private.chain_stripes AS x (tenant, stripe)
            VALUES (p_tenant, nextval('agentdb_private.chain_stripe_seq')::integer)
            RETURNING x.stripe INTO stripe;
        END IF;
        v_held := set_config('agentdb.chain_stripe', stripe || chr(31) || p_tenant, true);
    END IF;
    -- The tenant is the rows' user_id too (revision 0014): on Citus, one shard.
    IF p_chain = 'audit' THEN
        SELECT a.chain_seq, a.hash INTO last_seq, last_hash FROM agentdb_private.audit AS a
         WHERE a.user_id = p_tenant AND a.chain_tenant = p_tenant AND a.chain_stripe = stripe
         ORDER BY a.chain_seq DESC LIMIT 1;
    ELSE
        SELECT c.chain_seq, c.hash INTO last_seq, last_hash FROM agentdb_private.change_log AS c
         WHERE c.user_id = p_tenant AND c.chain_tenant = p_tenant AND c.chain_stripe = stripe
         ORDER BY c.chain_seq DESC LIMIT 1;
    END IF;
    last_seq := coalesce(last_seq, 0);
    last_hash := coalesce(last_hash, agentdb_private.chain_genesis());
END
$$;

-- BEFORE INSERT on audit: link the new row into its tenant's chain. The tenant
-- is the row's user, else its task's user, else '' (a call naming no known task);
-- the row's user_id is set to it (the entry points give it: the task lookup
-- by id alone is for inserts that do not, and on Citus would leave the shard).
CREATE OR REPLACE FUNCTION agentdb_private.chain_audit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
AS $$
DECLARE
    v_tail record;
BEGIN
    IF NEW.user_id IS NULL THEN
        NEW.user_id := coalesce((SELECT t.user_id FROM agentdb_private.tasks AS t WHERE t.id = NEW.task_id), '');
    END IF;
    NEW.chain_tenant := NEW.user_id;
    v_tail := agentdb_private.chain_claim('audit', NEW.chain_tenant);
    NEW.chain_stripe := v_tail.stripe;
    NEW.chain_seq := v_tail.last_seq + 1;
    -- chain_content leaves hash out: whatever the inserter gave is replaced.
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
    v_links text;
    v_problems jsonb;
    v_anchored jsonb;
BEGIN
    v_table := CASE verify_chain.chain
        WHEN 'audit' THEN 'agentdb_private.audit'
        WHEN 'change' THEN 'agentdb_private.change_log'
    END;
    IF v_table IS NULL THEN
        RAISE EXCEPTION 'no chain named %', coalesce(verify_chain.chain, 'NULL')
            USING HINT = 'The chains are audit and change.', ERRCODE = 'invalid_parameter_value';
    END IF;
    v_links := format($q$
        WITH links AS (
            SELECT r.id, r.chain_seq, r.hash,
                   lag(r.chain_seq) OVER w AS prev_seq,
                   lag(r.hash) OVER w AS prev_hash,
                   agentdb_private.chain_content(to_jsonb(r.*)) AS content
              FROM %1$s AS r
             WHERE r.chain_seq IS NOT NULL
            WINDOW w AS (PARTITION BY r.chain_tenant, r.chain_stripe ORDER BY r.chain_seq)
        )
        SELECT l.id,
               CASE WHEN l.chain_seq <> coalesce(l.prev_seq, 0) + 1 THEN 'gap' ELSE 'altered' END AS problem
          FROM links AS l
         WHERE l.chain_seq <> coalesce(l.prev_seq, 0) + 1
            OR l.hash IS DISTINCT FROM sha256(coalesce(l.prev_hash, agentdb_private.chain_genesis()) || l.content)
        UNION ALL
        SELECT r.id, 'not_chained'
          FROM %1$s AS r
         WHERE r.chain_seq IS NULL
           AND r.id > (SELECT min(c.id) FROM %1$s AS c WHERE c.chain_seq IS NOT NULL)
    $q$, v_table);
    IF verify_chain.anchor IS NULL THEN
        RETURN QUERY EXECUTE v_links || ' ORDER BY 1';
        RETURN;
    END IF;
    -- With an anchor: the links' problems and the anchored rows (read by id, a
    -- subquery Citus runs first) are fetched, then compared here. On Citus a
    -- correlated subquery next to jsonb_each() cannot be planned (docs/scaling.md).
    EXECUTE format('SELECT coalesce(jsonb_agg(to_jsonb(q)), ''[]'') FROM (%s) AS q', v_links) INTO v_problems;
    EXECUTE format($a$
        SELECT coalesce(jsonb_agg(jsonb_build_object('id', r.id, 'tenant', r.chain_tenant, 'stripe', r.chain_stripe,
                                                     'seq', r.chain_seq, 'hash', encode(r.hash, 'hex'))), '[]')
          FROM %1$s AS r
         WHERE r.id IN (SELECT (t.value ->> 'id')::bigint FROM jsonb_each(coalesce($1 -> %2$L, '{}')) AS t)
    $a$, v_table, verify_chain.chain) INTO v_anchored USING verify_chain.anchor;
    RETURN QUERY
    SELECT x.id, x.problem FROM (
        SELECT (p ->> 'id')::bigint AS id, p ->> 'problem' AS problem FROM jsonb_array_elements(v_problems) AS p
        UNION ALL
        SELECT (t.value ->> 'id')::bigint, 'anchor_missing'
          FROM jsonb_each(coalesce(verify_chain.anchor -> verify_chain.chain, '{}')) AS t
         WHERE NOT EXISTS (
               SELECT 1 FROM jsonb_array_elements(v_anchored) AS r
                WHERE (r ->> 'tenant') IS NOT DISTINCT FROM CASE WHEN strpos(t.key, ':') > 0
                                                                 THEN substr(t.key, strpos(t.key, ':') + 1) END
                  AND (r ->> 'stripe')::integer = split_part(t.key, ':', 1)::integer
                  AND (r ->> 'seq')::bigint = (t.value ->> 'seq')::bigint
                  AND (r ->> 'id')::bigint = (t.value ->> 'id')::bigint
                  AND r ->> 'hash' = t.value ->> 'hash')
    ) AS x
    ORDER BY 1;
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

-- The tails of one chain: every stripe of every tenant ("<stripe>:<tenant>")
-- and the 16 stripes of rows chained before 0011 ("<stripe>").
CREATE OR REPLACE FUNCTION agentdb_private.chain_tails_of(p_chain text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- PL/pgSQL: on Citus a query in an SQL function with parameters is not planned.
    RETURN (SELECT coalesce(jsonb_object_agg(x.k, jsonb_build_object('id', x.id, 'seq', x.seq, 'hash', encode(x.hash, 'hex'))),
                    '{}')
      FROM (
          -- The last row of each tenant's stripes, led by user_id (= chain_tenant):
          -- on Citus each shard finds its own tenants' tails.
          (SELECT DISTINCT ON (a.user_id, a.chain_tenant, a.chain_stripe)
                  a.chain_stripe || ':' || a.chain_tenant AS k, a.id, a.chain_seq AS seq, a.hash
             FROM agentdb_private.audit AS a
            WHERE p_chain = 'audit' AND a.chain_tenant IS NOT NULL
            ORDER BY a.user_id DESC, a.chain_tenant DESC, a.chain_stripe DESC, a.chain_seq DESC)
          UNION ALL
          (SELECT DISTINCT ON (c.user_id, c.chain_tenant, c.chain_stripe)
                  c.chain_stripe || ':' || c.chain_tenant, c.id, c.chain_seq, c.hash
             FROM agentdb_private.change_log AS c
            WHERE p_chain = 'change' AND c.chain_tenant IS NOT NULL
            ORDER BY c.user_id DESC, c.chain_tenant DESC, c.chain_stripe DESC, c.chain_seq DESC)
          UNION ALL
          (SELECT DISTINCT ON (a.chain_stripe) a.chain_stripe::text, a.id, a.chain_seq, a.hash
             FROM agentdb_private.audit AS a
            WHERE p_chain = 'audit' AND a.chain_tenant IS NULL AND a.chain_seq IS NOT NULL
            ORDER BY a.chain_stripe, a.chain_seq DESC)
          UNION ALL
          (SELECT DISTINCT ON (c.chain_stripe) c.chain_stripe::text, c.id, c.chain_seq, c.hash
             FROM agentdb_private.change_log AS c
            WHERE p_chain = 'change' AND c.chain_tenant IS NULL
            ORDER BY c.chain_stripe, c.chain_seq DESC)
      ) AS x);
END
$$;

-- The current tail of every stripe of both chains, to keep outside the
-- database (a file, another system): {"audit": {"<stripe>:<tenant>": {"id",
-- "seq", "hash"}, ...}, "change": {...}, "at": ...}. Passed back to
-- verify_chain, it shows rows removed from the end, which no chain can show by
-- itself. One entry per stripe of each tenant: its size grows with the tenants.
CREATE OR REPLACE FUNCTION agentdb.chain_anchor()
RETURNS jsonb
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'audit', agentdb_private.chain_tails_of('audit'),
        'change', agentdb_private.chain_tails_of('change'),
        'at', clock_timestamp())
$$;

GRANT EXECUTE ON FUNCTION
agentdb.verify_chain(text, jsonb),
agentdb.verify_audit_chain(jsonb),
agentdb.verify_change_chain(jsonb),
agentdb.chain_anchor()
TO agentdb_auditor;
