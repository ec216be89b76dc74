-- Watched tables. agentdb.watch(table) installs, on the table (and on each of
-- its partitions):
--   agentdb_watch_guard  BEFORE INSERT/UPDATE/DELETE/TRUNCATE, per statement:
--                        refuses a write by an agent role made outside a step;
--   agentdb_watch_ins/upd/del/trunc  AFTER, per statement, with transition
--                        tables: one change_log row per changed row, carrying
--                        the step that made it (or none), in one INSERT.
-- Statement-level triggers with transition tables log a bulk write in one
-- pass, at a small fraction of the cost of a row-level trigger per row.
--
-- Inside a step: agentdb_private.guarded_write sets the transaction-local
-- setting agentdb.call = '<task id>:<seq>' ('dry-run' for propose's
-- rolled-back trial) just before its write statement and clears it right
-- after (agentdb.run_sql does the same around an agent's statement). Anyone
-- can set a custom setting, so the guard accepts it only when the writing
-- role (current_user) is agentdb's: one that may create in agentdb_private,
-- i.e. the owner (inside agentdb.invoke, SECURITY DEFINER) or a superuser,
-- or agentdb_sql_writer (the role run_sql executes as, which no login role
-- can become). A session that set it by hand writes as itself, and its write
-- is refused.

-- BEFORE, per statement.
CREATE OR REPLACE FUNCTION agentdb_private.watch_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_call text := current_setting('agentdb.call', true);
BEGIN
    IF coalesce(v_call, '') <> '' THEN
        -- Only agentdb's owner (and superusers) may create in agentdb_private:
        -- a privilege test answered from the caches, without a query.
        IF current_user <> 'agentdb_sql_writer'
                AND NOT pg_catalog.has_schema_privilege(current_user, 'agentdb_private', 'CREATE') THEN
            RAISE EXCEPTION '% on %.% refused: agentdb.call is set, but this write does not come from agentdb.invoke',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'agentdb.call marks the guarded write of a step; do not set it by hand.';
        END IF;
        RETURN NULL;
    END IF;
    -- Superusers count as members of every role: only real members are agents
    -- (the catalog is read only when the cached membership test says yes).
    IF (pg_catalog.pg_has_role(session_user, 'agentdb_agent', 'MEMBER')
            OR pg_catalog.pg_has_role(current_user, 'agentdb_agent', 'MEMBER'))
        AND NOT (session_user = current_user AND current_setting('is_superuser') = 'on')
        AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r
                     WHERE r.rolname IN (session_user, current_user)
                       AND NOT r.rolsuper
                       AND pg_catalog.pg_has_role(r.oid, 'agentdb_agent', 'MEMBER')) THEN
        RAISE EXCEPTION '% on %.% refused: an agent role changes a watched table only through agentdb.invoke',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Call agentdb.invoke(task, tool, args): the write then becomes a recorded, verified step.';
    END IF;
    RETURN NULL;
END
$$;

-- AFTER, per statement. TG_ARGV: the watched table's oid, then its key columns.
-- Values are rendered with fixed settings so a row's jsonb does not depend on
-- the session (timestamps in UTC, floats exact, bytea as hex).
CREATE OR REPLACE FUNCTION agentdb_private.watch_log()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
SET datestyle = 'ISO, YMD'
SET intervalstyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
AS $$
DECLARE
    v_oid oid := TG_ARGV[0]::oid;
    v_name text;
    v_keys text [] := TG_ARGV[1:];
    v_call text := current_setting('agentdb.call', true);
    v_task uuid;
    v_seq integer;
    v_tail record;
    v_txid xid8;
    v_at timestamptz := clock_timestamp();
    v_first jsonb [];
    v_old jsonb;
    v_new jsonb;
    v_rec agentdb_private.change_log;
