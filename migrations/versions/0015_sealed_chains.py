"""Sealed chains: audit and change-log rows are linked into their tenant's hash chain after
commit, by agentdb.seal_chains(), instead of by their writer (chain_pending, chain_links,
chain_sealer; rows chained before keep their links). The ledger's checked columns become
domains with the same rules, and audit -> steps loses its foreign key (doctor checks it).
Both cut the work of every guarded write and reply (issue 12; docs/ledger.md).

A downgrade links every row sealed since into the per-tenant stripes of revision 0011 (a new
stripe per tenant, in link order, hashed as 0011 hashes), so no row loses its evidence.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from pathlib import Path

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# What sql/ of this revision adds on top of the tables (a package of revision 0014
# re-creates its own functions but knows nothing of these).
ADDED_FUNCTIONS = (
    "agentdb.seal_chains()",
    "agentdb_private.seal_chain(text, text)",
    "agentdb_private.chain_links_problems(text)",
    "agentdb_private.chain_old_problems(text)",
    "agentdb_private.chain_unlinked(text, text)",
    "agentdb_private.chain_anchor_problems(text, text, jsonb)",
    "agentdb_private.chain_link_tails(text)",
    "agentdb_private.is_distributed(regclass)",
    "agentdb_private.gate_clear(agentdb_private.tasks, agentdb_private.tools, text, boolean, boolean, boolean)",
    "agentdb_private.step_open(text, uuid, text, boolean, text)",
)

COLUMNS = (
    ("tasks", "lang", "tasks_lang_check", "lang IN ('zh', 'en')"),
    ("tasks", "status", "tasks_status_check", "status IN ('running', 'success', 'partial', 'failed')"),
    ("steps", "outcome", "steps_outcome_check",
     "outcome IN ('success', 'refused', 'invalid', 'duplicate', 'conflict', 'failed', 'unverified',"
     " 'needs_confirmation')"),
    ("steps", "reason", "steps_reason_length", "char_length(reason) <= 500"),
    ("audit", "status", "audit_status_check", "status IN ('SUCCESS', 'FAILED', 'REFUSED')"),
    ("change_log", "op", "change_log_op_check", "op IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')"),
    ("claims", "kind", "claims_kind_check", "kind IN ('create', 'update', 'delete', 'done')"),
    ("claims", "source", "claims_source_check", "source IN ('detected', 'declared', 'runtime')"),
    ("replies", "verdict", "replies_verdict_check", "verdict IN ('deliver', 'replace')"),
    ("replies", "book_state", "replies_book_state_check", "book_state IN ('troubled', 'empty', 'clean')"),
)
DOMAINS = ("lang_t", "task_status_t", "outcome_t", "reason_t", "audit_status_t", "change_op_t",
           "claim_kind_t", "claim_source_t", "verdict_t", "book_state_t")

# Every row sealed since 0015 gets a link of 0011's kind: its tenant's new stripe, chain_seq
# in link order, hash over its content with those columns set (sql/64_chain.sql of 0014).
RELINK = """
DO $relink$
DECLARE
    v_table text;
    v_chain text;
    r record;
    v_prev bytea;
    v_stripe integer;
    v_tenant text;
    v_seq bigint;
