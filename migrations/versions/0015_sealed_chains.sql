-- Revision 0015: the ledger's hash chains are sealed after commit, and the
-- ledger's checked columns are domains (issue 12). Idempotent, like every
-- revision from 0007 on: `pyagentdb install --repair` runs it again.
--
-- 1. Sealed chains (sql/64_chain.sql). A writer no longer links its audit or
--    change-log row into a chain inside its own transaction: it inserts the
--    row and a note in chain_pending, in the same statement or subtransaction.
--    agentdb.seal_chains() (the worker, verify_chain, or any schedule) links
--    every committed pending row into its tenant's chain in chain_links, in
--    row order, and removes the notes. Rows chained before this revision keep
--    their links in their own columns and are verified as they were.
-- 2. Domains. PostgreSQL reads a table's CHECK constraints back from their
--    stored text for every statement that writes it; a domain's constraint is
--    read once per session. The values allowed are the same.
-- 3. audit -> steps loses its foreign key: every audit row naming a step is
--    written by the same statement sequence that wrote the step (both append-
--    only); `pyagentdb doctor` checks that each named step exists.

-- 1. Domains (created once; their constraints carry the old checks' rules).
DO $domains$
DECLARE
    v text [];
BEGIN
    FOREACH v SLICE 1 IN ARRAY ARRAY[
        ['lang_t', 'VALUE IN (''zh'', ''en'')'],
        ['task_status_t', 'VALUE IN (''running'', ''success'', ''partial'', ''failed'')'],
        ['outcome_t', 'VALUE IN (''success'', ''refused'', ''invalid'', ''duplicate'', ''conflict'', ''failed'','
                      || ' ''unverified'', ''needs_confirmation'')'],
        ['reason_t', 'char_length(VALUE) <= 500'],
        ['audit_status_t', 'VALUE IN (''SUCCESS'', ''FAILED'', ''REFUSED'')'],
        ['change_op_t', 'VALUE IN (''INSERT'', ''UPDATE'', ''DELETE'', ''TRUNCATE'')'],
        ['claim_kind_t', 'VALUE IN (''create'', ''update'', ''delete'', ''done'')'],
        ['claim_source_t', 'VALUE IN (''detected'', ''declared'', ''runtime'')'],
        ['verdict_t', 'VALUE IN (''deliver'', ''replace'')'],
        ['book_state_t', 'VALUE IN (''troubled'', ''empty'', ''clean'')']
    ] LOOP
        IF to_regtype('agentdb_private.' || v[1]) IS NULL THEN
            EXECUTE 'CREATE DOMAIN agentdb_private.' || v[1] || ' AS text CONSTRAINT ' || v[1] || '_check CHECK ('
                    || v[2] || ')';
        END IF;
    END LOOP;
END
$domains$;

-- The columns that take them, and the checks they replace.
DO $columns$
DECLARE
    v text [];
    v_view text;
    v_columns text [] := ARRAY[
        ['tasks', 'lang', 'lang_t', 'tasks_lang_check'],
        ['tasks', 'status', 'task_status_t', 'tasks_status_check'],
        ['steps', 'outcome', 'outcome_t', 'steps_outcome_check'],
        ['steps', 'reason', 'reason_t', 'steps_reason_length'],
        ['audit', 'status', 'audit_status_t', 'audit_status_check'],
        ['change_log', 'op', 'change_op_t', 'change_log_op_check'],
        ['claims', 'kind', 'claim_kind_t', 'claims_kind_check'],
        ['claims', 'source', 'claim_source_t', 'claims_source_check'],
        ['replies', 'verdict', 'verdict_t', 'replies_verdict_check'],
        ['replies', 'book_state', 'book_state_t', 'replies_book_state_check']
    ];
BEGIN
    -- (No format() here: the offline install script doubles its percent signs.)
    -- A view on a column whose type changes goes; sql/, re-applied after every
    -- upgrade, makes it again.
    FOR v_view IN
        SELECT DISTINCT r.ev_class::regclass::text
          FROM pg_catalog.pg_depend AS d
          JOIN pg_catalog.pg_rewrite AS r ON r.oid = d.objid
          JOIN pg_catalog.pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
          JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
           AND d.refclassid = 'pg_catalog.pg_class'::regclass
           AND r.ev_class <> d.refobjid
           AND c.relnamespace = 'agentdb_private'::regnamespace
           AND a.atttypid = 'text'::regtype
           AND EXISTS (SELECT 1 FROM generate_subscripts(v_columns, 1) AS i
                        WHERE v_columns[i][1] = c.relname AND v_columns[i][2] = a.attname)
    LOOP
        EXECUTE 'DROP VIEW IF EXISTS ' || v_view || ' CASCADE';
    END LOOP;
    FOREACH v SLICE 1 IN ARRAY v_columns LOOP
        EXECUTE 'ALTER TABLE agentdb_private.' || v[1] || ' DROP CONSTRAINT IF EXISTS ' || v[4];
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                    WHERE a.attrelid = ('agentdb_private.' || v[1])::regclass AND a.attname = v[2]
                      AND a.atttypid <> ('agentdb_private.' || v[3])::regtype) THEN
            EXECUTE 'ALTER TABLE agentdb_private.' || v[1] || ' ALTER COLUMN ' || v[2]
                    || ' TYPE agentdb_private.' || v[3];
        END IF;
    END LOOP;
