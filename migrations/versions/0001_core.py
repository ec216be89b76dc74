"""Core schema: schemas, roles, registry, tasks, steps, audit, messages.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from pathlib import Path

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # Roles are cluster-wide and may serve other databases: they stay.
    op.execute("DROP SCHEMA IF EXISTS agentdb CASCADE")
    op.execute("DROP SCHEMA IF EXISTS agentdb_private CASCADE")
