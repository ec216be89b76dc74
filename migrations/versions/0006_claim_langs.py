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
    # What sql/ of this revision added on top of the tables goes too: a package of
    # revision 0005 re-creates its own functions but knows nothing of these.
    for fn in (
        "agentdb.claim_patterns_fingerprint(jsonb)",
        "agentdb_private.claim_is_backed(uuid, text, text)",
        "agentdb_private.detect_claims_in(text, text)",
        "agentdb_private.mark_shown(uuid)",
        "agentdb_private.close_task(uuid)",
        "agentdb_private.claim_doc_regexes(jsonb)",
        "agentdb_private.regex_error(text)",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.execute("DROP TABLE IF EXISTS agentdb_private.claim_langs CASCADE")  # and claim_langs_compiled()
    op.execute("ALTER TABLE agentdb_private.claim_rules DROP COLUMN IF EXISTS fingerprint")
    op.execute("UPDATE agentdb_private.claims SET source = 'detected' WHERE source = 'runtime'")
    op.execute("ALTER TABLE agentdb_private.claims DROP CONSTRAINT claims_source_check")
    op.execute("ALTER TABLE agentdb_private.claims ADD CONSTRAINT claims_source_check"
               " CHECK (source IN ('detected', 'declared'))")