BEGIN
    -- The first two changed rows: none, one (the common case, logged with
    -- no set-based query) or several.
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(x.j) INTO v_first FROM (SELECT to_jsonb(t.*) AS j FROM agentdb_old AS t LIMIT 2) AS x;
    ELSIF TG_OP <> 'TRUNCATE' THEN
        SELECT array_agg(x.j) INTO v_first FROM (SELECT to_jsonb(t.*) AS j FROM agentdb_new AS t LIMIT 2) AS x;
        IF v_first IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP = 'DELETE' AND v_first IS NULL THEN
        RETURN NULL;
    END IF;

    -- The guard (BEFORE, same statement) refused any marker not set by
    -- agentdb; a dry run's marker names no step.
    IF v_call ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[0-9]{1,9}$' THEN
        v_task := split_part(v_call, ':', 1)::uuid;
        v_seq := split_part(v_call, ':', 2)::integer;
    END IF;
    IF TG_RELID = v_oid THEN
        v_name := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
    ELSE
        -- A partition: the change is logged under the watched table.
        v_name := coalesce(
            (SELECT format('%I.%I', n.nspname, c.relname)
               FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
              WHERE c.oid = v_oid),
            v_oid::text);
    END IF;
    v_txid := pg_current_xact_id();
    v_tail := agentdb_private.chain_claim('change');

    IF TG_OP = 'TRUNCATE' OR cardinality(v_first) = 1 THEN
        IF TG_OP = 'INSERT' THEN
            v_new := v_first[1];
        ELSIF TG_OP = 'DELETE' THEN
            v_old := v_first[1];
        ELSIF TG_OP = 'UPDATE' THEN
            v_new := v_first[1];
            SELECT to_jsonb(t.*) INTO v_old FROM agentdb_old AS t;
        END IF;
        v_rec := ROW(
            nextval('agentdb_private.change_log_id_seq'::regclass), v_oid, v_name, TG_OP,
            CASE WHEN TG_OP = 'TRUNCATE' THEN NULL
                 WHEN cardinality(v_keys) = 1 THEN jsonb_build_object(v_keys[1], coalesce(v_new, v_old) -> v_keys[1])
                 ELSE (SELECT jsonb_object_agg(k, coalesce(v_new, v_old) -> k) FROM unnest(v_keys) AS k) END,
            v_old, v_new, v_txid, v_task, v_seq, session_user, v_at,
            v_tail.stripe, v_tail.last_seq + 1, NULL);
        v_rec.hash := sha256(v_tail.last_hash || agentdb_private.chain_content(to_jsonb(v_rec)));
        INSERT INTO agentdb_private.change_log OVERRIDING SYSTEM VALUE SELECT v_rec.*;
        RETURN NULL;
    END IF;

    -- Several rows, in one INSERT. c: the change rows, built as change_log
    -- records so that their content is hashed exactly as agentdb.verify_chain
    -- reads it back; h: the running link (chain_agg, seeded with the tail).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO agentdb_private.change_log OVERRIDING SYSTEM VALUE
        SELECT (x.c).id, (x.c).table_oid, (x.c).table_name, (x.c).op, (x.c).key, (x.c).old_row,
               (x.c).new_row, (x.c).txid, (x.c).task_id, (x.c).seq, (x.c).db_role, (x.c).at,
               (x.c).chain_stripe, (x.c).chain_seq, x.h
          FROM (
              SELECT s.n, s.c, agentdb_private.chain_agg(
                         CASE WHEN s.n = 0 THEN v_tail.last_hash ELSE agentdb_private.chain_content(to_jsonb(s.c)) END)
                         OVER (ORDER BY s.n ROWS UNBOUNDED PRECEDING) AS h
                FROM (
                    SELECT 0::bigint AS n, NULL::agentdb_private.change_log AS c
                    UNION ALL
                    SELECT r.n, ROW(
                        nextval('agentdb_private.change_log_id_seq'::regclass), v_oid, v_name, 'INSERT',
                        CASE WHEN cardinality(v_keys) = 1 THEN jsonb_build_object(v_keys[1], r.j -> v_keys[1])
                             ELSE (SELECT jsonb_object_agg(k, r.j -> k) FROM unnest(v_keys) AS k) END,
                        NULL, r.j, v_txid, v_task, v_seq, session_user, v_at,
                        v_tail.stripe, v_tail.last_seq + r.n, NULL)::agentdb_private.change_log
                      FROM (SELECT row_number() OVER () AS n, to_jsonb(t.*) AS j FROM agentdb_new AS t) AS r
                ) AS s
          ) AS x
         WHERE x.n > 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO agentdb_private.change_log OVERRIDING SYSTEM VALUE
        SELECT (x.c).id, (x.c).table_oid, (x.c).table_name, (x.c).op, (x.c).key, (x.c).old_row,
               (x.c).new_row, (x.c).txid, (x.c).task_id, (x.c).seq, (x.c).db_role, (x.c).at,
               (x.c).chain_stripe, (x.c).chain_seq, x.h
          FROM (
              SELECT s.n, s.c, agentdb_private.chain_agg(
                         CASE WHEN s.n = 0 THEN v_tail.last_hash ELSE agentdb_private.chain_content(to_jsonb(s.c)) END)
                         OVER (ORDER BY s.n ROWS UNBOUNDED PRECEDING) AS h
                FROM (
                    SELECT 0::bigint AS n, NULL::agentdb_private.change_log AS c
                    UNION ALL
                    SELECT r.n, ROW(
                        nextval('agentdb_private.change_log_id_seq'::regclass), v_oid, v_name, 'DELETE',
                        CASE WHEN cardinality(v_keys) = 1 THEN jsonb_build_object(v_keys[1], r.j -> v_keys[1])
                             ELSE (SELECT jsonb_object_agg(k, r.j -> k) FROM unnest(v_keys) AS k) END,
                        r.j, NULL, v_txid, v_task, v_seq, session_user, v_at,
                        v_tail.stripe, v_tail.last_seq + r.n, NULL)::agentdb_private.change_log
                      FROM (SELECT row_number() OVER () AS n, to_jsonb(t.*) AS j FROM agentdb_old AS t) AS r
                ) AS s
          ) AS x
         WHERE x.n > 0;
    ELSIF TG_OP = 'UPDATE' THEN
        -- Old and new rows are paired by key; rows whose key itself changed
        -- are paired in the order the statement updated them.
        INSERT INTO agentdb_private.change_log OVERRIDING SYSTEM VALUE
        WITH o AS (
            SELECT row_number() OVER () AS n, to_jsonb(t.*) AS j FROM agentdb_old AS t
        ),
        w AS (
            SELECT row_number() OVER () AS n, to_jsonb(t.*) AS j FROM agentdb_new AS t
        ),
        ok AS (
            SELECT o.n, o.j,
                   CASE WHEN cardinality(v_keys) = 1 THEN jsonb_build_object(v_keys[1], o.j -> v_keys[1])
                        ELSE (SELECT jsonb_object_agg(k, o.j -> k) FROM unnest(v_keys) AS k) END AS k
              FROM o
        ),
        wk AS (
            SELECT w.n, w.j,
                   CASE WHEN cardinality(v_keys) = 1 THEN jsonb_build_object(v_keys[1], w.j -> v_keys[1])
                        ELSE (SELECT jsonb_object_agg(k, w.j -> k) FROM unnest(v_keys) AS k) END AS k
              FROM w
        ),
        m AS (
            SELECT ok.n AS o_n, wk.n AS w_n, ok.j AS o_j, wk.j AS w_j, coalesce(wk.k, ok.k) AS k
              FROM ok FULL JOIN wk ON ok.k = wk.k
        ),
        pairs AS (
            SELECT m.w_n AS n, m.k, m.o_j, m.w_j FROM m WHERE m.o_n IS NOT NULL AND m.w_n IS NOT NULL
            UNION ALL
            SELECT coalesce(lw.w_n, 0) AS n, coalesce(lw.k, lo.k) AS k, lo.o_j, lw.w_j
              FROM (SELECT row_number() OVER (ORDER BY m.o_n) AS r, m.o_j, m.k FROM m WHERE m.w_n IS NULL) AS lo
              FULL JOIN (SELECT row_number() OVER (ORDER BY m.w_n) AS r, m.w_n, m.w_j, m.k
                           FROM m WHERE m.o_n IS NULL) AS lw ON lo.r = lw.r
        ),
        r AS (
            SELECT row_number() OVER (ORDER BY p.n) AS n, p.k, p.o_j, p.w_j FROM pairs AS p
        ),
        s AS (
            SELECT 0::bigint AS n, NULL::agentdb_private.change_log AS c
            UNION ALL
            SELECT r.n, ROW(
                nextval('agentdb_private.change_log_id_seq'::regclass), v_oid, v_name, 'UPDATE', r.k,
                r.o_j, r.w_j, v_txid, v_task, v_seq, session_user, v_at,
                v_tail.stripe, v_tail.last_seq + r.n, NULL)::agentdb_private.change_log
              FROM r
        ),
        x AS (
            SELECT s.n, s.c, agentdb_private.chain_agg(
                       CASE WHEN s.n = 0 THEN v_tail.last_hash ELSE agentdb_private.chain_content(to_jsonb(s.c)) END)
                       OVER (ORDER BY s.n ROWS UNBOUNDED PRECEDING) AS h
              FROM s
        )
        SELECT (x.c).id, (x.c).table_oid, (x.c).table_name, (x.c).op, (x.c).key, (x.c).old_row,
               (x.c).new_row, (x.c).txid, (x.c).task_id, (x.c).seq, (x.c).db_role, (x.c).at,
               (x.c).chain_stripe, (x.c).chain_seq, x.h
          FROM x
         WHERE x.n > 0;
    END IF;
    RETURN NULL;
