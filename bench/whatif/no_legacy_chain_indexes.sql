-- What if the four unique indexes of the chains linked in their rows (before
-- revision 0015; rows since are linked in chain_links) were gone? Every new
-- audit and change-log row evaluates their predicates.
DROP INDEX agentdb_private.audit_chain_key;
DROP INDEX agentdb_private.audit_tenant_chain_key;
DROP INDEX agentdb_private.change_log_chain_key;
DROP INDEX agentdb_private.change_log_tenant_chain_key;
