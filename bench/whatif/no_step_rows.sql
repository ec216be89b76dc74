-- What if a call wrote no step, audit or note row? Counts what write_step
-- costs (the receipt is still built and returned).
CREATE OR REPLACE FUNCTION agentdb_private.write_step(
    p_task agentdb_private.tasks, p_seq integer, p_tool_name text, p_tool agentdb_private.tools,
    p_args jsonb, p_reason text, p_started timestamptz, p_result jsonb, p_receipt jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN p_receipt;
END
$$;
