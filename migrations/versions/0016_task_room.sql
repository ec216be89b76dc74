-- Revision 0016: room on the tasks' pages for their updates (issue 11).
-- Idempotent, like every revision from 0007 on: `pyagentdb install --repair`
-- runs it again.

-- A task's row is updated once or twice in its life: closed when its reply is
-- taken (closed_at), settled (status, finished_at). With room left on its page
-- the first is a heap-only tuple update: no index of the table is written
-- (close_task 130 -> 56 us a call). SET takes no exclusive lock and rewrites
-- nothing: pages filled before keep their fill.
ALTER TABLE agentdb_private.tasks SET (fillfactor = 70);
