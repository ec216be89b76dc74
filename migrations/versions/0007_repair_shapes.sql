-- Revision 0007: the shapes of 0004 and 0006 as they are today, for databases
-- installed before those revisions were edited. Each step checks first, so a
-- database that is already right is left as it is.

-- 0004: snapshot_rows with key_hash, without the foreign key, with a BRIN index.
DO $repair$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_attribute AS a
        WHERE
            a.attrelid = 'agentdb_private.snapshot_rows'::regclass
            AND a.attname = 'key_hash' AND NOT a.attisdropped
    ) THEN
        -- Through a temporary copy, so the new table's constraints take the
        -- names a fresh install gives them.
        CREATE TEMPORARY TABLE snapshot_rows_0004 ON COMMIT DROP AS
        SELECT r.snapshot_id, r.table_oid, jsonb_hash_extended(r.key, 0) AS key_hash, r.row_hash, r.key, r.row_data
        FROM agentdb_private.snapshot_rows AS r;
        DROP TABLE agentdb_private.snapshot_rows;
        CREATE TABLE agentdb_private.snapshot_rows (
            snapshot_id bigint NOT NULL,
            table_oid oid NOT NULL,
            key_hash bigint NOT NULL,
            row_hash bigint NOT NULL,
            key jsonb NOT NULL,
            row_data jsonb NOT NULL
        );
        INSERT INTO agentdb_private.snapshot_rows (snapshot_id, table_oid, key_hash, row_hash, key, row_data)
        SELECT r.snapshot_id, r.table_oid, r.key_hash, r.row_hash, r.key, r.row_data
        FROM snapshot_rows_0004 AS r;
        DROP TABLE snapshot_rows_0004;
    END IF;
    DROP INDEX IF EXISTS agentdb_private.snapshot_rows_table_idx;
    CREATE INDEX IF NOT EXISTS snapshot_rows_snapshot_brin
    ON agentdb_private.snapshot_rows USING brin (snapshot_id);
END
$repair$;

-- 0006: claim_langs rebuilt when its columns are not today's (its rows are
-- compiled again by load_claim_patterns in the sql/ pass of this install).
DO $repair$
BEGIN
    IF (
        SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
            || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
            || CASE WHEN a.attstorage <> t.typstorage THEN ' storage ' || a.attstorage::text ELSE '' END,
            ', ' ORDER BY a.attnum)
        FROM pg_catalog.pg_attribute AS a
        INNER JOIN pg_catalog.pg_type AS t ON a.atttypid = t.oid
        WHERE
            a.attrelid = 'agentdb_private.claim_langs'::regclass
            AND a.attnum > 0 AND NOT a.attisdropped
    ) IS DISTINCT FROM 'lang text not null, clause_split text not null, max_clause integer, '
    'max_per_kind integer, flags text not null, script text, exclude_re text, guarded boolean not null, '
    'guard_kinds text[] not null, guard_res text[] not null, claim_kinds text[] not null, '
    'claim_res text[] not null' THEN
        -- Functions of the old sql/ typed by its row go too; the sql/ pass recreates them.
        DROP TABLE agentdb_private.claim_langs CASCADE;
        CREATE TABLE agentdb_private.claim_langs (
            lang text PRIMARY KEY,
            clause_split text NOT NULL,
            max_clause integer,
            max_per_kind integer,
            flags text NOT NULL,
            script text,
            exclude_re text,
            guarded boolean NOT NULL,
            guard_kinds text[] NOT NULL,
            guard_res text[] NOT NULL,
            claim_kinds text[] NOT NULL,
            claim_res text[] NOT NULL
        );
    END IF;
END
$repair$;

ALTER TABLE agentdb_private.claim_rules ADD COLUMN IF NOT EXISTS fingerprint text;

DO $repair$
BEGIN
    IF pg_get_constraintdef((
        SELECT c.oid FROM pg_catalog.pg_constraint AS c
        WHERE c.conrelid = 'agentdb_private.claims'::regclass AND c.conname = 'claims_source_check'
    )) NOT LIKE '%runtime%' THEN
        ALTER TABLE agentdb_private.claims DROP CONSTRAINT claims_source_check;
        ALTER TABLE agentdb_private.claims ADD CONSTRAINT claims_source_check
        CHECK (source IN ('detected', 'declared', 'runtime'));
    END IF;
END
$repair$;

-- Views whose target column is of another collation than today's: the sql/
-- pass recreates them. Without CASCADE: a view of the DBA's built on them
-- stops the upgrade (rolled back whole) instead of being dropped silently.
DO $repair$
DECLARE
    v_view text;
BEGIN
    FOREACH v_view IN ARRAY ARRAY['agentdb.tools', 'agentdb.permissions'] LOOP
        IF EXISTS (
            SELECT 1 FROM pg_catalog.pg_attribute AS a
            WHERE
                a.attrelid = to_regclass(v_view) AND a.attname = 'target'
                AND a.attcollation <> 'pg_catalog."C"'::regcollation
        ) THEN
            EXECUTE format('DROP VIEW %s', v_view);
        END IF;
    END LOOP;
END
$repair$;
