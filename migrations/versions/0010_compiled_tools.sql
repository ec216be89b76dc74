-- Revision 0010: tools compiled at registration (sql/42_compile.sql).
-- Idempotent, like every revision from 0007 on: `pyagentdb install --repair`
-- runs it again. Each tool's function lives in the schema agentdb_tools (no
-- role but the owner may use it); the tools table records what the code was
-- compiled from and, when DDL made it stale, why.

CREATE SCHEMA IF NOT EXISTS agentdb_tools;
REVOKE ALL ON SCHEMA agentdb_tools FROM PUBLIC;

ALTER TABLE agentdb_private.tools ADD COLUMN IF NOT EXISTS compiled_sig text;
ALTER TABLE agentdb_private.tools ADD COLUMN IF NOT EXISTS compiled_at timestamptz;
ALTER TABLE agentdb_private.tools ADD COLUMN IF NOT EXISTS stale_reason text;
