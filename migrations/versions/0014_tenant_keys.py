"""Tenant keys: user_id on steps and claims (from their task), NOT NULL on audit and
change_log ('' for rows of no user), every key of a tenant table led by user_id and the
foreign keys between tenant tables paired on it, so the tables can be distributed by user on
Citus (docs/scaling.md). One node keeps an index for each lookup by id alone. The lock
rows of the 16 global chain stripes (chain_heads), unused since 0011, are dropped.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# What sql/ of this revision adds on top of the tables (a package of revision 0013
# re-creates its own functions but knows nothing of these).
ADDED_FUNCTIONS = (
    "agentdb.invoke_for(text, uuid, text, jsonb, text, text, integer, bigint)",
    "agentdb_private.step_open(text, uuid, text, boolean)",
    "agentdb_private.invoke_core(text, uuid, text, jsonb, text, text, integer, bigint, boolean)",
    "agentdb_private.next_seq(text, uuid)",
    "agentdb_private.prior_receipt(text, uuid, text)",
    "agentdb_private.task_row(text, uuid, boolean)",
    "agentdb_private.stale_reason(text)",
    "agentdb_private.on_citus_worker()",
    "agentdb.report_for(text, uuid)",
    "agentdb.report_text_for(text, uuid, text)",
    "agentdb.finalize_reply_for(text, uuid, text, jsonb)",
    "agentdb.finish_task_for(text, uuid)",
    "agentdb_private.finish_core(text, uuid)",
    "agentdb_private.settled_status(text, uuid)",
    "agentdb_private.report_steps(text, uuid)",
    "agentdb_private.close_task(text, uuid)",
    "agentdb_private.report_core(text, uuid)",
    "agentdb_private.report_text_core(text, uuid, text)",
    "agentdb_private.book_state(text, uuid)",
    "agentdb_private.finalize_core(text, uuid, text, jsonb)",
    "agentdb_private.mark_shown(text, uuid)",
    "agentdb_private.claim_is_backed(text, uuid, text, text)",
    "agentdb_private.claim_is_backed_as(text, uuid, text, text, text)",
    "agentdb_private.claim_backed_as(text, uuid, text, text, text)",
    "agentdb_private.class_capacity(text, uuid, text, text)",
    "agentdb_private.claims_outnumber(text, uuid, text, jsonb, jsonb)",
    "agentdb.propose_for(text, uuid, text, jsonb, text, integer)",
    "agentdb.confirm_for(text, uuid, text)",
    "agentdb_private.propose_core(text, uuid, text, jsonb, text, integer)",
    "agentdb_private.confirm_core(text, uuid, text)",
    "agentdb_private.tenant_of(text)",
)

# Keys as revision 0013 left them (table, constraint, definition).
OLD_KEYS = (
    ("tasks", "tasks_pkey", "PRIMARY KEY (id)"),
    ("steps", "steps_pkey", "PRIMARY KEY (id)"),
    ("steps", "steps_seq_key", "UNIQUE (task_id, seq)"),
    ("audit", "audit_pkey", "PRIMARY KEY (id)"),
    ("claims", "claims_pkey", "PRIMARY KEY (id)"),
    ("replies", "replies_pkey", "PRIMARY KEY (task_id)"),
    ("drafts", "drafts_pkey", "PRIMARY KEY (id)"),
    ("actions", "actions_pkey", "PRIMARY KEY (id)"),
    ("permissions", "permissions_pkey", "PRIMARY KEY (id)"),
    ("change_log", "change_log_pkey", "PRIMARY KEY (id)"),
)
OLD_FKEYS = (
    ("steps", "steps_task_id_fkey", "(task_id) REFERENCES agentdb_private.tasks (id)"),
    ("audit", "audit_step_id_fkey", "(step_id) REFERENCES agentdb_private.steps (id)"),
    ("claims", "claims_task_id_fkey", "(task_id) REFERENCES agentdb_private.tasks (id)"),
    ("replies", "replies_task_id_fkey", "(task_id) REFERENCES agentdb_private.tasks (id)"),
    ("drafts", "drafts_task_id_fkey", "(task_id) REFERENCES agentdb_private.tasks (id)"),
    ("drafts", "drafts_shown_in_task_fkey", "(shown_in_task) REFERENCES agentdb_private.tasks (id)"),
    ("drafts", "drafts_closed_in_task_fkey", "(closed_in_task) REFERENCES agentdb_private.tasks (id)"),
    ("drafts", "drafts_step_id_fkey", "(step_id) REFERENCES agentdb_private.steps (id)"),
    ("drafts", "drafts_superseded_by_fkey", "(superseded_by) REFERENCES agentdb_private.drafts (id)"),
    ("actions", "actions_task_id_fkey", "(task_id) REFERENCES agentdb_private.tasks (id)"),
    ("actions", "actions_exec_task_id_fkey", "(exec_task_id) REFERENCES agentdb_private.tasks (id)"),
    ("actions", "actions_step_id_fkey", "(step_id) REFERENCES agentdb_private.steps (id)"),
)
OLD_INDEXES = (
    "CREATE UNIQUE INDEX steps_call_key ON agentdb_private.steps (task_id, call_id)"
    " WHERE call_id IS NOT NULL",
    "CREATE UNIQUE INDEX audit_chain_key ON agentdb_private.audit (chain_stripe, chain_seq)"
    " WHERE chain_tenant IS NULL",
    "CREATE UNIQUE INDEX audit_tenant_chain_key"
    " ON agentdb_private.audit (chain_tenant, chain_stripe, chain_seq) WHERE chain_tenant IS NOT NULL",
    "CREATE UNIQUE INDEX change_log_chain_key ON agentdb_private.change_log (chain_stripe, chain_seq)"
    " WHERE chain_tenant IS NULL",
    "CREATE UNIQUE INDEX change_log_tenant_chain_key"
    " ON agentdb_private.change_log (chain_tenant, chain_stripe, chain_seq) WHERE chain_tenant IS NOT NULL",
)
NEW_INDEXES = ("tasks_id_idx", "steps_task_idx", "replies_task_idx", "actions_id_idx", "drafts_id_idx",
               "steps_call_key", "audit_chain_key", "audit_tenant_chain_key", "change_log_chain_key",
               "change_log_tenant_chain_key")


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


# Views that use a column or key this revision made (sql/ of the head joins on user_id): a
# package of revision 0013 makes its own again when it installs.
DROP_DEPENDENT_VIEWS = """
DO $views$
DECLARE
    v_view text;
