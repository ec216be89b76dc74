-- Tasks: one per user message, opened and settled by the trusted runtime.
-- Identity and login state come from here, never from tool arguments.

-- Earlier signature (before expects_action, time_zone): dropped so named calls stay unambiguous.
DROP FUNCTION IF EXISTS agentdb.begin_task(text, text, text, boolean, text);

-- expects_action: the user asked for something to be done (the runtime offered
-- tools): a task with no step then delivers only a question, an offer, a draft
-- or "nothing was done" (see finalize_reply). time_zone: the user's, an IANA
-- name; times and dates in the reply are read in it (default: the server's).
CREATE OR REPLACE FUNCTION agentdb.begin_task(
    user_id text,
    conversation_id text,
    goal text DEFAULT NULL,
    authenticated boolean DEFAULT false,
    lang text DEFAULT 'zh',
    expects_action boolean DEFAULT false,
    time_zone text DEFAULT NULL
)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id uuid;
    v_zone text;
BEGIN
    IF coalesce(trim(user_id), '') = '' THEN
        RAISE EXCEPTION 'begin_task: user_id is required'
            USING HINT = 'Pass an anonymous id (for example the session id) with authenticated => false for guests.',
                  ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(trim(conversation_id), '') = '' THEN
        RAISE EXCEPTION 'begin_task: conversation_id is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Ids go into btree keys (tasks, drafts, replies): a very long one would fail there.
    IF length(user_id) > 200 OR length(conversation_id) > 200 THEN
        RAISE EXCEPTION 'begin_task: user_id and conversation_id are at most 200 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(lang, 'zh') NOT IN ('zh', 'en') THEN
        RAISE EXCEPTION 'begin_task: lang must be zh or en, not %', lang USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_zone := coalesce(begin_task.time_zone, current_setting('TimeZone'));
    IF begin_task.time_zone IS NOT NULL THEN
        BEGIN
            PERFORM now() AT TIME ZONE v_zone;
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'begin_task: % is not a time zone PostgreSQL knows', v_zone
                USING HINT = 'Use an IANA name such as Europe/London or Asia/Shanghai.',
                      ERRCODE = 'invalid_parameter_value';
        END;
    END IF;
    INSERT INTO agentdb_private.tasks (user_id, conversation_id, goal, authenticated, lang, expects_action, time_zone)
    VALUES (begin_task.user_id, begin_task.conversation_id, left(begin_task.goal, 2000),
            coalesce(begin_task.authenticated, false), coalesce(begin_task.lang, 'zh'),
            coalesce(begin_task.expects_action, false), v_zone)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

-- The task row, locked or not; with p_user NULL (the task-only entry points
-- of one node) found by its id alone. NULL when there is none (for that user).
CREATE OR REPLACE FUNCTION agentdb_private.task_row(p_user text, p_task uuid, p_lock boolean)
RETURNS agentdb_private.tasks
LANGUAGE plpgsql
AS $$
DECLARE
    v_task agentdb_private.tasks;
BEGIN
    IF p_user IS NULL AND p_lock THEN
        SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.id = p_task FOR UPDATE;
    ELSIF p_user IS NULL THEN
        SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.id = p_task;
    ELSIF p_lock THEN
        SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.user_id = p_user AND t.id = p_task FOR UPDATE;
    ELSE
        SELECT * INTO v_task FROM agentdb_private.tasks AS t WHERE t.user_id = p_user AND t.id = p_task;
    END IF;
    RETURN v_task;
END
$$;

-- Record a replan: step numbering continues where it was (seq never restarts).
-- p_user NULL: the task found by its id alone (the task-only entry point).
CREATE OR REPLACE FUNCTION agentdb_private.replan_core(p_user text, p_task uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_replans integer;
BEGIN
    IF p_user IS NULL THEN
        UPDATE agentdb_private.tasks AS t SET replans = t.replans + 1
         WHERE t.id = p_task AND t.status = 'running'
        RETURNING t.replans INTO v_replans;
    ELSE
        UPDATE agentdb_private.tasks AS t SET replans = t.replans + 1
         WHERE t.user_id = p_user AND t.id = p_task AND t.status = 'running'
        RETURNING t.replans INTO v_replans;
    END IF;
    RETURN v_replans;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.replan(task uuid)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.replan_core(NULL, replan.task);
END
$$;

-- The status a task's steps add up to: all ok -> success, none -> failed, else partial.
-- (PL/pgSQL, and the user named: on Citus a query in an SQL function with
-- parameters cannot be routed to a shard.)
DROP FUNCTION IF EXISTS agentdb_private.settled_status(uuid);
CREATE OR REPLACE FUNCTION agentdb_private.settled_status(p_user text, p_task uuid)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT CASE
        WHEN count(*) = 0 THEN 'failed'
        WHEN bool_and(s.outcome = 'success' AND s.verified) THEN 'success'
        WHEN bool_or(s.outcome = 'success' AND s.verified) THEN 'partial'
        ELSE 'failed'
    END
      FROM agentdb_private.steps AS s
     -- Calls refused because the task was already closed are not part of its work
     -- (the report and the claim check ignore them too).
     WHERE s.user_id = p_user AND s.task_id = p_task AND s.refusal IS DISTINCT FROM 'closed');
END
$$;

-- Settle a task (p_user NULL: found by its id alone). Settling twice returns
-- the first result.
CREATE OR REPLACE FUNCTION agentdb_private.finish_core(p_user text, p_task uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_task agentdb_private.tasks := agentdb_private.task_row(p_user, p_task, true);
    v_status text;
    v_now timestamptz := clock_timestamp();
BEGIN
    IF v_task.id IS NULL THEN
        RAISE EXCEPTION 'finish_task: no task %', p_task USING ERRCODE = 'no_data_found';
    END IF;
    IF v_task.status <> 'running' THEN
        RETURN v_task.status;
    END IF;
    v_status := agentdb_private.settled_status(v_task.user_id, v_task.id);
    UPDATE agentdb_private.tasks AS t
       SET status = v_status, finished_at = v_now, settled_by = 'finish_task'
     WHERE t.user_id = v_task.user_id AND t.id = v_task.id;
    RETURN v_status;
END
$$;

CREATE OR REPLACE FUNCTION agentdb.finish_task(task uuid)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN agentdb_private.finish_core(NULL, finish_task.task);
END
$$;

-- Settle tasks a crashed runtime left running. Returns how many were settled.
CREATE OR REPLACE FUNCTION agentdb.reap_tasks(older_than interval DEFAULT '1 hour')
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer := 0;
    v_now timestamptz := clock_timestamp();
    v_stale record;
    v_status text;
BEGIN
    -- Task by task, each found by its user and id: on Citus a locking read of
    -- many shards is refused, and each statement here runs on one shard. A task
    -- a call still holds is skipped (SKIP LOCKED) and left for the next run.
    FOR v_stale IN SELECT t.user_id, t.id FROM agentdb_private.tasks AS t
                    WHERE t.status = 'running' AND t.created_at < v_now - older_than LOOP
        PERFORM 1 FROM agentdb_private.tasks AS t
         WHERE t.user_id = v_stale.user_id AND t.id = v_stale.id AND t.status = 'running'
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        v_status := agentdb_private.settled_status(v_stale.user_id, v_stale.id);
        UPDATE agentdb_private.tasks AS t SET status = v_status, finished_at = v_now, settled_by = 'reap_tasks'
         WHERE t.user_id = v_stale.user_id AND t.id = v_stale.id;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
