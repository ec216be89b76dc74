-- Internal helpers shared by the API functions. None is executable by PUBLIC.

-- Column names and types of a table, in column order, without dropped columns.
CREATE OR REPLACE FUNCTION agentdb_private.table_columns(p_table regclass)
RETURNS TABLE (column_name text, type_name text, type_oid oid, not_null boolean, has_default boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.attname::text,
           format_type(a.atttypid, a.atttypmod),
           a.atttypid,
           a.attnotnull,
           (a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '')
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid = p_table
       AND a.attnum > 0
       AND NOT a.attisdropped
     ORDER BY a.attnum
$$;

-- Primary-key columns of a table, in key order (empty when it has none).
CREATE OR REPLACE FUNCTION agentdb_private.primary_key(p_table regclass)
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(a.attname::text ORDER BY k.ord), '{}')
      FROM pg_catalog.pg_index AS i
     CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k (attnum, ord)
      JOIN pg_catalog.pg_attribute AS a
        ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = p_table AND i.indisprimary
$$;

-- A user-facing sentence from the catalogue, with {name} placeholders filled
-- from p_vars. Falls back to English, then to the code itself.
CREATE OR REPLACE FUNCTION agentdb_private.msg(p_code text, p_lang text, p_vars jsonb DEFAULT '{}')
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_body text;
    v_key text;
    v_val text;
BEGIN
    SELECT m.body INTO v_body
      FROM agentdb_private.messages AS m
     WHERE m.code = p_code AND m.lang = coalesce(p_lang, 'zh');
    IF v_body IS NULL THEN
        SELECT m.body INTO v_body
          FROM agentdb_private.messages AS m
         WHERE m.code = p_code AND m.lang = 'en';
    END IF;
    IF v_body IS NULL THEN
        RETURN p_code;
    END IF;
    -- {Label}: the label with its first letter capitalised, to start a sentence.
    IF strpos(v_body, '{Label}') > 0 THEN
        v_body := replace(v_body, '{Label}',
            upper(left(coalesce(p_vars ->> 'label', ''), 1)) || substr(coalesce(p_vars ->> 'label', ''), 2));
    END IF;
    FOR v_key, v_val IN SELECT e.key, e.value FROM jsonb_each_text(coalesce(p_vars, '{}')) AS e LOOP
        v_body := replace(v_body, '{' || v_key || '}', coalesce(v_val, ''));
    END LOOP;
    RETURN v_body;
END
$$;

-- JSON Schema type of a column, derived from its PostgreSQL type.
CREATE OR REPLACE FUNCTION agentdb_private.json_schema_of(p_type_oid oid, p_type_name text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_type_oid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)
            THEN jsonb_build_object('type', 'integer')
        WHEN p_type_oid IN ('numeric'::regtype, 'float4'::regtype, 'float8'::regtype)
            THEN jsonb_build_object('type', 'number')
        WHEN p_type_oid = 'bool'::regtype
            THEN jsonb_build_object('type', 'boolean')
        WHEN p_type_oid IN ('timestamptz'::regtype, 'timestamp'::regtype)
            THEN jsonb_build_object('type', 'string', 'format', 'date-time')
        WHEN p_type_oid = 'date'::regtype
            THEN jsonb_build_object('type', 'string', 'format', 'date')
        WHEN p_type_oid IN ('time'::regtype, 'timetz'::regtype)
            THEN jsonb_build_object('type', 'string', 'format', 'time')
        WHEN p_type_oid = 'uuid'::regtype
            THEN jsonb_build_object('type', 'string', 'format', 'uuid')
        WHEN p_type_oid IN ('json'::regtype, 'jsonb'::regtype)
            THEN jsonb_build_object('type', jsonb_build_array('object', 'array', 'string', 'number', 'boolean'))
        WHEN p_type_name LIKE '%[]'
            THEN jsonb_build_object('type', 'array')
        ELSE jsonb_build_object('type', 'string')
    END
$$;

-- Is the table distributed by Citus? False on a server without Citus.
CREATE OR REPLACE FUNCTION agentdb_private.is_distributed(p_table regclass)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_found boolean;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
           INTO v_found USING p_table;
    END IF;
    RETURN coalesce(v_found, false);
END
$$;

-- True on a Citus worker node (a call delegated there by the coordinator);
-- false on the coordinator and on a server without Citus.
CREATE OR REPLACE FUNCTION agentdb_private.on_citus_worker()
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_worker boolean;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        EXECUTE 'SELECT groupid <> 0 FROM pg_catalog.pg_dist_local_group' INTO v_worker;
    END IF;
    RETURN coalesce(v_worker, false);
END
$$;
