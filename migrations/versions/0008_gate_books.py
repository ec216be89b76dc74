"""The exit gate reads the books first: action turns, the user's time zone, the claim classes
a tool backs, the book state of a reply, the clause recognisers.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # What sql/ of this revision added on top of the tables goes too: a package of
    # revision 0006 re-creates its own functions but knows nothing of these.
    for fn in (
        "agentdb.begin_task(text, text, text, boolean, text, boolean, text)",
        "agentdb.register_tool(text, text, regclass, text, text, text[], text, text[], text[],"
        " regprocedure, text, text, text, boolean, integer, interval, text[])",
        "agentdb_private.book_state(uuid)",
        "agentdb_private.read_clauses(text)",
        "agentdb_private.reply_acceptable(jsonb, text, integer)",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS {fn} CASCADE")
    op.execute("ALTER TABLE agentdb_private.claim_langs DROP COLUMN IF EXISTS label_names CASCADE")
    op.execute("ALTER TABLE agentdb_private.claim_langs DROP COLUMN IF EXISTS label_res CASCADE")
    op.execute("ALTER TABLE agentdb_private.claim_langs DROP COLUMN IF EXISTS question_sep CASCADE")
    # The compiled constant holds rows of the old shape: rebuilt from the table as it is now.
    op.execute(
        "DO $$ BEGIN EXECUTE format("
        "'CREATE OR REPLACE FUNCTION agentdb_private.claim_langs_compiled() "
        "RETURNS agentdb_private.claim_langs [] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L', "
        "format('SELECT %L::agentdb_private.claim_langs []', "
        "ARRAY(SELECT l FROM agentdb_private.claim_langs AS l ORDER BY l.lang COLLATE \"C\"))); END $$"
    )
    op.execute("ALTER TABLE agentdb_private.replies DROP COLUMN IF EXISTS book_state")
    op.execute("ALTER TABLE agentdb_private.claims DROP COLUMN IF EXISTS claim_class")
    op.execute("ALTER TABLE agentdb_private.tools DROP COLUMN IF EXISTS backs CASCADE")
    op.execute("ALTER TABLE agentdb_private.tasks DROP COLUMN IF EXISTS time_zone CASCADE")
    op.execute("ALTER TABLE agentdb_private.tasks DROP COLUMN IF EXISTS expects_action CASCADE")
