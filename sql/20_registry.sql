-- Tool registry and per-user permissions.

-- Earlier signature (before confirm_ttl): dropped so named calls stay unambiguous.
DROP FUNCTION IF EXISTS agentdb.register_tool(
    text, text, regclass, text, text, text[], text, text[], text[], regprocedure, text, text, text,
    boolean, integer
);

-- A conflict check must not search pg_temp before the tables it reads: a
-- function declared SET search_path = public searches pg_temp first, so an
-- agent session's temporary table of the same name would stand in for the real
-- one. Accepted: no SET search_path (it then runs with invoke's pinned
-- pg_catalog, pg_temp), or a path that names pg_temp last.
CREATE OR REPLACE FUNCTION agentdb_private.check_search_path(p_check regprocedure, p_tool text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_path text;
    v_parts text [];
    v_fn text;
BEGIN
    SELECT substr(c, length('search_path=') + 1),
           format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes))
      INTO v_path, v_fn
      FROM pg_catalog.pg_proc AS p
      JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
      LEFT JOIN LATERAL unnest(p.proconfig) AS c ON c LIKE 'search_path=%'
     WHERE p.oid = p_check;
    IF v_path IS NULL THEN
        RETURN;
    END IF;
    v_parts := ARRAY(SELECT trim(both ' "' FROM x) FROM unnest(string_to_array(v_path, ',')) AS x);
    IF v_parts[cardinality(v_parts)] = 'pg_temp' THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'tool %: conflict check % sets search_path = %, which searches pg_temp first', p_tool, v_fn, v_path
        USING ERRCODE = 'invalid_parameter_value',
              DETAIL = 'A session''s temporary table of the same name would stand in for the table the check reads.',
              HINT = format('Name pg_temp last: ALTER FUNCTION %s SET search_path = %s', v_fn,
                            array_to_string(array_remove(v_parts, 'pg_temp') || 'pg_temp'::text, ', '));
END
$$;

-- Check a tool's definition before it is stored: raises with a message that
-- says what to fix. Returns the key columns (the primary key when none given).
-- About 85 lines, past the 80 of the other functions: a flat list of
-- independent checks, each one IF with its own message and hint, read top to
-- bottom in the order a definition is written; split, it would only pass the
-- same record around.
CREATE OR REPLACE FUNCTION agentdb_private.check_tool(p_tool agentdb_private.tools)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_cols text [];
    v_keys text [];
    v_col text;
    v_kind "char";
    v_proc record;
