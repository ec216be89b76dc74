-- Revision 0014: every tenant row carries its user, and every key of a tenant
-- table leads with it, so that the tables can be distributed by user_id on
-- Citus (docs/scaling.md, `pyagentdb distribute`). On one node nothing changes
-- in behaviour: a task belongs to one user, so leading a key with user_id adds
-- no uniqueness that matters and removes none. Idempotent, like every revision
-- from 0007 on (`pyagentdb install --repair` runs it again).

-- 1. The user of each step and claim, copied from its task. Rows whose hash
-- chain content must not change get '' where they had no user: an audit row
-- of a call that named no known task, and a change-log row chained before
-- 0011 (sql/64_chain.sql's chain_content leaves such a '' out of the hash).
ALTER TABLE agentdb_private.steps ADD COLUMN IF NOT EXISTS user_id text;
ALTER TABLE agentdb_private.claims ADD COLUMN IF NOT EXISTS user_id text;
DO $fill$
BEGIN
    -- The evidence tables refuse UPDATE by trigger: this one-time fill goes around them.
    IF EXISTS (SELECT 1 FROM agentdb_private.steps WHERE user_id IS NULL) THEN
        ALTER TABLE agentdb_private.steps DISABLE TRIGGER USER;
        UPDATE agentdb_private.steps AS s SET user_id = t.user_id
        FROM agentdb_private.tasks AS t WHERE t.id = s.task_id AND s.user_id IS NULL;
        ALTER TABLE agentdb_private.steps ENABLE TRIGGER USER;
    END IF;
    IF EXISTS (SELECT 1 FROM agentdb_private.claims WHERE user_id IS NULL) THEN
        ALTER TABLE agentdb_private.claims DISABLE TRIGGER USER;
        UPDATE agentdb_private.claims AS c SET user_id = t.user_id
        FROM agentdb_private.tasks AS t WHERE t.id = c.task_id AND c.user_id IS NULL;
        ALTER TABLE agentdb_private.claims ENABLE TRIGGER USER;
    END IF;
    IF EXISTS (SELECT 1 FROM agentdb_private.audit WHERE user_id IS NULL) THEN
        ALTER TABLE agentdb_private.audit DISABLE TRIGGER USER;
        UPDATE agentdb_private.audit SET user_id = '' WHERE user_id IS NULL;
        ALTER TABLE agentdb_private.audit ENABLE TRIGGER USER;
    END IF;
    IF EXISTS (SELECT 1 FROM agentdb_private.change_log WHERE user_id IS NULL) THEN
        ALTER TABLE agentdb_private.change_log DISABLE TRIGGER USER;
        UPDATE agentdb_private.change_log SET user_id = '' WHERE user_id IS NULL;
        ALTER TABLE agentdb_private.change_log ENABLE TRIGGER USER;
    END IF;
END
$fill$;
ALTER TABLE agentdb_private.steps ALTER COLUMN user_id SET NOT NULL;
ALTER TABLE agentdb_private.claims ALTER COLUMN user_id SET NOT NULL;
ALTER TABLE agentdb_private.audit ALTER COLUMN user_id SET NOT NULL;
ALTER TABLE agentdb_private.change_log ALTER COLUMN user_id SET NOT NULL;

-- 2. Keys led by user_id. The foreign keys between tenant tables pair user_id
-- too; they are dropped first (they hold on the keys being replaced) and made
-- again as pairs. A constraint already led by user_id is left as it is.
DO $keys$
DECLARE
    v text [];
    v_has boolean;
    v_view text;
    v_index text;
    -- table, constraint, definition
    v_keys text [] := ARRAY[
        ['tasks', 'tasks_pkey', 'PRIMARY KEY (user_id, id)'],
        ['steps', 'steps_pkey', 'PRIMARY KEY (user_id, id)'],
        ['steps', 'steps_seq_key', 'UNIQUE (user_id, task_id, seq)'],
        ['audit', 'audit_pkey', 'PRIMARY KEY (user_id, id)'],
        ['claims', 'claims_pkey', 'PRIMARY KEY (user_id, id)'],
        ['replies', 'replies_pkey', 'PRIMARY KEY (user_id, task_id)'],
        ['drafts', 'drafts_pkey', 'PRIMARY KEY (user_id, id)'],
        ['actions', 'actions_pkey', 'PRIMARY KEY (user_id, id)'],
        ['permissions', 'permissions_pkey', 'PRIMARY KEY (user_id, id)'],
        ['change_log', 'change_log_pkey', 'PRIMARY KEY (user_id, id)']
    ];
    v_fkeys text [] := ARRAY[
        ['steps', 'steps_task_id_fkey', 'FOREIGN KEY (user_id, task_id) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['audit', 'audit_step_id_fkey', 'FOREIGN KEY (user_id, step_id) REFERENCES agentdb_private.steps (user_id, id)'],
        ['claims', 'claims_task_id_fkey', 'FOREIGN KEY (user_id, task_id) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['replies', 'replies_task_id_fkey',
         'FOREIGN KEY (user_id, task_id) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['drafts', 'drafts_task_id_fkey', 'FOREIGN KEY (user_id, task_id) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['drafts', 'drafts_shown_in_task_fkey',
         'FOREIGN KEY (user_id, shown_in_task) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['drafts', 'drafts_closed_in_task_fkey',
         'FOREIGN KEY (user_id, closed_in_task) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['drafts', 'drafts_step_id_fkey', 'FOREIGN KEY (user_id, step_id) REFERENCES agentdb_private.steps (user_id, id)'],
        ['drafts', 'drafts_superseded_by_fkey',
         'FOREIGN KEY (user_id, superseded_by) REFERENCES agentdb_private.drafts (user_id, id)'],
        ['actions', 'actions_task_id_fkey',
         'FOREIGN KEY (user_id, task_id) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['actions', 'actions_exec_task_id_fkey',
         'FOREIGN KEY (user_id, exec_task_id) REFERENCES agentdb_private.tasks (user_id, id)'],
        ['actions', 'actions_step_id_fkey', 'FOREIGN KEY (user_id, step_id) REFERENCES agentdb_private.steps (user_id, id)']
    ];
BEGIN
    -- (No format() here: the offline install script doubles its percent signs.)
    -- Views that hold on a key being replaced (a GROUP BY relying on it) go;
    -- sql/, re-applied after every upgrade, makes them again.
    FOR v_view IN
        SELECT DISTINCT r.ev_class::regclass::text
          FROM pg_catalog.pg_depend AS d
          JOIN pg_catalog.pg_rewrite AS r ON r.oid = d.objid
          JOIN pg_catalog.pg_constraint AS k ON k.oid = d.refobjid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
           AND d.refclassid = 'pg_catalog.pg_constraint'::regclass
           AND k.connamespace = 'agentdb_private'::regnamespace
           AND k.contype IN ('p', 'u')
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                            WHERE a.attrelid = k.conrelid AND a.attname = 'user_id' AND a.attnum = ANY (k.conkey))
    LOOP
        EXECUTE 'DROP VIEW IF EXISTS ' || v_view;
    END LOOP;
    FOREACH v SLICE 1 IN ARRAY v_fkeys LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_constraint AS k
                    WHERE k.conrelid = ('agentdb_private.' || v[1])::regclass AND k.conname = v[2]
                      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                                       WHERE a.attrelid = k.conrelid AND a.attname = 'user_id'
                                         AND a.attnum = ANY (k.conkey))) THEN
            EXECUTE 'ALTER TABLE agentdb_private.' || quote_ident(v[1]) || ' DROP CONSTRAINT ' || quote_ident(v[2]);
        END IF;
    END LOOP;
    FOREACH v SLICE 1 IN ARRAY v_keys LOOP
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                        WHERE a.attrelid = k.conrelid AND a.attname = 'user_id' AND a.attnum = ANY (k.conkey))
          INTO v_has
          FROM pg_catalog.pg_constraint AS k
         WHERE k.conrelid = ('agentdb_private.' || v[1])::regclass AND k.conname = v[2];
        IF v_has IS NOT TRUE THEN
            IF v_has IS NOT NULL THEN
                EXECUTE 'ALTER TABLE agentdb_private.' || quote_ident(v[1]) || ' DROP CONSTRAINT ' || quote_ident(v[2]);
            END IF;
            EXECUTE 'ALTER TABLE agentdb_private.' || quote_ident(v[1]) || ' ADD CONSTRAINT ' || quote_ident(v[2]) || ' ' || v[3];
        END IF;
    END LOOP;
    FOREACH v SLICE 1 IN ARRAY v_fkeys LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint AS k
                        WHERE k.conrelid = ('agentdb_private.' || v[1])::regclass AND k.conname = v[2]) THEN
            EXECUTE 'ALTER TABLE agentdb_private.' || quote_ident(v[1]) || ' ADD CONSTRAINT ' || quote_ident(v[2]) || ' ' || v[3];
        END IF;
    END LOOP;
    -- Unique indexes that are not constraints: the replay key and the chains' links.
    FOREACH v_index IN ARRAY ARRAY['steps_call_key', 'audit_chain_key', 'audit_tenant_chain_key',
                                    'change_log_chain_key', 'change_log_tenant_chain_key'] LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
                    WHERE i.indexrelid = to_regclass('agentdb_private.' || v_index)
                      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                                       WHERE a.attrelid = i.indrelid AND a.attname = 'user_id'
                                         AND a.attnum = ANY (i.indkey))) THEN
            EXECUTE 'DROP INDEX agentdb_private.' || quote_ident(v_index);
        END IF;
    END LOOP;
