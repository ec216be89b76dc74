-- Revision 0005: tables enabled for agent-written SQL (agentdb.run_sql) and the
-- NOLOGIN role that such statements run as.

DO $roles$
BEGIN
    -- The only identity an agent's statement ever runs with: privileges on the
    -- enabled tables (granted by agentdb.allow_sql), nothing else. Cluster-wide:
    -- created once, never dropped on downgrade.
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentdb_sql_writer') THEN
        CREATE ROLE agentdb_sql_writer NOLOGIN NOINHERIT;
    END IF;
    -- The installer owns the functions that switch to it (a SECURITY DEFINER
    -- function cannot SET ROLE, so the switch is a function owned by this role),
    -- and must be a member to create them.
    IF NOT pg_has_role(current_user, 'agentdb_sql_writer', 'MEMBER') THEN
        EXECUTE format('GRANT agentdb_sql_writer TO %I', current_user);
    END IF;
END
$roles$;

-- Tables an agent may write with run_sql.
CREATE TABLE agentdb_private.sql_tables (
    target regclass PRIMARY KEY,
    -- Rows belong to the task's user through this column (row-level security
    -- confines the writer role to them); NULL: the table is not per-user.
    owner_column text,
    max_rows integer,
    label_zh text,
    label_en text,
    -- allow_sql enabled row-level security on the table (disallow_sql turns it off again).
    rls_enabled_by_agentdb boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sql_tables_max_rows_check CHECK (max_rows IS NULL OR max_rows > 0)
);

-- Whose statement is running in which backend, while run_sql executes it.
-- A row lives only inside run_sql's own transaction, so no other session sees it.
CREATE TABLE agentdb_private.sql_scope (
    backend_pid integer PRIMARY KEY,
    user_id text NOT NULL,
    target regclass NOT NULL
);
