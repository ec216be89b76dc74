"""Agent-written SQL: tables enabled for agentdb.run_sql and the agentdb_sql_writer role.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from pathlib import Path

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # Undo what allow_sql did to each enabled table (policies, row-level security, grants),
    # then drop the tables. The role stays: roles are cluster-wide.
    op.execute("""
        DO $down$
        DECLARE
            r record;
        BEGIN
            IF to_regprocedure('agentdb.disallow_sql(regclass)') IS NOT NULL THEN
                FOR r IN SELECT target FROM agentdb_private.sql_tables LOOP
                    PERFORM agentdb.disallow_sql(r.target);
                END LOOP;
            END IF;
        END
        $down$
    """)
    op.execute("DROP TABLE IF EXISTS agentdb_private.sql_scope CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.sql_tables CASCADE")
