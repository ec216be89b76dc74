"""Repair the shapes left by revisions edited after they landed (fix forward).

0004 and 0006 were changed on main after databases had been installed from them, so a
database installed at one of those commits is at the right revision number with the wrong
tables. This revision brings each such shape to what 0004 and 0006 create today, keeping
every row, and changes nothing in a database that is already right:

- agentdb_private.snapshot_rows gets key_hash (jsonb_hash_extended(key, 0), as
  agentdb.snapshot computes it), loses its foreign key and gets the BRIN index (0004 since
  97fd427);
- agentdb_private.claim_langs is rebuilt when its columns differ (0006 since 980d9b4); it
  holds only what load_claim_patterns compiles from the patterns document, which the sql/
  pass of this same install loads again;
- agentdb_private.claim_rules gets fingerprint, and the claims source check allows
  'runtime' (0006 since 293186d);
- the views agentdb.tools and agentdb.permissions are dropped when their target column is
  not of collation "C" (schema-qualified names since ba1e959): CREATE OR REPLACE VIEW
  cannot change a column's collation, and the sql/ pass that follows recreates both.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # Nothing to undo: the repaired shapes are those of 0004 and 0006 as they are today.
    pass
