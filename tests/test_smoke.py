def test_invoke_inserts_and_verifies(reminders):
    task = reminders.execute(
        "SELECT agentdb.begin_task('u1', 'c1', 'remind me', authenticated => true)").fetchone()[0]
    receipt = reminders.execute(
        "SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb)",
        (task, '{"content": "buy veg", "remind_at": "2026-11-30 08:00+08"}'),
    ).fetchone()[0]
    assert receipt["outcome"] == "success" and receipt["verified"] is True
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 1
