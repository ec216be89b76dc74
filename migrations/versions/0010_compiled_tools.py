"""Tools compiled at registration: the agentdb_tools schema for their functions, and the
tools table's compiled signature, time and stale reason.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# What sql/ of this revision adds on top of the tables (a package of revision 0009
# re-creates its own functions but knows nothing of these).
ADDED_FUNCTIONS = (
    "agentdb.compile_tools(boolean)",
    "agentdb_private.base_type(oid, integer)",
    "agentdb_private.compile_columns(agentdb_private.tools)",
    "agentdb_private.has_column_triggers(regclass)",
    "agentdb_private.tool_signature(agentdb_private.tools)",
    "agentdb_private.compile_nested(jsonb, text)",
    "agentdb_private.compile_read(regclass, jsonb, text, text)",
    "agentdb_private.compile_differs(jsonb, text)",
    "agentdb_private.compile_same(jsonb, text)",
    "agentdb_private.compile_declare(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_plan(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_convert(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_bounds(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_checks(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_match(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_mismatch(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_proof(text)",
    "agentdb_private.compile_count(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_written(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_keys(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_marked(text)",
    "agentdb_private.compile_insert(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_verdict()",
    "agentdb_private.compile_setlist(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_setlist_dynamic(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_where_dynamic(agentdb_private.tools, jsonb, text)",
    "agentdb_private.compile_update(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_delete(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_end(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_body(agentdb_private.tools, jsonb)",
    "agentdb_private.compile_tool(text, boolean)",
    "agentdb_private.compile_dispatch()",
    "agentdb_tools._run(text, text, jsonb, integer, bigint, text, boolean, text)",
    "agentdb_private.compile_changed(boolean)",
    "agentdb_private.ddl_watched()",
    "agentdb_private.tool_stale(agentdb_private.tools)",
    "agentdb_private.stale_reason(agentdb_private.tools)",
    "agentdb_private.write_failure(text, text, integer)",
    "agentdb_private.step_open(uuid, text, boolean)",
    "agentdb_private.step_gate(agentdb_private.tasks, text, agentdb_private.tools, text, boolean, boolean)",
    "agentdb_private.step_run(agentdb_private.tools, agentdb_private.tasks, jsonb, integer, bigint, text,"
    " boolean)",
    "agentdb_private.receipt(agentdb_private.tasks, integer, text, agentdb_private.tools, text, jsonb)",
    "agentdb_private.write_step(agentdb_private.tasks, integer, text, agentdb_private.tools, jsonb, text,"
    " timestamp with time zone, jsonb, jsonb)",
    "agentdb_private.store_draft(agentdb_private.tasks, agentdb_private.tools, jsonb, integer)",
    "agentdb_private.draft_refusal(agentdb_private.tasks, agentdb_private.drafts, agentdb_private.tools)",
    "agentdb_private.check_search_path(regprocedure, text)",
    "agentdb_private.check_tool(agentdb_private.tools)",
)


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    # The event trigger goes with its function (CASCADE), before anything it calls.
    op.execute("DROP FUNCTION IF EXISTS agentdb_private.on_ddl() CASCADE")
    op.execute("DROP VIEW IF EXISTS agentdb.tool_status")
    for fn in ADDED_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.execute("DROP SCHEMA IF EXISTS agentdb_tools CASCADE")
    op.execute("ALTER TABLE agentdb_private.tools DROP COLUMN IF EXISTS compiled_sig, "
               "DROP COLUMN IF EXISTS compiled_at, DROP COLUMN IF EXISTS stale_reason")
