-- Revision 0004: the ledger. Watched tables and their change log, the hash
-- chains over the audit and change-log rows, and table snapshots.
-- Functions, views and triggers come from sql/63_watch.sql .. sql/66_snapshot.sql.

-- Which tables carry the change-log and guard triggers, and by which key.
CREATE TABLE agentdb_private.watched (
    table_oid oid PRIMARY KEY,
    table_name text NOT NULL,
    key_columns text[] NOT NULL,
    watched_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    watched_by text NOT NULL DEFAULT session_user
);

-- Every row change of a watched table: what, which row, old and new values,
-- the transaction, the step that made it (task_id, seq) or none, the role.
-- chain_stripe/chain_seq/hash: the row's link in its hash chain (see below).
CREATE TABLE agentdb_private.change_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_oid oid NOT NULL,
    table_name text NOT NULL,
    op text NOT NULL,
    key jsonb,
    old_row jsonb,
    new_row jsonb,
    txid xid8 NOT NULL,
    task_id uuid,
    seq integer,
    db_role text NOT NULL,
    at timestamptz NOT NULL,
    chain_stripe smallint NOT NULL,
    chain_seq bigint NOT NULL,
    hash bytea NOT NULL,
    CONSTRAINT change_log_op_check CHECK (op IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE'))
);

CREATE UNIQUE INDEX change_log_chain_key ON agentdb_private.change_log (chain_stripe, chain_seq);
CREATE INDEX change_log_table_txid_idx ON agentdb_private.change_log (table_oid, txid);
CREATE INDEX change_log_step_idx ON agentdb_private.change_log (task_id, seq)
WHERE task_id IS NOT NULL;
CREATE INDEX change_log_at_brin ON agentdb_private.change_log USING brin (at);

-- Hash chains. Each chained row stores hash = sha256(previous hash || its
-- content), and its place (stripe, seq). A writer appends to the stripe of its
-- transaction (xid mod 16) and holds that stripe's row here (updated once per
-- transaction) until it commits, so concurrent writers rarely wait on each
-- other and a stripe never forks.
CREATE TABLE agentdb_private.chain_heads (
    stripe smallint PRIMARY KEY,
    locked_by xid8
);

INSERT INTO agentdb_private.chain_heads (stripe)
SELECT g::smallint FROM generate_series(0, 15) AS g;

-- Audit rows written before this revision stay unchained (chain_seq NULL).
-- A later revision adding an audit column must make it nullable with no
-- default: the content hashed is the row as jsonb without NULLs, so a column
-- that gave old rows a value would break their links.
ALTER TABLE agentdb_private.audit
ADD COLUMN chain_stripe smallint,
ADD COLUMN chain_seq bigint,
ADD COLUMN hash bytea;

CREATE UNIQUE INDEX audit_chain_key ON agentdb_private.audit (chain_stripe, chain_seq);

-- Snapshots: per table a row count and an order-independent checksum (sum of
-- row hashes). Rows are stored only for tables that are not watched; a watched
-- table's rows are recovered from the change log when the checksums differ.
CREATE TABLE agentdb_private.snapshots (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text NOT NULL DEFAULT session_user
);

CREATE TABLE agentdb_private.snapshot_tables (
    snapshot_id bigint NOT NULL REFERENCES agentdb_private.snapshots (id) ON DELETE CASCADE,
    table_oid oid NOT NULL,
    table_name text NOT NULL,
    key_columns text[] NOT NULL,
    mode text NOT NULL,
    row_count bigint NOT NULL,
    checksum numeric NOT NULL,
    -- The MVCC snapshot the rows were read under, the reading transaction and
    -- the last change-log id it could see: which logged changes came after.
    xact_snapshot pg_snapshot NOT NULL,
    own_txid xid8,
    log_hwm bigint NOT NULL,
    PRIMARY KEY (snapshot_id, table_oid),
    CONSTRAINT snapshot_tables_mode_check CHECK (mode IN ('log', 'rows'))
);

-- Bulk data (a row per table row): no foreign key (agentdb.forget_snapshot
-- deletes the rows), and a BRIN index, as snapshot ids only grow.
CREATE TABLE agentdb_private.snapshot_rows (
    snapshot_id bigint NOT NULL,
    table_oid oid NOT NULL,
    key_hash bigint NOT NULL,
    row_hash bigint NOT NULL,
    key jsonb NOT NULL,
    row_data jsonb NOT NULL
);

CREATE INDEX snapshot_rows_snapshot_brin ON agentdb_private.snapshot_rows USING brin (snapshot_id);
