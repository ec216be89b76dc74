-- agentdb.run_sql: one INSERT, UPDATE or DELETE written by an agent, run as
-- the NOLOGIN role agentdb_sql_writer on a table enabled with agentdb.allow_sql,
-- inside a step with an expected row count. See docs/sql-guard.md.
--
-- The boundary is the role and this procedure, not a parser: the statement is
-- planned by the server itself (EXPLAIN, as the writer role, opened as a
-- cursor so that a second statement is an error before anything runs), the
-- plan must be one plain write of one enabled table, and after it ran the
-- transaction's own statistics must show that nothing else changed.

-- Sentences for the refusals below (same rules as sql/60_messages.sql: no
-- internal names).
INSERT INTO agentdb_private.messages AS m (code, lang, body) VALUES
('detail.refused.sql_guard', 'zh', '没能{label}:这条修改的写法无法安全核对,所以没有执行,什么都没有改动。'),
('detail.refused.sql_guard', 'en', 'Couldn''t {label}: the change wasn''t written in a form that can be checked safely, so it was not carried out and nothing was changed.'),
('detail.refused.sql_not_single', 'zh', '没能{label}:一次只能做一项修改,这次没有执行,什么都没有改动。'),
('detail.refused.sql_not_single', 'en', 'Couldn''t {label}: only one change can be made at a time, so it was not carried out and nothing was changed.'),
('detail.refused.sql_not_dml', 'zh', '没能{label}:这种操作不能这样做,什么都没有改动。'),
('detail.refused.sql_not_dml', 'en', 'Couldn''t {label}: that kind of operation can''t be done this way, so nothing was changed.'),
('detail.refused.sql_not_simple', 'zh', '没能{label}:这条修改牵涉了别的内容,无法安全核对,所以没有执行,什么都没有改动。'),
('detail.refused.sql_not_simple', 'en', 'Couldn''t {label}: the change reached beyond the items it names and can''t be checked safely, so it was not carried out and nothing was changed.'),
('detail.refused.table_not_allowed', 'zh', '没能{label}:这部分数据不能这样修改,什么都没有改动。'),
('detail.refused.table_not_allowed', 'en', 'Couldn''t {label}: that data can''t be changed this way, so nothing was changed.'),
('detail.refused.sql_denied', 'zh', '没能{label}:这条修改会动到不允许改动的内容(比如不属于你的条目),已经撤回,什么都没有改动。'),
('detail.refused.sql_denied', 'en', 'Couldn''t {label}: it reached items it may not change (for example ones that aren''t yours), so it was undone and nothing was changed.'),
('detail.refused.side_effect', 'zh', '没能{label}:这条修改会改动比要求更多的东西,已经撤回,什么都没有改动。'),
('detail.refused.side_effect', 'en', 'Couldn''t {label}: it would have changed more than was asked, so it was undone and nothing was changed.'),
('detail.invalid.expect_rows_required', 'zh', '没能{label}:没有说明预计改动几条,为了安全没有执行,什么都没有改动。'),
('detail.invalid.expect_rows_required', 'en', 'Couldn''t {label}: it didn''t say how many items should change, so to be safe nothing was changed.'),
('detail.refused.function_not_allowed', 'zh', '没能{label}:这条修改用到了不允许使用的功能,所以没有执行,什么都没有改动。'),
('detail.refused.function_not_allowed', 'en', 'Couldn''t {label}: the change used something that isn''t allowed here, so it was not carried out and nothing was changed.'),
('detail.failed.timeout', 'zh', '没能{label}:处理时间太长,已经停止,什么都没有改动,可以稍后重试。'),
('detail.failed.timeout', 'en', 'Couldn''t {label}: it took too long and was stopped; nothing was changed. You can try again later.')
ON CONFLICT (code, lang) DO UPDATE SET body = excluded.body;

-- Longest statement accepted (pyagentdb.sqlguard.MAX_SQL_CHARS is the same).
CREATE OR REPLACE FUNCTION agentdb_private.max_sql_chars()
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT 20000 $$;

-- The first word of a statement, lower-cased, after leading blanks and
-- comments (nested /* */ included). NULL when there is none.
CREATE OR REPLACE FUNCTION agentdb_private.sql_first_word(p_sql text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text := p_sql;
    v_depth integer;
    v_pos integer;
BEGIN
    LOOP
        v := ltrim(v, E' \t\r\n\f\v');
        IF left(v, 2) = '--' THEN
            -- As the server's lexer: a line comment ends at \n or \r.
            v_pos := coalesce(least(nullif(strpos(v, E'\n'), 0), nullif(strpos(v, E'\r'), 0)), 0);
            v := CASE WHEN v_pos = 0 THEN '' ELSE substr(v, v_pos + 1) END;
        ELSIF left(v, 2) = '/*' THEN
            v_depth := 1;
            v_pos := 3;
            WHILE v_depth > 0 AND v_pos <= length(v) LOOP
                IF substr(v, v_pos, 2) = '/*' THEN
                    v_depth := v_depth + 1;
                    v_pos := v_pos + 2;
                ELSIF substr(v, v_pos, 2) = '*/' THEN
                    v_depth := v_depth - 1;
                    v_pos := v_pos + 2;
                ELSE
                    v_pos := v_pos + 1;
                END IF;
            END LOOP;
            IF v_depth > 0 THEN
                RETURN NULL;
            END IF;
            v := substr(v, v_pos);
        ELSE
            EXIT;
        END IF;
    END LOOP;
    RETURN lower(substring(v FROM '^[A-Za-z_]+'));
END
$$;

-- Names in an agent's statement resolve in pg_catalog first (no shadowing of
-- built-in functions and operators), then in the schemas of the enabled
-- tables (public first), and in pg_temp last.
CREATE OR REPLACE FUNCTION agentdb_private.sql_search_path()
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT concat_ws(', ', 'pg_catalog', (
        SELECT string_agg(quote_ident(s.nspname), ', ' ORDER BY s.nspname <> 'public', s.nspname)
          FROM (SELECT DISTINCT n.nspname
                  FROM agentdb_private.sql_tables AS t
                  JOIN pg_catalog.pg_class AS c ON c.oid = t.target
                  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace) AS s
    ), 'pg_temp')
$$;

-- The task's user, while run_sql executes a statement in this backend (NULL
-- otherwise). Row-level security on owner-scoped tables compares with it,
-- and a statement may use it: INSERT ... VALUES (agentdb.sql_user(), ...).
CREATE OR REPLACE FUNCTION agentdb.sql_user()
RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.user_id FROM agentdb_private.sql_scope AS s WHERE s.backend_pid = pg_catalog.pg_backend_pid()
$$;

