"""The exit gate's reading fits PostgreSQL's per-session cache of 32 compiled regexes: label
sets and the class lexicon compiled per language, the facts rules in a table of their own
with their literal guards. The functions that read them come from sql/ (re-applied after
every upgrade); a downgrade to 0012 drops them with the columns and the table.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

FUNCTIONS = (
    "agentdb_private.fact_rules_compiled()",
    "agentdb_private.holding(text)",
    "agentdb_private.kind_order(jsonb)",
    "agentdb_private.is_string_list(jsonb)",
    "agentdb_private.clause_frames(text)",
    "agentdb_private.clause_has(text, jsonb, text)",
    "agentdb_private.clause_facts(text, jsonb, integer)",
    "agentdb_private.facts_mismatch(agentdb_private.tasks, text, jsonb, jsonb, jsonb, boolean)",
    "agentdb_private.reply_unacceptable(text, jsonb, jsonb, text, integer)",
    "agentdb_private.label_names_class(text, text, text)",
    "agentdb_private.label_sets(jsonb)",
    "agentdb_private.class_capacity(uuid, text, text)",
    "agentdb_private.claims_outnumber(uuid, text, jsonb, jsonb)",
)


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    for fn in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn} CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.fact_rules CASCADE")
    columns = ("set_names", "set_labels", "set_res", "lexicon_names", "lexicon_res", "lexicon_guards")
    for column in (*columns, "claim_guards"):
        op.execute(f"ALTER TABLE agentdb_private.claim_langs DROP COLUMN IF EXISTS {column} CASCADE")
    # The compiled constant holds rows of the dropped shape: rebuilt from the table as it is now.
    op.execute(
        "DO $$ BEGIN EXECUTE format("
        "'CREATE OR REPLACE FUNCTION agentdb_private.claim_langs_compiled() "
        "RETURNS agentdb_private.claim_langs [] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L', "
        "format('SELECT %L::agentdb_private.claim_langs []', "
        "ARRAY(SELECT l FROM agentdb_private.claim_langs AS l ORDER BY l.lang COLLATE \"C\"))); END $$"
    )
