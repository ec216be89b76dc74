"""Hash chains per tenant: chain_stripes (taken with SKIP LOCKED), the chain's tenant on
audit and change-log rows, the owner of each change-log row, the owner column of a watched
table (chain_heads, the 16 global stripes, is no longer used).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# What sql/ of this revision adds on top of the tables (a package of revision 0010
# re-creates its own functions but knows nothing of these).
ADDED_FUNCTIONS = (
    "agentdb_private.chain_claim(text, text)",
    "agentdb_private.chain_tails_of(text)",
    "agentdb_private.change_rows(oid, text, text, text[], text, jsonb[], jsonb[], uuid, integer)",
    "agentdb_private.log_changes(agentdb_private.change_log[])",
    "agentdb_private.log_change(oid, text, text, text[], text, jsonb, jsonb, uuid, integer)",
    "agentdb_private.watch_args(oid, text, text[])",
    "agentdb_private.watch_triggers()",
    "agentdb_private.watched_name(oid)",
    "agentdb_private.log_step_row(oid, text, text, text[], text, text, anyelement)",
    "agentdb_private.watch_table(regclass, text[], text)",
    "agentdb_private.watch_append(oid, text, text, text[], text, jsonb[], jsonb[], uuid, integer)",
)


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    for fn in ADDED_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    # A guard of this version's pair (the TRUNCATE one) would outlive the old functions.
    op.execute("""
        DO $drop$
        DECLARE
            v record;
        BEGIN
            FOR v IN SELECT g.tgrelid::regclass AS tbl FROM pg_catalog.pg_trigger AS g
                      WHERE g.tgname = 'agentdb_watch_guard_trunc' LOOP
                EXECUTE format('DROP TRIGGER agentdb_watch_guard_trunc ON %s', v.tbl);
            END LOOP;
        END
        $drop$""")
    for index in ("audit_tenant_chain_key", "change_log_tenant_chain_key", "audit_chain_key",
                  "change_log_chain_key"):
        op.execute(f"DROP INDEX IF EXISTS agentdb_private.{index}")
    # Rows chained per tenant keep their columns' values out of the old unique keys.
    op.execute("CREATE UNIQUE INDEX audit_chain_key ON agentdb_private.audit (chain_stripe, chain_seq)")
    op.execute("CREATE UNIQUE INDEX change_log_chain_key"
               " ON agentdb_private.change_log (chain_stripe, chain_seq)")
    op.execute("ALTER TABLE agentdb_private.watched DROP COLUMN IF EXISTS owner_column")
    op.execute("ALTER TABLE agentdb_private.change_log DROP COLUMN IF EXISTS user_id, "
               "DROP COLUMN IF EXISTS chain_tenant")
    op.execute("ALTER TABLE agentdb_private.audit DROP COLUMN IF EXISTS chain_tenant")
    op.execute("DROP TABLE IF EXISTS agentdb_private.chain_stripes")
    op.execute("DROP SEQUENCE IF EXISTS agentdb_private.chain_stripe_seq")
