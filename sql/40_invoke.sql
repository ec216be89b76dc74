-- The guarded write's shared pieces: the argument size limit, the result of a
-- write that did not happen, and the classification of an error during a
-- write. The write itself is compiled per tool (sql/42_compile.sql); the call
-- around it (task lock, replay, gate, step and audit rows) is the envelope of
-- sql/50_invoke_api.sql.

-- The interpreted write of earlier versions and its helpers: replaced by the
-- compiled tools.
DROP FUNCTION IF EXISTS agentdb_private.guarded_write(agentdb_private.tools, text, jsonb, integer, bigint);
DROP FUNCTION IF EXISTS agentdb_private.guarded_write(
    agentdb_private.tools, text, jsonb, integer, bigint, uuid, integer
);
DROP FUNCTION IF EXISTS agentdb_private.guarded_write(
    agentdb_private.tools, text, jsonb, integer, bigint, uuid, integer, boolean
);
DROP FUNCTION IF EXISTS agentdb_private.differs_sql(text, oid, text, text);
DROP FUNCTION IF EXISTS agentdb_private.mismatch_sql(text[], jsonb);
DROP FUNCTION IF EXISTS agentdb_private.match_sql(text[], text, boolean);
DROP FUNCTION IF EXISTS agentdb_private.bad_field(regclass, jsonb);
DROP FUNCTION IF EXISTS agentdb_private.nested_field(jsonb, jsonb);
DROP FUNCTION IF EXISTS agentdb_private.lossy_field(regclass, jsonb);

-- Argument size limit: anything bigger is refused before it is parsed further.
CREATE OR REPLACE FUNCTION agentdb_private.max_args_bytes()
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT 65536 $$;

-- A result object for a write that did not happen.
CREATE OR REPLACE FUNCTION agentdb_private.not_done(
    p_outcome text, p_refusal text, p_error text DEFAULT NULL, p_extra jsonb DEFAULT '{}'
)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'outcome', p_outcome, 'refusal', p_refusal, 'verified', false,
        'affected_rows', 0, 'attempts', 0, 'error', p_error
    ) || coalesce(p_extra, '{}')
$$;

-- An error raised by a write attempt (its statement or its proof), as a result,
-- or NULL when the attempt may be made once more. Data and integrity errors
-- repeat identically, and so do classes 42, 0A, 2B, 2F, 39 and 44: no second
-- try. Anything else (a trigger that raised, a deadlock, a serialization
-- failure, a lock timeout) gets one more.
CREATE OR REPLACE FUNCTION agentdb_private.write_failure(p_state text, p_msg text, p_attempts integer)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_attempts >= 2 OR left(p_state, 2) IN ('22', '23', '42', '0A', '2B', '2F', '39', '44') THEN
        agentdb_private.not_done(
            CASE WHEN left(p_state, 2) IN ('22', '23') AND p_state NOT IN ('23505', '23P01') THEN 'invalid' ELSE 'failed' END,
            CASE p_state
                WHEN '23505' THEN 'unique_violation'
                WHEN '23P01' THEN 'exclusion_violation'
                WHEN '23514' THEN 'check_violation'
                WHEN '23502' THEN 'missing_field'
                WHEN '23503' THEN 'foreign_key_violation'
                ELSE CASE WHEN left(p_state, 2) = '22' THEN 'bad_value' ELSE 'error' END
            END,
            format('%s (SQLSTATE %s)', p_msg, p_state),
            jsonb_build_object('attempts', p_attempts, 'sqlstate', p_state))
    END
$$;