END
$columns$;

-- 2. Sealed chains. The notes of rows not linked yet: one per audit or
-- change-log row, written with it; the sealer removes it when it links the row.
CREATE TABLE IF NOT EXISTS agentdb_private.chain_pending (
    user_id text NOT NULL,
    chain text NOT NULL,
    row_id bigint NOT NULL
);

-- The links of rows sealed from this revision on: per tenant (the row's
-- user_id) and chain ('audit' or 'change'), seq 1, 2, 3 ... in sealing order,
-- hash = sha256(previous link's hash || the row's content).
CREATE TABLE IF NOT EXISTS agentdb_private.chain_links (
    user_id text NOT NULL,
    chain text NOT NULL,
    seq bigint NOT NULL,
    row_id bigint NOT NULL,
    hash bytea NOT NULL,
    sealed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (user_id, chain, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS chain_links_row_key ON agentdb_private.chain_links (user_id, chain, row_id);

-- The sealer's lock and its last run: one sealer at a time.
CREATE TABLE IF NOT EXISTS agentdb_private.chain_sealer (
    id integer PRIMARY KEY CHECK (id = 1),
    sealed_at timestamptz,
    sealed_rows bigint NOT NULL DEFAULT 0
);
INSERT INTO agentdb_private.chain_sealer (id) VALUES (1) ON CONFLICT (id) DO NOTHING;

-- Rows written from now on have no link in their own columns.
ALTER TABLE agentdb_private.change_log ALTER COLUMN chain_stripe DROP NOT NULL;
ALTER TABLE agentdb_private.change_log ALTER COLUMN chain_seq DROP NOT NULL;
ALTER TABLE agentdb_private.change_log ALTER COLUMN hash DROP NOT NULL;
DROP TRIGGER IF EXISTS audit_chain ON agentdb_private.audit;

-- 3. The audit row's step is checked by doctor, not per insert.
ALTER TABLE agentdb_private.audit DROP CONSTRAINT IF EXISTS audit_step_id_fkey;

-- 4. The stripe keys of rows linked before this revision (the 16 global
-- stripes) cover only such rows: rows written from now on carry no link of
-- their own, and need no entry there.
DO $chainkeys$
DECLARE
    v_index text;
BEGIN
    FOREACH v_index IN ARRAY ARRAY['audit_chain_key', 'change_log_chain_key'] LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
                    WHERE i.indexrelid = to_regclass('agentdb_private.' || v_index)
                      AND position('chain_seq IS NOT NULL' IN pg_catalog.pg_get_expr(i.indpred, i.indrelid)) = 0) THEN
            EXECUTE 'DROP INDEX agentdb_private.' || v_index;
        END IF;
    END LOOP;
END
$chainkeys$;
CREATE UNIQUE INDEX IF NOT EXISTS audit_chain_key ON agentdb_private.audit (user_id, chain_stripe, chain_seq)
WHERE chain_tenant IS NULL AND chain_seq IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS change_log_chain_key ON agentdb_private.change_log (
    user_id, chain_stripe, chain_seq
) WHERE chain_tenant IS NULL AND chain_seq IS NOT NULL;
