-- Revision 0011: the hash chains per tenant (sql/64_chain.sql). Idempotent,
-- like every revision from 0007 on. Rows chained before keep their links in the
-- 16 global stripes (chain_tenant NULL) and are verified as they were; new rows
-- are chained per tenant, in stripes taken with SKIP LOCKED (chain_stripes), so
-- no writer waits for another. New columns are nullable with no default: the
-- hashed content of an old row (its jsonb without NULLs) does not change.

-- The stripes of each tenant's chains: a writer holds one (its row lock) from
-- its first chained row to its commit.
CREATE TABLE IF NOT EXISTS agentdb_private.chain_stripes (
    tenant text NOT NULL,
    stripe integer NOT NULL,
    PRIMARY KEY (tenant, stripe)
);
-- New stripes' numbers: unique across tenants, so opening one never conflicts.
CREATE SEQUENCE IF NOT EXISTS agentdb_private.chain_stripe_seq AS integer;

ALTER TABLE agentdb_private.audit ADD COLUMN IF NOT EXISTS chain_tenant text;
-- The owner of the changed row ('' for a table without an owner column), and
-- the chain it is linked in.
ALTER TABLE agentdb_private.change_log ADD COLUMN IF NOT EXISTS user_id text;
ALTER TABLE agentdb_private.change_log ADD COLUMN IF NOT EXISTS chain_tenant text;
-- The owner column a watched table's rows are chained under (a tool's owner_column).
ALTER TABLE agentdb_private.watched ADD COLUMN IF NOT EXISTS owner_column text;
UPDATE agentdb_private.watched AS w
SET
    owner_column = (
        SELECT t.owner_column FROM agentdb_private.tools AS t
        WHERE t.target::oid = w.table_oid AND t.owner_column IS NOT NULL
        ORDER BY t.name LIMIT 1
    )
WHERE w.owner_column IS NULL;

-- A link is unique in its stripe: the 16 global stripes for rows before 0011,
-- (tenant, stripe) after.
DO $keys$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_indexes AS i
                WHERE i.schemaname = 'agentdb_private' AND i.indexname = 'audit_chain_key'
                  AND i.indexdef NOT LIKE '%WHERE%') THEN
        DROP INDEX agentdb_private.audit_chain_key;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_indexes AS i
                WHERE i.schemaname = 'agentdb_private' AND i.indexname = 'change_log_chain_key'
                  AND i.indexdef NOT LIKE '%WHERE%') THEN
        DROP INDEX agentdb_private.change_log_chain_key;
    END IF;
END
$keys$;
CREATE UNIQUE INDEX IF NOT EXISTS audit_chain_key ON agentdb_private.audit (chain_stripe, chain_seq)
WHERE chain_tenant IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS audit_tenant_chain_key ON agentdb_private.audit (
    chain_tenant, chain_stripe, chain_seq
) WHERE chain_tenant IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS change_log_chain_key ON agentdb_private.change_log (chain_stripe, chain_seq)
WHERE chain_tenant IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS change_log_tenant_chain_key ON agentdb_private.change_log (
    chain_tenant, chain_stripe, chain_seq
) WHERE chain_tenant IS NOT NULL;

-- agentdb_private.chain_heads (the 16 global stripes' heads) stays as it was:
-- nothing appends there any more.
