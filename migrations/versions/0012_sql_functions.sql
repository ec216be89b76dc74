-- Functions a DBA adds to run_sql's allow-list (agentdb.allow_sql_function):
-- one row per function, named by its schema-qualified signature as
-- agentdb_private.sql_function_signature prints it (text, not regprocedure:
-- it survives dump and restore, and pg_upgrade refuses reg* columns).
-- Idempotent: install --repair runs it again.
CREATE TABLE IF NOT EXISTS agentdb_private.sql_functions (
    signature text PRIMARY KEY,
    reason text,
    granted_by_agentdb boolean NOT NULL DEFAULT false,
    added_by text NOT NULL DEFAULT current_user,
    added_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON agentdb_private.sql_functions FROM PUBLIC;
