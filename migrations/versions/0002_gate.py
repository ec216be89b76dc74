"""The exit gate: claim patterns, claims, delivered replies, audit payload.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from pathlib import Path

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # Functions that use these tables are dropped with them; re-applying sql/
    # after a partial downgrade is the installer's job (pyagentdb install).
    op.execute("DROP TABLE IF EXISTS agentdb_private.replies CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.claims CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.claim_rules CASCADE")
    op.execute("ALTER TABLE agentdb_private.audit DROP COLUMN IF EXISTS payload")
