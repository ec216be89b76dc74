-- The guarded write. One call = one step: validate, write in a subtransaction,
-- count the affected rows, read the row back and compare, then record the step
-- and the audit row in the same transaction as the write.

-- Argument size limit: anything bigger is refused before it is parsed further.
CREATE OR REPLACE FUNCTION agentdb_private.max_args_bytes()
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT 65536 $$;

-- SQL fragment: a comparison of column c between aliases a and b that is
-- true when they differ. Timestamps compare at second precision: values less
-- than one second apart match, even across a second boundary (09:00:00.8 asked,
-- 09:00:01.1 stored). Truncating both sides would call that a mismatch.
CREATE OR REPLACE FUNCTION agentdb_private.differs_sql(p_col text, p_type oid, p_a text, p_b text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_type IN ('timestamptz'::regtype, 'timestamp'::regtype, 'time'::regtype, 'timetz'::regtype)
            THEN format('CASE WHEN %1$s.%3$I IS NOT DISTINCT FROM %2$s.%3$I THEN false '
                        || 'WHEN %1$s.%3$I IS NULL OR %2$s.%3$I IS NULL THEN true '
                        || 'ELSE abs(extract(epoch FROM %1$s.%3$I) - extract(epoch FROM %2$s.%3$I)) >= 1 END',
                        p_a, p_b, p_col)
        WHEN p_type = 'json'::regtype
            THEN format('%1$s.%3$I::jsonb IS DISTINCT FROM %2$s.%3$I::jsonb', p_a, p_b, p_col)
        -- Any other type by its exact text form, not by the type's =: '30 days' =
        -- '1 mon' for interval, 90.0 = 90.00 for numeric, yet neither is what was asked.
        ELSE format('%1$s.%3$I::text IS DISTINCT FROM %2$s.%3$I::text', p_a, p_b, p_col)
    END
$$;

-- SQL fragment: the names (of p_cols) that differ between t and r, joined
-- by chr(31); empty when all match. Fixed shape so rows can be aggregated.
CREATE OR REPLACE FUNCTION agentdb_private.mismatch_sql(p_cols text[], p_types jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN coalesce(cardinality(p_cols), 0) = 0 THEN '''''' ELSE
        'concat_ws(chr(31), ' || string_agg(
            format('CASE WHEN %s THEN %L END',
                   agentdb_private.differs_sql(c, (p_types ->> c)::oid, 't', 'r'), c),
            ', ') || ')'
    END
      FROM unnest(p_cols) AS c
$$;

-- SQL fragment: t.c = alias.c AND ... for the given columns.
CREATE OR REPLACE FUNCTION agentdb_private.match_sql(p_cols text[], p_alias text, p_null_safe boolean DEFAULT false)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(
        CASE WHEN p_null_safe
            THEN format('t.%1$I IS NOT DISTINCT FROM %2$s.%1$I', c, p_alias)
            ELSE format('t.%1$I = %2$s.%1$I', c, p_alias)
        END, ' AND ')
      FROM unnest(p_cols) AS c
$$;

-- Which argument cannot be converted to its column type? NULL when all can.
CREATE OR REPLACE FUNCTION agentdb_private.bad_field(p_target regclass, p_args jsonb)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_val jsonb;
BEGIN
    FOR v_key, v_val IN SELECT e.key, e.value FROM jsonb_each(p_args) AS e LOOP
        BEGIN
            EXECUTE format('SELECT 1 FROM jsonb_populate_record(NULL::%s, $1)', p_target)
                USING jsonb_build_object(v_key, v_val);
        EXCEPTION WHEN OTHERS THEN
            RETURN v_key;
        END;
    END LOOP;
    RETURN NULL;
END
$$;

-- Which argument holds a JSON object or array where the column takes a single
-- value? Objects suit json/jsonb and composite columns, arrays json/jsonb and
-- array columns (a domain counts as its base type). NULL when none.
CREATE OR REPLACE FUNCTION agentdb_private.nested_field(p_types jsonb, p_args jsonb)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.key
      FROM jsonb_each(p_args) AS e
      JOIN pg_catalog.pg_type AS ty ON ty.oid = (p_types ->> e.key)::oid
      JOIN pg_catalog.pg_type AS bt
        ON bt.oid = CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END
     WHERE jsonb_typeof(e.value) IN ('object', 'array')
       AND bt.oid NOT IN ('json'::regtype, 'jsonb'::regtype)
       AND NOT (jsonb_typeof(e.value) = 'object' AND bt.typtype = 'c')
       AND NOT (jsonb_typeof(e.value) = 'array' AND bt.typcategory = 'A')
     ORDER BY e.key
     LIMIT 1
$$;

-- The first argument (of p_args) that its column would store differently from
-- what was given, its type's modifier rounding or cutting it (89.999 into
-- numeric(10,2) is stored as 90.00): (field, the value given, the value stored).
-- Compared by the base type's own equality, so 90 into numeric(10,2) fits.
CREATE OR REPLACE FUNCTION agentdb_private.lossy_field(
    p_target regclass, p_args jsonb, OUT field text, OUT given text, OUT stored text
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_col record;
    v_same boolean;
BEGIN
    FOR v_col IN
        SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS full_type,
               format_type(coalesce(nullif(b.typbasetype, 0), a.atttypid), NULL) AS base_type
          FROM pg_catalog.pg_attribute AS a
          JOIN pg_catalog.pg_type AS b ON b.oid = a.atttypid
         WHERE a.attrelid = p_target AND a.attnum > 0 AND NOT a.attisdropped
           AND (a.atttypmod >= 0 OR b.typtypmod >= 0) AND b.typcategory <> 'A'
           AND p_args ? a.attname::text AND jsonb_typeof(p_args -> a.attname::text) NOT IN ('null', 'object', 'array')
         ORDER BY a.attnum LOOP
        EXECUTE format('SELECT ($1::%1$s)::%2$s IS NOT DISTINCT FROM $1::%2$s, ($1::%1$s)::text',
                       v_col.full_type, v_col.base_type)
            INTO v_same, stored USING p_args ->> v_col.name;
        IF NOT v_same THEN
            field := v_col.name;
            given := p_args ->> v_col.name;
            RETURN;
        END IF;
    END LOOP;
    stored := NULL;
END
$$;

-- A result object for a write that did not happen.
CREATE OR REPLACE FUNCTION agentdb_private.not_done(
    p_outcome text, p_refusal text, p_error text DEFAULT NULL, p_extra jsonb DEFAULT '{}'
)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'outcome', p_outcome, 'refusal', p_refusal, 'verified', false,
        'affected_rows', 0, 'attempts', 0, 'error', p_error
    ) || coalesce(p_extra, '{}')
$$;

-- Earlier signatures (before p_task, p_seq; before p_dry): dropped so calls stay unambiguous.
DROP FUNCTION IF EXISTS agentdb_private.guarded_write(agentdb_private.tools, text, jsonb, integer, bigint);
DROP FUNCTION IF EXISTS agentdb_private.guarded_write(
    agentdb_private.tools, text, jsonb, integer, bigint, uuid, integer
);

-- Validate the arguments and perform the write with its proof. Never raises
-- for bad input: every problem comes back as a result object.
-- p_task, p_seq: the step this write belongs to; the write statement runs
-- marked with them (agentdb.call, see sql/63_watch.sql). p_dry: check the call
-- (arguments, duplicate, conflict) and stop before the statement (propose).
CREATE OR REPLACE FUNCTION agentdb_private.guarded_write(
    p_tool agentdb_private.tools,
    p_user text,
    p_args jsonb,
    p_expect_rows integer,
    p_expected_version bigint,
    p_task uuid DEFAULT NULL,
    p_seq integer DEFAULT NULL,
    p_dry boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_target text := p_tool.target::text;
    v_types jsonb;
    v_required text [];
    v_cols text [];
    v_key text;
    v_args jsonb;
    v_where jsonb;
    v_set jsonb;
    v_bulk boolean := false;
    v_expect integer;
    v_set_cols text [];
    v_where_cols text [];
    v_compare text [];
    v_keys text [] := p_tool.key_columns;
    v_owner text := p_tool.owner_column;
    v_ver text := p_tool.version_column;
    v_version bigint := p_expected_version;
    v_sql text;
    v_row jsonb;
    v_rows jsonb;
    v_affected integer := 0;
    v_readback jsonb;
    v_mismatch text [];
    v_left integer;
    v_attempts integer := 0;
    v_fail_outcome text;
    v_fail_refusal text;
    v_fail_error text;
    v_fail_extra jsonb := '{}';
    v_state text;
    v_msg text;
    v_conflict jsonb;
    v_check text;
    v_obj jsonb;
    v_lossy record;
    v_lock text;
BEGIN
    -- Shape of the arguments.
    IF p_args IS NULL OR jsonb_typeof(p_args) <> 'object' THEN
        RETURN agentdb_private.not_done('invalid', 'not_an_object',
            format('arguments must be a JSON object, got %s', coalesce(jsonb_typeof(p_args), 'NULL')));
    END IF;
    IF octet_length(p_args::text) > agentdb_private.max_args_bytes() THEN
        RETURN agentdb_private.not_done('invalid', 'too_large',
            format('arguments are %s bytes, the limit is %s', octet_length(p_args::text),
                   agentdb_private.max_args_bytes()));
    END IF;

    SELECT jsonb_object_agg(c.column_name, c.type_oid),
           array_agg(c.column_name),
           array_agg(c.column_name) FILTER (WHERE c.not_null AND NOT c.has_default)
      INTO v_types, v_cols, v_required
      FROM agentdb_private.table_columns(p_tool.target) AS c;

    -- Bulk form: {"where": {...}, "set": {...}} unless the table has such columns.
    IF p_tool.action IN ('update', 'delete') AND p_args ? 'where' AND NOT 'where' = ANY (v_cols) THEN
        v_bulk := true;
        v_where := p_args -> 'where';
        v_set := coalesce(p_args -> 'set', '{}');
        IF jsonb_typeof(v_where) <> 'object' OR jsonb_typeof(v_set) <> 'object' THEN
            RETURN agentdb_private.not_done('invalid', 'not_an_object', 'where and set must be JSON objects',
                jsonb_build_object('field', 'where'));
        END IF;
        FOR v_key IN SELECT k FROM jsonb_object_keys(p_args) AS k LOOP
            IF v_key NOT IN ('where', 'set') OR (v_key = 'set' AND p_tool.action = 'delete') THEN
                RETURN agentdb_private.not_done('invalid', 'unknown_field',
                    format('unknown argument %s in a bulk call', v_key), jsonb_build_object('field', v_key));
            END IF;
        END LOOP;
        v_args := v_set || v_where;
    ELSE
        v_args := p_args;
    END IF;

    -- Every argument must name a column.
    FOR v_key IN SELECT k FROM jsonb_object_keys(coalesce(v_where, '{}') || coalesce(v_set, '{}') || CASE WHEN v_bulk THEN '{}' ELSE p_args END) AS k LOOP
        IF NOT v_key = ANY (v_cols) THEN
            RETURN agentdb_private.not_done('invalid', 'unknown_field',
                format('unknown argument %s', left(v_key, 100)), jsonb_build_object('field', left(v_key, 100)));
        END IF;
    END LOOP;

    -- Version for optimistic concurrency: the parameter, else the argument.
    IF v_ver IS NOT NULL THEN
        IF v_version IS NULL AND (coalesce(v_where, p_args) ->> v_ver) IS NOT NULL THEN
            BEGIN
                v_version := (coalesce(v_where, p_args) ->> v_ver)::bigint;
            EXCEPTION WHEN OTHERS THEN
                RETURN agentdb_private.not_done('invalid', 'bad_value',
                    format('%s must be a whole number', v_ver), jsonb_build_object('field', v_ver));
            END;
        END IF;
        IF v_version IS NULL THEN
            RETURN agentdb_private.not_done('invalid', 'version_required',
                format('%s (the version read before) is required to update', v_ver),
                jsonb_build_object('field', v_ver));
        END IF;
        v_args := v_args - v_ver;
        v_where := v_where - v_ver;
        v_set := v_set - v_ver;
    END IF;

    -- The owner always comes from the task, never from the arguments.
    IF v_owner IS NOT NULL THEN
        v_args := v_args || jsonb_build_object(v_owner, p_user);
        v_set := v_set - v_owner;
        v_where := v_where - v_owner;
    END IF;

    -- Lenient conversion to the column types; name the field that fails. A bulk
    -- call's set and where are checked apart (a key may be in both).
    FOREACH v_obj IN ARRAY CASE WHEN v_bulk THEN ARRAY[v_set, v_where] ELSE ARRAY[v_args] END LOOP
        -- An object or array is no value for a scalar column, though it converts to text.
        v_key := agentdb_private.nested_field(v_types, v_obj);
        IF v_key IS NOT NULL THEN
            RETURN agentdb_private.not_done('invalid', 'bad_value',
                format('%s must be a single %s value, not a JSON %s', v_key,
                       format_type((v_types ->> v_key)::oid, NULL), jsonb_typeof(v_obj -> v_key)),
                jsonb_build_object('field', v_key));
        END IF;
        BEGIN
            EXECUTE format('SELECT 1 FROM jsonb_populate_record(NULL::%s, $1)', v_target) USING v_obj;
        EXCEPTION WHEN OTHERS THEN
            v_key := agentdb_private.bad_field(p_tool.target, v_obj);
            RETURN agentdb_private.not_done('invalid', 'bad_value',
                format('%s cannot be read as %s: %s', coalesce(v_key, '?'),
                       coalesce(format_type((v_types ->> v_key)::oid, NULL), '?'), SQLERRM),
                jsonb_build_object('field', v_key));
        END;
        SELECT * INTO v_lossy FROM agentdb_private.lossy_field(p_tool.target, v_obj);
        IF v_lossy.field IS NOT NULL THEN
            RETURN agentdb_private.not_done('invalid', 'lossy_value',
                format('%s: %s would be stored as %s', v_lossy.field, v_lossy.given, v_lossy.stored),
                jsonb_build_object('field', v_lossy.field));
        END IF;
    END LOOP;

    -- What must be present, what is compared on read-back, how many rows.
    IF p_tool.action = 'insert' THEN
        FOR v_key IN SELECT unnest(v_required) LOOP
            IF (v_args -> v_key) IS NULL OR jsonb_typeof(v_args -> v_key) = 'null' THEN
                RETURN agentdb_private.not_done('invalid', 'missing_field',
                    format('%s is required', v_key), jsonb_build_object('field', v_key));
            END IF;
        END LOOP;
        IF p_expect_rows IS NOT NULL AND p_expect_rows <> 1 THEN
            RETURN agentdb_private.not_done('invalid', 'bad_expect_rows',
                'an insert writes exactly one row; expect_rows must be 1 or omitted');
        END IF;
        v_set_cols := ARRAY(SELECT jsonb_object_keys(v_args));
        v_compare := coalesce(p_tool.compare_columns, v_set_cols);
        v_expect := 1;
    ELSIF NOT v_bulk THEN
        FOR v_key IN SELECT unnest(v_keys) LOOP
            IF (v_args -> v_key) IS NULL OR jsonb_typeof(v_args -> v_key) = 'null' THEN
                RETURN agentdb_private.not_done('invalid', 'missing_field',
                    format('%s is required to find the row', v_key), jsonb_build_object('field', v_key));
            END IF;
        END LOOP;
        v_set_cols := ARRAY(SELECT k FROM jsonb_object_keys(v_args) AS k
                             WHERE NOT k = ANY (v_keys) AND k IS DISTINCT FROM v_owner);
        IF p_tool.action = 'update' AND cardinality(v_set_cols) = 0 THEN
            RETURN agentdb_private.not_done('invalid', 'nothing_to_change', 'no new value was given');
        END IF;
        IF p_tool.action = 'delete' AND cardinality(v_set_cols) > 0 THEN
            RETURN agentdb_private.not_done('invalid', 'unknown_field',
                format('a delete takes only the key, not %s', v_set_cols[1]),
                jsonb_build_object('field', v_set_cols[1]));
        END IF;
        v_compare := coalesce(p_tool.compare_columns, v_set_cols);
        IF p_expect_rows IS NOT NULL AND p_expect_rows <> 1 THEN
            RETURN agentdb_private.not_done('invalid', 'bad_expect_rows',
                'a call by key changes exactly one row; use where/set for several');
        END IF;
        v_expect := 1;
    ELSE
        v_where_cols := ARRAY(SELECT jsonb_object_keys(v_where));
        IF cardinality(v_where_cols) = 0 THEN
            RETURN agentdb_private.not_done('refused', 'unbounded',
                'a bulk change needs at least one condition in where');
        END IF;
        v_set_cols := ARRAY(SELECT jsonb_object_keys(v_set));
        IF p_tool.action = 'update' AND cardinality(v_set_cols) = 0 THEN
            RETURN agentdb_private.not_done('invalid', 'nothing_to_change', 'no new value was given in set');
        END IF;
        IF p_expect_rows IS NULL OR p_expect_rows < 1 THEN
            RETURN agentdb_private.not_done('invalid', 'expect_rows_required',
                'a bulk change must say how many rows it expects (expect_rows)');
        END IF;
        IF p_tool.max_rows IS NOT NULL AND p_expect_rows > p_tool.max_rows THEN
            RETURN agentdb_private.not_done('refused', 'too_many_rows',
                format('%s rows expected, this tool allows at most %s', p_expect_rows, p_tool.max_rows));
        END IF;
        v_compare := coalesce(p_tool.compare_columns, v_set_cols);
        v_expect := p_expect_rows;
    END IF;
    -- Declared compare columns narrow what is compared; one the call did not
    -- give has nothing to be compared with (it read as NULL: a false mismatch).
    v_compare := ARRAY(SELECT c FROM unnest(v_compare) AS c
                        WHERE c IS DISTINCT FROM v_ver AND c = ANY (v_set_cols));

    -- Identity (ALWAYS) and generated columns are the database's to fill: the
    -- tool's argument schema does not offer them, so they are unknown here too.
    SELECT a.attname::text INTO v_key
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid = p_tool.target AND a.attnum > 0 AND NOT a.attisdropped
       AND (a.attidentity = 'a' OR a.attgenerated <> '')
       AND a.attname::text = ANY (v_set_cols)
     LIMIT 1;
    IF v_key IS NOT NULL THEN
        RETURN agentdb_private.not_done('invalid', 'unknown_field',
            format('%s is filled by the database and cannot be given', v_key),
            jsonb_build_object('field', v_key));
    END IF;

    -- Duplicate: the same dedup values already exist for this owner.
    IF p_tool.dedup_columns IS NOT NULL THEN
        -- Serialise racing duplicates of the same values: keyed on the values as
        -- converted to the columns (the same instant written in two time zones is
        -- one key), without the timestamp columns, whose duplicates are a range.
        EXECUTE format('SELECT concat_ws(chr(31), %s) FROM jsonb_populate_record(NULL::%s, $1) AS agentdb_asked',
            coalesce((SELECT string_agg(format('agentdb_asked.%I::text', d), ', ')
                        FROM unnest(p_tool.dedup_columns) AS d
                       WHERE (v_types ->> d)::oid NOT IN ('timestamptz'::regtype, 'timestamp'::regtype)), ''''''),
            v_target)
            INTO v_lock USING v_args;
        PERFORM pg_advisory_xact_lock(hashtextextended(
            p_tool.name || '|' || coalesce(p_user, '') || '|' || coalesce(v_lock, ''), 0));
        v_sql := format(
            'SELECT to_jsonb(t.*) FROM %s AS t, jsonb_populate_record(NULL::%s, $1) AS r WHERE %s %s LIMIT 1',
            v_target, v_target,
            -- Written so an index on (owner, dedup columns) can serve it: '=' for a value,
            -- IS NULL for a NULL, and "within one second" as a range for timestamps.
            (SELECT string_agg(CASE
                        WHEN v_args -> d IS NULL OR jsonb_typeof(v_args -> d) = 'null'
                            THEN format('t.%I IS NULL', d)
                        WHEN (v_types ->> d)::oid IN ('timestamptz'::regtype, 'timestamp'::regtype)
                            THEN format('t.%1$I > r.%1$I - interval ''1 second'' AND t.%1$I < r.%1$I + interval ''1 second''', d)
                        WHEN (v_types ->> d)::oid = 'json'::regtype
                            THEN format('t.%1$I::jsonb = r.%1$I::jsonb', d)
                        ELSE format('t.%1$I = r.%1$I', d)
                    END, ' AND ')
               FROM unnest(p_tool.dedup_columns) AS d),
            CASE WHEN v_owner IS NULL THEN '' ELSE format('AND t.%1$I = r.%1$I', v_owner) END);
        EXECUTE v_sql INTO v_row USING v_args;
        IF v_row IS NOT NULL THEN
            RETURN agentdb_private.not_done('duplicate', 'duplicate', 'an identical row already exists',
                jsonb_build_object('existing',
                    (SELECT jsonb_object_agg(k, v_row -> k) FROM unnest(v_keys) AS k), 'row', v_row));
        END IF;
    END IF;

    -- Conflict: the tool's own check says no (e.g. a clash in the calendar).
    IF p_tool.conflict_check IS NOT NULL THEN
        SELECT format('%I.%I', n.nspname, p.proname), p.prorettype::regtype::text INTO v_check, v_msg
          FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
         WHERE p.oid = p_tool.conflict_check;
        IF v_check IS NULL THEN
            -- Dropped since registration: format() would then call a bare row
            -- constructor, whose non-NULL result read as a conflict.
            RETURN agentdb_private.not_done('failed', 'check_failed',
                format('conflict check (oid %s) no longer exists', p_tool.conflict_check::oid));
        END IF;
        BEGIN
            EXECUTE format('SELECT to_jsonb(%s($1::text, $2::jsonb))', v_check) INTO v_conflict USING p_user, v_args;
        EXCEPTION WHEN OTHERS THEN
            RETURN agentdb_private.not_done('failed', 'check_failed',
                format('conflict check %s failed: %s', v_check, SQLERRM));
        END;
        IF v_conflict IS NOT NULL AND jsonb_typeof(v_conflict) <> 'null' THEN
            IF jsonb_typeof(v_conflict) = 'string' THEN
                v_conflict := jsonb_build_object('reason', v_conflict #>> '{}');
            END IF;
            RETURN agentdb_private.not_done('conflict', 'conflict',
                coalesce(v_conflict ->> 'reason', 'conflict'), jsonb_build_object('conflict', v_conflict));
        END IF;
    END IF;

    IF p_dry THEN
        -- A dry run stops here: the statement (and every trigger of the target) never runs.
        RETURN jsonb_build_object('outcome', 'success', 'refusal', NULL, 'verified', false,
                                  'affected_rows', 0, 'attempts', 0, 'error', NULL, 'dry_run', true);
    END IF;

    -- The statement. Values always travel as parameters, names through %I.
    IF p_tool.action = 'insert' THEN
        v_sql := format('INSERT INTO %s AS t (%s) SELECT %s FROM jsonb_populate_record(NULL::%s, $1) AS r RETURNING to_jsonb(t.*) AS agentdb_row',
            v_target,
            (SELECT string_agg(format('%I', c), ', ') FROM unnest(v_set_cols) AS c),
            (SELECT string_agg(format('r.%I', c), ', ') FROM unnest(v_set_cols) AS c),
            v_target);
    ELSIF p_tool.action = 'update' THEN
        v_sql := format('UPDATE %s AS t SET %s%s FROM jsonb_populate_record(NULL::%s, $1) AS r, jsonb_populate_record(NULL::%s, $2) AS w WHERE %s%s%s RETURNING to_jsonb(t.*) AS agentdb_row',
            v_target,
            (SELECT string_agg(format('%1$I = r.%1$I', c), ', ') FROM unnest(v_set_cols) AS c),
            CASE WHEN v_ver IS NULL THEN '' ELSE format(', %1$I = t.%1$I + 1', v_ver) END,
            v_target, v_target,
            CASE WHEN v_bulk THEN agentdb_private.match_sql(v_where_cols, 'w', true)
                 ELSE agentdb_private.match_sql(v_keys, 'w') END,
            CASE WHEN v_owner IS NULL THEN '' ELSE format(' AND t.%1$I = w.%1$I', v_owner) END,
            CASE WHEN v_ver IS NULL THEN '' ELSE format(' AND t.%I = $3', v_ver) END);
    ELSE
        v_sql := format('DELETE FROM %s AS t USING jsonb_populate_record(NULL::%s, $2) AS w WHERE %s%s RETURNING to_jsonb(t.*) AS agentdb_row',
            v_target, v_target,
            CASE WHEN v_bulk THEN agentdb_private.match_sql(v_where_cols, 'w', true)
                 ELSE agentdb_private.match_sql(v_keys, 'w') END,
            CASE WHEN v_owner IS NULL THEN '' ELSE format(' AND t.%1$I = w.%1$I', v_owner) END);
    END IF;
    -- Collect every returned row so bulk writes are counted and read back too.
    v_sql := format('WITH done AS (%s) SELECT count(*)::int, jsonb_agg(done.agentdb_row) FROM done', v_sql);

    -- For updates/deletes $2 holds the row-finding values (key or where) plus owner.
    v_where := CASE
        WHEN p_tool.action = 'insert' THEN '{}'
        WHEN v_bulk THEN v_where || CASE WHEN v_owner IS NULL THEN '{}' ELSE jsonb_build_object(v_owner, p_user) END
        ELSE v_args
    END;
    v_set := CASE WHEN v_bulk THEN v_set ELSE v_args END;

    -- At most two attempts, each in its own subtransaction.
    LOOP
        v_attempts := v_attempts + 1;
        v_fail_outcome := NULL;
        BEGIN
            -- Only the write statement runs marked as the step's: a watched table's
            -- guard lets it through and its change log names (task, seq). On an
            -- error the subtransaction's rollback restores the setting too.
            PERFORM set_config('agentdb.call', coalesce(p_task::text || ':' || p_seq::text, 'dry-run'), true);
            EXECUTE v_sql INTO v_affected, v_rows USING v_set, v_where, v_version;
            PERFORM set_config('agentdb.call', '', true);
            v_affected := coalesce(v_affected, 0);

            IF v_affected <> v_expect THEN
                IF v_affected = 0 AND v_ver IS NOT NULL THEN
                    -- Zero rows with a version: is the row there under a newer version?
                    EXECUTE format('SELECT to_jsonb(t.*) FROM %s AS t, jsonb_populate_record(NULL::%s, $1) AS w WHERE %s%s',
                        v_target, v_target,
                        CASE WHEN v_bulk THEN agentdb_private.match_sql(v_where_cols, 'w', true)
                             ELSE agentdb_private.match_sql(v_keys, 'w') END,
                        CASE WHEN v_owner IS NULL THEN '' ELSE format(' AND t.%1$I = w.%1$I', v_owner) END)
                        INTO v_readback USING v_where;
                    IF v_readback IS NOT NULL THEN
                        v_fail_outcome := 'conflict';
                        v_fail_refusal := 'stale_version';
                        v_fail_error := format('the row is at version %s, the call expected %s',
                                               v_readback ->> v_ver, v_version);
                        v_fail_extra := jsonb_build_object('conflict', jsonb_build_object(
                            'reason', 'changed by someone else since it was read',
                            'current_version', v_readback -> v_ver));
                        RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail_error;
                    END IF;
                END IF;
                v_fail_outcome := 'unverified';
                v_fail_refusal := CASE WHEN v_affected = 0 AND v_expect = 1 AND p_tool.action <> 'insert'
                                       THEN 'not_found' ELSE 'row_count' END;
                v_fail_error := format('expected %s row(s) to change, %s did', v_expect, v_affected);
                v_fail_extra := jsonb_build_object('expected_rows', v_expect, 'matched_rows', v_affected);
                RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail_error;
            END IF;

            -- Deferred constraints and constraint triggers run now, inside this
            -- subtransaction: a deferred failure is this step's, and a deferred
            -- rewrite is seen by the read-back. Inside a caller's transaction
            -- (now() is its start, not this statement's) the nested block is then
            -- undone, so the caller's own constraints stay deferred (their events
            -- fire again at its COMMIT).
            BEGIN
            SET CONSTRAINTS ALL IMMEDIATE;
            -- Read back by key, in the same transaction, and compare.
            IF p_tool.action = 'delete' THEN
                EXECUTE format('SELECT count(*)::int FROM jsonb_populate_recordset(NULL::%s, $1) AS r '
                    || 'CROSS JOIN LATERAL (SELECT 1 FROM %s AS t WHERE %s OFFSET 0) AS t',
                    v_target, v_target, agentdb_private.match_sql(v_keys, 'r'))
                    INTO v_left USING v_rows;
                IF v_left > 0 THEN
                    v_fail_outcome := 'unverified';
                    v_fail_refusal := 'still_there';
                    v_fail_error := format('%s deleted row(s) still read back', v_left);
                    RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail_error;
                END IF;
                v_readback := CASE WHEN v_bulk THEN NULL ELSE v_rows -> 0 END;
            ELSE
                -- k: the keys that the write returned; r: the values asked for.
                EXECUTE format(
                    'SELECT count(*)::int, jsonb_agg(to_jsonb(t.*)), string_agg(%s, chr(31)) '
                    || 'FROM jsonb_populate_recordset(NULL::%s, $1) AS k '
                    -- LATERAL ... OFFSET 0: one key probe per written row, whatever the
                    -- planner guesses for the recordset (it guesses 100 rows and may scan).
                    || 'CROSS JOIN LATERAL (SELECT * FROM %s AS t WHERE %s OFFSET 0) AS t '
                    || 'CROSS JOIN jsonb_populate_record(NULL::%s, $2) AS r',
                    agentdb_private.mismatch_sql(v_compare, v_types),
                    v_target, v_target, agentdb_private.match_sql(v_keys, 'k'), v_target)
                    INTO v_left, v_readback, v_msg USING v_rows, v_set;
                v_mismatch := ARRAY(SELECT DISTINCT m FROM unnest(string_to_array(v_msg, chr(31))) AS m
                                     WHERE m <> '' ORDER BY m);
                IF v_left <> v_affected THEN
                    v_fail_outcome := 'unverified';
                    v_fail_refusal := 'not_found_after_write';
                    v_fail_error := format('%s row(s) written, %s read back', v_affected, v_left);
                    RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail_error;
                END IF;
                IF cardinality(v_mismatch) > 0 THEN
                    v_fail_outcome := 'unverified';
                    v_fail_refusal := 'readback_mismatch';
                    v_fail_error := format('read back differs in %s', array_to_string(v_mismatch, ', '));
                    v_fail_extra := jsonb_build_object('mismatched', to_jsonb(v_mismatch),
                                                       'row', v_readback -> 0);
                    RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail_error;
                END IF;
                v_readback := CASE WHEN v_bulk THEN NULL ELSE v_readback -> 0 END;
            END IF;
            IF now() <> statement_timestamp() THEN
                RAISE EXCEPTION USING ERRCODE = 'AD003', MESSAGE = 'checked';
            END IF;
            EXCEPTION WHEN SQLSTATE 'AD003' THEN
                NULL;
            END;

            RETURN jsonb_build_object(
                'outcome', 'success', 'refusal', NULL, 'verified', true,
                'affected_rows', v_affected, 'attempts', v_attempts, 'error', NULL,
                'key', CASE WHEN v_bulk THEN NULL
                            ELSE (SELECT jsonb_object_agg(k, (v_rows -> 0) -> k) FROM unnest(v_keys) AS k) END,
                'row', v_readback);
        EXCEPTION
            WHEN SQLSTATE 'AD001' THEN
                -- Our own proof failed: the subtransaction is rolled back, no retry.
                RETURN agentdb_private.not_done(v_fail_outcome, v_fail_refusal, v_fail_error,
                    v_fail_extra || jsonb_build_object('attempts', v_attempts, 'affected_rows', v_affected));
            WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                -- Data and integrity errors repeat identically; anything else gets one more try.
                IF v_attempts >= 2 OR left(v_state, 2) IN ('22', '23', '42', '0A', '2B', '2F', '39', '44') THEN
                    RETURN agentdb_private.not_done(
                        CASE WHEN left(v_state, 2) IN ('22', '23') AND v_state NOT IN ('23505', '23P01')
                             THEN 'invalid' ELSE 'failed' END,
                        CASE v_state
                            WHEN '23505' THEN 'unique_violation'
                            WHEN '23P01' THEN 'exclusion_violation'
                            WHEN '23514' THEN 'check_violation'
                            WHEN '23502' THEN 'missing_field'
                            WHEN '23503' THEN 'foreign_key_violation'
                            ELSE CASE WHEN left(v_state, 2) = '22' THEN 'bad_value' ELSE 'error' END
                        END,
                        format('%s (SQLSTATE %s)', v_msg, v_state),
                        jsonb_build_object('attempts', v_attempts, 'sqlstate', v_state));
                END IF;
        END;
    END LOOP;
END
$$;
