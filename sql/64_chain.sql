-- Tamper evidence: the audit rows and the change-log rows are hash-chained.
--
-- From revision 0015 a row is linked after its transaction commits, by the
-- sealer (agentdb.seal_chains), not by its writer. A writer inserts the row and
-- a note in chain_pending (same transaction, same subtransaction); the sealer
-- takes every committed note, links the rows into their tenant's chain in
-- chain_links, in row order, and removes the notes, in one transaction:
--     link(n) = sha256(link(n-1) || content(row))
-- per tenant (the row's user_id; '' for rows without one) and chain ('audit'
-- or 'change'), where content is the row as jsonb without NULLs and without
-- hash, as UTF-8 text rendered with TimeZone UTC, and the first link follows
-- 32 zero bytes. Editing a sealed row breaks its own link; deleting one leaves
-- its link without a row (and a note without a row shows a row deleted before
-- it was sealed); recomputing an edited row's link breaks the next link.
--
-- Writers share no append point at all: they never read or lock a chain, so no
-- transaction waits for another to write, whoever they act for. One sealer
-- runs at a time (it holds chain_sealer's row); it never waits for a writer,
-- and rows a still-open transaction writes are sealed by a later run. What
-- this gives up: between its commit and the next seal a row has no link, so
-- an edit or a deletion made by someone who can bypass the append-only
-- triggers in that window is not evidence yet (docs/ledger.md: run the sealer
-- often; verify_chain and chain_anchor seal first).
--
-- Rows chained before revision 0015 keep their links in their own columns
-- (chain_tenant, chain_stripe, chain_seq, hash: per tenant and stripe since
-- 0011, the 16 global stripes before) and are verified as they were.

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

-- The writers' links of revisions 0004-0014: replaced by the sealer.
DROP TRIGGER IF EXISTS audit_chain ON agentdb_private.audit;
DROP FUNCTION IF EXISTS agentdb_private.chain_audit();
DROP FUNCTION IF EXISTS agentdb_private.chain_claim(text);
DROP FUNCTION IF EXISTS agentdb_private.chain_claim(text, text);

-- Link every committed pending row of one chain ('audit' or 'change'): each
-- tenant's rows in row order after that tenant's last link. A note whose row
-- is gone (deleted before it was sealed) still gets its link, over empty
-- content: verify_chain reports the row as missing. p_user: only that
-- tenant's rows, every table read by user_id (on Citus: one shard, a router
-- query); NULL: every tenant in one statement. Returns the rows linked.
-- Callers hold chain_sealer's row (one sealer at a time) and pin TimeZone.
DROP FUNCTION IF EXISTS agentdb_private.seal_chain(text);
CREATE OR REPLACE FUNCTION agentdb_private.seal_chain(p_chain text, p_user text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_linked bigint;
    v_mine text := CASE WHEN p_user IS NOT NULL THEN ' AND %s.user_id = $2' ELSE '' END;
BEGIN
    EXECUTE format($q$
        WITH notes AS (
            DELETE FROM agentdb_private.chain_pending AS p WHERE p.chain = $1 %1$s RETURNING p.user_id, p.row_id
        ),
        fresh AS (
            SELECT n.user_id, n.row_id,
                   row_number() OVER (PARTITION BY n.user_id ORDER BY n.row_id) AS n,
                   coalesce(agentdb_private.chain_content(to_jsonb(r.*)), '\x'::bytea) AS content
              FROM (SELECT DISTINCT x.user_id, x.row_id FROM notes AS x) AS n
              LEFT JOIN %4$s AS r ON r.user_id = n.user_id AND r.id = n.row_id %2$s
        ),
        tails AS (
            SELECT u.user_id, coalesce(t.seq, 0) AS seq, coalesce(t.hash, agentdb_private.chain_genesis()) AS hash
              FROM (SELECT DISTINCT f.user_id FROM fresh AS f) AS u
              LEFT JOIN LATERAL (SELECT l.seq, l.hash FROM agentdb_private.chain_links AS l
                                  WHERE l.user_id = u.user_id AND l.chain = $1 %3$s
                                  ORDER BY l.seq DESC LIMIT 1) AS t ON true
        ),
        linked AS (
            SELECT s.user_id, s.n, s.row_id,
                   agentdb_private.chain_agg(s.c) OVER (PARTITION BY s.user_id ORDER BY s.n ROWS UNBOUNDED PRECEDING) AS h
              FROM (SELECT t.user_id, 0::bigint AS n, NULL::bigint AS row_id, t.hash AS c FROM tails AS t
                    UNION ALL
                    SELECT f.user_id, f.n, f.row_id, f.content FROM fresh AS f) AS s
        )
        INSERT INTO agentdb_private.chain_links (user_id, chain, seq, row_id, hash)
        SELECT l.user_id, $1, t.seq + l.n, l.row_id, l.h
          FROM linked AS l JOIN tails AS t ON t.user_id = l.user_id
         WHERE l.n > 0
    $q$, format(v_mine, 'p'), format(v_mine, 'r'), format(v_mine, 'l'),
       CASE p_chain WHEN 'audit' THEN 'agentdb_private.audit' ELSE 'agentdb_private.change_log' END)
    USING p_chain, p_user;
    GET DIAGNOSTICS v_linked = ROW_COUNT;
    RETURN v_linked;
END
$$;

-- Seal both chains: link every row whose transaction has committed. Run it
-- often (`pyagentdb worker` does, every poll; or cron, pg_cron): until it
-- runs, fresh rows have no link. verify_chain and chain_anchor call it first.
-- One sealer at a time: a second waits for the first, then finds nothing left
-- or what committed meanwhile. Outside READ COMMITTED, or in a read-only
-- transaction, nothing is sealed (NULL counts): an older snapshot would miss
-- notes another sealer took. On Citus each tenant with notes is sealed by its
-- own statements (each on its shard). Returns {"audit": n, "change": n}.
CREATE OR REPLACE FUNCTION agentdb.seal_chains()
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
AS $$
DECLARE
    v_audit bigint := 0;
    v_change bigint := 0;
    v_user text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
            OR current_setting('transaction_read_only') = 'on' THEN
        RETURN jsonb_build_object('audit', NULL, 'change', NULL);
    END IF;
    PERFORM 1 FROM agentdb_private.chain_sealer AS s WHERE s.id = 1 FOR UPDATE;
    IF agentdb_private.is_distributed('agentdb_private.chain_pending') THEN
        FOR v_user IN SELECT DISTINCT p.user_id FROM agentdb_private.chain_pending AS p LOOP
            v_audit := v_audit + agentdb_private.seal_chain('audit', v_user);
            v_change := v_change + agentdb_private.seal_chain('change', v_user);
        END LOOP;
    ELSE
        v_audit := agentdb_private.seal_chain('audit');
        v_change := agentdb_private.seal_chain('change');
    END IF;
    UPDATE agentdb_private.chain_sealer AS s
       SET sealed_at = clock_timestamp(), sealed_rows = s.sealed_rows + v_audit + v_change
     WHERE s.id = 1;
    RETURN jsonb_build_object('audit', v_audit, 'change', v_change);
END
$$;

-- The links of one chain from revision 0015 on that do not hold, as (row id,
-- problem): missing (the row is gone), gap (links before this one are gone),
-- altered (the row or its link was changed). Callers pin TimeZone to UTC.
CREATE OR REPLACE FUNCTION agentdb_private.chain_links_problems(p_chain text)
RETURNS TABLE (id bigint, problem text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY EXECUTE format($q$
        WITH l AS (
            SELECT k.user_id, k.seq, k.row_id, k.hash,
                   lag(k.seq) OVER w AS prev_seq, lag(k.hash) OVER w AS prev_hash
              FROM agentdb_private.chain_links AS k
             WHERE k.chain = $1
            WINDOW w AS (PARTITION BY k.user_id ORDER BY k.seq)
        )
        SELECT l.row_id,
               CASE WHEN r.id IS NULL THEN 'missing'
                    WHEN l.seq <> coalesce(l.prev_seq, 0) + 1 THEN 'gap'
                    ELSE 'altered' END
          FROM l
          LEFT JOIN %s AS r ON r.user_id = l.user_id AND r.id = l.row_id
         WHERE r.id IS NULL
            OR l.seq <> coalesce(l.prev_seq, 0) + 1
            OR l.hash IS DISTINCT FROM sha256(coalesce(l.prev_hash, agentdb_private.chain_genesis())
                                              || agentdb_private.chain_content(to_jsonb(r.*)))
    $q$, CASE p_chain WHEN 'audit' THEN 'agentdb_private.audit' ELSE 'agentdb_private.change_log' END)
    USING p_chain;
END
$$;

-- The links of rows chained before revision 0015 (in their own columns) that
-- do not hold: gap (rows are missing before this one in its stripe) or altered.
CREATE OR REPLACE FUNCTION agentdb_private.chain_old_problems(p_table text)
RETURNS TABLE (id bigint, problem text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY EXECUTE format($q$
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
    $q$, p_table);
END
$$;

-- Rows with no link at all (neither of their own, nor a sealed one, nor a note
-- waiting for the sealer), written after the chain began: inserted around the
-- writers (with the triggers off, or by hand).
CREATE OR REPLACE FUNCTION agentdb_private.chain_unlinked(p_chain text, p_table text)
RETURNS TABLE (id bigint, problem text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY EXECUTE format($q$
        SELECT r.id, 'not_chained'::text
          FROM %1$s AS r
         WHERE r.chain_seq IS NULL
           AND r.id > least((SELECT min(c.id) FROM %1$s AS c WHERE c.chain_seq IS NOT NULL),
                            (SELECT min(l.row_id) FROM agentdb_private.chain_links AS l WHERE l.chain = $1))
           AND NOT EXISTS (SELECT 1 FROM agentdb_private.chain_links AS l
                            WHERE l.user_id = r.user_id AND l.chain = $1 AND l.row_id = r.id)
           AND NOT EXISTS (SELECT 1 FROM agentdb_private.chain_pending AS p
                            WHERE p.user_id = r.user_id AND p.chain = $1 AND p.row_id = r.id)
    $q$, p_table) USING p_chain;
END
$$;

-- Anchored tails (agentdb.chain_anchor) that are gone or differ: rows removed
-- from the end of a chain, which no chain shows by itself. The anchored rows
-- and links are read first, then compared (on Citus a correlated subquery next
-- to jsonb_each() cannot be planned, docs/scaling.md).
CREATE OR REPLACE FUNCTION agentdb_private.chain_anchor_problems(p_chain text, p_table text, p_anchor jsonb)
RETURNS TABLE (id bigint, problem text)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_rows jsonb;
    v_links jsonb;
BEGIN
    EXECUTE format($a$
        SELECT coalesce(jsonb_agg(jsonb_build_object('id', r.id, 'tenant', r.chain_tenant, 'stripe', r.chain_stripe,
                                                     'seq', r.chain_seq, 'hash', encode(r.hash, 'hex'))), '[]')
          FROM %1$s AS r
         WHERE r.id IN (SELECT (t.value ->> 'id')::bigint FROM jsonb_each(coalesce($1 -> %2$L, '{}')) AS t)
    $a$, p_table, p_chain) INTO v_rows USING p_anchor;
    SELECT coalesce(jsonb_agg(jsonb_build_object('tenant', l.user_id, 'seq', l.seq, 'id', l.row_id,
                                                 'hash', encode(l.hash, 'hex'))), '[]')
      INTO v_links
      FROM agentdb_private.chain_links AS l
     WHERE l.chain = p_chain
       AND (l.user_id, l.seq) IN (SELECT t.key, (t.value ->> 'seq')::bigint
                                    FROM jsonb_each(coalesce(p_anchor -> (p_chain || '_links'), '{}')) AS t);
    RETURN QUERY
    SELECT (t.value ->> 'id')::bigint, 'anchor_missing'::text
      FROM jsonb_each(coalesce(p_anchor -> p_chain, '{}')) AS t
     WHERE NOT EXISTS (
           SELECT 1 FROM jsonb_array_elements(v_rows) AS r
            WHERE (r ->> 'tenant') IS NOT DISTINCT FROM CASE WHEN strpos(t.key, ':') > 0
                                                             THEN substr(t.key, strpos(t.key, ':') + 1) END
              AND (r ->> 'stripe')::integer = split_part(t.key, ':', 1)::integer
              AND (r ->> 'seq')::bigint = (t.value ->> 'seq')::bigint
              AND (r ->> 'id')::bigint = (t.value ->> 'id')::bigint
              AND r ->> 'hash' = t.value ->> 'hash')
    UNION ALL
    SELECT (t.value ->> 'id')::bigint, 'anchor_missing'::text
      FROM jsonb_each(coalesce(p_anchor -> (p_chain || '_links'), '{}')) AS t
     WHERE NOT EXISTS (
           SELECT 1 FROM jsonb_array_elements(v_links) AS l
            WHERE l ->> 'tenant' = t.key
              AND (l ->> 'seq')::bigint = (t.value ->> 'seq')::bigint
              AND (l ->> 'id')::bigint = (t.value ->> 'id')::bigint
              AND l ->> 'hash' = t.value ->> 'hash');
END
$$;

-- Every broken link of a chain ('audit' or 'change'), in id order, after
-- sealing what has committed (agentdb.seal_chains):
--   altered        the row's content or its link no longer match
--   gap            links (or, before 0015, rows) are missing before this one
--   missing        a sealed row is gone (also one deleted before it was sealed)
--   not_chained    a row without any link, written after the chain began
-- p_anchor (from agentdb.chain_anchor(), kept outside the database) also finds
-- rows removed from the end of a chain:
--   anchor_missing the anchored tail is gone or differs
CREATE OR REPLACE FUNCTION agentdb.verify_chain(chain text DEFAULT 'audit', anchor jsonb DEFAULT NULL)
RETURNS TABLE (id bigint, problem text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
AS $$
DECLARE
    v_table text := CASE verify_chain.chain
        WHEN 'audit' THEN 'agentdb_private.audit'
        WHEN 'change' THEN 'agentdb_private.change_log'
    END;
BEGIN
    IF v_table IS NULL THEN
        RAISE EXCEPTION 'no chain named %', coalesce(verify_chain.chain, 'NULL')
            USING HINT = 'The chains are audit and change.', ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM agentdb.seal_chains();
    RETURN QUERY
    SELECT x.id, x.problem FROM (
        SELECT o.id, o.problem FROM agentdb_private.chain_old_problems(v_table) AS o
        UNION ALL
        SELECT l.id, l.problem FROM agentdb_private.chain_links_problems(verify_chain.chain) AS l
        UNION ALL
        SELECT u.id, u.problem FROM agentdb_private.chain_unlinked(verify_chain.chain, v_table) AS u
        UNION ALL
        SELECT a.id, a.problem FROM agentdb_private.chain_anchor_problems(verify_chain.chain, v_table, verify_chain.anchor) AS a
         WHERE verify_chain.anchor IS NOT NULL
    ) AS x
    ORDER BY 1, 2;
END
$$;

-- The first broken link of the audit chain (its id), or NULL when it holds.
CREATE OR REPLACE FUNCTION agentdb.verify_audit_chain(anchor jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT min(v.id) FROM agentdb.verify_chain('audit', verify_audit_chain.anchor) AS v $$;

-- The same for the change log.
CREATE OR REPLACE FUNCTION agentdb.verify_change_chain(anchor jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
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
            WHERE p_chain = 'change' AND c.chain_tenant IS NULL AND c.chain_seq IS NOT NULL
            ORDER BY c.chain_stripe, c.chain_seq DESC)
      ) AS x);
END
$$;

-- The last link of every tenant's chain sealed from 0015 on: {"<tenant>": {"id"
-- (the row), "seq", "hash"}}.
CREATE OR REPLACE FUNCTION agentdb_private.chain_link_tails(p_chain text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_object_agg(t.user_id, jsonb_build_object('id', t.row_id, 'seq', t.seq,
                                                                          'hash', encode(t.hash, 'hex'))), '{}')
              FROM (SELECT DISTINCT ON (l.user_id) l.user_id, l.row_id, l.seq, l.hash
                      FROM agentdb_private.chain_links AS l
                     WHERE l.chain = p_chain
                     ORDER BY l.user_id, l.seq DESC) AS t);
END
$$;

-- The current tail of both chains, after sealing what has committed, to keep
-- outside the database (a file, another system): {"audit_links": {"<tenant>":
-- {"id", "seq", "hash"}, ...}, "change_links": {...}, "audit": {"<stripe>:<tenant>":
-- ...}, "change": {...}, "at": ...} (audit and change: the stripes of rows
-- chained before 0015). Passed back to verify_chain, it shows rows removed from
-- the end, which no chain can show by itself. One entry per tenant (and per
-- stripe of old rows): its size grows with the tenants.
CREATE OR REPLACE FUNCTION agentdb.chain_anchor()
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM agentdb.seal_chains();
    RETURN jsonb_build_object(
        'audit', agentdb_private.chain_tails_of('audit'),
        'change', agentdb_private.chain_tails_of('change'),
        'audit_links', agentdb_private.chain_link_tails('audit'),
        'change_links', agentdb_private.chain_link_tails('change'),
        'at', clock_timestamp());
END
$$;

GRANT EXECUTE ON FUNCTION
agentdb.verify_chain(text, jsonb),
agentdb.verify_audit_chain(jsonb),
agentdb.verify_change_chain(jsonb),
agentdb.chain_anchor()
TO agentdb_auditor;
GRANT EXECUTE ON FUNCTION agentdb.seal_chains() TO agentdb_app;
