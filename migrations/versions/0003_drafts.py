"""Drafts (propose, show, confirm) and the action-confirmation centre.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from pathlib import Path

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agentdb_private.actions CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.approvers CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.drafts CASCADE")
    op.execute("ALTER TABLE agentdb_private.tools DROP COLUMN IF EXISTS confirm_ttl CASCADE")