BEGIN
    PERFORM set_config('TimeZone', 'UTC', true);
    FOREACH v_chain IN ARRAY ARRAY['audit', 'change'] LOOP
        v_table := CASE v_chain WHEN 'audit' THEN 'agentdb_private.audit'
                                ELSE 'agentdb_private.change_log' END;
        v_tenant := NULL;
        FOR r IN EXECUTE 'SELECT t.id, t.user_id FROM ' || v_table || ' AS t'
                || ' LEFT JOIN agentdb_private.chain_links AS l'
                || ' ON l.user_id = t.user_id AND l.chain = $1 AND l.row_id = t.id'
                || ' WHERE t.chain_seq IS NULL AND (l.seq IS NOT NULL OR EXISTS (SELECT 1'
                || ' FROM agentdb_private.chain_pending AS p WHERE p.user_id = t.user_id AND p.chain = $1'
                || ' AND p.row_id = t.id)) ORDER BY t.user_id, l.seq NULLS LAST, t.id' USING v_chain LOOP
            IF v_tenant IS DISTINCT FROM r.user_id THEN
                v_tenant := r.user_id;
                v_prev := '\\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
                v_seq := 0;
                INSERT INTO agentdb_private.chain_stripes (tenant, stripe)
                VALUES (v_tenant, nextval('agentdb_private.chain_stripe_seq')::integer)
                RETURNING stripe INTO v_stripe;
            END IF;
            v_seq := v_seq + 1;
            EXECUTE 'UPDATE ' || v_table || ' AS t SET chain_tenant = t.user_id, chain_stripe = $1,'
                    || ' chain_seq = $2 WHERE t.user_id = $3 AND t.id = $4'
                    USING v_stripe, v_seq, r.user_id, r.id;
            EXECUTE 'UPDATE ' || v_table || ' AS t SET hash = sha256($1 || convert_to(jsonb_strip_nulls('
                    || 'CASE WHEN t.user_id = '''' AND (to_jsonb(t) ? ''step_id'' OR t.chain_tenant IS NULL)'
                    || ' THEN to_jsonb(t) - ARRAY[''hash'', ''user_id'']'
                    || ' ELSE to_jsonb(t) - ''hash'' END)::text,'
                    || ' ''UTF8'')) WHERE t.user_id = $2 AND t.id = $3 RETURNING t.hash'
                    INTO v_prev USING v_prev, r.user_id, r.id;
        END LOOP;
    END LOOP;
END
$relink$"""


def upgrade() -> None:
    op.execute((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def downgrade() -> None:
    op.execute("ALTER TABLE agentdb_private.audit DISABLE TRIGGER USER")
    op.execute("ALTER TABLE agentdb_private.change_log DISABLE TRIGGER USER")
    op.execute(RELINK)
    op.execute("ALTER TABLE agentdb_private.audit ENABLE TRIGGER USER")
    op.execute("ALTER TABLE agentdb_private.change_log ENABLE TRIGGER USER")
    for fn in ADDED_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn} CASCADE")
    op.execute("DROP TABLE IF EXISTS agentdb_private.chain_pending, agentdb_private.chain_links,"
               " agentdb_private.chain_sealer CASCADE")
    for column in ("chain_stripe", "chain_seq", "hash"):
        op.execute(f"ALTER TABLE agentdb_private.change_log ALTER COLUMN {column} SET NOT NULL")
    # Views on the retyped columns go; the package of 0014 makes its own again.
    for table, column, name, check in COLUMNS:
        op.execute(f"""
            DO $v$
            DECLARE v_view text;
            BEGIN
                FOR v_view IN
                    SELECT DISTINCT r.ev_class::regclass::text
                      FROM pg_catalog.pg_depend AS d
                      JOIN pg_catalog.pg_rewrite AS r ON r.oid = d.objid
                      JOIN pg_catalog.pg_attribute AS a
                        ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                     WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND r.ev_class <> d.refobjid
                       AND a.attrelid = 'agentdb_private.{table}'::regclass AND a.attname = '{column}'
                LOOP
                    EXECUTE 'DROP VIEW IF EXISTS ' || v_view || ' CASCADE';
                END LOOP;
            END
            $v$""")
        op.execute(f"ALTER TABLE agentdb_private.{table} ALTER COLUMN {column} TYPE text")
        op.execute(f"ALTER TABLE agentdb_private.{table} ADD CONSTRAINT {name} CHECK ({check})")
    for domain in DOMAINS:
        op.execute(f"DROP DOMAIN IF EXISTS agentdb_private.{domain}")
    for table in ("audit", "change_log"):
        op.execute(f"DROP INDEX IF EXISTS agentdb_private.{table}_chain_key")
        op.execute(f"CREATE UNIQUE INDEX {table}_chain_key ON agentdb_private.{table}"
                   " (user_id, chain_stripe, chain_seq) WHERE chain_tenant IS NULL")
    op.execute("ALTER TABLE agentdb_private.audit ADD CONSTRAINT audit_step_id_fkey"
               " FOREIGN KEY (user_id, step_id) REFERENCES agentdb_private.steps (user_id, id)")
