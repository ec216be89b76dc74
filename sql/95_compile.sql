-- Runs last. Watched tables get the triggers of this version (a table watched
-- before 0010 gets the owner column in its loggers' arguments), then every
-- registered tool is compiled with the compiler just installed (sql/42_compile.sql)
-- and the dispatcher regenerated. A tool that no longer compiles is marked
-- stale with the reason (see agentdb.tool_status).
DO $rearm$
DECLARE
    v_watched record;
BEGIN
    FOR v_watched IN SELECT w.table_oid, w.key_columns, w.owner_column FROM agentdb_private.watched AS w
                      WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.oid = w.table_oid) LOOP
        PERFORM agentdb_private.watch_table(v_watched.table_oid::regclass, v_watched.key_columns, v_watched.owner_column);
    END LOOP;
END
$rearm$;

SELECT count(*) AS compiled_tools FROM agentdb_private.compile_changed(true);