BEGIN
    FOR v_view IN
        SELECT DISTINCT r.ev_class::regclass::text
          FROM pg_catalog.pg_depend AS d
          JOIN pg_catalog.pg_rewrite AS r ON r.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
           AND ((d.refclassid = 'pg_catalog.pg_class'::regclass
                 AND (d.refobjid, d.refobjsubid) IN (
                     SELECT a.attrelid, a.attnum FROM pg_catalog.pg_attribute AS a
                      WHERE a.attname = 'user_id' AND a.attrelid IN (
                            'agentdb_private.steps'::regclass, 'agentdb_private.claims'::regclass)))
                OR (d.refclassid = 'pg_catalog.pg_constraint'::regclass
                    AND d.refobjid IN (SELECT k.oid FROM pg_catalog.pg_constraint AS k
                                        WHERE k.connamespace = 'agentdb_private'::regnamespace)))
    LOOP
        EXECUTE 'DROP VIEW IF EXISTS ' || v_view || ' CASCADE';
    END LOOP;
END
$views$"""


def downgrade() -> None:
    op.execute(DROP_DEPENDENT_VIEWS)
    op.execute("DROP VIEW IF EXISTS agentdb.tool_status")  # calls stale_reason(text)
    for fn in ADDED_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    for table, name, _definition in OLD_FKEYS:
        op.execute(f"ALTER TABLE agentdb_private.{table} DROP CONSTRAINT IF EXISTS {name}")
    for name in NEW_INDEXES:
        op.execute(f"DROP INDEX IF EXISTS agentdb_private.{name}")
    for table, name, definition in OLD_KEYS:
        op.execute(f"ALTER TABLE agentdb_private.{table} DROP CONSTRAINT IF EXISTS {name}")
        op.execute(f"ALTER TABLE agentdb_private.{table} ADD CONSTRAINT {name} {definition}")
    for table, name, definition in OLD_FKEYS:
        op.execute(f"ALTER TABLE agentdb_private.{table} ADD CONSTRAINT {name} FOREIGN KEY {definition}")
    for statement in OLD_INDEXES:
        op.execute(statement)
    # '' stands for "no user" since 0014; before, audit and change_log said NULL.
    op.execute("ALTER TABLE agentdb_private.audit ALTER COLUMN user_id DROP NOT NULL")
    op.execute("ALTER TABLE agentdb_private.change_log ALTER COLUMN user_id DROP NOT NULL")
    op.execute("ALTER TABLE agentdb_private.steps DROP COLUMN IF EXISTS user_id")
    op.execute("ALTER TABLE agentdb_private.claims DROP COLUMN IF EXISTS user_id")
    op.execute("CREATE TABLE IF NOT EXISTS agentdb_private.chain_heads"
               " (stripe smallint PRIMARY KEY, locked_by xid8)")
    op.execute("INSERT INTO agentdb_private.chain_heads (stripe)"
               " SELECT g::smallint FROM generate_series(0, 15) AS g ON CONFLICT DO NOTHING")
