-- What if 64 tools were registered, add_reminder sorting last? (63 more insert
-- tools on the same table, named a_001 ... a_063.) Counts what the dispatcher
-- costs with its tool's place: agentdb_tools._run.
SELECT
    count(
        agentdb.register_tool(
            name => 'a_' || lpad(g::text, 3, '0'), action => 'insert', target => 'public.reminders',
            label_zh => '记一条', label_en => 'note it', owner_column => 'user_id',
            dedup_columns => ARRAY['content', 'remind_at']
        )
    ) AS registered
FROM generate_series(1, 63) AS g;
