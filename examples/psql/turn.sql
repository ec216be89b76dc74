-- One complete turn from psql: begin_task -> invoke -> report -> finalize_reply.
-- Run: psql "$DSN" -v ON_ERROR_STOP=1 -f examples/psql/turn.sql
-- Needs the reminders example (pyagentdb.examples) and permission for 'alice'.
\set QUIET on
SELECT agentdb.begin_task('alice', 'psql-demo', 'remind me to buy vegetables',
                          authenticated => true, lang => 'en', time_zone => 'Asia/Shanghai') AS task \gset
-- the prompt layer: rules from database facts
SELECT unnest(agentdb.context_rules(:'task')) AS rule;
-- the agent's write
SELECT r ->> 'outcome' AS outcome, r ->> 'verified' AS verified, r ->> 'detail' AS detail
  FROM agentdb.invoke(:'task', 'add_reminder',
                      '{"content": "buy vegetables", "remind_at": "2026-12-01 08:00+08"}',
                      call_id => 'psql-1') AS r;
-- the report for the model's final wording (this closes the task's tools)
SELECT agentdb.report_text(:'task') AS report;
-- the exit gate: what the user reads
SELECT v ->> 'verdict' AS verdict, v ->> 'text' AS user_reads
  FROM agentdb.finalize_reply(:'task', 'I''ve set a reminder to buy vegetables at 8am.') AS v;
SELECT agentdb.finish_task(:'task') AS status;
