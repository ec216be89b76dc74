"""run_sql's function allow-list, extended by a DBA: agentdb_private.sql_functions, filled by
agentdb.allow_sql_function (sql/68_sql_functions.sql) and read by the database check.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

FUNCTIONS = (
    "agentdb.allow_sql_function(regprocedure, text)",
    "agentdb.disallow_sql_function(regprocedure)",
    "agentdb_private.sql_function_signature(oid)",
)


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # EXECUTE granted to the writer by allow_sql_function goes with the rows that say so.
    op.execute("""
        DO $$
        DECLARE v_fn regprocedure;
        BEGIN
            FOR v_fn IN SELECT to_regprocedure(f.signature) FROM agentdb_private.sql_functions AS f
                         WHERE f.granted_by_agentdb AND to_regprocedure(f.signature) IS NOT NULL LOOP
                EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM agentdb_sql_writer', v_fn);
            END LOOP;
        END $$
    """)
    op.execute("DROP VIEW IF EXISTS agentdb.sql_functions")
    for fn in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.execute("DROP TABLE IF EXISTS agentdb_private.sql_functions")
