"""The exit gate reads what a reply says: normalised text, claim classes, facts. No table
changes (the columns came with 0008); this revision owns the functions sql/ added for it, so
that a downgrade to 0008 leaves none of them behind and pending_claims as 0008 had it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FUNCTIONS = (
    "agentdb.read_reply(text)",
    "agentdb_private.max_reply()",
    "agentdb_private.claim_doc_compiled()",
    "agentdb_private.normalise_reply(text)",
    "agentdb_private.known_class(text)",
    "agentdb_private.claim_class(text, text, text)",
    "agentdb_private.classify_claims(text, jsonb, jsonb)",
    "agentdb_private.label_classes(text, text)",
    "agentdb_private.step_classes(text, text)",
    "agentdb_private.fact_number(text)",
    "agentdb_private.read_facts(text, jsonb)",
    "agentdb_private.claim_is_backed_as(uuid, text, text, text)",
    "agentdb_private.claim_backed_as(uuid, text, text, text)",
    "agentdb_private.written_values(agentdb_private.tasks)",
    "agentdb_private.facts_mismatch(agentdb_private.tasks, jsonb, jsonb, jsonb, boolean)",
)

# agentdb.pending_claims as sql/ of revision 0008 defines it (by kind, no claim_class column).
PENDING_CLAIMS_0008 = """
CREATE VIEW agentdb.pending_claims AS
SELECT c.id AS claim_id, c.task_id, t.user_id, t.conversation_id, c.kind, c.claim_text, c.span_start,
       c.span_end, c.tool, c.source, c.created_at
  FROM agentdb_private.claims AS c
 INNER JOIN agentdb_private.tasks AS t ON c.task_id = t.id
 WHERE NOT agentdb_private.claim_backed(c.task_id, c.kind, c.tool);
GRANT SELECT ON agentdb.pending_claims TO agentdb_app, agentdb_auditor;
"""


def upgrade() -> None:
    # Nothing to create here: sql/ (re-applied after every upgrade) defines the functions.
    pass


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS agentdb.pending_claims")
    for fn in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.execute(PENDING_CLAIMS_0008)
