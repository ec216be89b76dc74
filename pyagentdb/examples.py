"""The example schema used by the demo, the tests and the benchmark: a reminders table."""

REMINDERS_SQL = """
CREATE TABLE IF NOT EXISTS public.reminders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    content text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 500),
    remind_at timestamptz NOT NULL,
    done boolean NOT NULL DEFAULT false,
    version bigint NOT NULL DEFAULT 1
);
-- Serves the duplicate check (owner + time) and the user's own listing.
CREATE INDEX IF NOT EXISTS reminders_owner_time_idx ON public.reminders (user_id, remind_at);
COMMENT ON COLUMN public.reminders.content IS '提醒内容 / what to be reminded of';
COMMENT ON COLUMN public.reminders.remind_at IS '提醒时间 / when to remind';

SELECT agentdb.register_tool(
    name => 'add_reminder', action => 'insert', target => 'public.reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder',
    owner_column => 'user_id', dedup_columns => ARRAY['content', 'remind_at'],
    description => 'Create a reminder for the current user at a given time.');
SELECT agentdb.register_tool(
    name => 'edit_reminder', action => 'update', target => 'public.reminders',
    label_zh => '改一条提醒', label_en => 'change a reminder',
    owner_column => 'user_id', version_column => 'version',
    description => 'Change the text or time of one of the current user''s reminders.');
SELECT agentdb.register_tool(
    name => 'finish_reminders', action => 'update', target => 'public.reminders',
    label_zh => '把提醒标为已完成', label_en => 'mark reminders as done',
    owner_column => 'user_id',
    description => 'Mark several reminders done at once (where/set, with expect_rows).');
SELECT agentdb.register_tool(
    name => 'delete_reminder', action => 'delete', target => 'public.reminders',
    label_zh => '删一条提醒', label_en => 'delete a reminder',
    owner_column => 'user_id',
    description => 'Delete one of the current user''s reminders.');
"""


def install_reminders(conn) -> None:
    """Create the reminders table and register its tools (idempotent). `conn` is psycopg."""
    conn.execute(REMINDERS_SQL)