BEGIN
    IF p_tool.name IS NULL OR p_tool.name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'tool name % is not valid', coalesce(quote_literal(p_tool.name), 'NULL')
            USING HINT = 'Use lower-case letters, digits and underscores, starting with a letter.',
                  ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_tool.action IS NULL OR p_tool.action NOT IN ('insert', 'update', 'delete') THEN
        RAISE EXCEPTION 'tool %: action must be insert, update or delete, not %', p_tool.name, coalesce(p_tool.action, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_tool.risk IS NULL OR p_tool.risk NOT IN ('read', 'write', 'irreversible') THEN
        RAISE EXCEPTION 'tool %: risk must be read, write or irreversible, not %', p_tool.name, coalesce(p_tool.risk, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_tool.confirm_ttl IS NOT NULL AND p_tool.confirm_ttl <= interval '0' THEN
        RAISE EXCEPTION 'tool %: confirm_ttl must be positive, not %', p_tool.name, p_tool.confirm_ttl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_tool.target IS NULL THEN
        RAISE EXCEPTION 'tool %: target table is required', p_tool.name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.relkind INTO v_kind FROM pg_catalog.pg_class AS c WHERE c.oid = p_tool.target;
    IF v_kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'tool %: % is not a table', p_tool.name, p_tool.target
            USING HINT = 'Tools write to ordinary or partitioned tables, not views or sequences.',
                  ERRCODE = 'wrong_object_type';
    END IF;
    IF (SELECT n.nspname FROM pg_catalog.pg_class AS c
            JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = p_tool.target)
            IN ('agentdb', 'agentdb_private', 'pg_catalog', 'information_schema') THEN
        RAISE EXCEPTION 'tool %: % belongs to agentdb or the system and cannot be a tool target', p_tool.name, p_tool.target
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(trim(p_tool.label_zh), '') = '' OR coalesce(trim(p_tool.label_en), '') = '' THEN
        RAISE EXCEPTION 'tool %: both label_zh and label_en are required', p_tool.name
            USING HINT = 'Labels are the everyday phrase a user sees, e.g. 记一条提醒 / set a reminder.',
                  ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT array_agg(t.column_name) INTO v_cols FROM agentdb_private.table_columns(p_tool.target) AS t;
    v_keys := coalesce(p_tool.key_columns, agentdb_private.primary_key(p_tool.target));
    IF cardinality(v_keys) = 0 THEN
        RAISE EXCEPTION 'tool %: % has no primary key, so key_columns must be given', p_tool.name, p_tool.target
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    FOREACH v_col IN ARRAY v_keys || coalesce(p_tool.compare_columns, '{}') || coalesce(p_tool.dedup_columns, '{}')
            || ARRAY[p_tool.owner_column, p_tool.version_column] LOOP
        IF v_col IS NOT NULL AND NOT v_col = ANY (v_cols) THEN
            RAISE EXCEPTION 'tool %: table % has no column %', p_tool.name, p_tool.target, quote_literal(v_col)
                USING HINT = format('Columns of %s: %s', p_tool.target, array_to_string(v_cols, ', ')),
                      ERRCODE = 'undefined_column';
        END IF;
    END LOOP;

    IF p_tool.dedup_columns IS NOT NULL AND p_tool.action <> 'insert' THEN
        RAISE EXCEPTION 'tool %: dedup_columns only apply to insert tools', p_tool.name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_tool.version_column IS NOT NULL AND p_tool.action <> 'update' THEN
        RAISE EXCEPTION 'tool %: version_column only applies to update tools', p_tool.name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The claim classes a tool p_tool.backs are those of the exit gate (sql/claim_patterns.json).
    PERFORM agentdb_private.check_backs(p_tool.name, p_tool.backs);

    IF p_tool.conflict_check IS NOT NULL THEN
        SELECT p.pronargs, p.proargtypes::oid [] AS argtypes, p.prorettype INTO v_proc
          FROM pg_catalog.pg_proc AS p WHERE p.oid = p_tool.conflict_check;
        IF v_proc.pronargs <> 2 OR v_proc.argtypes[0] <> 'text'::regtype
                OR v_proc.argtypes[1] <> 'jsonb'::regtype
                OR v_proc.prorettype NOT IN ('text'::regtype, 'jsonb'::regtype) THEN
            RAISE EXCEPTION 'tool %: conflict check % must take (user_id text, args jsonb) and return text or jsonb', p_tool.name, p_tool.conflict_check
                USING HINT = 'Return NULL when there is no conflict, or the reason as text (or jsonb {reason, alternative}).',
                      ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM agentdb_private.check_search_path(p_tool.conflict_check, p_tool.name);
    END IF;
    RETURN v_keys;
END
$$;

-- Earlier signature (before backs): dropped so named calls stay unambiguous.
DROP FUNCTION IF EXISTS agentdb.register_tool(
    text, text, regclass, text, text, text[], text, text[], text[], regprocedure, text, text, text,
    boolean, integer, interval
);

-- Register (or re-register) a tool. Validates the table and every column
-- named, and fails with a message that says what to fix.
CREATE OR REPLACE FUNCTION agentdb.register_tool(
    name text,
    action text,
    target regclass,
    label_zh text,
    label_en text,
    key_columns text[] DEFAULT NULL,
    owner_column text DEFAULT NULL,
    compare_columns text[] DEFAULT NULL,
    dedup_columns text[] DEFAULT NULL,
    conflict_check regprocedure DEFAULT NULL,
    risk text DEFAULT 'write',
    version_column text DEFAULT NULL,
    description text DEFAULT NULL,
    needs_confirm boolean DEFAULT false,
    max_rows integer DEFAULT NULL,
    confirm_ttl interval DEFAULT NULL,
    backs text[] DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tool agentdb_private.tools;
    v_keys text [];
BEGIN
    v_tool.name := register_tool.name;
    v_tool.action := register_tool.action;
    v_tool.target := register_tool.target;
    v_tool.label_zh := register_tool.label_zh;
    v_tool.label_en := register_tool.label_en;
    v_tool.key_columns := register_tool.key_columns;
    v_tool.owner_column := register_tool.owner_column;
    v_tool.compare_columns := register_tool.compare_columns;
    v_tool.dedup_columns := register_tool.dedup_columns;
    v_tool.conflict_check := register_tool.conflict_check;
    v_tool.risk := register_tool.risk;
    v_tool.version_column := register_tool.version_column;
    v_tool.confirm_ttl := register_tool.confirm_ttl;
    v_tool.backs := register_tool.backs;
    v_keys := agentdb_private.check_tool(v_tool);

    INSERT INTO agentdb_private.tools AS t (
        name, action, target, label_zh, label_en, description, key_columns, owner_column,
        compare_columns, dedup_columns, conflict_check, risk, version_column, needs_confirm, max_rows,
        confirm_ttl, backs
    ) VALUES (
        register_tool.name, register_tool.action, register_tool.target, register_tool.label_zh,
        register_tool.label_en, register_tool.description, v_keys, register_tool.owner_column,
        register_tool.compare_columns, register_tool.dedup_columns, register_tool.conflict_check,
        register_tool.risk, register_tool.version_column, coalesce(register_tool.needs_confirm, false),
        register_tool.max_rows, coalesce(register_tool.confirm_ttl, interval '30 minutes'),
        register_tool.backs
    )
    ON CONFLICT ON CONSTRAINT tools_pkey DO UPDATE SET
        action = excluded.action, target = excluded.target, label_zh = excluded.label_zh,
        label_en = excluded.label_en, description = excluded.description,
        key_columns = excluded.key_columns, owner_column = excluded.owner_column,
        compare_columns = excluded.compare_columns, dedup_columns = excluded.dedup_columns,
        conflict_check = excluded.conflict_check, risk = excluded.risk,
        version_column = excluded.version_column, needs_confirm = excluded.needs_confirm,
        max_rows = excluded.max_rows, confirm_ttl = excluded.confirm_ttl, backs = excluded.backs,
        -- excluded.created_at is now(): Citus takes no STABLE function in DO UPDATE SET.
        updated_at = excluded.created_at;

    -- Watch the target (sql/63_watch.sql): its change log names rows by the
    -- primary key, or by the tool's key when the table has none, and chains
    -- each row under its owner.
    PERFORM agentdb_private.watch_table(target,
        coalesce(nullif(agentdb_private.primary_key(target), '{}'), v_keys), register_tool.owner_column);
    -- Compile the tool (sql/42_compile.sql): invoke runs this code, and nothing else.
    PERFORM agentdb_private.compile_tool(register_tool.name);

    RETURN (SELECT to_jsonb(t) FROM agentdb.tools AS t WHERE t.name = register_tool.name);
END
$$;

CREATE OR REPLACE FUNCTION agentdb.unregister_tool(name text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_gone boolean;
BEGIN
    DELETE FROM agentdb_private.tools AS t WHERE t.name = unregister_tool.name;
    v_gone := FOUND;
    IF v_gone THEN
        PERFORM set_config('agentdb.compiling', 'on', true);
        EXECUTE format('DROP FUNCTION IF EXISTS agentdb_tools.%I(text, jsonb, integer, bigint, text, boolean, text)',
                       unregister_tool.name);
        PERFORM agentdb_private.compile_dispatch();
        PERFORM set_config('agentdb.compiling', '', true);
    END IF;
    RETURN v_gone;
END
$$;

-- Grant WRITE or DELETE to a user, for one tool, one table, or (both NULL) every tool.
CREATE OR REPLACE FUNCTION agentdb.grant_permission(
    user_id text, permission text, tool text DEFAULT NULL, target regclass DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_perm text := upper(trim(permission));
BEGIN
    IF coalesce(trim(user_id), '') = '' THEN
        RAISE EXCEPTION 'user_id is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(user_id) > 200 THEN
        RAISE EXCEPTION 'user_id is at most 200 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_perm IS NULL OR v_perm NOT IN ('WRITE', 'DELETE') THEN
        RAISE EXCEPTION 'permission must be WRITE or DELETE, not %', coalesce(permission, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tool IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agentdb_private.tools AS t WHERE t.name = grant_permission.tool) THEN
        RAISE EXCEPTION 'no tool named %', quote_literal(tool)
            USING HINT = 'See SELECT name FROM agentdb.tools.', ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO agentdb_private.permissions (user_id, permission, tool, target)
    VALUES (grant_permission.user_id, v_perm, grant_permission.tool, grant_permission.target)
    ON CONFLICT DO NOTHING;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.revoke_permission(
    user_id text, permission text, tool text DEFAULT NULL, target regclass DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM agentdb_private.permissions AS p
         WHERE p.user_id = revoke_permission.user_id
           AND p.permission = upper(trim(revoke_permission.permission))
           AND p.tool IS NOT DISTINCT FROM revoke_permission.tool
           AND p.target IS NOT DISTINCT FROM revoke_permission.target
        RETURNING 1
    )
    SELECT count(*) > 0 FROM gone
$$;

-- Does this user hold the permission for this tool (by tool, by table, or for all)?
-- No SET clause: called only inside agentdb's functions (search_path pinned).
-- PL/pgSQL: its plan is kept for the session (an SQL function with a query
-- would be planned again in every call).
CREATE OR REPLACE FUNCTION agentdb_private.has_permission(
    p_user text, p_permission text, p_tool text, p_target regclass
)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM agentdb_private.permissions AS p
         WHERE p.user_id = p_user
           AND p.permission = p_permission
           AND (p.tool = p_tool OR p.target = p_target OR (p.tool IS NULL AND p.target IS NULL))
    );
END
$$;
