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

-- The change-log rows of one statement, as records without their links, in the
-- order they are chained: an UPDATE's old and new rows paired by key (rows
-- whose key itself changed are paired in the order the statement updated
-- them). Each row belongs to the tenant that owns it: the value of the table's
-- owner column (p_owner), or '' when it has none.
-- (Its return type changed during 0011's development: replace, not redefine.)
DROP FUNCTION IF EXISTS agentdb_private.change_rows(oid, text, text, text[], text, jsonb[], jsonb[], uuid, integer);
CREATE FUNCTION agentdb_private.change_rows(
    p_oid oid, p_name text, p_owner text, p_keys text[], p_op text, p_old jsonb[], p_new jsonb[],
    p_task uuid, p_seq integer
)
RETURNS agentdb_private.change_log[]
LANGUAGE sql
AS $$
    WITH o AS (SELECT u.n, u.j, CASE WHEN cardinality(p_keys) = 1 THEN jsonb_build_object(p_keys[1], u.j -> p_keys[1])
                                     ELSE (SELECT jsonb_object_agg(k, u.j -> k) FROM unnest(p_keys) AS k) END AS k
                 FROM unnest(p_old) WITH ORDINALITY AS u (j, n)),
    w AS (SELECT u.n, u.j, CASE WHEN cardinality(p_keys) = 1 THEN jsonb_build_object(p_keys[1], u.j -> p_keys[1])
                                ELSE (SELECT jsonb_object_agg(k, u.j -> k) FROM unnest(p_keys) AS k) END AS k
            FROM unnest(p_new) WITH ORDINALITY AS u (j, n)),
    m AS (SELECT o.n AS o_n, w.n AS w_n, o.j AS o_j, w.j AS w_j, coalesce(w.k, o.k) AS k
            FROM o FULL JOIN w ON o.k = w.k),
    pairs AS (
        SELECT CASE WHEN p_op = 'DELETE' THEN m.o_n ELSE m.w_n END AS n, m.k, m.o_j, m.w_j
          FROM m WHERE p_op <> 'UPDATE' OR (m.o_n IS NOT NULL AND m.w_n IS NOT NULL)
        UNION ALL
        SELECT coalesce(lw.w_n, 0), coalesce(lw.k, lo.k), lo.o_j, lw.w_j
          FROM (SELECT row_number() OVER (ORDER BY m.o_n) AS r, m.o_j, m.k FROM m
                 WHERE p_op = 'UPDATE' AND m.w_n IS NULL) AS lo
          FULL JOIN (SELECT row_number() OVER (ORDER BY m.w_n) AS r, m.w_n, m.w_j, m.k FROM m
                      WHERE p_op = 'UPDATE' AND m.o_n IS NULL) AS lw ON lo.r = lw.r
        UNION ALL
        SELECT 1, NULL, NULL, NULL WHERE p_op = 'TRUNCATE'
    )
    -- Positional, in change_log's column order: a column added to change_log must
    -- be added here too (the cast fails until it is).
    SELECT array_agg(ROW(
               nextval('agentdb_private.change_log_id_seq'::regclass), p_oid, p_name, p_op, p.k, p.o_j, p.w_j,
               pg_current_xact_id(), p_task, p_seq, session_user, clock_timestamp(), NULL, NULL, NULL,
               coalesce(coalesce(p.w_j, p.o_j) ->> nullif(p_owner, ''), ''), NULL)::agentdb_private.change_log
           ORDER BY p.n)
      FROM pairs AS p
$$;


-- A compiled tool's own written row (sql/42_compile.sql), logged by the tool
-- rather than by its statement's trigger, rendered with the same fixed
-- settings as watch_log (DateStyle aside: jsonb renders dates in ISO always),
-- with its note for the sealer. p_call is the step's marker (task:seq).
CREATE OR REPLACE FUNCTION agentdb_private.log_step_row(
    p_oid oid, p_name text, p_owner text, p_keys text[], p_op text, p_call text, p_row anyelement
)
RETURNS void
LANGUAGE plpgsql
SET timezone = 'UTC'
SET intervalstyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
AS $$
DECLARE
    v_row jsonb := to_jsonb(p_row);
    v_tenant text := coalesce(v_row ->> nullif(p_owner, ''), '');
BEGIN
    INSERT INTO agentdb_private.change_log AS c (
        table_oid, table_name, op, key, old_row, new_row, txid, task_id, seq, db_role, at, user_id
    ) VALUES (
        p_oid, p_name, p_op,
        CASE WHEN cardinality(p_keys) = 1 THEN jsonb_build_object(p_keys[1], v_row -> p_keys[1])
             ELSE (SELECT jsonb_object_agg(k, v_row -> k) FROM unnest(p_keys) AS k) END,
        CASE WHEN p_op = 'DELETE' THEN v_row END, CASE WHEN p_op <> 'DELETE' THEN v_row END,
        pg_current_xact_id(), split_part(p_call, ':', 1)::uuid, split_part(p_call, ':', 2)::integer,
        session_user, clock_timestamp(), v_tenant
    );
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    VALUES (v_tenant, 'change', currval('agentdb_private.change_log_id_seq'::regclass));
END
$$;

-- Insert a statement's change-log rows (several), each with its note for the
-- sealer (sql/64_chain.sql), which links it into its tenant's chain after
-- commit.
DROP FUNCTION IF EXISTS agentdb_private.log_changes(jsonb[]);
CREATE OR REPLACE FUNCTION agentdb_private.log_changes(p_rows agentdb_private.change_log[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO agentdb_private.change_log OVERRIDING SYSTEM VALUE SELECT r.* FROM unnest(p_rows) AS r;
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id)
    SELECT r.user_id, 'change', r.id FROM unnest(p_rows) AS r;
END
$$;

-- One changed row (the common case), and its note for the sealer, without a
-- set-based query. The row's owner (user_id) is the tenant whose chain it joins.
CREATE OR REPLACE FUNCTION agentdb_private.log_change(
    p_oid oid, p_name text, p_owner text, p_keys text[], p_op text, p_old jsonb, p_new jsonb, p_task uuid,
    p_seq integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_row jsonb := coalesce(p_new, p_old);
    v_tenant text := coalesce(v_row ->> nullif(p_owner, ''), '');
    v_id bigint;
BEGIN
    INSERT INTO agentdb_private.change_log AS c (
        table_oid, table_name, op, key, old_row, new_row, txid, task_id, seq, db_role, at, user_id
    ) VALUES (
        p_oid, p_name, p_op,
        CASE WHEN cardinality(p_keys) = 1 THEN jsonb_build_object(p_keys[1], v_row -> p_keys[1])
             ELSE (SELECT jsonb_object_agg(k, v_row -> k) FROM unnest(p_keys) AS k) END,
        p_old, p_new, pg_current_xact_id(), p_task, p_seq, session_user, clock_timestamp(), v_tenant
    ) RETURNING c.id INTO v_id;
    INSERT INTO agentdb_private.chain_pending (user_id, chain, row_id) VALUES (v_tenant, 'change', v_id);
END
$$;

-- AFTER, per statement. TG_ARGV: the watched table's oid, 'owner:' and its
-- owner column (nothing after the colon when it has none; triggers made before
-- 0011 lack this argument), then its key columns. The transition tables are read
-- into arrays first. Values are rendered with fixed settings so a row's jsonb
-- does not depend on the session (timestamps in UTC, floats exact, bytea as hex).
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
    v_owned boolean := TG_ARGV[1] LIKE 'owner:%';
    v_name text;
    v_call text := current_setting('agentdb.call', true);
    v_task uuid;
    v_seq integer;
    v_old jsonb [];
    v_new jsonb [];
    v_owner text;
    v_keys text [];
BEGIN
    -- A compiled tool logs its own statement's rows (log_step_row): only the
    -- statement it marked, at the trigger depth it named, steps aside here.
    IF v_call LIKE '%:logged:%' AND split_part(v_call, ':', 4) = pg_trigger_depth()::text THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        SELECT array_agg(to_jsonb(t.*)) INTO v_old FROM agentdb_old AS t;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        SELECT array_agg(to_jsonb(t.*)) INTO v_new FROM agentdb_new AS t;
    END IF;
    IF TG_OP <> 'TRUNCATE' AND v_old IS NULL AND v_new IS NULL THEN
        RETURN NULL;
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
    -- The guard (BEFORE, same statement) refused any marker not set by agentdb.
    IF v_call ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[0-9]{1,9}(:logged:[0-9]+)?$' THEN
        v_task := split_part(v_call, ':', 1)::uuid;
        v_seq := split_part(v_call, ':', 2)::integer;
    END IF;
    v_owner := CASE WHEN v_owned THEN substr(TG_ARGV[1], 7) ELSE '' END;
    v_keys := CASE WHEN v_owned THEN TG_ARGV[2:] ELSE TG_ARGV[1:] END;
    -- No chain is read here (the sealer links the rows after commit), so any
    -- isolation level appends alike.
    PERFORM agentdb_private.watch_append(v_oid, v_name, v_owner, v_keys, TG_OP, v_old, v_new, v_task, v_seq);
    RETURN NULL;
END
$$;

-- The rows of one statement into the change log (watch_log).
CREATE OR REPLACE FUNCTION agentdb_private.watch_append(
    p_oid oid, p_name text, p_owner text, p_keys text[], p_op text, p_old jsonb[], p_new jsonb[], p_task uuid,
    p_seq integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF coalesce(cardinality(p_old), 0) <= 1 AND coalesce(cardinality(p_new), 0) <= 1 AND p_op <> 'TRUNCATE' THEN
        -- One row changed: no pairing to do.
        PERFORM agentdb_private.log_change(p_oid, p_name, p_owner, p_keys, p_op, p_old[1], p_new[1], p_task, p_seq);
    ELSE
        PERFORM agentdb_private.log_changes(agentdb_private.change_rows(
            p_oid, p_name, p_owner, p_keys, p_op, p_old, p_new, p_task, p_seq));
    END IF;
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

-- The loggers' arguments: the table's oid, 'owner:<column>', the key columns.
CREATE OR REPLACE FUNCTION agentdb_private.watch_args(p_table oid, p_owner text, p_keys text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$ SELECT ARRAY[p_table::text, 'owner:' || coalesce(p_owner, '')] || p_keys $$;

-- Are all six triggers on every target, enabled, the loggers naming this
-- table, its owner column and p_keys? SECURITY DEFINER: agentdb.watched calls
-- it with the reader's rights.
CREATE OR REPLACE FUNCTION agentdb_private.watch_armed(p_table oid, p_keys text[])
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH args AS (
        SELECT string_agg(convert_to(a, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY o) AS tgargs
          FROM unnest(agentdb_private.watch_args(p_table, (SELECT w.owner_column FROM agentdb_private.watched AS w
                                                             WHERE w.table_oid = p_table), p_keys))
               WITH ORDINALITY AS u (a, o)
    )
    SELECT coalesce(bool_and(
        (SELECT count(*) FROM pg_catalog.pg_trigger AS g, args
          WHERE g.tgrelid = w.w
            AND g.tgenabled <> 'D'
            AND (g.tgname IN ('agentdb_watch_guard', 'agentdb_watch_guard_trunc')
                 OR (g.tgname IN ('agentdb_watch_ins', 'agentdb_watch_upd', 'agentdb_watch_del', 'agentdb_watch_trunc')
                     AND g.tgargs = args.tgargs))) = 6), false)
      FROM agentdb_private.watch_targets(p_table) AS w (w)
$$;

-- Install (or repair) the triggers; p_keys names the rows in the log, p_owner
-- (the owner column of a tool's table) the tenant each row is chained under.
-- Returns true when something was installed, false when all was in place.
DROP FUNCTION IF EXISTS agentdb_private.watch_table(regclass, text[]);
CREATE OR REPLACE FUNCTION agentdb_private.watch_table(p_table regclass, p_keys text[], p_owner text DEFAULT NULL)
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
    -- A table keeps the owner column it was watched with unless one is given; a
    -- table watched again after unwatch takes its tools' owner column.
    p_owner := coalesce(p_owner,
        (SELECT w.owner_column FROM agentdb_private.watched AS w WHERE w.table_oid = p_table),
        (SELECT t.owner_column FROM agentdb_private.tools AS t
          WHERE t.target = p_table AND t.owner_column IS NOT NULL ORDER BY t.name LIMIT 1));

    IF EXISTS (SELECT 1 FROM agentdb_private.watched AS w
                WHERE w.table_oid = p_table AND w.key_columns = p_keys
                  AND w.owner_column IS NOT DISTINCT FROM p_owner)
            AND agentdb_private.watch_armed(p_table, p_keys) THEN
        RETURN false;
    END IF;

    v_args := (SELECT string_agg(quote_literal(a), ', ')
                 FROM unnest(agentdb_private.watch_args(p_table, p_owner, p_keys)) AS a);
    FOR v_target IN SELECT agentdb_private.watch_targets(p_table) LOOP
        -- Two guards: Citus copies no trigger that fires on TRUNCATE to a table's shards.
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_guard BEFORE INSERT OR UPDATE OR DELETE ON %s '
                       || 'FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.watch_guard()', v_target);
        EXECUTE format('CREATE OR REPLACE TRIGGER agentdb_watch_guard_trunc BEFORE TRUNCATE ON %s '
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
        -- One ALTER per trigger (Citus refuses several ENABLE TRIGGER subcommands in one).
        FOREACH v_trigger IN ARRAY agentdb_private.watch_triggers() LOOP
            EXECUTE format('ALTER TABLE %s ENABLE TRIGGER %I', v_target, v_trigger);
        END LOOP;
    END LOOP;

    INSERT INTO agentdb_private.watched AS w (table_oid, table_name, key_columns, owner_column)
    VALUES (p_table, (SELECT format('%I.%I', n.nspname, c.relname)
                        FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                       WHERE c.oid = p_table), p_keys, p_owner)
    ON CONFLICT (table_oid) DO UPDATE SET
        table_name = excluded.table_name, key_columns = excluded.key_columns, owner_column = excluded.owner_column,
        watched_at = CASE WHEN w.key_columns = excluded.key_columns THEN w.watched_at ELSE excluded.watched_at END;
    RETURN true;
END
$$;

-- The names of the triggers watch installs on a table.
CREATE OR REPLACE FUNCTION agentdb_private.watch_triggers()
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY['agentdb_watch_guard', 'agentdb_watch_guard_trunc', 'agentdb_watch_ins', 'agentdb_watch_upd',
                 'agentdb_watch_del', 'agentdb_watch_trunc']
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
        FOREACH v_trigger IN ARRAY agentdb_private.watch_triggers() LOOP
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
