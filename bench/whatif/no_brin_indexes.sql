-- What if audit and change_log had no BRIN index on their time column?
DROP INDEX agentdb_private.audit_at_brin;
DROP INDEX agentdb_private.change_log_at_brin;
