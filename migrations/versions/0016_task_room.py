"""Room on the tasks' pages for their updates: fillfactor 70 on agentdb_private.tasks, so the
update that closes a task when its reply is taken (closed_at, no indexed column) is a
heap-only tuple update instead of a new row version in every index (finalize_reply, issue 11).
Only a storage parameter: no rewrite, pages written before keep their fill.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from pathlib import Path

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


# On Citus the table's shards are altered from the coordinator, by default over several
# connections per worker; the functions re-applied later in the transaction then need one.
ONE_CONNECTION_PER_NODE = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
END
$$
"""


def upgrade() -> None:
    op.execute(ONE_CONNECTION_PER_NODE)
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    op.execute(ONE_CONNECTION_PER_NODE)
    op.execute("ALTER TABLE agentdb_private.tasks RESET (fillfactor)")
