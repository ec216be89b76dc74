-- What if a compiled tool wrote no change-log row (nor its note for the
-- sealer)? Counts what log_step_row costs. Not a change to make: the row is
-- the write's evidence.
CREATE OR REPLACE FUNCTION agentdb_private.log_step_row(
    p_oid oid, p_name text, p_owner text, p_keys text[], p_op text, p_call text, p_row anyelement
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN;
END
$$;
