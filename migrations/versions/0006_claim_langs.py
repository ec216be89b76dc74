"""Claim patterns compiled per language for agentdb.detect_claims, and the loaded
document's fingerprint.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agentdb_private.claim_langs CASCADE")
    op.execute("ALTER TABLE agentdb_private.claim_rules DROP COLUMN IF EXISTS fingerprint")
