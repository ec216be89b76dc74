-- Step and audit rows are evidence: once written they never change.

CREATE OR REPLACE FUNCTION agentdb_private.refuse_change()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Steps and audit rows are evidence; correct with a new row, never by editing.';
END
$$;

CREATE OR REPLACE TRIGGER steps_append_only
BEFORE UPDATE OR DELETE ON agentdb_private.steps
FOR EACH ROW EXECUTE FUNCTION agentdb_private.refuse_change();

CREATE OR REPLACE TRIGGER steps_no_truncate
BEFORE TRUNCATE ON agentdb_private.steps
FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.refuse_change();

CREATE OR REPLACE TRIGGER audit_append_only
BEFORE UPDATE OR DELETE ON agentdb_private.audit
FOR EACH ROW EXECUTE FUNCTION agentdb_private.refuse_change();

CREATE OR REPLACE TRIGGER audit_no_truncate
BEFORE TRUNCATE ON agentdb_private.audit
FOR EACH STATEMENT EXECUTE FUNCTION agentdb_private.refuse_change();
