-- A DBA's additions to run_sql's function allow-list. The built-in list
-- (agentdb_private.sql_allowed_functions) names time, text and number
-- functions of pg_catalog; a DBA may add a function of their own (a slug, a
-- normaliser), by its signature, after checking that it has no side effect
-- and reads no other data: the database check (sql_function_refusal) then lets
-- a statement call it. agentdb.sql_function_list() (at the end) is the whole
-- list by name, as the Python guard and the run_sql tool description read it.

-- Add function fn to the list (again: its reason is replaced). The writer role
-- gets EXECUTE on it when it lacks it (taken back by disallow_sql_function).
CREATE OR REPLACE FUNCTION agentdb.allow_sql_function(fn regprocedure, reason text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_proc pg_catalog.pg_proc;
    v_schema name;
    v_signature text;
    v_grant boolean;
BEGIN
    IF fn IS NULL THEN
        RAISE EXCEPTION 'allow_sql_function: a function is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO v_proc FROM pg_catalog.pg_proc AS p WHERE p.oid = fn;
    v_schema := (SELECT n.nspname FROM pg_catalog.pg_namespace AS n WHERE n.oid = v_proc.pronamespace);
    IF v_schema IN ('agentdb', 'agentdb_private') THEN
        RAISE EXCEPTION 'allow_sql_function: % belongs to agentdb', fn USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF v_proc.prokind <> 'f' THEN
        RAISE EXCEPTION 'allow_sql_function: % is not a plain function (an aggregate, window function or procedure)', fn
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_proc.prorettype IN ('pg_catalog.trigger'::regtype, 'pg_catalog.event_trigger'::regtype) THEN
        RAISE EXCEPTION 'allow_sql_function: % is a trigger function', fn USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_proc.proretset THEN
        RAISE EXCEPTION 'allow_sql_function: % returns a set', fn USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_signature := agentdb_private.sql_function_signature(fn);
    v_grant := NOT has_function_privilege('agentdb_sql_writer', fn, 'EXECUTE');
    IF v_grant THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO agentdb_sql_writer', fn);
    END IF;
    INSERT INTO agentdb_private.sql_functions AS f (signature, reason, granted_by_agentdb)
    VALUES (v_signature, nullif(btrim(allow_sql_function.reason), ''), v_grant)
    ON CONFLICT (signature) DO UPDATE
        SET reason = excluded.reason,
            granted_by_agentdb = f.granted_by_agentdb OR excluded.granted_by_agentdb;
    RETURN (SELECT to_jsonb(s) FROM agentdb.sql_functions AS s WHERE s.signature = v_signature);
END
$$;

-- Take function fn off the list (and back the EXECUTE allow_sql_function
-- gave). True when it was on it.
CREATE OR REPLACE FUNCTION agentdb.disallow_sql_function(fn regprocedure)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row agentdb_private.sql_functions;
BEGIN
    DELETE FROM agentdb_private.sql_functions AS f
     WHERE f.signature = agentdb_private.sql_function_signature(fn)
    RETURNING * INTO v_row;
    IF v_row.signature IS NULL THEN
        RETURN false;
    END IF;
    IF v_row.granted_by_agentdb THEN
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM agentdb_sql_writer', fn);
    END IF;
    RETURN true;
END
$$;

-- The functions a DBA added, for DBAs, auditors and runtimes (the Python guard
-- accepts calls of them by name). present: false once the function is
-- dropped (its row then allows nothing; a function made again with the same
-- signature is allowed again).
CREATE OR REPLACE VIEW agentdb.sql_functions AS
SELECT
    f.signature,
    p.oid IS NOT NULL AS present,
    n.nspname AS schema_name,
    p.proname AS function_name,
    f.reason,
    f.granted_by_agentdb,
    f.added_by,
    f.added_at
FROM agentdb_private.sql_functions AS f
LEFT JOIN pg_catalog.pg_proc AS p ON p.oid = to_regprocedure(f.signature)
LEFT JOIN pg_catalog.pg_namespace AS n ON p.pronamespace = n.oid;

GRANT SELECT ON agentdb.sql_functions TO agentdb_agent, agentdb_app, agentdb_auditor;

-- The whole allow-list by name, as the Python guard reads it
-- (pyagentdb.sqlguard.sql_functions) and the run_sql tool description names
-- it: the functions a DBA added that exist, the built-in list of pg_catalog
-- and agentdb.sql_user(). unqualified: a statement may call it without its
-- schema (agentdb is not on the statement's search path). ordinal: the order
-- the tool description names them in. The database's own check
-- (sql_function_refusal) is stricter: a DBA's function by its signature, and
-- an extension's function of a built-in name only without side effects. A
-- function, not a view: revision 0012's downgrade drops what it reads.
CREATE OR REPLACE FUNCTION agentdb.sql_function_list()
RETURNS TABLE (schema_name name, function_name name, unqualified boolean, source text, ordinal integer)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH listed AS (
        SELECT f.schema_name, f.function_name, true AS unqualified, 'dba' AS source, 1 AS tier, 0::bigint AS n
          FROM agentdb.sql_functions AS f
         WHERE f.present
        UNION ALL
        SELECT 'pg_catalog', b.name, true, 'built-in', 2, b.n
          FROM unnest(agentdb_private.sql_allowed_functions()) WITH ORDINALITY AS b (name, n)
        UNION ALL
        SELECT 'agentdb', 'sql_user', false, 'agentdb', 3, 0
    )
    SELECT l.schema_name, l.function_name, bool_or(l.unqualified), min(l.source),
           row_number() OVER (ORDER BY min(l.tier), min(l.n), l.schema_name, l.function_name)::integer
      FROM listed AS l
     GROUP BY l.schema_name, l.function_name
$$;

GRANT EXECUTE ON FUNCTION agentdb.sql_function_list() TO agentdb_agent, agentdb_app, agentdb_auditor;