-- The functions a statement may call, by name, from pg_catalog: run_sql's
-- built-in allow-list, the only copy. The Python guard and the run_sql tool
-- description read it through agentdb.sql_function_list() (with
-- agentdb.sql_user() and a DBA's additions; sql/68_sql_functions.sql). Time,
-- text and number functions with no side effect and no access to other data.
-- extract, position, overlay, timezone, similar_to_escape and overlaps are
-- what EXTRACT(...), POSITION(... IN ...), OVERLAY(...), AT TIME ZONE, SIMILAR
-- TO and OVERLAPS call. The first line holds the ones the tool description
-- names first (as many as fit); the order means nothing else.
CREATE OR REPLACE FUNCTION agentdb_private.sql_allowed_functions()
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY[
        'now', 'lower', 'upper', 'btrim', 'round', 'length', 'replace', 'concat', 'date_trunc', 'abs',
        'clock_timestamp', 'statement_timestamp', 'transaction_timestamp',
        'date_part', 'extract', 'make_date', 'make_time', 'make_timestamp',
        'make_timestamptz', 'make_interval', 'to_timestamp', 'to_date', 'to_char', 'to_number',
        'timezone', 'overlaps', 'age', 'justify_days', 'justify_hours', 'justify_interval', 'isfinite',
        'initcap', 'ltrim', 'rtrim', 'char_length',
        'substr', 'substring', 'left', 'right', 'concat_ws', 'lpad', 'rpad',
        'position', 'strpos', 'overlay', 'similar_to_escape', 'split_part', 'translate', 'reverse',
        'starts_with', 'regexp_replace', 'md5',
        'trunc', 'floor', 'ceil', 'ceiling', 'mod', 'sign',
        'gen_random_uuid'
    ]
$$;

-- A function's schema-qualified signature, as agentdb.allow_sql_function
-- stores it in agentdb_private.sql_functions (a DBA's additions to the list).
CREATE OR REPLACE FUNCTION agentdb_private.sql_function_signature(p_fn oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes))
      FROM pg_catalog.pg_proc AS p
      JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
     WHERE p.oid = p_fn
$$;

-- Why the statement may not call function p_fn, or NULL when it may: a
-- function of the list above in pg_catalog (or one of an extension, e.g.
-- citext's, by the same name and without side effects), a cast function of
-- pg_catalog, agentdb.sql_user(), or one a DBA added by its signature
-- (agentdb.allow_sql_function); and the writer role must hold EXECUTE.
CREATE OR REPLACE FUNCTION agentdb_private.sql_function_refusal(p_fn oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p.oid IS NULL THEN format('function %s is not known', p_fn)
        WHEN NOT (
            p.oid = 'agentdb.sql_user()'::regprocedure
            OR p.pronamespace = 'pg_catalog'::regnamespace
               AND (p.proname = ANY (agentdb_private.sql_allowed_functions())
                    OR EXISTS (SELECT 1 FROM pg_catalog.pg_cast AS c WHERE c.castfunc = p.oid))
            OR p.proname = ANY (agentdb_private.sql_allowed_functions()) AND p.provolatile <> 'v'
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                            WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
                              AND d.deptype = 'e')
            OR EXISTS (SELECT 1 FROM agentdb_private.sql_functions AS f
                        WHERE f.signature = agentdb_private.sql_function_signature(p.oid)))
            THEN format('function %s is not allowed in an agent''s statement', p.oid::regprocedure)
        WHEN NOT has_function_privilege('agentdb_sql_writer', p.oid, 'EXECUTE')
            THEN format('function %s may not be called by agentdb_sql_writer', p.oid::regprocedure)
    END
      FROM (SELECT p_fn AS fn) AS x
      LEFT JOIN pg_catalog.pg_proc AS p ON p.oid = x.fn
$$;

-- Why the statement may not use operator p_op, or NULL when it may: every
-- operator of pg_catalog, and an extension's whose function has no side
-- effect (citext's =, for instance).
CREATE OR REPLACE FUNCTION agentdb_private.sql_operator_refusal(p_op oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN o.oid IS NULL THEN format('operator %s is not known', p_op)
        WHEN NOT (
            o.oprnamespace = 'pg_catalog'::regnamespace
            OR f.provolatile <> 'v'
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                            WHERE d.classid = 'pg_catalog.pg_operator'::regclass AND d.objid = o.oid
                              AND d.deptype = 'e'))
            THEN format('operator %s is not allowed in an agent''s statement', o.oid::regoperator)
        WHEN NOT has_function_privilege('agentdb_sql_writer', o.oprcode, 'EXECUTE')
            THEN format('operator %s may not be used by agentdb_sql_writer', o.oid::regoperator)
    END
      FROM (SELECT p_op AS op) AS x
      LEFT JOIN pg_catalog.pg_operator AS o ON o.oid = x.op
      LEFT JOIN pg_catalog.pg_proc AS f ON f.oid = o.oprcode
$$;

-- The statement as PostgreSQL analyzed it: its query tree (pg_node_tree
-- text), stored by a function made for the moment with a BEGIN ATOMIC body,
-- in a subtransaction that is then rolled back, so nothing of it stays. Only
-- called after sql_writer_parse proved the text to be one statement, so the
-- text around it cannot turn into a second command.
CREATE OR REPLACE FUNCTION agentdb_private.sql_query_tree(p_statement text, p_path text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name text := 'sql_probe_' || pg_backend_pid();
    v_tree text;
BEGIN
    BEGIN
        PERFORM set_config('search_path', p_path, true);
        EXECUTE format(E'CREATE FUNCTION agentdb_private.%I() RETURNS void LANGUAGE sql\nBEGIN ATOMIC\n%s\n;\nEND',
                       v_name, p_statement);
        SELECT p.prosqlbody::text INTO v_tree
          FROM pg_catalog.pg_proc AS p
         WHERE p.proname = v_name AND p.pronamespace = 'agentdb_private'::regnamespace;
        RAISE EXCEPTION USING ERRCODE = 'AD002';
    EXCEPTION WHEN SQLSTATE 'AD002' THEN
        NULL;
    END;
    RETURN v_tree;
END
$$;

-- Why the analyzed statement p_tree may not run, or NULL: a function or an
-- operator it calls that is not allowed. Read from the tree's text, where
-- constants are printed as bytes and names with their blanks escaped, so
-- nothing the statement says can pose as a field (a name that happens to
-- read ":funcid" could only add a refusal, never hide a call). The fields:
-- funcid (every function call, cast and SQL form such as EXTRACT), aggfnoid,
-- winfnoid, tsmhandler and the window range functions; opno (operators, IS
-- DISTINCT FROM, NULLIF, IN and ANY), opnos (row comparisons), eqop, sortop.
CREATE OR REPLACE FUNCTION agentdb_private.sql_call_refusal(p_tree text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH calls AS (
        SELECT m[1] AS field, m[2]::oid AS ref
          FROM regexp_matches(p_tree,
                  '[ ({]:(funcid|aggfnoid|winfnoid|tsmhandler|startInRangeFunc|endInRangeFunc|opno|eqop|sortop) (\d+)',
                  'g') AS m
        UNION ALL
        SELECT 'opno', o::oid
          FROM regexp_matches(p_tree, '[ ({]:opnos \(o((?: \d+)*)\)', 'g') AS m,
               regexp_split_to_table(btrim(m[1]), ' ') AS o
         WHERE o <> ''
    ),
    refused AS (
        SELECT CASE WHEN c.field IN ('opno', 'eqop', 'sortop') THEN agentdb_private.sql_operator_refusal(c.ref)
                    ELSE agentdb_private.sql_function_refusal(c.ref) END AS why
          FROM (SELECT DISTINCT calls.field, calls.ref FROM calls WHERE calls.ref <> 0) AS c
    )
    SELECT CASE
        WHEN p_tree IS NULL THEN agentdb_private.not_done('invalid', 'sql_error', 'the statement could not be analyzed')
        ELSE (SELECT agentdb_private.not_done('refused', 'function_not_allowed', min(r.why))
                FROM refused AS r WHERE r.why IS NOT NULL HAVING count(*) > 0)
    END
$$;

-- Why the analyzed statement p_tree is not the shape of one plain write, or
-- NULL: a subquery anywhere (even one the planner would fold away), WHERE
-- CURRENT OF a cursor of the session, or a
-- range-table entry other than the table and, for an INSERT, its VALUES list:
-- rtekind 1 (a subquery in FROM, INSERT ... SELECT), 2 (a join), 3 (a
-- function in FROM), 4 (XMLTABLE, JSON_TABLE), 5 (VALUES in FROM), 6 (WITH).
-- The guard draws the same line; the plan is checked again after planning.
CREATE OR REPLACE FUNCTION agentdb_private.sql_shape_refusal(p_tree text, p_action text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN strpos(p_tree, '{SUBLINK ') > 0 THEN agentdb_private.not_done('refused', 'sql_not_simple',
            'a subquery is not allowed: it could read other rows or tables; give literal values')
        WHEN strpos(p_tree, '{CURRENTOFEXPR ') > 0 THEN agentdb_private.not_done('refused', 'sql_not_simple',
            'WHERE CURRENT OF a cursor is not allowed; name the rows by their values')
        ELSE (SELECT agentdb_private.not_done('refused', 'sql_not_simple', CASE min(m[1])
                  WHEN '1' THEN 'a subquery in FROM or INSERT ... SELECT is not allowed; give the values with VALUES (...)'
                  WHEN '2' THEN 'a join is not allowed; change one table and name its rows in WHERE'
                  WHEN '3' THEN 'a function in FROM is not allowed'
                  WHEN '4' THEN 'XMLTABLE or JSON_TABLE in FROM is not allowed'
                  WHEN '5' THEN 'VALUES in FROM is not allowed; name the rows in WHERE'
                  ELSE 'WITH is not allowed' END)
                FROM regexp_matches(p_tree, '[ ({]:rtekind ([1-6]) ', 'g') AS m
               WHERE m[1] <> '5' OR p_action <> 'insert'
              HAVING count(*) > 0)
    END
$$;

-- Failed before anything ran (parsing, analyzing or planning): the refusal.
CREATE OR REPLACE FUNCTION agentdb_private.sql_prepare_failure(p_state text, p_msg text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_state = '42P11' THEN agentdb_private.not_done('refused', 'sql_not_single',
            'more than one statement was given')
        WHEN p_state IN ('42501', '42P01', '3F000') THEN agentdb_private.not_done('refused', 'table_not_allowed',
            format('%s (SQLSTATE %s)', p_msg, p_state))
        WHEN p_state = '57014' THEN agentdb_private.not_done('failed', 'timeout',
            'the statement was cancelled (statement_timeout) before it ran')
        ELSE agentdb_private.not_done('invalid', 'sql_error', format('%s (SQLSTATE %s)', p_msg, p_state))
    END
$$;

-- The two functions below run as agentdb_sql_writer (they are owned by it;
-- see the end of this file). Nothing in them may name an agentdb object: the
-- writer has no USAGE on agentdb_private.

-- Parse and analyze the statement with the writer's privileges, without
-- planning or running it: a cursor is opened over its EXPLAIN (PostgreSQL
-- cannot open one over two statements, 42P11) and closed before the first
-- fetch, which is when EXPLAIN would plan.
CREATE OR REPLACE FUNCTION agentdb_private.sql_writer_parse(p_statement text, p_path text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cursor refcursor;
BEGIN
    PERFORM pg_catalog.set_config('search_path', p_path, true);
    OPEN v_cursor FOR EXECUTE 'EXPLAIN (VERBOSE, FORMAT JSON) ' || p_statement;
    CLOSE v_cursor;
END
$$;

-- The server's own plan of the statement, made with the writer's privileges.
-- A cursor cannot be opened over more than one statement, so a second
-- statement fails here (42P11) before anything was executed.
CREATE OR REPLACE FUNCTION agentdb_private.sql_writer_plan(p_statement text, p_path text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row record;
BEGIN
    PERFORM pg_catalog.set_config('search_path', p_path, true);
    FOR v_row IN EXECUTE 'EXPLAIN (VERBOSE, FORMAT JSON) ' || p_statement LOOP
        RETURN v_row."QUERY PLAN"::jsonb;
    END LOOP;
    RETURN NULL;
END
$$;

-- Execute the (already planned) statement and report what the transaction's
-- statistics and the session's settings looked like around it. The two
-- readings are written out twice on purpose: as the writer, this function
-- may call nothing of agentdb_private, where a shared helper would live.
CREATE OR REPLACE FUNCTION agentdb_private.sql_writer_exec(p_statement text, p_path text)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    v_rows bigint;
    v_counts_before jsonb;
    v_counts_after jsonb;
    v_settings_before text;
    v_settings_after text;
BEGIN
    PERFORM pg_catalog.set_config('search_path', p_path, true);
    SELECT coalesce(jsonb_object_agg(c.oid::text, c.n), '{}')
      INTO v_counts_before
      FROM (SELECT r.oid, pg_catalog.pg_stat_get_xact_tuples_inserted(r.oid)
                          + pg_catalog.pg_stat_get_xact_tuples_updated(r.oid)
                          + pg_catalog.pg_stat_get_xact_tuples_deleted(r.oid) AS n
              FROM pg_catalog.pg_class AS r WHERE r.relkind IN ('r', 't', 'm', 'p')) AS c
     WHERE c.n > 0;
    SELECT md5(string_agg(g.name || '=' || coalesce(g.setting, ''), ',' ORDER BY g.name))
        || coalesce(current_setting('agentdb.call', true), '')
      INTO v_settings_before
      FROM pg_catalog.pg_settings AS g;

    EXECUTE p_statement;
    GET DIAGNOSTICS v_rows = ROW_COUNT;

    SELECT coalesce(jsonb_object_agg(c.oid::text, c.n), '{}')
      INTO v_counts_after
      FROM (SELECT r.oid, pg_catalog.pg_stat_get_xact_tuples_inserted(r.oid)
                          + pg_catalog.pg_stat_get_xact_tuples_updated(r.oid)
                          + pg_catalog.pg_stat_get_xact_tuples_deleted(r.oid) AS n
              FROM pg_catalog.pg_class AS r WHERE r.relkind IN ('r', 't', 'm', 'p')) AS c
     WHERE c.n > 0;
    SELECT md5(string_agg(g.name || '=' || coalesce(g.setting, ''), ',' ORDER BY g.name))
        || coalesce(current_setting('agentdb.call', true), '')
      INTO v_settings_after
      FROM pg_catalog.pg_settings AS g;

    RETURN jsonb_build_object(
        'rows', v_rows,
        'before', v_counts_before,
        'after', v_counts_after,
        'settings_changed', v_settings_before IS DISTINCT FROM v_settings_after);
END
$$;

-- Advisory locks this backend holds: a statement could take a session-level
-- one (it outlives a rollback) or release one of the runtime's, so run_sql
-- releases any it finds new and takes again any it finds gone.
CREATE OR REPLACE FUNCTION agentdb_private.sql_advisory_locks()
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'classid', l.classid::bigint, 'objid', l.objid::bigint, 'objsubid', l.objsubid,
        'mode', l.mode)), '[]')
      FROM pg_catalog.pg_locks AS l
     WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.granted
$$;

DROP FUNCTION IF EXISTS agentdb_private.sql_release_new_locks(jsonb);

-- Take (p_take, without waiting) or release once one advisory lock, as
-- sql_advisory_locks() shows it: one bigint key (objsubid 1) or two int4 keys
-- (shown as unsigned oids).
CREATE OR REPLACE FUNCTION agentdb_private.sql_lock_once(p_lock jsonb, p_take boolean)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_shared boolean := p_lock ->> 'mode' = 'ShareLock';
    v_hi bigint := (p_lock ->> 'classid')::bigint;
    v_lo bigint := (p_lock ->> 'objid')::bigint;
    v_key bigint := (v_hi << 32) | v_lo;
    v_k1 integer := (v_hi - CASE WHEN v_hi > 2147483647 THEN 4294967296 ELSE 0 END)::integer;
    v_k2 integer := (v_lo - CASE WHEN v_lo > 2147483647 THEN 4294967296 ELSE 0 END)::integer;
BEGIN
    IF (p_lock ->> 'objsubid')::integer = 1 THEN
        RETURN CASE WHEN p_take AND v_shared THEN pg_try_advisory_lock_shared(v_key)
                    WHEN p_take THEN pg_try_advisory_lock(v_key)
                    WHEN v_shared THEN pg_advisory_unlock_shared(v_key)
                    ELSE pg_advisory_unlock(v_key) END;
    END IF;
    RETURN CASE WHEN p_take AND v_shared THEN pg_try_advisory_lock_shared(v_k1, v_k2)
                WHEN p_take THEN pg_try_advisory_lock(v_k1, v_k2)
                WHEN v_shared THEN pg_advisory_unlock_shared(v_k1, v_k2)
                ELSE pg_advisory_unlock(v_k1, v_k2) END;
END
$$;

-- After a statement: release every advisory lock it took (taken possibly
-- several times over: until it is gone), and take again, once, any it
-- released (a lock does not come back with a rollback).
CREATE OR REPLACE FUNCTION agentdb_private.sql_restore_locks(p_before jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lock jsonb;
    v_released integer := 0;
BEGIN
    FOR v_lock IN SELECT a.value FROM jsonb_array_elements(agentdb_private.sql_advisory_locks()) AS a
                   WHERE NOT p_before @> jsonb_build_array(a.value) LOOP
        WHILE agentdb_private.sql_advisory_locks() @> jsonb_build_array(v_lock) AND v_released < 10000 LOOP
            PERFORM agentdb_private.sql_lock_once(v_lock, false);
            v_released := v_released + 1;
        END LOOP;
    END LOOP;
    FOR v_lock IN SELECT b.value FROM jsonb_array_elements(p_before) AS b
                   WHERE NOT agentdb_private.sql_advisory_locks() @> jsonb_build_array(b.value) LOOP
        PERFORM agentdb_private.sql_lock_once(v_lock, true);
    END LOOP;
END
$$;

-- The step's stand-in tool: label, action and table for the receipt and the
-- audit row (run_sql is not a registered tool).
CREATE OR REPLACE FUNCTION agentdb_private.sql_tool(p_action text, p_target regclass)
RETURNS agentdb_private.tools
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tool agentdb_private.tools;
    v_reg agentdb_private.sql_tables;
BEGIN
    SELECT * INTO v_reg FROM agentdb_private.sql_tables AS t WHERE t.target = p_target;
    v_tool.name := 'run_sql';
    v_tool.action := CASE WHEN p_action IN ('insert', 'update', 'delete') THEN p_action END;
    v_tool.target := p_target;
    v_tool.risk := 'write';
    v_tool.label_zh := coalesce(v_reg.label_zh, CASE v_tool.action
        WHEN 'insert' THEN '添加数据' WHEN 'delete' THEN '删除数据' ELSE '修改数据' END);
    v_tool.label_en := coalesce(v_reg.label_en, CASE v_tool.action
        WHEN 'insert' THEN 'add the data' WHEN 'delete' THEN 'delete the data' ELSE 'change the data' END);
    v_tool.key_columns := '{}';
    v_tool.needs_confirm := false;
    RETURN v_tool;
END
$$;

-- Which relation a changed relation counts as: a TOAST table as its table.
CREATE OR REPLACE FUNCTION agentdb_private.sql_owning_relation(p_rel oid)
RETURNS oid
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT c.oid FROM pg_catalog.pg_class AS c WHERE c.reltoastrelid = p_rel LIMIT 1), p_rel)
$$;

-- sql_write (below) runs one statement in phases, each a function here, the
-- callee before its caller. They share one value: a jsonb object that holds
-- the action and the target found so far (sql_action, sql_target) and, once
-- a phase refuses, the refusal (outcome, refusal, error, ...).

-- Phase 1 of sql_write: a first look at the text, before it is parsed (the
-- plan is what decides). {"sql_action": ...}, or why not.
CREATE OR REPLACE FUNCTION agentdb_private.sql_first_look(p_statement text, p_expect_rows integer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_word text := agentdb_private.sql_first_word(p_statement);
    v_action jsonb;
BEGIN
    IF coalesce(btrim(p_statement, E' \t\r\n\f\v;'), '') = '' THEN
        RETURN agentdb_private.not_done('invalid', 'sql_error', 'the statement is empty');
    END IF;
    IF length(p_statement) > agentdb_private.max_sql_chars() THEN
        RETURN agentdb_private.not_done('invalid', 'too_large',
            format('the statement is %s characters, the limit is %s', length(p_statement),
                   agentdb_private.max_sql_chars()));
    END IF;
    IF v_word IS NULL OR v_word NOT IN ('insert', 'update', 'delete') THEN
        RETURN agentdb_private.not_done('refused', 'sql_not_dml',
            format('only INSERT, UPDATE or DELETE may be run, not %s', coalesce(upper(left(v_word, 30)), 'this')));
    END IF;
    v_action := jsonb_build_object('sql_action', v_word);
    IF p_expect_rows IS NULL OR p_expect_rows < 1 THEN
        RETURN agentdb_private.not_done('invalid', 'expect_rows_required',
            'expect_rows (how many rows the statement must change, at least 1) is required') || v_action;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM agentdb_private.sql_tables) THEN
        RETURN agentdb_private.not_done('refused', 'table_not_allowed', 'no table is enabled for run_sql')
            || v_action;
    END IF;
    RETURN v_action;
END
$$;

-- Phases 2 and 3 of sql_write: the statement parsed as the writer (one
-- statement, every name resolved, nothing planned or run yet); every function
-- and operator it calls allowed, and no subquery, join, function or VALUES in
-- FROM, before it is planned (planning already runs immutable functions of
-- constants); then the server's plan, as the writer. {"plan": ...}, or why not.
CREATE OR REPLACE FUNCTION agentdb_private.sql_prepare(p_statement text, p_path text, p_action text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tree_text text;
    v_plan jsonb;
    v_fail jsonb;
    v_state text;
    v_msg text;
BEGIN
    BEGIN
        PERFORM agentdb_private.sql_writer_parse(p_statement, p_path);
        v_tree_text := agentdb_private.sql_query_tree(p_statement, p_path);
        v_fail := coalesce(agentdb_private.sql_call_refusal(v_tree_text),
                           agentdb_private.sql_shape_refusal(v_tree_text, p_action));
        IF v_fail IS NULL THEN
            v_plan := agentdb_private.sql_writer_plan(p_statement, p_path);
        END IF;
    EXCEPTION
        WHEN query_canceled THEN
            v_fail := agentdb_private.sql_prepare_failure('57014', NULL);
        WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            v_fail := agentdb_private.sql_prepare_failure(v_state, v_msg);
    END;
    RETURN coalesce(v_fail, jsonb_build_object('plan', v_plan));
END
$$;

-- The relations of table p_target: its partitions, or itself.
CREATE OR REPLACE FUNCTION agentdb_private.sql_table_tree(p_target regclass)
RETURNS oid[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT array_agg(p.relid::oid) FROM pg_catalog.pg_partition_tree(p_target) AS p),
                    ARRAY[p_target::oid])
$$;

-- Phase 4 of sql_write, its root: one plan (a rule on the table can turn one
-- statement into several), whose root is the ModifyTable of the statement's
-- kind on an enabled table; no upsert, and no ON CONFLICT at all on an
-- owner-scoped table. {"sql_action", "sql_target"}, or the refusal with them.
CREATE OR REPLACE FUNCTION agentdb_private.sql_plan_root(p_plan jsonb, p_action text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_root jsonb := p_plan -> 0 -> 'Plan';
    v_action jsonb := jsonb_build_object('sql_action', p_action);
    v_target regclass;
    v_reg agentdb_private.sql_tables;
    v_result jsonb;
BEGIN
    IF jsonb_array_length(p_plan) <> 1 THEN
        RETURN agentdb_private.not_done('refused', 'sql_not_simple',
            format('the statement became %s statements (a rule on the table)', jsonb_array_length(p_plan)))
            || v_action;
    END IF;
    IF v_root ->> 'Node Type' IS DISTINCT FROM 'ModifyTable'
            OR lower(v_root ->> 'Operation') IS DISTINCT FROM p_action THEN
        RETURN agentdb_private.not_done('refused', 'sql_not_dml',
            format('the statement is not a plain %s (the plan starts with %s %s)', upper(p_action),
                   coalesce(v_root ->> 'Node Type', '?'), coalesce(v_root ->> 'Operation', '')))
            || v_action;
    END IF;
    v_target := to_regclass(format('%I.%I', v_root ->> 'Schema', v_root ->> 'Relation Name'));
    SELECT * INTO v_reg FROM agentdb_private.sql_tables AS t WHERE t.target = v_target;
    IF NOT FOUND THEN
        RETURN agentdb_private.not_done('refused', 'table_not_allowed',
            format('%s is not enabled for run_sql', coalesce(v_target::text, '?')))
            || v_action;
    END IF;
    v_result := v_action || jsonb_build_object('sql_target', v_target::oid);
    IF v_root ->> 'Conflict Resolution' IS DISTINCT FROM NULL AND v_root ->> 'Conflict Resolution' <> 'NOTHING' THEN
        RETURN agentdb_private.not_done('refused', 'sql_not_simple',
            'ON CONFLICT DO UPDATE is not allowed (an upsert''s row count proves nothing)') || v_result;
    END IF;
    IF v_root ? 'Conflict Resolution' AND v_reg.owner_column IS NOT NULL THEN
        -- Its row count would answer for rows of other users, which the
        -- statement may not see: a quiet probe of their keys.
        RETURN agentdb_private.not_done('refused', 'sql_not_simple',
            format('ON CONFLICT is not allowed on %s, whose rows belong to users: it would decide on rows '
                   'of other users; insert without it', v_target)) || v_result;
    END IF;
    RETURN v_result;
END
$$;

-- Phase 4 of sql_write, below the root: every node, checked for the most
-- telling reason first (a function in FROM, a subquery, another relation),
-- then for its kind and, for UPDATE/DELETE, a condition. Why not, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.sql_plan_nodes(p_root jsonb, p_action text, p_target regclass)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tree oid [] := agentdb_private.sql_table_tree(p_target);
    v_nodes jsonb [];
    v_node jsonb;
    v_type text;
    v_rel regclass;
BEGIN
    SELECT coalesce(array_agg(n), '{}') INTO v_nodes
      FROM jsonb_path_query(p_root -> 'Plans', 'strict $.**') AS n
     WHERE jsonb_typeof(n) = 'object' AND n ? 'Node Type';
    FOREACH v_node IN ARRAY v_nodes LOOP
        IF v_node ? 'Function Name' THEN
            RETURN agentdb_private.not_done('refused', 'sql_not_simple',
                format('a function in FROM is not allowed (%s)', v_node ->> 'Function Name'));
        END IF;
        IF v_node ->> 'Parent Relationship' IN ('InitPlan', 'SubPlan') THEN
            RETURN agentdb_private.not_done('refused', 'sql_not_simple',
                format('a subquery is not allowed (%s)', coalesce(v_node ->> 'Subplan Name', v_node ->> 'Node Type')));
        END IF;
        IF v_node ? 'Relation Name' THEN
            v_rel := to_regclass(format('%I.%I', v_node ->> 'Schema', v_node ->> 'Relation Name'));
            IF v_rel IS NULL OR NOT v_rel::oid = ANY (v_tree) OR p_action = 'insert' THEN
                RETURN agentdb_private.not_done('refused', 'sql_not_simple',
                    format('the statement reads %s; only the rows of %s it changes may be named',
                           coalesce(v_rel::text, v_node ->> 'Relation Name'), p_target));
            END IF;
        END IF;
    END LOOP;
    FOREACH v_node IN ARRAY v_nodes LOOP
        v_type := v_node ->> 'Node Type';
        IF NOT v_type = ANY (CASE WHEN p_action = 'insert'
                THEN ARRAY['Result', 'Values Scan']
                ELSE ARRAY['Seq Scan', 'Index Scan', 'Index Only Scan', 'Bitmap Heap Scan', 'Bitmap Index Scan',
                           'BitmapAnd', 'BitmapOr', 'Tid Scan', 'Tid Range Scan', 'Append', 'Merge Append',
                           'Result'] END) THEN
            RETURN agentdb_private.not_done('refused', 'sql_not_simple',
                format('%s is not allowed in an agent''s %s (only one table, no joins, subqueries or set '
                       'operations)', v_type, upper(p_action)));
        END IF;
        -- UPDATE/DELETE must name their rows: a scan of the table with no
        -- condition at all (no WHERE, or WHERE true / 1 = 1 folded away) is every row.
        IF p_action <> 'insert' AND v_node ? 'Relation Name' AND v_type <> 'Bitmap Index Scan'
                AND NOT (v_node ?| ARRAY['Filter', 'Index Cond', 'Recheck Cond', 'TID Cond']) THEN
            RETURN agentdb_private.not_done('refused', 'unbounded',
                format('%s without a condition would change every row', upper(p_action)));
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Phase 4 of sql_write: the plan must be one plain write of one enabled
-- table. {"sql_action", "sql_target"} when it is, else the refusal with them.
CREATE OR REPLACE FUNCTION agentdb_private.sql_check_plan(p_plan jsonb, p_action text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN r.v ? 'outcome' THEN r.v
                ELSE coalesce(agentdb_private.sql_plan_nodes(p_plan -> 0 -> 'Plan', p_action,
                                                             (r.v ->> 'sql_target')::oid::regclass) || r.v, r.v) END
      FROM (SELECT agentdb_private.sql_plan_root(p_plan, p_action) AS v) AS r
$$;

-- Phase 5 of sql_write: the same gate as invoke, now that the table is
-- known, and the table's max_rows. Why not, or NULL.
CREATE OR REPLACE FUNCTION agentdb_private.sql_admit(
    p_task agentdb_private.tasks, p_action text, p_target regclass, p_expect_rows integer
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_max integer := (SELECT t.max_rows FROM agentdb_private.sql_tables AS t WHERE t.target = p_target);
BEGIN
    RETURN coalesce(
        agentdb_private.gate_checks(p_task, 'run_sql', agentdb_private.sql_tool(p_action, p_target)),
        CASE WHEN v_max IS NOT NULL AND p_expect_rows > v_max THEN agentdb_private.not_done('refused', 'too_many_rows',
            format('%s rows expected, run_sql allows at most %s on %s', p_expect_rows, v_max, p_target)) END);
END
$$;

-- Rows changed per relation while the statement ran (sql_writer_exec's
-- statistics before and after): {"own": changes counted on the relations
-- p_tree of the table, "other": [names of other relations changed]}. A
-- TOAST table counts as its table; agentdb's own bookkeeping (a change log
-- trigger) does not count.
CREATE OR REPLACE FUNCTION agentdb_private.sql_counted_changes(p_exec jsonb, p_tree oid[])
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_delta bigint;
    v_rel oid;
    v_own bigint := 0;
    v_other text [] := '{}';
BEGIN
    FOR v_key, v_delta IN
        SELECT a.key, a.value::bigint - coalesce((p_exec -> 'before' ->> a.key)::bigint, 0)
          FROM jsonb_each_text(p_exec -> 'after') AS a LOOP
        CONTINUE WHEN v_delta = 0;
        v_rel := agentdb_private.sql_owning_relation(v_key::oid);
        IF v_rel = ANY (p_tree) THEN
            v_own := v_own + v_delta;
        ELSIF (SELECT n.nspname FROM pg_catalog.pg_class AS c
                 JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                WHERE c.oid = v_rel) IS DISTINCT FROM 'agentdb_private' THEN
            v_other := v_other || coalesce(v_rel::regclass::text, v_key);
        END IF;
    END LOOP;
    RETURN jsonb_build_object('own', v_own, 'other', to_jsonb(v_other));
END
$$;

-- Phase 6 of sql_write, the proof (inside its subtransaction, after the
-- statement ran): nothing changed but the table (the statistics), no setting
-- changed, no advisory lock taken or released (p_locks: held before), the
-- rows changed are expect_rows, the rows counted on the table are the rows
-- reported, and the change log holds exactly those rows for this step when
-- the table is watched. {"rows": n, "log": [{key, row}, ...]}, or why not.
CREATE OR REPLACE FUNCTION agentdb_private.sql_proof(
    p_task agentdb_private.tasks, p_seq integer, p_target regclass, p_expect_rows integer,
    p_locks jsonb, p_exec jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_tree oid [] := agentdb_private.sql_table_tree(p_target);
    v_counts jsonb := agentdb_private.sql_counted_changes(p_exec, v_tree);
    v_own bigint := (v_counts ->> 'own')::bigint;
    v_rows bigint := (p_exec ->> 'rows')::bigint;
    v_partitioned boolean := (SELECT c.relkind = 'p' FROM pg_catalog.pg_class AS c WHERE c.oid = p_target);
    v_logged bigint;
    v_log jsonb;
BEGIN
    IF jsonb_array_length(v_counts -> 'other') > 0 THEN
        RETURN agentdb_private.not_done('refused', 'side_effect', format('the statement also changed %s',
            (SELECT string_agg(o.name, ', ' ORDER BY o.n)
               FROM jsonb_array_elements_text(v_counts -> 'other') WITH ORDINALITY AS o (name, n))));
    ELSIF (p_exec ->> 'settings_changed')::boolean THEN
        RETURN agentdb_private.not_done('refused', 'side_effect', 'the statement changed a session setting');
    ELSIF NOT p_locks @> agentdb_private.sql_advisory_locks() THEN
        RETURN agentdb_private.not_done('refused', 'side_effect', 'the statement took an advisory lock');
    ELSIF NOT agentdb_private.sql_advisory_locks() @> p_locks THEN
        RETURN agentdb_private.not_done('refused', 'side_effect',
            'the statement released an advisory lock the session held');
    ELSIF v_rows <> p_expect_rows THEN
        RETURN agentdb_private.not_done('unverified', 'row_count',
            format('expected %s row(s) to change, %s did', p_expect_rows, v_rows),
            jsonb_build_object('expected_rows', p_expect_rows, 'matched_rows', v_rows));
    ELSIF v_own <> v_rows AND NOT (v_partitioned AND v_own BETWEEN v_rows AND 2 * v_rows) THEN
        -- e.g. a trigger on the table changed other rows of it as well.
        RETURN agentdb_private.not_done('refused', 'side_effect',
            format('%s row(s) reported, %s row change(s) counted on %s', v_rows, v_own, p_target));
    END IF;
    IF EXISTS (SELECT 1 FROM agentdb_private.watched AS w WHERE w.table_oid = p_target) THEN
        SELECT count(*), jsonb_agg(jsonb_build_object('key', c.key, 'row', coalesce(c.new_row, c.old_row))
                                   ORDER BY c.id)
          INTO v_logged, v_log
          FROM agentdb_private.change_log AS c
         WHERE c.task_id = p_task.id AND c.seq = p_seq AND c.table_oid = ANY (v_tree);
        IF v_logged <> v_rows AND NOT (v_partitioned AND v_logged BETWEEN v_rows AND 2 * v_rows) THEN
            RETURN agentdb_private.not_done('unverified', 'log_mismatch',
                format('%s row(s) changed, %s logged for this step', v_rows, v_logged),
                jsonb_build_object('expected_rows', v_rows, 'matched_rows', v_logged));
        END IF;
    END IF;
    RETURN jsonb_build_object('rows', v_rows, 'log', v_log);
END
$$;

-- An error while the statement ran, as a result: row-level security or
-- another privilege is sql_denied, a bad value or a constraint is invalid
-- (but a duplicate key or an exclusion is a failure, as for invoke).
CREATE OR REPLACE FUNCTION agentdb_private.sql_run_error(p_state text, p_msg text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT agentdb_private.not_done(
        CASE WHEN p_state = '42501' THEN 'refused'
             WHEN left(p_state, 2) IN ('22', '23') AND p_state NOT IN ('23505', '23P01') THEN 'invalid'
             ELSE 'failed' END,
        CASE WHEN p_state = '42501' THEN 'sql_denied'
             WHEN p_state = '23505' THEN 'unique_violation'
             WHEN p_state = '23P01' THEN 'exclusion_violation'
             WHEN p_state = '23514' THEN 'check_violation'
             WHEN p_state = '23502' THEN 'missing_field'
             WHEN p_state = '23503' THEN 'foreign_key_violation'
             WHEN p_state = '55P03' THEN 'timeout'
             WHEN left(p_state, 2) = '22' THEN 'bad_value'
             ELSE 'error' END,
        format('%s (SQLSTATE %s)', p_msg, p_state),
        jsonb_build_object('attempts', 1, 'sqlstate', p_state))
$$;

-- Phase 6 of sql_write: execute as the writer, in a subtransaction, with the
-- step's marker set and the task's user published to agentdb.sql_user(); then
-- the proof, and the subtransaction kept or rolled back. The result's outcome
-- part: success (with the row read back when one changed), or why not.
CREATE OR REPLACE FUNCTION agentdb_private.sql_run(
    p_task agentdb_private.tasks, p_seq integer, p_statement text, p_path text, p_expect_rows integer,
    p_target regclass, p_locks jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_exec jsonb;
    v_proof jsonb;
    v_state text;
    v_msg text;
BEGIN
    INSERT INTO agentdb_private.sql_scope AS s (backend_pid, user_id, target)
    VALUES (pg_backend_pid(), p_task.user_id, p_target)
    ON CONFLICT (backend_pid) DO UPDATE SET user_id = excluded.user_id, target = excluded.target;
    -- The step's marker (sql/63_watch.sql): a watched table's change log
    -- names this step as the one that made the change.
    PERFORM set_config('agentdb.call', p_task.id::text || ':' || p_seq::text, true);
    v_exec := agentdb_private.sql_writer_exec(p_statement, p_path);
    PERFORM set_config('agentdb.call', '', true);
    DELETE FROM agentdb_private.sql_scope AS s WHERE s.backend_pid = pg_backend_pid();
    v_proof := agentdb_private.sql_proof(p_task, p_seq, p_target, p_expect_rows, p_locks, v_exec);
    IF v_proof ? 'outcome' THEN
        RAISE EXCEPTION USING ERRCODE = 'AD001', MESSAGE = v_proof ->> 'error';
    END IF;
    RETURN jsonb_build_object('outcome', 'success', 'refusal', NULL, 'verified', true,
                              'affected_rows', (v_proof ->> 'rows')::bigint, 'attempts', 1, 'error', NULL)
        || CASE WHEN (v_proof ->> 'rows')::bigint = 1 AND jsonb_typeof(v_proof -> 'log') = 'array'
                THEN jsonb_build_object('key', v_proof -> 'log' -> 0 -> 'key', 'row', v_proof -> 'log' -> 0 -> 'row')
                ELSE '{}' END;
EXCEPTION
    WHEN SQLSTATE 'AD001' THEN
        RETURN v_proof || jsonb_build_object('attempts', 1);
    WHEN query_canceled THEN
        RETURN agentdb_private.not_done('failed', 'timeout', 'the statement was cancelled (statement_timeout)')
            || jsonb_build_object('attempts', 1);
    WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
        RETURN agentdb_private.sql_run_error(v_state, v_msg);
END
$$;

-- Plan, check, execute and prove one statement, phase by phase (above).
-- Never raises for a bad statement: every problem is a result object (with
-- the action and target found so far under the keys sql_action and
-- sql_target). A session-level advisory lock the statement took outlives the
-- rollback, and one it released does not come back: both are restored.
DROP FUNCTION IF EXISTS agentdb_private.sql_write(agentdb_private.tasks, text, integer);
CREATE OR REPLACE FUNCTION agentdb_private.sql_write(
    p_task agentdb_private.tasks, p_seq integer, p_statement text, p_expect_rows integer
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_result jsonb := agentdb_private.sql_first_look(p_statement, p_expect_rows);
    v_action text := v_result ->> 'sql_action';
    v_path text;
    v_target regclass;
    v_prepared jsonb;
    v_locks jsonb;
BEGIN
    IF v_result ? 'outcome' THEN
        RETURN v_result;
    END IF;
    v_path := agentdb_private.sql_search_path();
    v_prepared := agentdb_private.sql_prepare(p_statement, v_path, v_action);
    IF v_prepared ? 'outcome' THEN
        RETURN v_prepared || v_result;
    END IF;
    v_result := agentdb_private.sql_check_plan(v_prepared -> 'plan', v_action);
    IF v_result ? 'outcome' THEN
        RETURN v_result;
    END IF;
    v_target := (v_result ->> 'sql_target')::oid::regclass;
    v_prepared := agentdb_private.sql_admit(p_task, v_action, v_target, p_expect_rows);
    IF v_prepared IS NOT NULL THEN
        RETURN v_prepared || v_result;
    END IF;
    v_locks := agentdb_private.sql_advisory_locks();
    v_result := v_result || agentdb_private.sql_run(p_task, p_seq, p_statement, v_path, p_expect_rows, v_target,
                                                    v_locks);
    PERFORM agentdb_private.sql_restore_locks(v_locks);
    RETURN v_result;
END
$$;

-- Shared front half of run_sql and record_sql_refusal, on the envelope of
-- every guarded call (sql/50_invoke_api.sql): the task (locked), a replay by
-- call_id, the next step number, the gate; then the statement (sql_write) and
-- the step and audit rows.
CREATE OR REPLACE FUNCTION agentdb_private.sql_step(
    p_task uuid,
    p_statement text,
    p_expect_rows integer,
    p_call_id text,
    p_reason text,
    p_guard_refusal text
)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    v_result jsonb;
    v_args jsonb := jsonb_strip_nulls(jsonb_build_object(
        'statement', left(p_statement, agentdb_private.max_sql_chars()), 'expect_rows', p_expect_rows));
    v_action text := agentdb_private.sql_first_word(left(p_statement, agentdb_private.max_sql_chars()));
    v_tool agentdb_private.tools := agentdb_private.sql_tool(v_action, NULL);
    v_state text;
    v_msg text;
BEGIN
    s := agentdb_private.step_open(p_task, p_call_id, false);
    IF s.prior IS NOT NULL THEN
        RETURN s.prior;
    END IF;
    -- Permission needs the table, which only the plan tells: checked in sql_write.
    v_result := coalesce(s.refusal, agentdb_private.step_gate(s.task, 'run_sql', v_tool, p_call_id, false, true));
    IF v_result IS NULL AND p_guard_refusal IS NOT NULL THEN
        v_result := agentdb_private.not_done('refused', 'sql_guard', 'sql guard: ' || left(p_guard_refusal, 1000));
    END IF;
    IF v_result IS NULL THEN
        BEGIN
            v_result := agentdb_private.sql_write(s.task, s.seq, p_statement, p_expect_rows);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            v_result := agentdb_private.not_done('failed', 'error', format('%s (SQLSTATE %s)', v_msg, v_state));
        END;
        v_tool := agentdb_private.sql_tool(coalesce(v_result ->> 'sql_action', v_action),
                                           (v_result ->> 'sql_target')::oid::regclass);
    END IF;
    RETURN agentdb_private.record_step(s.task, s.seq, 'run_sql', v_tool, v_args, p_reason, s.call_id,
        s.started, v_result);
END
$$;

-- Run one INSERT/UPDATE/DELETE written by an agent, as a step. expect_rows
-- (required, at least 1) must equal the rows changed, or it is rolled back.
CREATE OR REPLACE FUNCTION agentdb.run_sql(
    task uuid,
    statement text,
    -- Required; the default only turns a missing value into a recorded refusal.
    expect_rows integer DEFAULT NULL,
    call_id text DEFAULT NULL,
    reason text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.sql_step(
        run_sql.task, run_sql.statement, run_sql.expect_rows, run_sql.call_id, run_sql.reason, NULL
    )
$$;

-- Record a statement that a client-side guard (pyagentdb.sqlguard) refused:
-- a refused step and an audit row, nothing executed.
CREATE OR REPLACE FUNCTION agentdb.record_sql_refusal(
    task uuid,
    statement text,
    refusal text DEFAULT NULL,
    call_id text DEFAULT NULL,
    reason text DEFAULT NULL,
    expect_rows integer DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT agentdb_private.sql_step(
        record_sql_refusal.task, record_sql_refusal.statement, record_sql_refusal.expect_rows,
        record_sql_refusal.call_id, record_sql_refusal.reason,
        coalesce(nullif(btrim(record_sql_refusal.refusal), ''), 'refused by the client''s guard')
    )
$$;

-- Drop the policies allow_sql made on a table (quietly when there are none).
CREATE OR REPLACE FUNCTION agentdb_private.sql_drop_policies(p_table regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name name;
BEGIN
    FOR v_name IN SELECT p.polname FROM pg_catalog.pg_policy AS p
                   WHERE p.polrelid = p_table AND p.polname IN ('agentdb_sql_owner', 'agentdb_sql_others') LOOP
        EXECUTE format('DROP POLICY %I ON %s', v_name, p_table);
    END LOOP;
END
$$;

-- The sequences of table p_table's serial and identity columns: INSERT needs
-- USAGE on them for the default.
CREATE OR REPLACE FUNCTION agentdb_private.sql_table_sequences(p_table regclass)
RETURNS SETOF regclass
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.objid::regclass
      FROM pg_catalog.pg_depend AS d
     WHERE d.refobjid = p_table AND d.classid = 'pg_catalog.pg_class'::regclass
       AND d.deptype IN ('a', 'i')
       AND (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid = d.objid) = 'S'
$$;

-- allow_sql, first: may table p_table be enabled, with these arguments? Its
-- schema, or an error.
CREATE OR REPLACE FUNCTION agentdb_private.sql_allow_checks(p_table regclass, p_owner_column text, p_max_rows integer)
RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_kind "char";
    v_schema name;
BEGIN
    IF p_table IS NULL THEN
        RAISE EXCEPTION 'allow_sql: target table is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.relkind, n.nspname INTO v_kind, v_schema
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE c.oid = p_table;
    IF v_kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'allow_sql: % is not a table', p_table
            USING HINT = 'Only ordinary or partitioned tables can be enabled for run_sql.',
                  ERRCODE = 'wrong_object_type';
    END IF;
    IF v_schema IN ('agentdb', 'agentdb_private', 'pg_catalog', 'information_schema') OR v_schema LIKE 'pg_%' THEN
        RAISE EXCEPTION 'allow_sql: % belongs to agentdb or the system', p_table USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_owner_column IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM agentdb_private.table_columns(p_table) AS c WHERE c.column_name = p_owner_column) THEN
        RAISE EXCEPTION 'allow_sql: table % has no column %', p_table, quote_literal(p_owner_column)
            USING HINT = format('Columns of %s: %s', p_table,
                (SELECT string_agg(c.column_name, ', ') FROM agentdb_private.table_columns(p_table) AS c)),
                  ERRCODE = 'undefined_column';
    END IF;
    IF p_max_rows IS NOT NULL AND p_max_rows < 1 THEN
        RAISE EXCEPTION 'allow_sql: max_rows must be at least 1, not %', p_max_rows
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_schema;
END
$$;

-- allow_sql, the row-level security of an owner-scoped table: a restrictive
-- policy confines the writer to the task user's rows. p_ours: row-level
-- security is on because agentdb turned it on. Returns p_ours afterwards.
CREATE OR REPLACE FUNCTION agentdb_private.sql_owner_policies(p_table regclass, p_owner_column text, p_ours boolean)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_catalog.pg_class AS c WHERE c.oid = p_table) AND NOT p_ours THEN
        -- The table has its own policies: leave them to others, give the writer
        -- a way in that the restrictive policy below narrows.
        EXECUTE format('CREATE POLICY agentdb_sql_others ON %s AS PERMISSIVE FOR ALL TO agentdb_sql_writer '
                       'USING (true) WITH CHECK (true)', p_table);
    ELSE
        -- Turning row-level security on must not change what anyone else sees.
        EXECUTE format('CREATE POLICY agentdb_sql_others ON %s AS PERMISSIVE FOR ALL TO PUBLIC '
                       'USING (true) WITH CHECK (true)', p_table);
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p_table);
        p_ours := true;
    END IF;
    EXECUTE format('CREATE POLICY agentdb_sql_owner ON %1$s AS RESTRICTIVE FOR ALL TO agentdb_sql_writer '
                   'USING (%2$I::text = agentdb.sql_user()) WITH CHECK (%2$I::text = agentdb.sql_user())',
                   p_table, p_owner_column);
    RETURN p_ours;
END
$$;

-- Enable a table for run_sql: the writer role gets SELECT, INSERT, UPDATE and
-- DELETE on it, and the table is watched (change log). With owner_column,
-- row-level security confines the writer to the task user's rows (reads and
-- writes): see docs/sql-guard.md.
CREATE OR REPLACE FUNCTION agentdb.allow_sql(
    target regclass,
    owner_column text DEFAULT NULL,
    max_rows integer DEFAULT NULL,
    label_zh text DEFAULT NULL,
    label_en text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schema name := agentdb_private.sql_allow_checks(target, owner_column, max_rows);
    v_ours boolean := coalesce((SELECT t.rls_enabled_by_agentdb FROM agentdb_private.sql_tables AS t
                                 WHERE t.target = allow_sql.target), false);
    v_seq regclass;
BEGIN
    -- Re-enabling: start from a clean table (the owner column may have changed).
    PERFORM agentdb_private.sql_drop_policies(target);
    IF v_ours AND owner_column IS NULL THEN
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', target);
        v_ours := false;
    END IF;

    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO agentdb_sql_writer', target);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO agentdb_sql_writer', v_schema);
    FOR v_seq IN SELECT agentdb_private.sql_table_sequences(target) LOOP
        EXECUTE format('GRANT USAGE ON SEQUENCE %s TO agentdb_sql_writer', v_seq);
    END LOOP;
    IF owner_column IS NOT NULL THEN
        v_ours := agentdb_private.sql_owner_policies(target, owner_column, v_ours);
    END IF;

    -- Watched (sql/63_watch.sql): every change is logged with the step that made
    -- it, and run_sql reads its own changes back from that log. Needs a primary key.
    PERFORM agentdb_private.watch_table(target, agentdb_private.primary_key(target));

    INSERT INTO agentdb_private.sql_tables AS t (target, owner_column, max_rows, label_zh, label_en,
                                               rls_enabled_by_agentdb)
    VALUES (allow_sql.target, allow_sql.owner_column, allow_sql.max_rows, nullif(btrim(allow_sql.label_zh), ''),
            nullif(btrim(allow_sql.label_en), ''), v_ours)
    ON CONFLICT ON CONSTRAINT sql_tables_pkey DO UPDATE SET
        owner_column = excluded.owner_column, max_rows = excluded.max_rows, label_zh = excluded.label_zh,
        label_en = excluded.label_en, rls_enabled_by_agentdb = excluded.rls_enabled_by_agentdb;
    RETURN (SELECT to_jsonb(s) FROM agentdb.sql_tables AS s WHERE s.target = allow_sql.target);
END
$$;

-- Disable a table for run_sql and undo what allow_sql did to it (except the
-- watch: a tool may rely on it; agentdb.unwatch removes it).
CREATE OR REPLACE FUNCTION agentdb.disallow_sql(target regclass)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_reg agentdb_private.sql_tables;
    v_schema name;
    v_seq regclass;
BEGIN
    DELETE FROM agentdb_private.sql_tables AS t WHERE t.target = disallow_sql.target RETURNING * INTO v_reg;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.oid = target) THEN
        RETURN true;  -- dropped since: nothing left to undo
    END IF;
    PERFORM agentdb_private.sql_drop_policies(target);
    IF v_reg.rls_enabled_by_agentdb THEN
        EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', target);
    END IF;
    EXECUTE format('REVOKE ALL ON %s FROM agentdb_sql_writer', target);
    FOR v_seq IN SELECT agentdb_private.sql_table_sequences(target) LOOP
        EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM agentdb_sql_writer', v_seq);
    END LOOP;
    SELECT n.nspname INTO v_schema FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF NOT EXISTS (SELECT 1 FROM agentdb_private.sql_tables AS t
                     JOIN pg_catalog.pg_class AS c ON c.oid = t.target
                    WHERE c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace AS n WHERE n.nspname = v_schema)) THEN
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM agentdb_sql_writer', v_schema);
    END IF;
    RETURN true;
END
$$;

-- The tables enabled for run_sql, for runtimes (which tables may the agent
-- write), DBAs and auditors.
CREATE OR REPLACE VIEW agentdb.sql_tables AS
SELECT
    t.target,
    t.owner_column,
    t.max_rows,
    t.label_zh,
    t.label_en,
    t.rls_enabled_by_agentdb,
    t.created_at,
    -- From the catalog directly: a view calls functions with the reader's rights.
    (
        SELECT
            jsonb_agg(
                jsonb_build_object('name', a.attname, 'type', format_type(a.atttypid, a.atttypmod))
                ORDER BY a.attnum
            )
        FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = t.target AND a.attnum > 0 AND NOT a.attisdropped
    ) AS columns,
    -- schema-qualified whatever the reader's search_path
    (
        SELECT format('%I.%I', n.nspname, c.relname)
        FROM pg_catalog.pg_class AS c
        INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid
        WHERE c.oid = t.target
    ) AS table_name
FROM agentdb_private.sql_tables AS t;

-- The writer-side functions belong to the writer role. Changing an owner to a
-- role needs that role to hold CREATE on the schema (superusers aside): only
-- for the moment of the change.
GRANT CREATE ON SCHEMA agentdb_private TO agentdb_sql_writer;
ALTER FUNCTION agentdb_private.sql_writer_parse(text, text) OWNER TO agentdb_sql_writer;
ALTER FUNCTION agentdb_private.sql_writer_plan(text, text) OWNER TO agentdb_sql_writer;
ALTER FUNCTION agentdb_private.sql_writer_exec(text, text) OWNER TO agentdb_sql_writer;
REVOKE CREATE ON SCHEMA agentdb_private FROM agentdb_sql_writer;
REVOKE ALL ON FUNCTION agentdb_private.sql_writer_parse(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentdb_private.sql_writer_plan(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentdb_private.sql_writer_exec(text, text) FROM PUBLIC;

-- Grants: the agent may run SQL and read which tables it may write; the
-- writer may name the task's user (and the policies call it as the writer).
REVOKE ALL ON FUNCTION agentdb.run_sql(uuid, text, integer, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentdb.record_sql_refusal(uuid, text, text, text, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentdb.sql_user() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
agentdb.run_sql(uuid, text, integer, text, text),
agentdb.record_sql_refusal(uuid, text, text, text, text, integer)
TO agentdb_agent;
GRANT USAGE ON SCHEMA agentdb TO agentdb_sql_writer;
GRANT EXECUTE ON FUNCTION agentdb.sql_user() TO agentdb_sql_writer;
GRANT SELECT ON agentdb.sql_tables TO agentdb_agent, agentdb_app, agentdb_auditor;
