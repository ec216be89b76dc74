-- Revision 0003: drafts (propose -> show -> confirm) and the action-confirmation centre.

-- How long a draft of this tool stays confirmable.
ALTER TABLE agentdb_private.tools
ADD COLUMN confirm_ttl interval NOT NULL DEFAULT '30 minutes';

CREATE TABLE agentdb_private.drafts (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id text NOT NULL,
    conversation_id text NOT NULL,
    task_id uuid NOT NULL REFERENCES agentdb_private.tasks (id),
    ordinal integer NOT NULL,
    tool text NOT NULL,
    args jsonb NOT NULL,
    args_hash text NOT NULL,
    expect_rows integer,
    summary_zh text NOT NULL,
    summary_en text NOT NULL,
    status text NOT NULL DEFAULT 'proposed',
    expires_at timestamptz NOT NULL,
    shown_in_task uuid REFERENCES agentdb_private.tasks (id),
    shown_at timestamptz,
    superseded_by uuid REFERENCES agentdb_private.drafts (id),
    closed_in_task uuid REFERENCES agentdb_private.tasks (id),
    closed_at timestamptz,
    step_id bigint REFERENCES agentdb_private.steps (id),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT drafts_status_check CHECK (
        status IN ('proposed', 'confirmed', 'superseded', 'rejected', 'expired', 'failed')
    ),
    CONSTRAINT drafts_ordinal_key UNIQUE (user_id, conversation_id, ordinal)
);

CREATE INDEX drafts_open_idx ON agentdb_private.drafts (expires_at)
WHERE status = 'proposed';
CREATE INDEX drafts_task_idx ON agentdb_private.drafts (task_id);

-- Who may approve a user's actions besides the user.
CREATE TABLE agentdb_private.approvers (
    user_id text NOT NULL,
    approver text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, approver)
);

-- Actions waiting for (or given) asynchronous human approval; approved ones are
-- the worker's queue.
CREATE TABLE agentdb_private.actions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    conversation_id text NOT NULL,
    task_id uuid NOT NULL REFERENCES agentdb_private.tasks (id),
    tool text NOT NULL,
    args jsonb NOT NULL,
    args_hash text NOT NULL,
    expect_rows integer,
    reason text,
    summary_zh text NOT NULL,
    summary_en text NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    approver text,
    approved_args jsonb,
    decided_at timestamptz,
    decision_note text,
    exec_task_id uuid REFERENCES agentdb_private.tasks (id),
    step_id bigint REFERENCES agentdb_private.steps (id),
    receipt jsonb,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    CONSTRAINT actions_status_check CHECK (
        status IN ('pending', 'approved', 'rejected', 'done', 'failed', 'expired')
    )
);

CREATE INDEX actions_queue_idx ON agentdb_private.actions (id)
WHERE status = 'approved';
CREATE INDEX actions_pending_idx ON agentdb_private.actions (user_id, created_at)
WHERE status = 'pending';
