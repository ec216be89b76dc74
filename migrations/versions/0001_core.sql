-- Revision 0001: schemas, group roles and the core tables.
-- Functions, views and triggers are not here: they are re-applied from sql/
-- after every upgrade, so this file holds only what carries data.

DO $roles$
BEGIN
    -- Roles are cluster-wide: create them once, never drop them on downgrade.
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentdb_app') THEN
        CREATE ROLE agentdb_app NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentdb_agent') THEN
        CREATE ROLE agentdb_agent NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentdb_auditor') THEN
        CREATE ROLE agentdb_auditor NOLOGIN;
    END IF;
END
$roles$;

-- API schema: functions and views only.
CREATE SCHEMA agentdb;
-- Private schema: tables and internal helpers; no agentdb role may touch it.
CREATE SCHEMA agentdb_private;

CREATE TABLE agentdb_private.tools (
    name text PRIMARY KEY,
    action text NOT NULL,
    target regclass NOT NULL,
    label_zh text NOT NULL,
    label_en text NOT NULL,
    description text,
    key_columns text[] NOT NULL,
    owner_column text,
    compare_columns text[],
    dedup_columns text[],
    conflict_check regprocedure,
    risk text NOT NULL DEFAULT 'write',
    version_column text,
    needs_confirm boolean NOT NULL DEFAULT false,
    max_rows integer,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tools_action_check CHECK (action IN ('insert', 'update', 'delete')),
    CONSTRAINT tools_risk_check CHECK (risk IN ('read', 'write', 'irreversible')),
    CONSTRAINT tools_name_check CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    CONSTRAINT tools_max_rows_check CHECK (max_rows IS NULL OR max_rows > 0)
);

CREATE TABLE agentdb_private.permissions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    permission text NOT NULL,
    tool text REFERENCES agentdb_private.tools (name) ON DELETE CASCADE,
    target regclass,
    granted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT permissions_kind_check CHECK (permission IN ('WRITE', 'DELETE'))
);

-- One grant per (user, permission, scope); NULL scope means every tool.
CREATE UNIQUE INDEX permissions_scope_key
ON agentdb_private.permissions (
    user_id, permission, coalesce(tool, ''), coalesce(target::oid, 0)
);

CREATE TABLE agentdb_private.tasks (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id text NOT NULL,
    conversation_id text NOT NULL,
    goal text,
    authenticated boolean NOT NULL DEFAULT false,
    lang text NOT NULL DEFAULT 'zh',
    status text NOT NULL DEFAULT 'running',
    replans integer NOT NULL DEFAULT 0,
    -- Set when the execution report is taken: later invokes are refused.
    closed_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    settled_by text,
    CONSTRAINT tasks_status_check CHECK (
        status IN ('running', 'success', 'partial', 'failed')
    ),
    CONSTRAINT tasks_lang_check CHECK (lang IN ('zh', 'en'))
);

CREATE INDEX tasks_user_idx ON agentdb_private.tasks (user_id, created_at);
CREATE INDEX tasks_running_idx ON agentdb_private.tasks (created_at)
WHERE status = 'running';

CREATE TABLE agentdb_private.steps (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id uuid NOT NULL REFERENCES agentdb_private.tasks (id),
    seq integer NOT NULL,
    tool text,
    action text,
    args jsonb,
    reason text,
    outcome text NOT NULL,
    refusal text,
    verified boolean NOT NULL DEFAULT false,
    attempts integer NOT NULL DEFAULT 0,
    error text,
    affected_rows integer NOT NULL DEFAULT 0,
    call_id text,
    receipt jsonb NOT NULL,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT steps_outcome_check CHECK (
        outcome IN (
            'success', 'refused', 'invalid', 'duplicate', 'conflict',
            'failed', 'unverified', 'needs_confirmation'
        )
    ),
    CONSTRAINT steps_reason_length CHECK (char_length(reason) <= 500),
    CONSTRAINT steps_seq_key UNIQUE (task_id, seq)
);

-- A call_id is used once per task: the replay returns the first receipt.
CREATE UNIQUE INDEX steps_call_key ON agentdb_private.steps (task_id, call_id)
WHERE call_id IS NOT NULL;

CREATE TABLE agentdb_private.audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id uuid,
    step_id bigint REFERENCES agentdb_private.steps (id),
    user_id text,
    tool text,
    action text,
    target text,
    status text NOT NULL,
    outcome text NOT NULL,
    refusal text,
    detail text,
    db_role text NOT NULL DEFAULT current_user,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT audit_status_check CHECK (status IN ('SUCCESS', 'FAILED', 'REFUSED'))
);

CREATE INDEX audit_at_brin ON agentdb_private.audit USING brin (at);
CREATE INDEX audit_task_idx ON agentdb_private.audit (task_id);

-- User-facing sentences, one catalogue for every language.
CREATE TABLE agentdb_private.messages (
    code text NOT NULL,
    lang text NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (code, lang)
);

-- What sql/ looked like at each install, so a re-install with no change is a no-op.
CREATE TABLE agentdb_private.install_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sql_sha256 text NOT NULL,
    installed_by text NOT NULL DEFAULT current_user,
    installed_at timestamptz NOT NULL DEFAULT now()
);
