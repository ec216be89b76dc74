-- The tool compiler. register_tool compiles each tool into one PL/pgSQL
-- function, agentdb_tools.<tool name>, with static SQL: a typed variable per
-- column, the insert/update/delete written out, the read-back and the
-- comparison spelled out column by column. agentdb_tools._run (generated
-- too) dispatches a call to it. Nothing is looked up in the catalogue per call.
--
-- A compiled tool depends on its table as it was: the signature
-- (agentdb_private.tool_signature) is what the code was compiled from. An
-- event trigger (below, when the installer is a superuser) recompiles a tool
-- after DDL changes its signature, or marks it stale with the reason; without
-- the event trigger, invoke compares the signature itself. A stale tool is
-- refused (refusal stale_tool): nothing is written through stale code.
--
-- The generated function has phases (see compile_tool): plan (shape, unknown
-- fields), convert (typed values), bounds, checks (duplicate, conflict), the
-- statement, the proof (row count, deferred constraints, read-back). A dry run
-- (propose) stops after the checks.
--
-- Generated code names every column through the alias agentdb_target, and
-- declares #variable_conflict use_variable, so no column name can collide with
-- a variable or an alias (a column called t, r, w or k is an ordinary column).

-- The base type of a (domain) type, without modifiers, and whether any level
-- (the column or a domain under it) carries a type modifier.
CREATE OR REPLACE FUNCTION agentdb_private.base_type(p_type oid, p_mod integer, OUT base oid, OUT has_mod boolean)
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE d (oid, has_mod, depth) AS (
        SELECT p_type, p_mod >= 0, 0
        UNION ALL
        SELECT t.typbasetype, d.has_mod OR t.typtypmod >= 0, d.depth + 1
          FROM d JOIN pg_catalog.pg_type AS t ON t.oid = d.oid
         WHERE t.typtype = 'd' AND d.depth < 20
    )
    SELECT d.oid, d.has_mod FROM d ORDER BY d.depth DESC LIMIT 1
$$;

-- What the compiler needs of each column of a tool's target, in column order,
-- as a JSON array of objects. kind: scalar (read with its type's input), json,
-- jsonb, or complex (arrays and composites, read as jsonb_populate_record
-- reads them). temporal: compared at second precision. lossy: a type modifier
-- may round or cut a given value. default: the expression an INSERT would use
-- when the column is not given (an identity by default: its sequence).
CREATE OR REPLACE FUNCTION agentdb_private.compile_columns(p_tool agentdb_private.tools)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'num', a.attnum, 'name', a.attname, 'var', 'v_' || a.attnum, 'wvar', 'w_' || a.attnum,
               'raw', 'r_' || a.attnum, 'kvar', 'k_' || a.attnum, 'ksvar', 'ks_' || a.attnum,
               -- The base type by its internal name: format_type's "character" or "bit"
               -- would mean char(1) and bit(1) in a declaration or a cast.
               'full_type', format_type(a.atttypid, a.atttypmod),
               'base_type', format('%I.%I', (SELECT n.nspname FROM pg_catalog.pg_namespace AS n WHERE n.oid = bt.typnamespace),
                                   bt.typname),
               'label', format_type(a.atttypid, NULL),
               'kind', CASE WHEN b.base = 'json'::regtype THEN 'json' WHEN b.base = 'jsonb'::regtype THEN 'jsonb'
                            WHEN bt.typcategory = 'A' OR bt.typtype = 'c' THEN 'complex' ELSE 'scalar' END,
               'temporal', b.base IN ('timestamptz'::regtype, 'timestamp'::regtype, 'time'::regtype, 'timetz'::regtype),
               'lossy', b.has_mod AND bt.typcategory <> 'A' AND bt.typtype <> 'c' AND b.base NOT IN
                        ('timestamptz'::regtype, 'timestamp'::regtype, 'time'::regtype, 'timetz'::regtype),
               'not_null', a.attnotnull,
               'default', CASE
                   WHEN a.attidentity = 'd'
                       THEN format('nextval(%L::regclass)', pg_get_serial_sequence(p_tool.target::text, a.attname))
                   WHEN a.atthasdef AND a.attgenerated = ''
                       THEN (SELECT pg_get_expr(ad.adbin, ad.adrelid) FROM pg_catalog.pg_attrdef AS ad
                              WHERE ad.adrelid = a.attrelid AND ad.adnum = a.attnum)
                   WHEN ty.typtype = 'd' THEN pg_get_expr(ty.typdefaultbin, 0) END,
               'insertable', a.attidentity <> 'a' AND a.attgenerated = '',
               'key', a.attname::text = ANY (p_tool.key_columns),
               'owner', a.attname::text IS NOT DISTINCT FROM p_tool.owner_column,
               'version', a.attname::text IS NOT DISTINCT FROM p_tool.version_column,
               'compared', p_tool.compare_columns IS NULL OR a.attname::text = ANY (p_tool.compare_columns),
               'dedup', a.attname::text = ANY (coalesce(p_tool.dedup_columns, '{}')),
               -- Compared with =: types without a btree equality (point, xml) by their text.
               'eq', EXISTS (SELECT 1 FROM pg_catalog.pg_opclass AS o JOIN pg_catalog.pg_am AS m ON m.oid = o.opcmethod
                              WHERE o.opcintype = b.base AND o.opcdefault AND m.amname = 'btree')
                     AND b.base <> 'json'::regtype)
           ORDER BY a.attnum), '[]')
      FROM pg_catalog.pg_attribute AS a
      JOIN pg_catalog.pg_type AS ty ON ty.oid = a.atttypid
     CROSS JOIN LATERAL agentdb_private.base_type(a.atttypid, a.atttypmod) AS b
      JOIN pg_catalog.pg_type AS bt ON bt.oid = b.base
     WHERE a.attrelid = p_tool.target AND a.attnum > 0 AND NOT a.attisdropped
$$;

-- Does the table (or a partition) have a trigger fired by UPDATE OF given
-- columns? Then an update sets only the columns given (dynamic SET list), so
-- such a trigger fires exactly when it would for the call.
CREATE OR REPLACE FUNCTION agentdb_private.has_column_triggers(p_table regclass)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_trigger AS g
         WHERE g.tgrelid IN (SELECT p_table UNION SELECT t.relid FROM pg_catalog.pg_partition_tree(p_table) AS t)
           AND NOT g.tgisinternal AND cardinality(g.tgattr::int2 []) > 0)
$$;

-- What a compiled tool was compiled from: its own definition, the target's
-- name and columns (types, modifiers, defaults, identity), whether it has
-- column triggers, how it is watched, and the conflict check's name and settings. Any change
-- makes the compiled code stale. The search_path is pinned, here and in
-- compile_tool: a table's name (regclass as text) is then always schema-
-- qualified, whoever calls (the install's own session included, whose
-- search_path would drop "public.").
CREATE OR REPLACE FUNCTION agentdb_private.tool_signature(p_tool agentdb_private.tools)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN md5(concat_ws(chr(30),
        (to_jsonb(p_tool) - ARRAY['created_at', 'updated_at', 'compiled_sig', 'compiled_at', 'stale_reason'])::text,
        (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class AS c
           JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = p_tool.target),
        (SELECT string_agg(concat_ws(chr(31), a.attnum, a.attname, a.atttypid, a.atttypmod, a.attnotnull,
                                     a.attidentity, a.attgenerated, pg_get_expr(ad.adbin, ad.adrelid)),
                           chr(29) ORDER BY a.attnum)
           FROM pg_catalog.pg_attribute AS a
           LEFT JOIN pg_catalog.pg_attrdef AS ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
          WHERE a.attrelid = p_tool.target AND a.attnum > 0 AND NOT a.attisdropped),
        agentdb_private.has_column_triggers(p_tool.target)::text,
        (SELECT concat_ws(chr(31), w.key_columns::text, w.owner_column,
                          agentdb_private.watch_armed(w.table_oid, w.key_columns)::text)
           FROM agentdb_private.watched AS w WHERE w.table_oid = p_tool.target),
        (SELECT concat_ws(chr(31), n.nspname, p.proname, p.proconfig::text, p.prorettype)
           FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
          WHERE p.oid = p_tool.conflict_check)));
END
$$;

