-- Privileges. Runs last, after every function and view exists.
-- Default: nobody but the owner may do anything; then grant per role.

REVOKE ALL ON SCHEMA agentdb_private FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA agentdb_private FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA agentdb_private FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA agentdb FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA agentdb FROM PUBLIC;
REVOKE CREATE ON SCHEMA agentdb FROM PUBLIC;

GRANT USAGE ON SCHEMA agentdb TO agentdb_app, agentdb_agent, agentdb_auditor;

-- Called by the agentdb.tools view with the reader's rights.
GRANT EXECUTE ON FUNCTION agentdb_private.args_schema(agentdb_private.tools), agentdb_private.args_schema(text)
TO agentdb_app, agentdb_agent, agentdb_auditor;

-- The trusted runtime: opens and settles tasks, manages permissions.
GRANT EXECUTE ON FUNCTION
agentdb.begin_task(text, text, text, boolean, text, boolean, text),
agentdb.finish_task(uuid),
agentdb.reap_tasks(interval),
agentdb.replan(uuid),
agentdb.grant_permission(text, text, text, regclass),
agentdb.revoke_permission(text, text, text, regclass)
TO agentdb_app;
GRANT SELECT ON agentdb.tools, agentdb.permissions TO agentdb_app;

-- The agent: writes only through invoke.
GRANT EXECUTE ON FUNCTION
agentdb.invoke(uuid, text, jsonb, text, text, integer, bigint)
TO agentdb_agent;
GRANT SELECT ON agentdb.tools TO agentdb_agent;

-- The auditor: reads the views, changes nothing.
GRANT SELECT ON
agentdb.tools,
agentdb.permissions,
agentdb.v_tasks,
agentdb.v_steps,
agentdb.v_audit,
agentdb.v_problems,
agentdb.v_errors_by_tool
TO agentdb_auditor;

-- Agents get no TEMPORARY privilege of their own: a temporary table is how a
-- session shadows a table that an unpinned function reads (see
-- agentdb_private.check_search_path). While TEMPORARY is granted to PUBLIC
-- (PostgreSQL's default) members still have it: `pyagentdb doctor` says so and
-- gives the commands for the DBA.
DO $temp$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM agentdb_agent', current_database());
END
$temp$;