END
$$;

-- The change log is evidence too: no UPDATE, DELETE or TRUNCATE.
CREATE OR REPLACE FUNCTION agentdb_private.refuse_ledger_change()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'The change log is evidence; it is never edited.';
END
$$;

CREATE OR REPLACE TRIGGER change_log_append_only
BEFORE UPDATE OR DELETE ON agentdb_private.change_log
FOR EACH ROW EXECUTE FUNCTION agentdb_private.refuse_ledger_change();

CREATE OR REPLACE TRIGGER change_log_no_truncate
BEFORE TRUNCATE ON agentdb_private.change_log
FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.refuse_ledger_change();

-- The table itself and every partition below it (a write naming a partition
-- fires only that partition's statement triggers).
CREATE OR REPLACE FUNCTION agentdb_private.watch_targets(p_table regclass)
RETURNS SETOF regclass
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_table
    UNION
    SELECT t.relid FROM pg_catalog.pg_partition_tree(p_table) AS t WHERE t.relid <> p_table
$$;

-- Are all five triggers on every target, enabled, the loggers naming this
-- table and p_keys? SECURITY DEFINER: agentdb.watched calls it with the
-- reader's rights.
CREATE OR REPLACE FUNCTION agentdb_private.watch_armed(p_table oid, p_keys text[])
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH args AS (
        SELECT string_agg(convert_to(a, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY o) AS tgargs
          FROM unnest(p_table::text || p_keys) WITH ORDINALITY AS u (a, o)
    )
    SELECT coalesce(bool_and(
        (SELECT count(*) FROM pg_catalog.pg_trigger AS g, args
          WHERE g.tgrelid = w.w
            AND g.tgenabled <> 'D'
            AND (g.tgname = 'agentdb_watch_guard'
                 OR (g.tgname IN ('agentdb_watch_ins', 'agentdb_watch_upd', 'agentdb_watch_del', 'agentdb_watch_trunc')
                     AND g.tgargs = args.tgargs))) = 5), false)
      FROM agentdb_private.watch_targets(p_table) AS w (w)
$$;

-- Install (or repair) the triggers; p_keys names the rows in the log.
-- Returns true when something was installed, false when all was in place.
CREATE OR REPLACE FUNCTION agentdb_private.watch_table(p_table regclass, p_keys text[])
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_kind "char";
    v_schema text;
    v_target regclass;
    v_args text;
    v_trigger text;
BEGIN
    SELECT c.relkind, n.nspname INTO v_kind, v_schema
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE c.oid = p_table;
    IF v_kind IS NULL OR v_kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'cannot watch %: it is not a table', p_table
            USING ERRCODE = 'wrong_object_type';
    END IF;
    IF v_schema IN ('agentdb', 'agentdb_private', 'pg_catalog', 'information_schema') OR v_schema LIKE 'pg_toast%' THEN
        RAISE EXCEPTION 'cannot watch %: it belongs to agentdb or the system', p_table
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(cardinality(p_keys), 0) = 0 THEN
        RAISE EXCEPTION 'cannot watch %: it has no primary key', p_table
            USING HINT = 'The change log names each changed row by its primary key; add one (ALTER TABLE ... ADD PRIMARY KEY).',
                  ERRCODE = 'invalid_table_definition';
    END IF;

    -- Forget tables dropped since they were watched (their triggers went with them).
    DELETE FROM agentdb_private.watched AS w
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.oid = w.table_oid);

    IF EXISTS (SELECT 1 FROM agentdb_private.watched AS w
                WHERE w.table_oid = p_table AND w.key_columns = p_keys)
            AND agentdb_private.watch_armed(p_table, p_keys) THEN
        RETURN false;
    END IF;

    v_args := (SELECT string_agg(quote_literal(a), ', ') FROM unnest(p_table::oid::text || p_keys) AS a);
    FOR v_target IN SELECT agentdb_private.watch_targets(p_table) LOOP
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
                       || 'FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.watch_guard()', v_target);
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_ins AFTER INSERT ON %s REFERENCING NEW TABLE AS agentdb_new '
                       || 'FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.watch_log(%s)', v_target, v_args);
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_upd AFTER UPDATE ON %s '
                       || 'REFERENCING OLD TABLE AS agentdb_old NEW TABLE AS agentdb_new '
                       || 'FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.watch_log(%s)', v_target, v_args);
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_del AFTER DELETE ON %s REFERENCING OLD TABLE AS agentdb_old '
                       || 'FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.watch_log(%s)', v_target, v_args);
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_trunc AFTER TRUNCATE ON %s '
                       || 'FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.watch_log(%s)', v_target, v_args);
        -- One trigger per ALTER TABLE: Citus refuses ENABLE TRIGGER among other subcommands.
        FOREACH v_trigger IN ARRAY ARRAY['agentdb_watch_guard', 'agentdb_watch_ins', 'agentdb_watch_upd',
                                         'agentdb_watch_del', 'agentdb_watch_trunc'] LOOP
            EXECUTE format('ALTER TABLE %s ENABLE TRIGGER %I', v_target, v_trigger);
        END LOOP;
    END LOOP;

    INSERT INTO agentdb_private.watched AS w (table_oid, table_name, key_columns)
    VALUES (p_table, (SELECT format('%I.%I', n.nspname, c.relname)
                        FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                       WHERE c.oid = p_table), p_keys)
    ON CONFLICT (table_oid) DO UPDATE SET
        table_name = excluded.table_name, key_columns = excluded.key_columns,
        watched_at = CASE WHEN w.key_columns = excluded.key_columns THEN w.watched_at ELSE excluded.watched_at END;
    RETURN true;
