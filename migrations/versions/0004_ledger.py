"""The ledger: watched tables and their change log, hash chains over audit and
change-log rows, table snapshots.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # The trigger functions go first (CASCADE drops their triggers on audit and on
    # every watched table), so no trigger is left writing to a dropped table.
    for fn in ("watch_log()", "watch_guard()", "chain_audit()", "refuse_ledger_change()"):
        op.execute(f"DROP FUNCTION IF EXISTS agentdb_private.{fn} CASCADE")
    for table in ("snapshot_rows", "snapshot_tables", "snapshots", "chain_heads", "change_log", "watched"):
        op.execute(f"DROP TABLE IF EXISTS agentdb_private.{table} CASCADE")
    op.execute("ALTER TABLE agentdb_private.audit DROP COLUMN IF EXISTS chain_stripe, "
               "DROP COLUMN IF EXISTS chain_seq, DROP COLUMN IF EXISTS hash")
