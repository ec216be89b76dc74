-- Snapshots and diffs: what an agent run changed, by the books.
--
-- agentdb.snapshot(tables) reads each table once: a row count and a checksum,
-- the sum of one 64-bit hash per row (order-independent), under a recorded
-- MVCC snapshot. A watched table keeps nothing else: its changes between two
-- snapshots are in the change log. Any other table also stores each row (key,
-- hash, values) so that a later diff can compare rows.
--
-- agentdb.diff(before, after) skips every table whose count and checksum are
-- unchanged. For the others it lists rows added, removed and changed (with
-- the changed columns): from the stored rows when both snapshots have them,
-- else from the change log, whose net effect must account exactly for the
-- change in count and checksum ("complete": false when it does not, e.g. a
-- change made with the triggers disabled).

-- SQL expression: a bigint hash of the row aliased p_alias of table p_table.
-- Each column is hashed with its type's extended hash function (seeded with
-- its column number, so values swapped between columns differ), or, for
-- types without one, as its jsonb text; NULL counts as a fixed value (not
-- looked for in NOT NULL columns). The column hashes are combined with XOR.
CREATE OR REPLACE FUNCTION agentdb_private.row_hash_sql(p_table regclass, p_alias text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH cols AS (
        SELECT a.attnum, a.attname,
               -- Domains hash as their base type, varchar as text.
               CASE WHEN ty.typtype = 'd' THEN ty.typbasetype
                    WHEN a.atttypid = 'varchar'::regtype THEN 'text'::regtype
                    ELSE a.atttypid END AS htype,
               a.atttypid,
               a.attnotnull
          FROM pg_catalog.pg_attribute AS a
          JOIN pg_catalog.pg_type AS ty ON ty.oid = a.atttypid
         WHERE a.attrelid = p_table AND a.attnum > 0 AND NOT a.attisdropped
    ),
    fns AS (
        SELECT c.attnum, c.attname, c.atttypid, c.htype, c.attnotnull,
               (SELECT p.oid::regproc::text
                  FROM pg_catalog.pg_opclass AS oc
                  JOIN pg_catalog.pg_am AS am ON am.oid = oc.opcmethod AND am.amname = 'hash'
                  JOIN pg_catalog.pg_amproc AS ap
                    ON ap.amprocfamily = oc.opcfamily AND ap.amprocnum = 2
                   AND ap.amproclefttype = oc.opcintype AND ap.amprocrighttype = oc.opcintype
                  JOIN pg_catalog.pg_proc AS p ON p.oid = ap.amproc
                 WHERE oc.opcdefault AND oc.opcintype = c.htype
                   AND p.proargtypes[0] = c.htype AND p.pronargs = 2
                 LIMIT 1) AS fn
          FROM cols AS c
    )
    SELECT coalesce(string_agg(format(CASE WHEN f.attnotnull THEN '%s' ELSE 'coalesce(%s, %s)' END,
               CASE WHEN f.fn IS NOT NULL
                    THEN format('%s(%s.%I%s, %s)', f.fn, p_alias, f.attname,
                                CASE WHEN f.htype = f.atttypid THEN '' ELSE '::' || format_type(f.htype, NULL) END,
                                f.attnum)
                    ELSE format('hashtextextended(to_jsonb(%s.%I)::text, %s)', p_alias, f.attname, f.attnum)
               END,
               -1000003 * f.attnum), ' # ' ORDER BY f.attnum), '0::bigint')
      FROM fns AS f
$$;

-- SQL expression: the key of row p_alias as a jsonb object of p_keys.
CREATE OR REPLACE FUNCTION agentdb_private.row_key_sql(p_keys text[], p_alias text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('jsonb_build_object(%s)',
                  string_agg(format('%L, %s.%I', k, p_alias, k), ', ' ORDER BY o))
      FROM unnest(p_keys) WITH ORDINALITY AS u (k, o)
$$;

-- Is the logged change (txid, id) visible to the snapshot of a table?
-- A snapshot sees its own transaction's changes only up to its log_hwm.
CREATE OR REPLACE FUNCTION agentdb_private.change_seen(
    p_txid xid8, p_id bigint, p_snap pg_snapshot, p_own xid8, p_hwm bigint
)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_txid = p_own THEN p_id <= p_hwm
                ELSE pg_catalog.pg_visible_in_snapshot(p_txid, p_snap) END
$$;

-- Would row-level security keep some rows of p_table from p_role? Decided as
-- PostgreSQL does (check_enable_rls, check_role_for_policy): not when the
-- table has none, nor for a superuser or BYPASSRLS role, nor for a role with
-- the owner's privileges unless the table FORCEs it. Otherwise it would,
-- unless a permissive policy for reading that applies to the role is plainly
-- USING (true) (as the one allow_sql adds for everyone but its writer) and no
-- restrictive policy that applies to it says anything else.
CREATE OR REPLACE FUNCTION agentdb_private.rls_hides_rows(p_role name, p_table regclass)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH applies AS (
        SELECT p.polpermissive, coalesce(pg_get_expr(p.polqual, p.polrelid), 'false') = 'true' AS all_rows
          FROM pg_catalog.pg_policy AS p, pg_catalog.pg_roles AS r
         WHERE p.polrelid = p_table AND r.rolname = p_role AND p.polcmd IN ('r', '*')
           AND (p.polroles = '{0}' OR EXISTS (SELECT 1 FROM unnest(p.polroles) AS pr (oid)
                                               WHERE pg_has_role(r.oid, pr.oid, 'USAGE')))
    )
    SELECT coalesce((
        SELECT c.relrowsecurity
               AND NOT r.rolsuper AND NOT r.rolbypassrls
               AND (c.relforcerowsecurity OR NOT pg_has_role(r.oid, c.relowner, 'USAGE'))
               AND NOT (EXISTS (SELECT 1 FROM applies AS a WHERE a.polpermissive AND a.all_rows)
                        AND NOT EXISTS (SELECT 1 FROM applies AS a WHERE NOT a.polpermissive AND NOT a.all_rows))
          FROM pg_catalog.pg_class AS c, pg_catalog.pg_roles AS r
         WHERE c.oid = p_table AND r.rolname = p_role), true)
$$;

-- Refuse (p_verb: snapshot or diff) unless the caller may read p_table, every
-- row of it: a snapshot holds every row, and a diff shows them, so a role
-- that row-level security confines to some rows is refused, with the reason.
-- agentdb's functions read as their owner, so it must see every row as well.
CREATE OR REPLACE FUNCTION agentdb_private.check_reads_every_row(p_table regclass, p_verb text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT has_table_privilege(session_user, p_table, 'SELECT') THEN
        RAISE EXCEPTION 'cannot % %: % may not read it', p_verb, p_table, session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF agentdb_private.rls_hides_rows(session_user, p_table) THEN
        RAISE EXCEPTION 'cannot % %: row-level security hides some of its rows from %', p_verb, p_table, session_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A snapshot holds every row of a table and a diff shows them. Take snapshots and diffs '
                         'of this table as its owner or as a role with BYPASSRLS.';
    END IF;
    IF agentdb_private.rls_hides_rows(current_user, p_table) THEN
        RAISE EXCEPTION 'cannot % %: row-level security hides some of its rows from agentdb''s owner %',
            p_verb, p_table, current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'agentdb reads the table as the role that installed it; that role needs BYPASSRLS or '
                         'to own the table (without FORCE ROW LEVEL SECURITY).';
    END IF;
END
$$;

-- Take a snapshot of the tables: its id.
CREATE OR REPLACE FUNCTION agentdb.snapshot(tables regclass[])
RETURNS bigint
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
    v_id bigint;
    v_table regclass;
    v_name text;
    v_keys text [];
    v_mode text;
    v_snap pg_snapshot;
    v_count bigint;
    v_sum numeric;
    v_stored bigint := 0;
BEGIN
    IF tables IS NULL OR cardinality(tables) = 0 OR array_position(tables, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'snapshot: give one or more tables, none NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Check every table before reading any.
    FOREACH v_table IN ARRAY tables LOOP
        IF (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid = v_table) NOT IN ('r', 'p') THEN
            RAISE EXCEPTION 'cannot snapshot %: it is not a table', v_table USING ERRCODE = 'wrong_object_type';
        END IF;
        PERFORM agentdb_private.check_reads_every_row(v_table, 'snapshot');
        IF cardinality(agentdb_private.primary_key(v_table)) = 0 THEN
            RAISE EXCEPTION 'cannot snapshot %: it has no primary key', v_table
                USING HINT = 'A diff names each row by its primary key; add one (ALTER TABLE ... ADD PRIMARY KEY).',
                      ERRCODE = 'invalid_table_definition';
        END IF;
    END LOOP;

    INSERT INTO agentdb_private.snapshots DEFAULT VALUES RETURNING id INTO v_id;
    FOR v_table IN SELECT DISTINCT t FROM unnest(tables) AS t LOOP
        v_keys := agentdb_private.primary_key(v_table);
        SELECT format('%I.%I', n.nspname, c.relname) INTO v_name
          FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
         WHERE c.oid = v_table;
        v_mode := CASE WHEN EXISTS (SELECT 1 FROM agentdb_private.watched AS w
                                     WHERE w.table_oid = v_table AND w.key_columns = v_keys)
                            AND agentdb_private.watch_armed(v_table, v_keys)
                       THEN 'log' ELSE 'rows' END;
        -- One statement: the count, the checksum and the MVCC snapshot they saw.
        IF v_mode = 'log' THEN
            EXECUTE format('SELECT pg_current_snapshot(), count(*), coalesce(sum(%s), 0) FROM %s AS t',
                           agentdb_private.row_hash_sql(v_table, 't'), v_table)
                INTO v_snap, v_count, v_sum;
        ELSE
            EXECUTE format(
                'WITH r AS (INSERT INTO agentdb_private.snapshot_rows '
                || '(snapshot_id, table_oid, key_hash, row_hash, key, row_data) '
                || 'SELECT $1, $2, jsonb_hash_extended(k.key, 0), k.row_hash, k.key, k.row_data '
                || 'FROM (SELECT %s AS key, %s AS row_hash, to_jsonb(t.*) AS row_data FROM %s AS t) AS k '
                || 'RETURNING row_hash) '
                || 'SELECT pg_current_snapshot(), count(*), coalesce(sum(r.row_hash), 0) FROM r',
                agentdb_private.row_key_sql(v_keys, 't'), agentdb_private.row_hash_sql(v_table, 't'), v_table)
                INTO v_snap, v_count, v_sum USING v_id, v_table::oid;
            v_stored := v_stored + v_count;
        END IF;
        INSERT INTO agentdb_private.snapshot_tables (
            snapshot_id, table_oid, table_name, key_columns, mode, row_count, checksum,
            xact_snapshot, own_txid, log_hwm
        ) VALUES (
            v_id, v_table, v_name, v_keys, v_mode, v_count, v_sum,
            v_snap, pg_current_xact_id_if_assigned(),
            coalesce((SELECT max(c.id) FROM agentdb_private.change_log AS c), 0)
        );
    END LOOP;
    -- Statistics for the rows just stored, so that a diff is not planned on
    -- empty or stale ones before autovacuum comes by: when this snapshot
    -- stored more than a fifth of the rows the statistics know of. Skipped
    -- when another ANALYZE holds the table.
    IF v_stored > 0.2 * greatest((SELECT c.reltuples FROM pg_catalog.pg_class AS c
                                  WHERE c.oid = 'agentdb_private.snapshot_rows'::regclass), 0) THEN
        ANALYZE (SKIP_LOCKED) agentdb_private.snapshot_rows;
    END IF;
    RETURN v_id;
END
$$;

DROP FUNCTION IF EXISTS agentdb_private.changed_columns(oid, jsonb, jsonb);

-- The changed columns between two row values, in the order of p_cols (the
-- table's columns), then any others by name.
CREATE OR REPLACE FUNCTION agentdb_private.changed_columns(p_cols text[], p_before jsonb, p_after jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(k ORDER BY pg_catalog.array_position(p_cols, k) NULLS LAST, k), '[]')
      FROM pg_catalog.jsonb_object_keys(p_before || p_after) AS k
     WHERE (p_before -> k) IS DISTINCT FROM (p_after -> k)
$$;

-- agentdb_private.diff_table (below) in phases, the callee before its caller.
-- They share the net change of a table between snapshots p_a and p_b: a jsonb
-- array of {"k": key, "b": row before or null, "a": row after or null}.

-- The net change from the rows both snapshots hold. First the (key hash, row
-- hash) pairs found on one side only, a narrow join; then only those rows,
-- paired by their actual key.
CREATE OR REPLACE FUNCTION agentdb_private.diff_rows_net(
    p_a agentdb_private.snapshot_tables, p_b agentdb_private.snapshot_tables
)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH odd AS (
        SELECT coalesce(ra.key_hash, rb.key_hash) AS key_hash
          FROM (SELECT r.key_hash, r.row_hash FROM agentdb_private.snapshot_rows AS r
                 WHERE r.snapshot_id = p_a.snapshot_id AND r.table_oid = p_a.table_oid) AS ra
          FULL JOIN (SELECT r.key_hash, r.row_hash FROM agentdb_private.snapshot_rows AS r
                      WHERE r.snapshot_id = p_b.snapshot_id AND r.table_oid = p_b.table_oid) AS rb
            ON ra.key_hash = rb.key_hash AND ra.row_hash = rb.row_hash
         WHERE ra.key_hash IS NULL OR rb.key_hash IS NULL
    ),
    ra AS (
        SELECT r.key, r.row_data FROM agentdb_private.snapshot_rows AS r
         WHERE r.snapshot_id = p_a.snapshot_id AND r.table_oid = p_a.table_oid
           AND r.key_hash IN (SELECT odd.key_hash FROM odd)
    ),
    rb AS (
        SELECT r.key, r.row_data FROM agentdb_private.snapshot_rows AS r
         WHERE r.snapshot_id = p_b.snapshot_id AND r.table_oid = p_b.table_oid
           AND r.key_hash IN (SELECT odd.key_hash FROM odd)
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object('k', coalesce(ra.key, rb.key), 'b', ra.row_data, 'a', rb.row_data)), '[]')
      FROM ra FULL JOIN rb ON ra.key = rb.key
     WHERE ra.row_data IS DISTINCT FROM rb.row_data
$$;

-- The change log of p_b's table between the two snapshots: the entries p_b
-- sees and p_a does not. No SET clause, so that it is inlined into its
-- callers (agentdb's own, with a pinned search_path).
CREATE OR REPLACE FUNCTION agentdb_private.diff_log(
    p_a agentdb_private.snapshot_tables, p_b agentdb_private.snapshot_tables
)
RETURNS SETOF agentdb_private.change_log
LANGUAGE sql STABLE
AS $$
    SELECT c.*
      FROM agentdb_private.change_log AS c
     WHERE c.table_oid = p_b.table_oid
       AND (c.txid >= pg_catalog.pg_snapshot_xmin(p_a.xact_snapshot) OR c.txid = p_a.own_txid)
       AND agentdb_private.change_seen(c.txid, c.id, p_b.xact_snapshot, p_b.own_txid, p_b.log_hwm)
       AND NOT agentdb_private.change_seen(c.txid, c.id, p_a.xact_snapshot, p_a.own_txid, p_a.log_hwm)
$$;

-- The net change from the change log, per key: the value before the first
-- change and after the last (NULL: no such row).
CREATE OR REPLACE FUNCTION agentdb_private.diff_log_net(
    p_a agentdb_private.snapshot_tables, p_b agentdb_private.snapshot_tables
)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH ch AS (
        SELECT c.id, c.op, c.key, c.old_row, c.new_row,
               (SELECT pg_catalog.jsonb_object_agg(k, c.old_row -> k) FROM unnest(p_b.key_columns) AS k) AS old_key
          FROM agentdb_private.diff_log(p_a, p_b) AS c
         WHERE c.op <> 'TRUNCATE'
    ),
    touch AS (
        SELECT ch.id, ch.key AS k, NULL::jsonb AS b, ch.new_row AS a FROM ch WHERE ch.op = 'INSERT'
        UNION ALL
        SELECT ch.id, ch.key, ch.old_row, NULL FROM ch WHERE ch.op = 'DELETE'
        UNION ALL
        SELECT ch.id, ch.key, ch.old_row, ch.new_row FROM ch WHERE ch.op = 'UPDATE' AND ch.old_key = ch.key
        UNION ALL
        -- An update of the key itself: the old key goes, the new one comes.
        SELECT ch.id, ch.old_key, ch.old_row, NULL FROM ch WHERE ch.op = 'UPDATE' AND ch.old_key <> ch.key
        UNION ALL
        SELECT ch.id, ch.key, NULL, ch.new_row FROM ch WHERE ch.op = 'UPDATE' AND ch.old_key <> ch.key
    )
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('k', n.k, 'b', n.b, 'a', n.a)), '[]')
      FROM (SELECT t.k,
                   (pg_catalog.array_agg(t.b ORDER BY t.id))[1] AS b,
                   (pg_catalog.array_agg(t.a ORDER BY t.id DESC))[1] AS a
              FROM touch AS t GROUP BY t.k) AS n
     WHERE n.b IS DISTINCT FROM n.a
$$;

-- Does the net change p_net from the change log account exactly for the new
-- count and checksum? Not when the table was truncated or dropped since, nor
-- when it changed shape (its logged rows no longer fit it). Runs with
-- diff_table's settings (the text form of the logged values).
CREATE OR REPLACE FUNCTION agentdb_private.diff_log_complete(
    p_a agentdb_private.snapshot_tables, p_b agentdb_private.snapshot_tables, p_net jsonb
)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_added jsonb;
    v_removed jsonb;
    v_sum_after numeric;
    v_sum_before numeric;
BEGIN
    IF EXISTS (SELECT 1 FROM agentdb_private.diff_log(p_a, p_b) AS c WHERE c.op = 'TRUNCATE')
            OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.oid = p_b.table_oid) THEN
        RETURN false;
    END IF;
    SELECT coalesce(jsonb_agg(n.value -> 'a') FILTER (WHERE jsonb_typeof(n.value -> 'a') = 'object'), '[]'),
           coalesce(jsonb_agg(n.value -> 'b') FILTER (WHERE jsonb_typeof(n.value -> 'b') = 'object'), '[]')
      INTO v_added, v_removed
      FROM jsonb_array_elements(p_net) AS n;
    EXECUTE format(
        'SELECT (SELECT coalesce(sum(%1$s), 0) FROM jsonb_array_elements($1) AS e '
        || '         CROSS JOIN LATERAL jsonb_populate_record(NULL::%2$s, e.value) AS t), '
        || '       (SELECT coalesce(sum(%1$s), 0) FROM jsonb_array_elements($2) AS e '
        || '         CROSS JOIN LATERAL jsonb_populate_record(NULL::%2$s, e.value) AS t)',
        agentdb_private.row_hash_sql(p_b.table_oid, 't'), p_b.table_oid::regclass)
        INTO v_sum_after, v_sum_before USING v_added, v_removed;
    RETURN p_b.checksum - p_a.checksum = v_sum_after - v_sum_before
        AND p_b.row_count - p_a.row_count = jsonb_array_length(v_added) - jsonb_array_length(v_removed);
EXCEPTION WHEN OTHERS THEN
    -- The table changed shape since: its logged rows no longer fit it.
    RETURN false;
END
$$;

-- A table's entry of agentdb.diff from its net change, or NULL when a
-- complete diff found nothing.
CREATE OR REPLACE FUNCTION agentdb_private.diff_entry(
    p_b agentdb_private.snapshot_tables, p_net jsonb, p_complete boolean, p_source text
)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cols text [] := ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute AS a
                             WHERE a.attrelid = p_b.table_oid AND a.attnum > 0 AND NOT a.attisdropped
                             ORDER BY a.attnum);
    v_added jsonb;
    v_removed jsonb;
    v_changed jsonb;
BEGIN
    SELECT coalesce(jsonb_agg(n.value -> 'a' ORDER BY (n.value -> 'k')::text)
                        FILTER (WHERE jsonb_typeof(n.value -> 'b') <> 'object'), '[]'),
           coalesce(jsonb_agg(n.value -> 'b' ORDER BY (n.value -> 'k')::text)
                        FILTER (WHERE jsonb_typeof(n.value -> 'a') <> 'object'), '[]'),
           coalesce(jsonb_agg(jsonb_build_object(
                        'key', n.value -> 'k',
                        'columns', agentdb_private.changed_columns(v_cols, n.value -> 'b', n.value -> 'a'),
                        'before', n.value -> 'b',
                        'after', n.value -> 'a') ORDER BY (n.value -> 'k')::text)
                        FILTER (WHERE jsonb_typeof(n.value -> 'a') = 'object'
                                  AND jsonb_typeof(n.value -> 'b') = 'object'), '[]')
      INTO v_added, v_removed, v_changed
      FROM jsonb_array_elements(p_net) AS n;
    IF p_complete AND jsonb_array_length(v_added) + jsonb_array_length(v_removed) + jsonb_array_length(v_changed) = 0 THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object('table', p_b.table_name, 'added', v_added, 'removed', v_removed,
                              'changed', v_changed, 'complete', p_complete, 'source', p_source);
END
$$;

-- One table's differences between two snapshots, or NULL when there are none:
-- from the rows when both snapshots hold them, else from the change log.
CREATE OR REPLACE FUNCTION agentdb_private.diff_table(
    p_a agentdb_private.snapshot_tables, p_b agentdb_private.snapshot_tables
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
SET datestyle = 'ISO, YMD'
SET intervalstyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
AS $$
DECLARE
    v_net jsonb;
BEGIN
    IF p_a.row_count = p_b.row_count AND p_a.checksum = p_b.checksum THEN
        RETURN NULL;
    END IF;
    IF p_a.mode = 'rows' AND p_b.mode = 'rows' THEN
        RETURN agentdb_private.diff_entry(p_b, agentdb_private.diff_rows_net(p_a, p_b), true, 'rows');
    END IF;
    v_net := agentdb_private.diff_log_net(p_a, p_b);
    RETURN agentdb_private.diff_entry(p_b, v_net, agentdb_private.diff_log_complete(p_a, p_b, v_net), 'change_log');
END
$$;

-- What changed between two snapshots: a JSON array with one object per table
-- that differs (tables in both snapshots), by table name:
--   {"table": "public.x", "added": [row, ...], "removed": [row, ...],
--    "changed": [{"key": {...}, "columns": ["col", ...], "before": {...}, "after": {...}}],
--    "complete": true, "source": "change_log" | "rows"}
CREATE OR REPLACE FUNCTION agentdb.diff(before bigint, after bigint)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pair record;
    v_one jsonb;
    v_out jsonb := '[]';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM agentdb_private.snapshots AS s WHERE s.id = diff.before) THEN
        RAISE EXCEPTION 'no snapshot %', coalesce(diff.before::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM agentdb_private.snapshots AS s WHERE s.id = diff.after) THEN
        RAISE EXCEPTION 'no snapshot %', coalesce(diff.after::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_pair IN
        SELECT a, b
          FROM agentdb_private.snapshot_tables AS a
          JOIN agentdb_private.snapshot_tables AS b ON b.table_oid = a.table_oid AND b.snapshot_id = diff.after
         WHERE a.snapshot_id = diff.before
         ORDER BY b.table_name
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.oid = (v_pair.b).table_oid) THEN
            PERFORM agentdb_private.check_reads_every_row((v_pair.b).table_oid::regclass, 'diff');
        ELSIF EXISTS (SELECT 1 FROM agentdb_private.snapshots AS s
                       WHERE s.id IN (diff.before, diff.after) AND s.created_by <> session_user)
                AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user) THEN
            -- Dropped since: its privileges and policies went with it.
            RAISE EXCEPTION 'cannot diff %: the table no longer exists, so only the role that took both snapshots may',
                (v_pair.b).table_name
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        v_one := agentdb_private.diff_table(v_pair.a, v_pair.b);
        IF v_one IS NOT NULL THEN
            v_out := v_out || jsonb_build_array(v_one);
        END IF;
    END LOOP;
    RETURN v_out;
END
$$;

-- Drop a snapshot and any rows it kept.
CREATE OR REPLACE FUNCTION agentdb.forget_snapshot(snapshot bigint)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH rows_gone AS (
        DELETE FROM agentdb_private.snapshot_rows AS r WHERE r.snapshot_id = forget_snapshot.snapshot
    ),
    gone AS (
        DELETE FROM agentdb_private.snapshots AS s WHERE s.id = forget_snapshot.snapshot RETURNING 1
    )
    SELECT count(*) > 0 FROM gone
$$;

CREATE OR REPLACE VIEW agentdb.snapshots AS
SELECT
    s.id AS snapshot_id,
    s.created_at,
    s.created_by,
    t.table_name,
    t.mode,
    t.row_count,
    t.checksum
FROM agentdb_private.snapshots AS s
INNER JOIN agentdb_private.snapshot_tables AS t ON s.id = t.snapshot_id;

GRANT EXECUTE ON FUNCTION
agentdb.snapshot(regclass[]),
agentdb.diff(bigint, bigint),
agentdb.forget_snapshot(bigint)
TO agentdb_app, agentdb_auditor;
GRANT SELECT ON agentdb.snapshots TO agentdb_app, agentdb_auditor;