-- Before any value of a JSON object is read: a scalar column given an object
-- or an array is refused (it would convert to text). Checked by field name, so
-- the field named is the same whatever the column order.
CREATE OR REPLACE FUNCTION agentdb_private.compile_nested(p_cols jsonb, p_src text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(string_agg(format($g$            IF jsonb_typeof(%1$s -> %2$L) IN ('object', 'array') THEN
                RETURN agentdb_private.not_done('invalid', 'bad_value',
                    format('%%s must be a single %%s value, not a JSON %%s', %2$L, %3$L, jsonb_typeof(%1$s -> %2$L)),
                    jsonb_build_object('field', %2$L));
            END IF;
$g$, p_src, c ->> 'name', c ->> 'label'), '' ORDER BY c ->> 'name'), '')
      FROM jsonb_array_elements(p_cols) AS c
     WHERE c ->> 'kind' = 'scalar' AND NOT (c ->> 'owner')::boolean
$$;

-- One column's value read from a JSON object into a variable of the column's
-- type (phase convert): p_src is the object's expression, p_var the variable.
-- A lossy column is read raw first and compared with what it stores.
CREATE OR REPLACE FUNCTION agentdb_private.compile_read(p_target regclass, p_col jsonb, p_src text, p_var text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('IF %1$s ? %2$L THEN' || chr(10)
        || '    v_field := %2$L; v_type := %3$L;' || chr(10)
        || CASE
               WHEN p_col ->> 'kind' = 'scalar' AND (p_col ->> 'lossy')::boolean THEN
                   '    %5$s := (%1$s ->> %2$L)::%4$s;' || chr(10)
                || '    %6$s := %5$s;' || chr(10)
                || '    IF %6$s::%4$s IS DISTINCT FROM %5$s THEN' || chr(10)
                || '        RETURN agentdb_private.not_done(''invalid'', ''lossy_value'', format(''%%s: %%s would be stored as %%s'', %2$L, %1$s ->> %2$L, %6$s), jsonb_build_object(''field'', %2$L));' || chr(10)
                || '    END IF;' || chr(10)
               WHEN p_col ->> 'kind' = 'scalar' THEN '    %6$s := (%1$s ->> %2$L)::%4$s;' || chr(10)
               WHEN p_col ->> 'kind' IN ('json', 'jsonb') THEN
                   '    %6$s := CASE WHEN jsonb_typeof(%1$s -> %2$L) = ''null'' THEN NULL ELSE (%1$s -> %2$L)::%4$s END;'
                || chr(10)
               ELSE '    %6$s := (jsonb_populate_record(NULL::%7$s, jsonb_build_object(%2$L, %1$s -> %2$L))).%8$I;'
                || chr(10)
           END
        || 'END IF;' || chr(10),
        p_src, p_col ->> 'name', p_col ->> 'label', p_col ->> 'base_type', p_col ->> 'raw', p_var,
        p_target::text, p_col ->> 'name')
$$;

-- SQL fragment: column c of agentdb_target differs from the expression p_val,
-- by the read-back's rule: timestamps at second precision (09:00:00.8 asked,
-- 09:00:01.1 stored match), json as jsonb, anything else by its exact text
-- form, not the type's = ('30 days' = '1 mon' for interval, yet not what was asked).
CREATE OR REPLACE FUNCTION agentdb_private.compile_differs(p_col jsonb, p_val text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN (p_col ->> 'temporal')::boolean THEN format(
            'CASE WHEN agentdb_target.%1$I IS NOT DISTINCT FROM %2$s THEN false '
            'WHEN agentdb_target.%1$I IS NULL OR %2$s IS NULL THEN true '
            'ELSE abs(extract(epoch FROM agentdb_target.%1$I) - extract(epoch FROM %2$s)) >= 1 END',
            p_col ->> 'name', p_val)
        WHEN p_col ->> 'kind' = 'json' THEN
            format('agentdb_target.%1$I::jsonb IS DISTINCT FROM %2$s::jsonb', p_col ->> 'name', p_val)
        ELSE format('agentdb_target.%1$I::text IS DISTINCT FROM %2$s::text', p_col ->> 'name', p_val)
    END
$$;

-- SQL fragment: column c of agentdb_target equals p_val for the duplicate
-- check (the type's =, timestamps within one second; written so an index on
-- (owner, dedup columns) serves it; a nullable column also matches NULL).
CREATE OR REPLACE FUNCTION agentdb_private.compile_same(p_col jsonb, p_val text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN (p_col ->> 'not_null')::boolean THEN e
                ELSE format('((%2$s IS NULL AND agentdb_target.%1$I IS NULL) OR %3$s)', p_col ->> 'name', p_val, e) END
      FROM (SELECT CASE
          WHEN (p_col ->> 'temporal')::boolean THEN format(
              '(agentdb_target.%1$I > %2$s - interval ''1 second'' AND agentdb_target.%1$I < %2$s + interval ''1 second'')',
              p_col ->> 'name', p_val)
          WHEN p_col ->> 'kind' = 'json' THEN format('agentdb_target.%1$I::jsonb = %2$s::jsonb', p_col ->> 'name', p_val)
          WHEN (p_col ->> 'eq')::boolean THEN format('agentdb_target.%1$I = %2$s', p_col ->> 'name', p_val)
          ELSE format('agentdb_target.%1$I::text = %2$s::text', p_col ->> 'name', p_val)
      END AS e) AS x
$$;

-- The generated function's variables: one per column (v_<attnum>, typed as
-- the column), a where value (w_) for update/delete tools, a raw value (r_)
-- for lossy columns, the written keys (k_, ks_ for bulk calls).
CREATE OR REPLACE FUNCTION agentdb_private.compile_declare(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT '#variable_conflict use_variable' || chr(10) || 'DECLARE' || chr(10)
        || '    v_attempts integer := 0;' || chr(10) || '    v_phase text;' || chr(10)
        || '    v_field text;' || chr(10) || '    v_type text;' || chr(10) || '    v_state text;' || chr(10)
        || '    v_msg text;' || chr(10) || '    v_fail jsonb;' || chr(10) || '    v_bulk boolean := false;' || chr(10)
        || '    v_set jsonb;' || chr(10) || '    v_where jsonb;' || chr(10) || '    v_ver bigint := p_version;' || chr(10)
        || '    v_affected integer := 0;' || chr(10) || '    v_left integer;' || chr(10) || '    v_row jsonb;' || chr(10)
        || '    v_mismatch text;' || chr(10) || '    v_conflict jsonb;' || chr(10)
        || CASE WHEN p_tool.action = 'insert' THEN format('    v_new %s;', p_tool.target) || chr(10) ELSE '' END
        || CASE WHEN p_tool.action = 'delete' THEN format('    v_gone %s;', p_tool.target) || chr(10) ELSE '' END
        || string_agg(format('    %s %s;', c ->> 'var', c ->> 'full_type') || chr(10)
            || CASE WHEN p_tool.action <> 'insert' THEN format('    %s %s;', c ->> 'wvar', c ->> 'full_type') || chr(10)
                    ELSE '' END
            || CASE WHEN (c ->> 'lossy')::boolean THEN format('    %s %s;', c ->> 'raw', c ->> 'base_type') || chr(10)
                    ELSE '' END
            || CASE WHEN (c ->> 'key')::boolean THEN format('    %s %s;', c ->> 'kvar', c ->> 'full_type') || chr(10)
                    || format('    %s %s[];', c ->> 'ksvar', c ->> 'full_type') || chr(10) ELSE '' END, '' ORDER BY (c ->> 'num')::int)
      FROM jsonb_array_elements(p_cols) AS c
$$;

-- Phase plan: the arguments' shape and size, the bulk form's split into where
-- and set, and every argument naming a column. No statement can fail here.
CREATE OR REPLACE FUNCTION agentdb_private.compile_plan(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT concat(
        $g$    IF p_args IS NULL OR jsonb_typeof(p_args) <> 'object' THEN
        RETURN agentdb_private.not_done('invalid', 'not_an_object',
            format('arguments must be a JSON object, got %s', coalesce(jsonb_typeof(p_args), 'NULL')));
    END IF;
    IF octet_length(p_args::text) > agentdb_private.max_args_bytes() THEN
        RETURN agentdb_private.not_done('invalid', 'too_large', format('arguments are %s bytes, the limit is %s',
            octet_length(p_args::text), agentdb_private.max_args_bytes()));
    END IF;
    v_set := p_args;
    v_where := p_args;
$g$,
        -- The bulk form, unless the table has a column called where.
        CASE WHEN p_tool.action <> 'insert' AND NOT p_cols @> '[{"name": "where"}]' THEN format($g$    IF p_args ? 'where' THEN
        v_bulk := true;
        v_where := p_args -> 'where';
        v_set := coalesce(p_args -> 'set', '{}');
        IF jsonb_typeof(v_where) <> 'object' OR jsonb_typeof(v_set) <> 'object' THEN
            RETURN agentdb_private.not_done('invalid', 'not_an_object', 'where and set must be JSON objects',
                jsonb_build_object('field', 'where'));
        END IF;
        v_field := (SELECT k FROM jsonb_object_keys(p_args - %s) AS k LIMIT 1);
        IF v_field IS NOT NULL THEN
            RETURN agentdb_private.not_done('invalid', 'unknown_field',
                format('unknown argument %%s in a bulk call', v_field), jsonb_build_object('field', v_field));
        END IF;
    END IF;
$g$, CASE WHEN p_tool.action = 'delete' THEN $q$'{where}'::text[]$q$ ELSE $q$'{where,set}'::text[]$q$ END) END,
        format($g$    IF ((v_where || v_set) - %1$L::text[]) <> '{}' THEN
        v_field := (SELECT k FROM jsonb_object_keys((v_where || v_set) - %1$L::text[]) AS k LIMIT 1);
        RETURN agentdb_private.not_done('invalid', 'unknown_field', format('unknown argument %%s', left(v_field, 100)),
            jsonb_build_object('field', left(v_field, 100)));
    END IF;
$g$, (SELECT array_agg(c ->> 'name') FROM jsonb_array_elements(p_cols) AS c)))
$$;

-- Phase convert: the version (update tools with a version column), the owner
-- (always the task's user, never an argument), then each given value read into
-- its column's type. An error here names the field (see compile_handler).
CREATE OR REPLACE FUNCTION agentdb_private.compile_convert(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    WITH c AS (SELECT e AS col FROM jsonb_array_elements(p_cols) AS e)
    SELECT concat(
        '            v_phase := ''convert'';' || chr(10),
        CASE WHEN p_tool.version_column IS NOT NULL THEN format($g$            v_field := %1$L; v_type := 'bigint';
            IF v_ver IS NULL AND (v_where ->> %1$L) IS NOT NULL THEN
                v_ver := (v_where ->> %1$L)::bigint;
            END IF;
            IF v_ver IS NULL THEN
                RETURN agentdb_private.not_done('invalid', 'version_required',
                    format('%%s (the version read before) is required to update', %1$L), jsonb_build_object('field', %1$L));
            END IF;
            v_set := v_set - %1$L;
            v_where := v_where - %1$L;
$g$, p_tool.version_column) END,
        (SELECT format($g$            v_set := v_set - %1$L;
            v_where := v_where - %1$L;
            v_field := %1$L; v_type := %2$L;
            %3$s := p_user::%4$s;
$g$, c.col ->> 'name', c.col ->> 'label', c.col ->> 'var', c.col ->> 'base_type')
           FROM c WHERE (c.col ->> 'owner')::boolean),
        agentdb_private.compile_nested(p_cols, 'v_set'),
        CASE WHEN p_tool.action = 'insert' THEN
            (SELECT string_agg(agentdb_private.compile_read(p_tool.target, c.col, 'v_set', c.col ->> 'var'), '')
               FROM c WHERE NOT (c.col ->> 'owner')::boolean AND (c.col ->> 'insertable')::boolean)
        ELSE
            coalesce((SELECT string_agg(agentdb_private.compile_read(p_tool.target, c.col, 'v_set', c.col ->> 'var'), '')
                        FROM c WHERE NOT (c.col ->> 'owner')::boolean AND ((c.col ->> 'insertable')::boolean
                                                                            OR (c.col ->> 'key')::boolean)), '')
            || '            IF v_bulk THEN' || chr(10) || agentdb_private.compile_nested(p_cols, 'v_where')
            || coalesce((SELECT string_agg(agentdb_private.compile_read(p_tool.target, c.col, 'v_where', c.col ->> 'wvar'), '')
                           FROM c WHERE NOT (c.col ->> 'owner')::boolean), '')
            || '            END IF;' || chr(10)
        END,
        '            v_field := NULL;' || chr(10))
$$;

-- Phase bounds: what must be given, what may not be, how many rows.
CREATE OR REPLACE FUNCTION agentdb_private.compile_bounds(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    WITH c AS (SELECT e AS col FROM jsonb_array_elements(p_cols) AS e),
    required AS (
        SELECT string_agg(format($g$            IF NOT (v_set ? %1$L) OR jsonb_typeof(v_set -> %1$L) = 'null' THEN
                RETURN agentdb_private.not_done('invalid', 'missing_field', %2$L, jsonb_build_object('field', %1$L));
            END IF;
$g$, c.col ->> 'name', CASE WHEN p_tool.action = 'insert' THEN format('%s is required', c.col ->> 'name')
                            ELSE format('%s is required to find the row', c.col ->> 'name') END), ''
            ORDER BY CASE WHEN p_tool.action = 'insert' THEN (c.col ->> 'num')::int
                          ELSE array_position(p_tool.key_columns, c.col ->> 'name') END) AS code
          FROM c
         WHERE CASE WHEN p_tool.action = 'insert'
                    THEN (c.col ->> 'not_null')::boolean AND c.col ->> 'default' IS NULL
                         AND (c.col ->> 'insertable')::boolean AND NOT (c.col ->> 'owner')::boolean
                    -- The owner in the key (a table keyed (user_id, id), as Citus wants it)
                    -- is the task's user, never an argument.
                    ELSE (c.col ->> 'key')::boolean AND NOT (c.col ->> 'owner')::boolean END
    ),
    filled AS (
        SELECT string_agg(format($g$            IF %2$s ? %1$L THEN
                RETURN agentdb_private.not_done('invalid', 'unknown_field',
                    %3$L, jsonb_build_object('field', %1$L));
            END IF;
$g$, c.col ->> 'name', CASE WHEN p_tool.action = 'insert' THEN 'v_set'
                            ELSE format('(CASE WHEN v_bulk THEN v_set ELSE v_set - %L::text[] END)', p_tool.key_columns) END,
            format('%s is filled by the database and cannot be given', c.col ->> 'name')), '') AS code
          FROM c WHERE NOT (c.col ->> 'insertable')::boolean
    ),
    keys AS (SELECT format('%L::text[]', p_tool.key_columns) AS arr)
    SELECT CASE WHEN p_tool.action = 'insert' THEN concat((SELECT code FROM required), $g$            IF p_expect_rows IS NOT NULL AND p_expect_rows <> 1 THEN
                RETURN agentdb_private.not_done('invalid', 'bad_expect_rows',
                    'an insert writes exactly one row; expect_rows must be 1 or omitted');
            END IF;
$g$, (SELECT code FROM filled))
    ELSE concat($g$            IF v_bulk THEN
                IF v_where = '{}' THEN
                    RETURN agentdb_private.not_done('refused', 'unbounded', 'a bulk change needs at least one condition in where');
                END IF;
$g$, CASE WHEN p_tool.action = 'update' THEN $g$                IF v_set = '{}' THEN
                    RETURN agentdb_private.not_done('invalid', 'nothing_to_change', 'no new value was given in set');
                END IF;
$g$ END, $g$                IF p_expect_rows IS NULL OR p_expect_rows < 1 THEN
                    RETURN agentdb_private.not_done('invalid', 'expect_rows_required',
                        'a bulk change must say how many rows it expects (expect_rows)');
                END IF;
$g$, CASE WHEN p_tool.max_rows IS NOT NULL THEN format($g$                IF p_expect_rows > %1$s THEN
                    RETURN agentdb_private.not_done('refused', 'too_many_rows',
                        format('%%s rows expected, this tool allows at most %1$s', p_expect_rows));
                END IF;
$g$, p_tool.max_rows) END, '            ELSE' || chr(10), (SELECT code FROM required),
        CASE WHEN p_tool.action = 'update' THEN format($g$                IF (v_set - %1$s) = '{}' THEN
                    RETURN agentdb_private.not_done('invalid', 'nothing_to_change', 'no new value was given');
                END IF;
$g$, (SELECT arr FROM keys)) ELSE format($g$                v_field := (SELECT k FROM jsonb_object_keys(v_set - %1$s) AS k LIMIT 1);
                IF v_field IS NOT NULL THEN
                    RETURN agentdb_private.not_done('invalid', 'unknown_field',
                        format('a delete takes only the key, not %%s', v_field), jsonb_build_object('field', v_field));
                END IF;
$g$, (SELECT arr FROM keys)) END, $g$                IF p_expect_rows IS NOT NULL AND p_expect_rows <> 1 THEN
                    RETURN agentdb_private.not_done('invalid', 'bad_expect_rows',
                        'a call by key changes exactly one row; use where/set for several');
                END IF;
            END IF;
$g$, CASE WHEN p_tool.action = 'update' THEN (SELECT code FROM filled) END) END
$$;

-- Phase checks: the duplicate check (insert tools with dedup columns) under an
-- advisory lock keyed on the converted values (timestamps, whose duplicates
-- are a range, left out of the key), then the tool's conflict check. A dry run
-- (propose) stops after them: no statement, no trigger of the target.
CREATE OR REPLACE FUNCTION agentdb_private.compile_checks(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_code text := '';
    v_fn text;
BEGIN
    IF p_tool.dedup_columns IS NOT NULL THEN
        v_code := format($g$            v_phase := 'dedup';
            PERFORM pg_advisory_xact_lock(hashtextextended(%1$L || '|' || coalesce(p_user, '') || '|' || concat_ws(chr(31), %2$s), 0));
            SELECT to_jsonb(agentdb_target.*) INTO v_row FROM %3$s AS agentdb_target WHERE %4$s LIMIT 1;
            IF v_row IS NOT NULL THEN
                RETURN agentdb_private.not_done('duplicate', 'duplicate', 'an identical row already exists',
                    jsonb_build_object('existing', jsonb_build_object(%5$s), 'row', v_row));
            END IF;
$g$, p_tool.name,
            coalesce((SELECT string_agg(format('%s::text', c ->> 'var'), ', ' ORDER BY array_position(p_tool.dedup_columns, c ->> 'name'))
                        FROM jsonb_array_elements(p_cols) AS c
                       WHERE (c ->> 'dedup')::boolean AND NOT (c ->> 'temporal')::boolean), ''''''),
            p_tool.target,
            (SELECT string_agg(agentdb_private.compile_same(c, c ->> 'var'), ' AND ' ORDER BY (c ->> 'num')::int)
               FROM jsonb_array_elements(p_cols) AS c
              WHERE (c ->> 'dedup')::boolean OR (c ->> 'owner')::boolean),
            (SELECT string_agg(format('%L, v_row -> %L', k, k), ', ') FROM unnest(p_tool.key_columns) AS k));
    END IF;
    IF p_tool.conflict_check IS NOT NULL THEN
        SELECT format('%I.%I', n.nspname, p.proname) INTO v_fn
          FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
         WHERE p.oid = p_tool.conflict_check;
        IF v_fn IS NULL THEN
            -- Dropped since registration: every call fails the check (never a conflict the
            -- user could act on, never a write without the check).
            RETURN v_code || format($g$            RETURN agentdb_private.not_done('failed', 'check_failed', %L);
$g$, format('conflict check (oid %s) no longer exists', p_tool.conflict_check::oid));
        END IF;
        v_code := v_code || format($g$            v_phase := 'conflict';
            v_conflict := to_jsonb(%1$s(p_user, (%2$s)%3$s));
            IF v_conflict IS NOT NULL AND jsonb_typeof(v_conflict) <> 'null' THEN
                IF jsonb_typeof(v_conflict) = 'string' THEN
                    v_conflict := jsonb_build_object('reason', v_conflict #>> '{}');
                END IF;
                RETURN agentdb_private.not_done('conflict', 'conflict', coalesce(v_conflict ->> 'reason', 'conflict'),
                    jsonb_build_object('conflict', v_conflict));
            END IF;
$g$, v_fn, CASE WHEN p_tool.action = 'insert' THEN 'v_set' ELSE 'CASE WHEN v_bulk THEN v_set || v_where ELSE v_set END' END,
            CASE WHEN p_tool.owner_column IS NOT NULL
                 THEN format(' || jsonb_build_object(%L, p_user)', p_tool.owner_column) ELSE '' END);
    END IF;
    RETURN v_code || $g$            IF p_dry THEN
                RETURN jsonb_build_object('outcome', 'success', 'refusal', NULL, 'verified', false, 'affected_rows', 0,
                                          'attempts', 0, 'error', NULL, 'dry_run', true);
            END IF;
$g$;
END
$$;

-- SQL fragments of the statements: the key match (p_var: v_ for the values
-- given, k_ for the keys written), the bulk where (each given where value,
-- NULL-safe), the owner and the version.
CREATE OR REPLACE FUNCTION agentdb_private.compile_match(p_tool agentdb_private.tools, p_cols jsonb, p_form text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT concat_ws(' AND ',
        CASE WHEN p_form = 'bulk' THEN (
            SELECT string_agg(format('(NOT (v_where ? %1$L) OR %2$s)', c ->> 'name', CASE
                       WHEN c ->> 'kind' = 'json'
                           THEN format('agentdb_target.%I::jsonb IS NOT DISTINCT FROM %s::jsonb', c ->> 'name', c ->> 'wvar')
                       WHEN (c ->> 'eq')::boolean
                           THEN format('agentdb_target.%I IS NOT DISTINCT FROM %s', c ->> 'name', c ->> 'wvar')
                       ELSE format('agentdb_target.%I::text IS NOT DISTINCT FROM %s::text', c ->> 'name', c ->> 'wvar') END),
                   ' AND ' ORDER BY (c ->> 'num')::int)
              FROM jsonb_array_elements(p_cols) AS c WHERE NOT (c ->> 'owner')::boolean)
        ELSE (SELECT string_agg(format('agentdb_target.%I = %s', c ->> 'name',
                                       CASE WHEN p_form = 'written' THEN c ->> 'kvar' ELSE c ->> 'var' END),
                                ' AND ' ORDER BY array_position(p_tool.key_columns, c ->> 'name'))
                FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'key')::boolean) END,
        CASE WHEN p_form <> 'written' THEN
            (SELECT format('agentdb_target.%I = %s', c ->> 'name', c ->> 'var')
               FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'owner')::boolean) END,
        CASE WHEN p_form <> 'written' AND p_tool.version_column IS NOT NULL AND p_tool.action = 'update'
             THEN format('agentdb_target.%I = v_ver', p_tool.version_column) END)
$$;

-- SQL fragment: the names of the compared columns that read back differently,
-- joined by chr(31) ('' when all match). p_form: insert, key or bulk.
CREATE OR REPLACE FUNCTION agentdb_private.compile_mismatch(p_tool agentdb_private.tools, p_cols jsonb, p_form text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce('concat_ws(chr(31), ' || string_agg(format('CASE WHEN %s AND %s THEN %L END',
               CASE WHEN (c ->> 'owner')::boolean THEN 'true' ELSE format('v_set ? %L', c ->> 'name') END,
               agentdb_private.compile_differs(c, CASE WHEN (c ->> 'owner')::boolean THEN c ->> 'var' ELSE c ->> 'var' END),
               c ->> 'name'), ', ' ORDER BY (c ->> 'num')::int) || ')', '''''')
      FROM jsonb_array_elements(p_cols) AS c
     WHERE (c ->> 'compared')::boolean AND (c ->> 'insertable')::boolean
       AND CASE p_form
               WHEN 'insert' THEN true
               WHEN 'key' THEN NOT (c ->> 'key')::boolean AND NOT (c ->> 'owner')::boolean AND NOT (c ->> 'version')::boolean
               ELSE NOT (c ->> 'owner')::boolean AND NOT (c ->> 'version')::boolean
           END
$$;

-- The read-back of the proof phase, run after the deferred constraints:
-- inside a caller's transaction (now() is its start, not this statement's) in
-- a nested block that is undone afterwards, so the caller's constraints stay
-- deferred (their events run again at its COMMIT).
CREATE OR REPLACE FUNCTION agentdb_private.compile_proof(p_readback text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT $g$            v_phase := 'proof';
            IF now() = statement_timestamp() THEN
                SET CONSTRAINTS ALL IMMEDIATE;
$g$ || p_readback || $g$            ELSE
                BEGIN
                    SET CONSTRAINTS ALL IMMEDIATE;
$g$ || p_readback || $g$                    RAISE EXCEPTION USING ERRCODE = 'AD003', MESSAGE = 'checked';
                EXCEPTION WHEN SQLSTATE 'AD003' THEN
                    NULL;
                END;
            END IF;
$g$
$$;

-- Phase proof, first part: the rows the statement changed must be the rows
-- expected. With a version column, no row at the version asked for but one at
-- another is a stale version (a conflict, never a lost update).
CREATE OR REPLACE FUNCTION agentdb_private.compile_count(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format($g$            v_phase := 'proof';
            IF v_affected <> %1$s THEN
%2$s                v_fail := agentdb_private.not_done('unverified',
                    CASE WHEN v_affected = 0 AND %1$s = 1 AND %3$L <> 'insert' THEN 'not_found' ELSE 'row_count' END,
                    format('expected %%s row(s) to change, %%s did', %1$s, v_affected),
                    jsonb_build_object('expected_rows', %1$s, 'matched_rows', v_affected));
                RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail ->> 'error';
            END IF;
$g$, CASE WHEN p_tool.action = 'insert' THEN '1' ELSE '(CASE WHEN v_bulk THEN p_expect_rows ELSE 1 END)' END,
        CASE WHEN p_tool.version_column IS NOT NULL AND p_tool.action = 'update' THEN format($g$                IF v_affected = 0 THEN
                    IF v_bulk THEN
                        SELECT to_jsonb(agentdb_target.%1$I) INTO v_row FROM %2$s AS agentdb_target WHERE %3$s LIMIT 1;
                    ELSE
                        SELECT to_jsonb(agentdb_target.%1$I) INTO v_row FROM %2$s AS agentdb_target WHERE %4$s LIMIT 1;
                    END IF;
                    IF v_row IS NOT NULL THEN
                        v_fail := agentdb_private.not_done('conflict', 'stale_version',
                            format('the row is at version %%s, the call expected %%s', v_row, v_ver),
                            jsonb_build_object('conflict', jsonb_build_object(
                                'reason', 'changed by someone else since it was read', 'current_version', v_row)));
                        RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail ->> 'error';
                    END IF;
                END IF;
$g$, p_tool.version_column, p_tool.target,
            replace(agentdb_private.compile_match(p_tool, p_cols, 'bulk'), format(' AND agentdb_target.%I = v_ver', p_tool.version_column), ''),
            replace(agentdb_private.compile_match(p_tool, p_cols, 'key'), format(' AND agentdb_target.%I = v_ver', p_tool.version_column), ''))
        ELSE '' END, p_tool.action)
$$;

-- The written rows read back: for a bulk call, one key probe per written row
-- (LATERAL ... OFFSET 0: whatever the planner guesses for the key array).
CREATE OR REPLACE FUNCTION agentdb_private.compile_written(p_tool agentdb_private.tools, p_cols jsonb, p_select text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('FROM unnest(%1$s) AS agentdb_key (%2$s) CROSS JOIN LATERAL (SELECT %3$s FROM %4$s AS agentdb_target WHERE %5$s OFFSET 0) AS agentdb_target',
        string_agg(c ->> 'ksvar', ', ' ORDER BY array_position(p_tool.key_columns, c ->> 'name')),
        string_agg(c ->> 'kvar', ', ' ORDER BY array_position(p_tool.key_columns, c ->> 'name')),
        p_select, p_tool.target,
        string_agg(format('agentdb_target.%I = agentdb_key.%I', c ->> 'name', c ->> 'kvar'), ' AND '
                   ORDER BY array_position(p_tool.key_columns, c ->> 'name'))
        -- The owner too, as the task's user: on Citus that routes the read-back to the user's
        -- shard (a key value taken from unnest() cannot be routed).
        || coalesce((SELECT format(' AND agentdb_target.%I = %s', o ->> 'name', o ->> 'var')
                       FROM jsonb_array_elements(p_cols) AS o WHERE (o ->> 'owner')::boolean), ''))
      FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'key')::boolean
$$;

-- RETURNING list and INTO targets of the written keys (single row) or the
-- aggregation of a bulk call's keys.
CREATE OR REPLACE FUNCTION agentdb_private.compile_keys(p_tool agentdb_private.tools, p_cols jsonb, p_part text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT string_agg(CASE p_part
                          WHEN 'returning' THEN format('agentdb_target.%I AS %s', c ->> 'name', c ->> 'kvar')
                          WHEN 'into' THEN c ->> 'kvar'
                          WHEN 'into_all' THEN c ->> 'ksvar'
                          WHEN 'agg' THEN format('array_agg(agentdb_done.%s)', c ->> 'kvar')
                          WHEN 'object' THEN format('%L, %s', c ->> 'name', c ->> 'kvar')
                      END, ', ' ORDER BY array_position(p_tool.key_columns, c ->> 'name'))
      FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'key')::boolean
$$;

-- The statement runs marked as the step's (agentdb.call, sql/63_watch.sql):
-- a watched table's guard lets it through and its change log names the step.
-- (set_config as an assignment: a simple expression, no query.)
CREATE OR REPLACE FUNCTION agentdb_private.compile_marked(p_statement text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT '            v_phase := ''write'';' || chr(10)
        || '            v_msg := set_config(''agentdb.call'', coalesce(p_call, ''''), true);' || chr(10)
        || p_statement
        || '            v_msg := set_config(''agentdb.call'', '''', true);' || chr(10)
$$;

-- The read-back's verdict: every written row read back, no compared column
-- different (the names sorted, once, only when there is a difference).
CREATE OR REPLACE FUNCTION agentdb_private.compile_verdict()
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT $g$            IF v_left <> v_affected THEN
                v_fail := agentdb_private.not_done('unverified', 'not_found_after_write',
                    format('%s row(s) written, %s read back', v_affected, v_left));
                RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail ->> 'error';
            END IF;
            IF v_mismatch <> '' THEN
                v_mismatch := (SELECT string_agg(x.m, chr(31) ORDER BY x.m)
                                 FROM (SELECT DISTINCT m FROM unnest(string_to_array(v_mismatch, chr(31))) AS m
                                        WHERE m <> '') AS x);
                IF v_mismatch IS NOT NULL THEN
                    v_fail := agentdb_private.not_done('unverified', 'readback_mismatch',
                        format('read back differs in %s', replace(v_mismatch, chr(31), ', ')),
                        jsonb_build_object('mismatched', to_jsonb(string_to_array(v_mismatch, chr(31))), 'row', v_row));
                    RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail ->> 'error';
                END IF;
            END IF;
$g$
$$;

-- The name a watched table is logged under.
CREATE OR REPLACE FUNCTION agentdb_private.watched_name(p_table oid)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('%I.%I', n.nspname, c.relname)
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE c.oid = p_table
$$;

-- Statement and proof of an insert tool. A column not given takes its default
-- (copied here at compile time; a change of default recompiles the tool). On
-- a watched table whose triggers are armed the tool writes the change-log row
-- of its insert itself (log_step_row), and the marker tells the statement's own log trigger, at
-- this trigger depth only, to step aside: statements that triggers of the
-- table run log as always.
CREATE OR REPLACE FUNCTION agentdb_private.compile_insert(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT CASE WHEN w.key_columns IS NULL OR NOT agentdb_private.watch_armed(w.table_oid, w.key_columns)
                THEN agentdb_private.compile_marked(format($g$            INSERT INTO %1$s AS agentdb_target (%2$s)
            VALUES (%3$s)
            RETURNING %4$s INTO %5$s;
            GET DIAGNOSTICS v_affected = ROW_COUNT;
$g$, p_tool.target, x.cols, x.vals, agentdb_private.compile_keys(p_tool, p_cols, 'returning'),
            agentdb_private.compile_keys(p_tool, p_cols, 'into')))
        ELSE format($g$            v_phase := 'write';
            v_msg := set_config('agentdb.call', coalesce(p_call, '') || ':logged:' || (pg_trigger_depth() + 1), true);
            INSERT INTO %1$s AS agentdb_target (%2$s)
            VALUES (%3$s)
            RETURNING agentdb_target.* INTO v_new;
            GET DIAGNOSTICS v_affected = ROW_COUNT;
            v_msg := set_config('agentdb.call', '', true);
            IF v_affected = 1 THEN
                PERFORM agentdb_private.log_step_row(%4$s, %5$L, %6$L, %7$L, 'INSERT', p_call, v_new);
            END IF;
%8$s$g$, p_tool.target, x.cols, x.vals, p_tool.target::oid, agentdb_private.watched_name(p_tool.target::oid),
            coalesce(w.owner_column, ''), w.key_columns,
            (SELECT string_agg(format('            %s := v_new.%I;', c ->> 'kvar', c ->> 'name') || chr(10), '')
               FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'key')::boolean)) END
        || agentdb_private.compile_count(p_tool, p_cols)
        || agentdb_private.compile_proof(format($g$            SELECT to_jsonb(agentdb_target.*), %1$s INTO v_row, v_mismatch FROM %2$s AS agentdb_target WHERE %3$s;
            GET DIAGNOSTICS v_left = ROW_COUNT;
%4$s$g$, agentdb_private.compile_mismatch(p_tool, p_cols, 'insert'), p_tool.target,
            agentdb_private.compile_match(p_tool, p_cols, 'written'), agentdb_private.compile_verdict()))
      FROM (SELECT string_agg(format('%I', c ->> 'name'), ', ' ORDER BY (c ->> 'num')::int) AS cols,
                   string_agg(CASE WHEN (c ->> 'owner')::boolean OR c ->> 'default' IS NULL THEN c ->> 'var'
                                   ELSE format('CASE WHEN v_set ? %L THEN %s ELSE (%s)::%s END', c ->> 'name',
                                               c ->> 'var', c ->> 'default', c ->> 'full_type') END,
                              ', ' ORDER BY (c ->> 'num')::int) AS vals
              FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'insertable')::boolean) AS x
      LEFT JOIN agentdb_private.watched AS w ON w.table_oid = p_tool.target);
END
$$;

-- The SET list of an update: every settable column set to the value given, or
-- kept; the version column incremented. p_form: key (key columns are not set)
-- or bulk.
CREATE OR REPLACE FUNCTION agentdb_private.compile_setlist(p_tool agentdb_private.tools, p_cols jsonb, p_form text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(string_agg(format('%1$I = CASE WHEN v_set ? %1$L THEN %2$s ELSE agentdb_target.%1$I END',
                                      c ->> 'name', c ->> 'var'), ', ' ORDER BY (c ->> 'num')::int)
                        FILTER (WHERE NOT (c ->> 'version')::boolean),
                    format('%1$I = agentdb_target.%1$I', p_tool.key_columns[1]))
        || CASE WHEN p_tool.version_column IS NOT NULL
                THEN format(', %1$I = agentdb_target.%1$I + 1', p_tool.version_column) ELSE '' END
      FROM jsonb_array_elements(p_cols) AS c
     WHERE (c ->> 'insertable')::boolean AND NOT (c ->> 'owner')::boolean
       AND (p_form = 'bulk' OR NOT (c ->> 'key')::boolean)
$$;

-- The dynamic SET list, for a table with UPDATE OF triggers: only the columns
-- given are named, so such a trigger fires exactly as for the call. Values come
-- from jsonb_populate_record over the set object ($1); same conversion.
CREATE OR REPLACE FUNCTION agentdb_private.compile_setlist_dynamic(p_tool agentdb_private.tools, p_cols jsonb, p_form text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('concat_ws(%L, %s%s)', ', ',
        string_agg(format('CASE WHEN v_set ? %L THEN %L END', c ->> 'name',
                          format('%1$I = agentdb_asked.%1$I', c ->> 'name')), ', ' ORDER BY (c ->> 'num')::int),
        CASE WHEN p_tool.version_column IS NOT NULL
             THEN format(', %L', format('%1$I = agentdb_target.%1$I + 1', p_tool.version_column)) ELSE '' END)
      FROM jsonb_array_elements(p_cols) AS c
     WHERE (c ->> 'insertable')::boolean AND NOT (c ->> 'owner')::boolean AND NOT (c ->> 'version')::boolean
       AND (p_form = 'bulk' OR NOT (c ->> 'key')::boolean)
$$;

-- An expression giving, at run time, the WHERE clause of the dynamic update:
-- $1 set, $2 where (as agentdb_asked and agentdb_where), $3 the task's user,
-- $4 the version. Bulk: only the where values given are named.
CREATE OR REPLACE FUNCTION agentdb_private.compile_where_dynamic(p_tool agentdb_private.tools, p_cols jsonb, p_form text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format('concat_ws(%L, %s)', ' AND ', concat_ws(', ',
        CASE WHEN p_form = 'bulk' THEN
            (SELECT string_agg(format('CASE WHEN v_where ? %L THEN %L END', c ->> 'name', CASE
                       WHEN c ->> 'kind' = 'json' OR NOT (c ->> 'eq')::boolean
                           THEN format('agentdb_target.%1$I::text IS NOT DISTINCT FROM agentdb_where.%1$I::text', c ->> 'name')
                       ELSE format('agentdb_target.%1$I IS NOT DISTINCT FROM agentdb_where.%1$I', c ->> 'name') END),
                    ', ' ORDER BY (c ->> 'num')::int)
               FROM jsonb_array_elements(p_cols) AS c WHERE NOT (c ->> 'owner')::boolean)
        ELSE (SELECT format('%L', string_agg(format('agentdb_target.%1$I = agentdb_asked.%1$I', k), ' AND '))
                FROM unnest(p_tool.key_columns) AS k) END,
        (SELECT format('%L', format('agentdb_target.%I = $3::%s', c ->> 'name', c ->> 'base_type'))
           FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'owner')::boolean),
        CASE WHEN p_tool.version_column IS NOT NULL
             THEN format('%L', format('agentdb_target.%I = $4', p_tool.version_column)) END))
$$;

-- Statement and proof of an update tool, by key or bulk (where/set).
CREATE OR REPLACE FUNCTION agentdb_private.compile_update(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_key text;
    v_bulk text;
BEGIN
    IF agentdb_private.has_column_triggers(p_tool.target) THEN
        v_bulk := format($g$                EXECUTE 'WITH agentdb_done AS (UPDATE %1$s AS agentdb_target SET ' || %2$s
                    || ' FROM jsonb_populate_record(NULL::%1$s, $1) AS agentdb_asked, '
                    || 'jsonb_populate_record(NULL::%1$s, $2) AS agentdb_where WHERE ' || %3$s
                    || ' RETURNING %4$s) SELECT count(*)::integer, %5$s FROM agentdb_done'
                    INTO v_affected, %6$s USING v_set, v_where, p_user, v_ver;
$g$, p_tool.target, agentdb_private.compile_setlist_dynamic(p_tool, p_cols, 'bulk'),
            agentdb_private.compile_where_dynamic(p_tool, p_cols, 'bulk'), agentdb_private.compile_keys(p_tool, p_cols, 'returning'),
            agentdb_private.compile_keys(p_tool, p_cols, 'agg'), agentdb_private.compile_keys(p_tool, p_cols, 'into_all'));
        v_key := format($g$                EXECUTE 'UPDATE %1$s AS agentdb_target SET ' || %2$s
                    || ' FROM jsonb_populate_record(NULL::%1$s, $1) AS agentdb_asked WHERE ' || %3$s
                    || ' RETURNING %4$s' INTO %5$s USING v_set, v_where, p_user, v_ver;
                GET DIAGNOSTICS v_affected = ROW_COUNT;
$g$, p_tool.target, agentdb_private.compile_setlist_dynamic(p_tool, p_cols, 'key'),
            agentdb_private.compile_where_dynamic(p_tool, p_cols, 'key'), agentdb_private.compile_keys(p_tool, p_cols, 'returning'),
            agentdb_private.compile_keys(p_tool, p_cols, 'into'));
    ELSE
        v_bulk := format($g$                WITH agentdb_done AS (
                    UPDATE %1$s AS agentdb_target SET %2$s WHERE %3$s RETURNING %4$s
                )
                SELECT count(*)::integer, %5$s INTO v_affected, %6$s FROM agentdb_done;
$g$, p_tool.target, agentdb_private.compile_setlist(p_tool, p_cols, 'bulk'),
            agentdb_private.compile_match(p_tool, p_cols, 'bulk'), agentdb_private.compile_keys(p_tool, p_cols, 'returning'),
            agentdb_private.compile_keys(p_tool, p_cols, 'agg'), agentdb_private.compile_keys(p_tool, p_cols, 'into_all'));
        v_key := format($g$                UPDATE %1$s AS agentdb_target SET %2$s WHERE %3$s RETURNING %4$s INTO %5$s;
                GET DIAGNOSTICS v_affected = ROW_COUNT;
$g$, p_tool.target, agentdb_private.compile_setlist(p_tool, p_cols, 'key'),
            agentdb_private.compile_match(p_tool, p_cols, 'key'),
            replace(agentdb_private.compile_keys(p_tool, p_cols, 'returning'), ' AS k_', ' AS x_'),
            agentdb_private.compile_keys(p_tool, p_cols, 'into'));
    END IF;
    RETURN agentdb_private.compile_marked('            IF v_bulk THEN' || chr(10) || v_bulk || '            ELSE' || chr(10)
                                          || v_key || '            END IF;' || chr(10))
        || agentdb_private.compile_count(p_tool, p_cols)
        || agentdb_private.compile_proof(format($g$            IF v_bulk THEN
                SELECT count(*)::integer, string_agg(%1$s, chr(31)), (array_agg(to_jsonb(agentdb_target.*)))[1]
                  INTO v_left, v_mismatch, v_row %2$s;
            ELSE
                SELECT to_jsonb(agentdb_target.*), %3$s INTO v_row, v_mismatch FROM %4$s AS agentdb_target WHERE %5$s;
                GET DIAGNOSTICS v_left = ROW_COUNT;
            END IF;
%6$s$g$, agentdb_private.compile_mismatch(p_tool, p_cols, 'bulk'), agentdb_private.compile_written(p_tool, p_cols, '*'),
            agentdb_private.compile_mismatch(p_tool, p_cols, 'key'), p_tool.target,
            agentdb_private.compile_match(p_tool, p_cols, 'written'), agentdb_private.compile_verdict()));
END
$$;

-- Statement and proof of a delete tool, by key or bulk (where).
CREATE OR REPLACE FUNCTION agentdb_private.compile_delete(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT agentdb_private.compile_marked(format($g$            IF v_bulk THEN
                WITH agentdb_done AS (DELETE FROM %1$s AS agentdb_target WHERE %2$s RETURNING %3$s)
                SELECT count(*)::integer, %4$s INTO v_affected, %5$s FROM agentdb_done;
            ELSE
                -- The row, not to_jsonb() of it, in RETURNING: Citus takes only IMMUTABLE
                -- functions there.
                DELETE FROM %1$s AS agentdb_target WHERE %6$s RETURNING agentdb_target.* INTO v_gone;
                GET DIAGNOSTICS v_affected = ROW_COUNT;
                IF v_affected > 0 THEN
                    v_row := to_jsonb(v_gone);
%7$s
                END IF;
            END IF;
$g$, p_tool.target, agentdb_private.compile_match(p_tool, p_cols, 'bulk'),
        agentdb_private.compile_keys(p_tool, p_cols, 'returning'), agentdb_private.compile_keys(p_tool, p_cols, 'agg'),
        agentdb_private.compile_keys(p_tool, p_cols, 'into_all'), agentdb_private.compile_match(p_tool, p_cols, 'key'),
        (SELECT string_agg(format('                    %s := v_gone.%I;', c ->> 'kvar', c ->> 'name'), chr(10)
                           ORDER BY array_position(p_tool.key_columns, c ->> 'name'))
           FROM jsonb_array_elements(p_cols) AS c WHERE (c ->> 'key')::boolean)))
        || agentdb_private.compile_count(p_tool, p_cols)
        || agentdb_private.compile_proof(format($g$            IF v_bulk THEN
                SELECT count(*)::integer INTO v_left %1$s;
            ELSE
                SELECT count(*)::integer INTO v_left FROM %2$s AS agentdb_target WHERE %3$s;
            END IF;
            IF v_left > 0 THEN
                v_fail := agentdb_private.not_done('unverified', 'still_there',
                    format('%%s deleted row(s) still read back', v_left));
                RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_fail ->> 'error';
            END IF;
$g$, agentdb_private.compile_written(p_tool, p_cols, '1'), p_tool.target,
            agentdb_private.compile_match(p_tool, p_cols, 'written')))
$$;

-- The success result (its sentence for the user made here, once, in both
-- languages), and the handler of the attempt's block: a proof that
-- failed (AD001) is never retried; an error names the field when a value could
-- not be read, is check_failed in the conflict check, and otherwise is
-- classified by agentdb_private.write_failure (which may ask for one more try).
CREATE OR REPLACE FUNCTION agentdb_private.compile_end(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format($g$            RETURN jsonb_build_object('outcome', 'success', 'refusal', NULL, 'verified', true,
                'affected_rows', v_affected, 'attempts', v_attempts,
                'key', CASE WHEN v_bulk THEN NULL ELSE jsonb_build_object(%1$s) END,
                'row', CASE WHEN v_bulk THEN NULL ELSE v_row END,
                'detail', CASE WHEN p_lang = 'en' THEN %3$L ELSE %4$L END);
        EXCEPTION
            WHEN SQLSTATE 'AD001' THEN
                RETURN v_fail || jsonb_build_object('attempts', v_attempts, 'affected_rows', v_affected);
            WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                IF v_phase = 'convert' THEN
                    RETURN agentdb_private.not_done('invalid', 'bad_value',
                        format('%%s cannot be read as %%s: %%s', coalesce(v_field, '?'), coalesce(v_type, '?'), v_msg),
                        jsonb_build_object('field', v_field));
                ELSIF v_phase = 'conflict' THEN
                    RETURN agentdb_private.not_done('failed', 'check_failed',
                        format('conflict check %%s failed: %%s', %2$L, v_msg));
                END IF;
                v_fail := agentdb_private.write_failure(v_state, v_msg, v_attempts);
                IF v_fail IS NOT NULL THEN
                    RETURN v_fail;
                END IF;
        END;
$g$, agentdb_private.compile_keys(p_tool, p_cols, 'object'), p_tool.conflict_check::text,
        agentdb_private.msg('detail.success', 'en', jsonb_build_object('label', p_tool.label_en)),
        agentdb_private.msg('detail.success', 'zh', jsonb_build_object('label', p_tool.label_zh)))
$$;

-- The whole function of a tool, from its phases.
CREATE OR REPLACE FUNCTION agentdb_private.compile_body(p_tool agentdb_private.tools, p_cols jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    -- One subtransaction per attempt (the BEGIN ... EXCEPTION block), holding
    -- every phase: whatever raises ends as a result. The generated function is
    -- long (about 200 lines for a table of a few columns) and says why at its
    -- top: it is machine-written, one straight line per column, so that no
    -- phase reads the catalogue or builds SQL at call time.
    SELECT '-- Generated by agentdb_private.compile_tool for tool ' || quote_literal(p_tool.name)
        || ' (sql/42_compile.sql); do not edit.' || chr(10)
        || '-- Long by design: plan, convert, bounds, checks, the statement, the read-back and the' || chr(10)
        || '-- comparison are written out column by column, so no phase reads the catalogue or' || chr(10)
        || '-- builds SQL at call time; one subtransaction per attempt holds them all.' || chr(10)
        || agentdb_private.compile_declare(p_tool, p_cols) || 'BEGIN' || chr(10)
        || '    LOOP' || chr(10) || '        v_attempts := v_attempts + 1;' || chr(10) || '        BEGIN' || chr(10)
        || agentdb_private.compile_plan(p_tool, p_cols)
        || agentdb_private.compile_convert(p_tool, p_cols)
        || agentdb_private.compile_bounds(p_tool, p_cols)
        || agentdb_private.compile_checks(p_tool, p_cols)
        || CASE p_tool.action
               WHEN 'insert' THEN agentdb_private.compile_insert(p_tool, p_cols)
               WHEN 'update' THEN agentdb_private.compile_update(p_tool, p_cols)
               ELSE agentdb_private.compile_delete(p_tool, p_cols) END
        || agentdb_private.compile_end(p_tool, p_cols)
        || '    END LOOP;' || chr(10) || 'END' || chr(10)
$$;

-- The source of a tool's compiled function (or of the dispatcher, '_run'),
-- NULL when there is none.
CREATE OR REPLACE FUNCTION agentdb_private.compiled_source(p_name text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT p.prosrc FROM pg_catalog.pg_proc AS p
     WHERE p.oid = to_regprocedure(CASE WHEN p_name = '_run'
         THEN 'agentdb_tools._run(text, text, jsonb, integer, bigint, text, boolean, text)'
         ELSE format('agentdb_tools.%I(text, jsonb, integer, bigint, text, boolean, text)', p_name) END)
$$;

-- Compile one tool: check what it names still exists, generate its function,
-- record the signature it was compiled from; true. When the function in place
-- is exactly the code generated, from the same signature, nothing is done:
-- false. Raises (with the reason) when the
-- tool cannot be compiled; register_tool then fails, the event trigger marks
-- the tool stale. p_dispatch: also regenerate agentdb_tools._run (a new tool).
-- (Earlier versions returned void.)
DO $old$
BEGIN
    IF (SELECT p.prorettype FROM pg_catalog.pg_proc AS p
         WHERE p.oid = to_regprocedure('agentdb_private.compile_tool(text, boolean)')) = 'pg_catalog.void'::regtype THEN
        DROP FUNCTION agentdb_private.compile_tool(text, boolean);
    END IF;
END
$old$;
CREATE OR REPLACE FUNCTION agentdb_private.compile_tool(p_name text, p_dispatch boolean DEFAULT true)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tool agentdb_private.tools;
    v_cols jsonb;
    v_missing text;
    v_was text := current_setting('agentdb.compiling', true);
    v_body text;
    v_sig text;
    v_at timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('agentdb compile', 0));
    SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = p_name;
    IF v_tool.name IS NULL THEN
        RAISE EXCEPTION 'no tool named %', p_name USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.oid = v_tool.target) THEN
        RAISE EXCEPTION 'tool %: its table (oid %) no longer exists', p_name, v_tool.target::oid
            USING ERRCODE = 'undefined_table';
    END IF;
    v_cols := agentdb_private.compile_columns(v_tool);
    SELECT n INTO v_missing
      FROM unnest(v_tool.key_columns || coalesce(v_tool.compare_columns, '{}') || coalesce(v_tool.dedup_columns, '{}')
                  || ARRAY[v_tool.owner_column, v_tool.version_column]) AS n
     WHERE n IS NOT NULL AND NOT v_cols @> jsonb_build_array(jsonb_build_object('name', n))
     LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION 'tool %: table % has no column %', p_name, v_tool.target, quote_literal(v_missing)
            USING ERRCODE = 'undefined_column';
    END IF;
    IF v_tool.conflict_check IS NOT NULL THEN
        PERFORM agentdb_private.check_search_path(v_tool.conflict_check, p_name);
    END IF;
    v_body := agentdb_private.compile_body(v_tool, v_cols);
    v_sig := agentdb_private.tool_signature(v_tool);
    -- The code in place is what would be generated, from the same signature:
    -- nothing to do (an install, or a register_tool that changed nothing).
    IF v_tool.stale_reason IS NULL AND v_tool.compiled_sig IS NOT DISTINCT FROM v_sig
       AND agentdb_private.compiled_source(p_name) IS NOT DISTINCT FROM v_body THEN
        RETURN false;
    END IF;
    -- The DDL below must not wake the event trigger (it would compile again).
    PERFORM set_config('agentdb.compiling', 'on', true);
    -- Another signature of this tool's function (an older compiler's) goes.
    FOR v_missing IN SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
                      WHERE p.pronamespace = 'agentdb_tools'::regnamespace AND p.proname = p_name
                        AND p.pronargs <> 7 LOOP
        EXECUTE format('DROP FUNCTION %s', v_missing);
    END LOOP;
    EXECUTE format('CREATE OR REPLACE FUNCTION agentdb_tools.%I(p_user text, p_args jsonb, p_expect_rows integer, '
                   'p_version bigint, p_call text, p_dry boolean, p_lang text) RETURNS jsonb LANGUAGE plpgsql AS %L',
                   p_name, v_body);
    EXECUTE format('REVOKE ALL ON FUNCTION agentdb_tools.%I(text, jsonb, integer, bigint, text, boolean, text) FROM PUBLIC', p_name);
    IF p_dispatch THEN
        PERFORM agentdb_private.compile_dispatch();
    END IF;
    PERFORM set_config('agentdb.compiling', coalesce(v_was, ''), true);
    -- compiled_at: when the tool was compiled from what it is now. New code
    -- from the same signature (a newer compiler) keeps it. Values, not calls,
    -- in the SET list: on Citus (tools is a reference table) an UPDATE takes
    -- no VOLATILE function.
    UPDATE agentdb_private.tools AS t
       SET compiled_sig = v_sig, stale_reason = NULL,
           compiled_at = CASE WHEN t.compiled_at IS NOT NULL AND t.stale_reason IS NULL
                                   AND t.compiled_sig IS NOT DISTINCT FROM v_sig
                              THEN t.compiled_at ELSE v_at END
     WHERE t.name = p_name;
    RETURN true;
END
$$;

-- The dispatcher's search over the tool names (sorted byte-wise, as compared):
-- halves until at most three remain, then an equality test each. A call so
-- evaluates about log2(n) + 3 expressions whatever its tool's place; a CASE
-- evaluates one per name before the match (64 tools: 0.12 M instructions more
-- for the last one than the first, counted with callgrind).
CREATE OR REPLACE FUNCTION agentdb_private.compile_dispatch_tree(p_names text[], p_indent text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_n integer := coalesce(cardinality(p_names), 0);
    v_mid integer := v_n / 2 + 1;
BEGIN
    IF v_n <= 3 THEN
        RETURN (SELECT string_agg(format('%1$s%2$s p_tool = %3$L THEN' || chr(10)
                                         || '%1$s    RETURN agentdb_tools.%3$I(p_user, p_args, p_expect_rows, p_version, '
                                         || 'p_call, p_dry, p_lang);' || chr(10),
                                         p_indent, CASE WHEN i = 1 THEN 'IF' ELSE 'ELSIF' END, p_names[i]), '' ORDER BY i)
                  FROM generate_subscripts(p_names, 1) AS i) || p_indent || 'END IF;' || chr(10);
    END IF;
    RETURN format('%1$sIF p_tool COLLATE "C" < %2$L THEN' || chr(10) || '%3$s%1$sELSE' || chr(10) || '%4$s%1$sEND IF;'
                  || chr(10), p_indent, p_names[v_mid],
                  agentdb_private.compile_dispatch_tree(p_names[1:v_mid - 1], p_indent || '    '),
                  agentdb_private.compile_dispatch_tree(p_names[v_mid:v_n], p_indent || '    '));
END
$$;

-- Regenerate agentdb_tools._run: one static call per compiled tool, found by
-- compile_dispatch_tree, so every call is planned once per session. Left as
-- it is when its code would not change.
CREATE OR REPLACE FUNCTION agentdb_private.compile_dispatch()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_was text := current_setting('agentdb.compiling', true);
    v_names text[];
    v_code text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('agentdb compile', 0));
    SELECT array_agg(t.name ORDER BY t.name COLLATE "C")
      INTO v_names
      FROM agentdb_private.tools AS t
     WHERE to_regprocedure(format('agentdb_tools.%I(text, jsonb, integer, bigint, text, boolean, text)', t.name)) IS NOT NULL;
    v_code := 'BEGIN' || chr(10) || coalesce(agentdb_private.compile_dispatch_tree(v_names, '    '), '')
        || '    RETURN NULL;' || chr(10) || 'END';
    IF agentdb_private.compiled_source('_run') IS NOT DISTINCT FROM v_code THEN
        RETURN;
    END IF;
    PERFORM set_config('agentdb.compiling', 'on', true);
    EXECUTE format('CREATE OR REPLACE FUNCTION agentdb_tools._run(p_tool text, p_user text, p_args jsonb, '
                   'p_expect_rows integer, p_version bigint, p_call text, p_dry boolean, p_lang text) RETURNS jsonb '
                   'LANGUAGE plpgsql AS %L', v_code);
    REVOKE ALL ON FUNCTION agentdb_tools._run(text, text, jsonb, integer, bigint, text, boolean, text) FROM PUBLIC;
    PERFORM set_config('agentdb.compiling', coalesce(v_was, ''), true);
END
$$;

-- The dispatcher before any tool is compiled (compile_dispatch replaces it;
-- sql/95_compile.sql regenerates it, and every tool, at each install).
CREATE OR REPLACE FUNCTION agentdb_tools._run(
    p_tool text, p_user text, p_args jsonb, p_expect_rows integer, p_version bigint, p_call text, p_dry boolean,
    p_lang text
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NULL;
END
$$;

-- Recompile every tool whose signature changed since it was compiled; a tool
-- that no longer compiles is marked stale with the reason (invoke refuses it).
-- p_all: every tool's code is generated again and replaced where it differs
-- (an install: the compiler itself may be new); status 'unchanged' for the
-- others, whose function and compiled_at stay as they are.
CREATE OR REPLACE FUNCTION agentdb_private.compile_changed(p_all boolean DEFAULT false)
RETURNS TABLE (tool text, status text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_tool agentdb_private.tools;
    v_any boolean := p_all;
BEGIN
    FOR v_tool IN SELECT * FROM agentdb_private.tools AS t ORDER BY t.name LOOP
        CONTINUE WHEN NOT p_all AND v_tool.stale_reason IS NULL
                      AND agentdb_private.tool_signature(v_tool) IS NOT DISTINCT FROM v_tool.compiled_sig;
        tool := v_tool.name;
        v_any := true;
        BEGIN
            status := CASE WHEN agentdb_private.compile_tool(v_tool.name, false) THEN 'compiled' ELSE 'unchanged' END;
        EXCEPTION WHEN OTHERS THEN
            status := 'stale: ' || SQLERRM;
            UPDATE agentdb_private.tools AS t SET stale_reason = SQLERRM WHERE t.name = v_tool.name;
        END;
        RETURN NEXT;
    END LOOP;
    IF v_any THEN
        PERFORM agentdb_private.compile_dispatch();
    END IF;
END
$$;

-- The event trigger's function, after every DDL command: recompile what the
-- command changed. It never makes the command fail.
CREATE OR REPLACE FUNCTION agentdb_private.on_ddl()
RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('agentdb.compiling', true) = 'on' OR to_regclass('agentdb_private.tools') IS NULL THEN
        RETURN;
    END IF;
    PERFORM agentdb_private.compile_changed();
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'agentdb could not recompile its tools after %: %', tg_tag, SQLERRM;
END
$$;

-- Is the event trigger there and enabled? Without it, invoke compares each
-- tool's signature with the catalogue itself (see agentdb_private.step_gate).
-- On a Citus worker (a call delegated there) DDL comes from the coordinator,
-- whose event trigger marks stale tools in tools, a reference table copied to
-- every node (docs/scaling.md): there the stored state is the one to trust.
CREATE OR REPLACE FUNCTION agentdb_private.ddl_watched()
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger AS e
                    WHERE e.evtname = 'agentdb_ddl' AND e.evtenabled <> 'D')
        OR agentdb_private.on_citus_worker();
END
$$;

-- A tool that may not run: stale (marked, or compiled from another signature
-- while no event trigger watches the DDL), with the reason; NULL when fresh.
CREATE OR REPLACE FUNCTION agentdb_private.tool_stale(p_tool agentdb_private.tools)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN CASE
        WHEN p_tool.stale_reason IS NOT NULL THEN p_tool.stale_reason
        WHEN p_tool.compiled_sig IS NULL THEN 'never compiled'
        WHEN NOT agentdb_private.ddl_watched()
             AND agentdb_private.tool_signature(p_tool) IS DISTINCT FROM p_tool.compiled_sig
            THEN 'its table or conflict check changed since it was compiled'
    END;
END
$$;

-- The same for agentdb.tool_status, which calls it with the reader's rights.
CREATE OR REPLACE FUNCTION agentdb_private.stale_reason(p_tool agentdb_private.tools)
RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT agentdb_private.tool_stale(p_tool) $$;

-- By name, for the view: on Citus a view over the tools (a reference table)
-- may not call a function on their row type ("circular dependencies").
CREATE OR REPLACE FUNCTION agentdb_private.stale_reason(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tool agentdb_private.tools;
BEGIN
    SELECT * INTO v_tool FROM agentdb_private.tools AS t WHERE t.name = p_name;
    RETURN agentdb_private.tool_stale(v_tool);
END
$$;

-- Recompile the tools (the owner, after DDL made some stale; or to retry).
CREATE OR REPLACE FUNCTION agentdb.compile_tools(every boolean DEFAULT false)
RETURNS TABLE (tool text, status text)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT c.tool, c.status FROM agentdb_private.compile_changed(compile_tools.every) AS c $$;

-- Each tool's compiled state, for DBAs and `pyagentdb doctor`.
CREATE OR REPLACE VIEW agentdb.tool_status AS
SELECT
    t.name AS tool,
    t.compiled_at,
    agentdb_private.stale_reason(t.name) AS stale_reason,
    agentdb_private.stale_reason(t.name) IS NOT NULL AS stale,
    agentdb_private.ddl_watched() AS ddl_watched
FROM agentdb_private.tools AS t;

-- The event trigger needs a superuser. Without one, the signature check in
-- invoke keeps stale code from running (docs/architecture.md).
DO $evt$
BEGIN
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        DROP EVENT TRIGGER IF EXISTS agentdb_ddl;
        CREATE EVENT TRIGGER agentdb_ddl ON ddl_command_end EXECUTE FUNCTION agentdb_private.on_ddl();
    END IF;
END
$evt$;

GRANT SELECT ON agentdb.tool_status TO agentdb_app, agentdb_auditor;
GRANT EXECUTE ON FUNCTION agentdb_private.stale_reason(agentdb_private.tools), agentdb_private.stale_reason(text)
TO agentdb_app, agentdb_auditor;
