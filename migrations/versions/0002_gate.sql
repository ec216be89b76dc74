-- Revision 0002: the exit gate. Claim patterns, claims, delivered replies.

-- The claim patterns document (sql/claim_patterns.json), loaded at install.
CREATE TABLE agentdb_private.claim_rules (
    id integer PRIMARY KEY DEFAULT 1,
    doc jsonb NOT NULL,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT claim_rules_single_row CHECK (id = 1)
);

-- What the model's reply said was done, detected or declared.
CREATE TABLE agentdb_private.claims (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id uuid NOT NULL REFERENCES agentdb_private.tasks (id),
    kind text NOT NULL,
    claim_text text,
    span_start integer,
    span_end integer,
    tool text,
    source text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT claims_kind_check CHECK (kind IN ('create', 'update', 'delete', 'done')),
    CONSTRAINT claims_source_check CHECK (source IN ('detected', 'declared'))
);

CREATE INDEX claims_task_idx ON agentdb_private.claims (task_id);

-- The conversation history: only what the user was actually shown.
CREATE TABLE agentdb_private.replies (
    task_id uuid PRIMARY KEY REFERENCES agentdb_private.tasks (id),
    conversation_id text NOT NULL,
    user_id text NOT NULL,
    verdict text NOT NULL,
    delivered_text text NOT NULL,
    pending jsonb NOT NULL DEFAULT '[]',
    delivered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT replies_verdict_check CHECK (verdict IN ('deliver', 'replace'))
);

CREATE INDEX replies_conversation_idx
ON agentdb_private.replies (conversation_id, delivered_at);

-- The model's original text lives only here, in the audit record.
ALTER TABLE agentdb_private.audit ADD COLUMN payload jsonb;