END
$keys$;
CREATE UNIQUE INDEX IF NOT EXISTS steps_call_key ON agentdb_private.steps (user_id, task_id, call_id)
WHERE call_id IS NOT NULL;
-- The 16 global stripes of rows chained before 0011 (frozen: nothing appends to them).
CREATE UNIQUE INDEX IF NOT EXISTS audit_chain_key ON agentdb_private.audit (user_id, chain_stripe, chain_seq)
WHERE chain_tenant IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS change_log_chain_key ON agentdb_private.change_log (
    user_id, chain_stripe, chain_seq
) WHERE chain_tenant IS NULL;
-- Per-tenant chains: the tenant is the row's user (chain_tenant = user_id).
CREATE UNIQUE INDEX IF NOT EXISTS audit_tenant_chain_key ON agentdb_private.audit (
    user_id, chain_tenant, chain_stripe, chain_seq
) WHERE chain_tenant IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS change_log_tenant_chain_key ON agentdb_private.change_log (
    user_id, chain_tenant, chain_stripe, chain_seq
) WHERE chain_tenant IS NOT NULL;

-- 3. Lookups by id alone (the task-only entry points of one node, an action
-- by its number, a reply by its task) keep an index.
CREATE INDEX IF NOT EXISTS tasks_id_idx ON agentdb_private.tasks (id);
CREATE INDEX IF NOT EXISTS steps_task_idx ON agentdb_private.steps (task_id, seq);
CREATE INDEX IF NOT EXISTS replies_task_idx ON agentdb_private.replies (task_id);
CREATE INDEX IF NOT EXISTS actions_id_idx ON agentdb_private.actions (id);
CREATE INDEX IF NOT EXISTS drafts_id_idx ON agentdb_private.drafts (id);

-- 4. The lock rows of the 16 global chain stripes: nothing has taken them
-- since 0011 (each tenant's chain has its own stripes), and on Citus they
-- could be neither distributed nor copied to every node.
DROP TABLE IF EXISTS agentdb_private.chain_heads;