END
$$;

-- Watch a table by its primary key (idempotent). True when the triggers were
-- installed now, false when the table was already watched.
CREATE OR REPLACE FUNCTION agentdb.watch(tbl regclass)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'watch: a table is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN agentdb_private.watch_table(tbl, agentdb_private.primary_key(tbl));
END
$$;

-- Remove the triggers (idempotent). True when the table was watched.
CREATE OR REPLACE FUNCTION agentdb.unwatch(tbl regclass)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_target regclass;
    v_trigger text;
    v_found boolean := false;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'unwatch: a table is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_target IN SELECT agentdb_private.watch_targets(tbl) LOOP
        FOREACH v_trigger IN ARRAY ARRAY['agentdb_watch_guard', 'agentdb_watch_ins', 'agentdb_watch_upd',
                                         'agentdb_watch_del', 'agentdb_watch_trunc'] LOOP
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS g WHERE g.tgrelid = v_target AND g.tgname = v_trigger) THEN
                EXECUTE format('DROP TRIGGER %I ON %s', v_trigger, v_target);
                v_found := true;
            END IF;
        END LOOP;
    END LOOP;
    DELETE FROM agentdb_private.watched AS w WHERE w.table_oid = tbl;
    RETURN v_found OR FOUND;
END
$$;

-- The watched tables; armed is false when a trigger was dropped or disabled
-- since (changes then go unlogged: watch the table again).
CREATE OR REPLACE VIEW agentdb.watched AS
SELECT
    format('%I.%I', n.nspname, c.relname) AS table_name,
    w.key_columns,
    w.watched_at,
    w.watched_by,
    agentdb_private.watch_armed(w.table_oid, w.key_columns) AS armed
FROM agentdb_private.watched AS w
INNER JOIN pg_catalog.pg_class AS c ON w.table_oid = c.oid
INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid;

GRANT SELECT ON agentdb.watched TO agentdb_app, agentdb_auditor;
GRANT EXECUTE ON FUNCTION agentdb_private.watch_armed(oid, text[]) TO agentdb_app, agentdb_auditor;
