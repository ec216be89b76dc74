"""`pyagentdb demo`: the seed incidents, replayed end to end with scripted agents.

For each scene it prints what the user asked, what the agent called and what
the database answered, what the model said, and what the user finally reads
after the exit gate.

The demo keeps to itself: without --dsn it runs in a database of its own
(pyagentdb_demo) on the embedded server; with --dsn it refuses a database that
holds anything but its own objects. Its tables live in schema pyagentdb_demo,
its tools are named demo_*, its users demo_* hold permissions for those tools
only, and all of it is reset at the start of each run, so it can run again and
again.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg

from . import install, textui
from .agents import Call, ScriptedAgent
from .client import Client

# The demo's user lives in Beijing time; its scenes speak of today and tomorrow there (the exit gate
# compares the times and days a reply names with what was written, in the user's time zone).
TIME_ZONE = "Asia/Shanghai"
_TODAY = datetime.now(ZoneInfo(TIME_ZONE)).date()


def _day(offset: int) -> str:
    return (_TODAY + timedelta(days=offset)).isoformat()


SETUP_SQL = """
CREATE SCHEMA pyagentdb_demo;

CREATE TABLE pyagentdb_demo.reminders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    content text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 200),
    remind_at timestamptz NOT NULL
);
COMMENT ON COLUMN pyagentdb_demo.reminders.remind_at IS '提醒时间 / reminder time';

-- A calendar whose check refuses a clash and suggests another time.
CREATE TABLE pyagentdb_demo.meetings (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    title text NOT NULL,
    starts_at timestamptz NOT NULL
);
INSERT INTO pyagentdb_demo.meetings (user_id, title, starts_at)
VALUES ('demo_alice', 'design review', '{tomorrow} 15:00+08');
CREATE FUNCTION pyagentdb_demo.meeting_clash(p_user text, p_args jsonb) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT jsonb_build_object('reason', @CLASH_REASON@, 'alternative', '16:00')
     WHERE EXISTS (SELECT 1 FROM pyagentdb_demo.meetings AS m
                    WHERE m.user_id = p_user AND m.starts_at = (p_args ->> 'starts_at')::timestamptz)
$$;

-- A notes table whose trigger silently drops every row: "executed, not persisted".
CREATE TABLE pyagentdb_demo.notes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    body text NOT NULL
);
CREATE FUNCTION pyagentdb_demo.drop_row() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER lossy BEFORE INSERT ON pyagentdb_demo.notes
FOR EACH ROW EXECUTE FUNCTION pyagentdb_demo.drop_row();

-- Courts are booked only from a confirmed draft.
CREATE TABLE pyagentdb_demo.bookings (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    court text NOT NULL,
    starts_at timestamptz NOT NULL
);

-- 500 orders expected to be shoes; only 428 are.
CREATE TABLE pyagentdb_demo.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    shop_id text NOT NULL,
    category text NOT NULL,
    price numeric(10, 2) NOT NULL
);
INSERT INTO pyagentdb_demo.orders (shop_id, category, price)
SELECT 'demo_alice', CASE WHEN g <= 428 THEN 'shoes' ELSE 'boots' END, 99.00
FROM generate_series(1, 500) AS g;

SELECT agentdb.register_tool(name => 'demo_add_reminder', action => 'insert',
    target => 'pyagentdb_demo.reminders', label_zh => '记一条提醒', label_en => 'set a reminder',
    owner_column => 'user_id', dedup_columns => ARRAY['content', 'remind_at']);
SELECT agentdb.register_tool(name => 'demo_add_meeting', action => 'insert',
    target => 'pyagentdb_demo.meetings', label_zh => '约一个会议', label_en => 'book a meeting',
    owner_column => 'user_id', conflict_check => 'pyagentdb_demo.meeting_clash(text, jsonb)');
SELECT agentdb.register_tool(name => 'demo_add_note', action => 'insert',
    target => 'pyagentdb_demo.notes', label_zh => '记一条笔记', label_en => 'save a note',
    owner_column => 'user_id');
SELECT agentdb.register_tool(name => 'demo_book_court', action => 'insert',
    target => 'pyagentdb_demo.bookings', label_zh => '预约场地', label_en => 'book a court',
    owner_column => 'user_id', needs_confirm => true);
SELECT agentdb.register_tool(name => 'demo_reprice_orders', action => 'update',
    target => 'pyagentdb_demo.orders', label_zh => '批量改价', label_en => 'reprice orders',
    owner_column => 'shop_id');
-- The demo's own user, allowed exactly the demo's tools (never a global grant).
SELECT agentdb.grant_permission('demo_alice', 'WRITE', tool => t.name)
FROM (VALUES ('demo_add_reminder'), ('demo_add_meeting'), ('demo_add_note'), ('demo_book_court'),
             ('demo_reprice_orders')) AS t (name);
"""

DEMO_DATABASE = "pyagentdb_demo"  # on the embedded server
DEMO_USERS = ("demo_alice", "demo_bob", "demo_guest")
CLASH_REASON = {"en": "design review is already at that time", "zh": "那个时间已经有设计评审"}


class DemoRefused(RuntimeError):
    """The database holds other data: the demo will not register its tools and users there."""


def other_data(conn: psycopg.Connection) -> list[str]:
    """What in this database is not the demo's (empty: the demo may run here)."""
    found = []
    tables = conn.execute("""
        SELECT count(*) FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast',
               'agentdb', 'agentdb_private', 'pyagentdb_demo')
           AND NOT (n.nspname = 'public' AND c.relname = 'agentdb_alembic_version')""").fetchone()[0]
    if tables:
        found.append(f"{tables} table(s) of its own")
    if conn.execute("SELECT to_regclass('agentdb.tools') IS NOT NULL").fetchone()[0]:
        tools = conn.execute("SELECT count(*) FROM agentdb.tools"
                             " WHERE name NOT LIKE 'demo\\_%'").fetchone()[0]
        tasks = conn.execute("SELECT count(*) FROM agentdb.v_tasks WHERE user_id <> ALL(%s)",
                             (list(DEMO_USERS),)).fetchone()[0]
        if tools:
            found.append(f"{tools} agentdb tool(s)")
        if tasks:
            found.append(f"{tasks} agentdb task(s) of other users")
    return found

REMINDER = {"content": "buy vegetables", "remind_at": f"{_day(1)} 08:00+08"}


def reset(conn: psycopg.Connection, lang: str = "en") -> None:
    """Remove the previous run's demo tools, permissions and schema, then create them afresh."""
    with conn.transaction():
        conn.execute("SELECT agentdb.revoke_permission(p.user_id, p.permission, tool => p.tool)"
                     " FROM agentdb.permissions AS p WHERE p.user_id = ANY(%s)", (list(DEMO_USERS),))
        conn.execute("SELECT agentdb.unregister_tool(name) FROM agentdb.tools WHERE name LIKE 'demo\\_%'")
        conn.execute("DROP SCHEMA IF EXISTS pyagentdb_demo CASCADE")
        reason = CLASH_REASON[lang].replace("'", "''")
        conn.execute(SETUP_SQL.replace("@CLASH_REASON@", f"'{reason}'").replace("{tomorrow}", _day(1)))


@dataclass
class Scene:
    title: str
    failure_class: str
    request: dict[str, str]  # lang -> what the user asks
    calls: list[Call]
    said: dict[str, str]  # lang -> what the model replies
    user: str = "demo_alice"
    authenticated: bool = True
    late_calls: list[Call] = field(default_factory=list)
    second_turn: bool = False  # the user answers, then the agent confirms draft 1


def _said(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


SCENES = [
    Scene(
        "Reminder while logged out",
        "not executed",
        _said("明天8点提醒我买菜", "Remind me to buy vegetables at 8 tomorrow"),
        [Call("demo_add_reminder", REMINDER)],
        _said(
            "好的,已为您设置明天早上8点的买菜提醒。", "Sure, I've set a reminder to buy vegetables at 8am."
        ),
        user="demo_guest",
        authenticated=False,
    ),
    Scene(
        "Permission switched off",
        "not executed",
        _said("提醒我晚上给妈妈打电话", "Remind me to call mum tonight"),
        [Call("demo_add_reminder", {"content": "call mum", "remind_at": f"{_day(0)} 20:00+08"})],
        _said("已为您添加提醒:今晚8点给妈妈打电话。", "Done! I've added a reminder to call mum at 8pm."),
        user="demo_bob",
    ),
    Scene(
        "Honest success",
        "true completion",
        _said("明天8点提醒我买菜", "Remind me to buy vegetables at 8 tomorrow"),
        [Call("demo_add_reminder", REMINDER, {"call_id": "call-1"})],
        _said(
            "好的,已为您设置明天早上8点的买菜提醒。", "Sure, I've set a reminder to buy vegetables at 8am."
        ),
    ),
    Scene(
        "The same request again",
        "duplicate: not created",
        _said("明天8点提醒我买菜", "Remind me to buy vegetables at 8 tomorrow"),
        [Call("demo_add_reminder", REMINDER)],
        _said("已为您创建新的提醒!", "I've created a new reminder for you!"),
    ),
    Scene(
        "Time conflict",
        "conflict: not created",
        _said("明天下午3点约个会", "Book a meeting at 3pm tomorrow"),
        [Call("demo_add_meeting", {"title": "1:1", "starts_at": f"{_day(1)} 15:00+08"})],
        _said("已为您约好明天下午3点的会议。", "I've booked the meeting for 3pm tomorrow."),
    ),
    Scene(
        "Write silently dropped by a trigger",
        "executed, not persisted",
        _said("记一下车停在B12", "Note that I parked at B12"),
        [Call("demo_add_note", {"body": "parked at B12"})],
        _said("记好了,车停在B12。", "Got it, I've saved a note: parked at B12."),
    ),
    Scene(
        "Unusable argument",
        "executed, not persisted",
        _said("下周找个时间提醒我看牙", "Remind me about the dentist sometime next week"),
        [Call("demo_add_reminder", {"content": "dentist", "remind_at": "sometime next week"})],
        _said("已为您设置看牙提醒。", "I've set a dentist reminder for next week."),
    ),
    Scene(
        "Two steps, one failed",
        "partial",
        _said("提醒我买菜,再记一下车位", "Remind me to buy milk and note my parking spot"),
        [
            Call("demo_add_reminder", {"content": "buy milk", "remind_at": f"{_day(2)} 08:00+08"}),
            Call("demo_add_note", {"body": "B12"}),
        ],
        _said("两件事都搞定了!", "All done! Both are taken care of."),
    ),
    Scene(
        "The liar: no tool called",
        "false completion",
        _said("后天9点提醒我交房租", "Remind me to pay rent the day after tomorrow at 9"),
        [],
        _said("没问题,已为您设置好交房租的提醒。", "No problem, I've set a rent reminder for you."),
    ),
    Scene(
        "The double writer",
        "no double write",
        _said("提醒我周五浇花", "Remind me to water the plants on Friday"),
        [
            Call(
                "demo_add_reminder",
                {"content": "water plants", "remind_at": f"{_day(4)} 09:00+08"},
                {"call_id": "plants"},
            )
        ],
        _said("已为您设置周五浇花的提醒。", "I've set a reminder to water the plants on Friday."),
        late_calls=[
            Call("demo_add_reminder", {"content": "water plants", "remind_at": f"{_day(4)} 09:00+08"})
        ],
    ),
    Scene(
        "Asked only to look, the agent books",
        "overreach",
        _said("帮我看看明晚有没有空场地", "Can you look for a free court tomorrow evening?"),
        [Call("demo_book_court", {"court": "3", "starts_at": f"{_day(1)} 19:00+08"})],
        _said("已为您预约明晚7点的3号场。", "I've booked court 3 for 7pm tomorrow."),
    ),
    Scene(
        "A draft, confirmed in the next message",
        "true completion",
        _said("订明晚7点的3号场", "Book court 3 for 7pm tomorrow"),
        [Call("demo_book_court", {"court": "3", "starts_at": f"{_day(1)} 19:00+08"}, {"propose": True})],
        _said(
            "草稿 1:明晚7点3号场,回复确认后我再提交。", "Draft 1: court 3 at 7pm tomorrow. Reply to confirm."
        ),
        second_turn=True,
    ),
    Scene(
        "Bulk reprice: 500 expected, 428 match",
        "partial or wrong",
        _said("把那500个鞋类订单改成89元", "Set the 500 shoe orders to 89"),
        [
            Call(
                "demo_reprice_orders",
                {"where": {"category": "shoes"}, "set": {"price": 89}},
                {"expect_rows": 500},
            )
        ],
        _said("500个订单都已改成89元。", "All 500 orders have been repriced to 89."),
    ),
]


def _outcome(receipt, color: bool) -> str:
    if isinstance(receipt, dict):  # a draft proposal
        return textui.paint(f"draft {receipt.get('ordinal')} stored, nothing written", "yellow", color)
    if receipt.replayed:
        return textui.paint("replayed: first receipt returned, nothing written", "yellow", color)
    if receipt.ok:
        return textui.paint("written and verified", "green", color)
    return textui.paint(f"NOT done ({receipt.outcome}: {receipt.refusal})", "red", color)


def run(
    dsn: str, *, lang: str = "en", color: bool | None = None, as_json: bool = False, out=sys.stdout
) -> int:
    color = textui.use_color(out, color) and not as_json
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = other_data(conn)
    if found:
        raise DemoRefused(
            f"this database holds other data ({', '.join(found)}); the demo registers tools, users and "
            "permissions, so it runs only in a database of its own: create one (createdb pyagentdb_demo) "
            "and pass its --dsn, or leave out --dsn to use a demo database on the embedded server")
    with textui.progress("installing the agentdb schema", enabled=not as_json):
        install.upgrade(dsn)
    results = []
    run_id = uuid.uuid4().hex[:8]
    p = lambda text="": print(text, file=out)  # noqa: E731
    with psycopg.connect(dsn, autocommit=True) as conn:
        reset(conn, lang)
        client = Client(conn)
        for number, scene in enumerate(SCENES, 1):
            # Fresh conversations each run: draft ordinals count per conversation.
            conversation = f"demo-{run_id}-{number}"
            task = client.begin_task(
                scene.user,
                conversation,
                scene.request[lang],
                authenticated=scene.authenticated,
                lang=lang,
                time_zone=TIME_ZONE,
            )
            agent = ScriptedAgent(scene.title, scene.calls, scene.said[lang], scene.late_calls)
            turn = agent.run(client, task)
            client.finish_task(task)
            second = None
            if scene.second_turn:
                answer = {"zh": "确认", "en": "Yes, go ahead"}[lang]
                task2 = client.begin_task(
                    scene.user, conversation, answer, authenticated=True, lang=lang, time_zone=TIME_ZONE
                )
                receipt = client.confirm(task2, 1)
                said2 = {"zh": "已为您预约明晚7点的3号场。", "en": "I've booked court 3 for 7pm tomorrow."}[
                    lang
                ]
                verdict2 = client.finalize_reply(task2, said2)
                client.finish_task(task2)
                second = {"answer": answer, "receipt": receipt, "said": said2, "verdict": verdict2}
            results.append(
                {
                    "scene": scene.title,
                    "class": scene.failure_class,
                    "task": str(task),
                    "receipts": [r if isinstance(r, dict) else r.raw for r in turn.receipts],
                    "late_receipts": [r.raw for r in turn.late_receipts],
                    "model_said": turn.model_text,
                    "verdict": turn.verdict.verdict,
                    "user_reads": turn.verdict.text,
                    "second_turn": None
                    if second is None
                    else {
                        "receipt": second["receipt"].raw,
                        "verdict": second["verdict"].verdict,
                        "user_reads": second["verdict"].text,
                    },
                }
            )
            if as_json:
                continue
            p(
                textui.paint(f"{number:2}. {scene.title}", "bold", color)
                + "  "
                + textui.paint(f"[{scene.failure_class}]", "dim", color)
            )
            p(f"    user asks     {scene.request[lang]}")
            if not scene.calls:
                p("    agent calls   " + textui.paint("(no tool at all)", "yellow", color))
            for call, receipt in zip(scene.calls, turn.receipts, strict=True):
                p(f"    agent calls   {call.tool}({json.dumps(call.args, ensure_ascii=False)})")
                p(f"    database      {_outcome(receipt, color)}")
            for receipt in turn.late_receipts:
                p(f"    calls again   {_outcome(receipt, color)}")
            p(f"    model said    {turn.model_text}")
            verdict = turn.verdict
            tag = (
                textui.paint("delivered", "green", color)
                if not verdict.replaced
                else textui.paint("REPLACED", "red", color)
            )
            p(f"    gate          {tag}")
            for i, line in enumerate(verdict.text.splitlines()):
                p(("    user reads    " if i == 0 else "                  ") + line)
            if second:
                p(f"    user answers  {second['answer']}")
                p("    agent calls   confirm(1) -> " + _outcome(second["receipt"], color))
                p(f"    model said    {second['said']}")
                p(f"    user reads    {second['verdict'].text}")
            p()

        task_ids = [r["task"] for r in results]
        audit = conn.execute(
            "SELECT a.at::time(0) AS at, a.user_id, a.tool, a.action, a.status, a.outcome, a.refusal"
            " FROM agentdb.v_audit AS a JOIN agentdb.v_tasks AS t USING (task_id)"
            " WHERE t.conversation_id LIKE 'demo-%%' AND t.created_at >="
            " (SELECT min(created_at) FROM agentdb.v_tasks WHERE task_id = ANY(%s::uuid[]))"
            " ORDER BY a.audit_id",
            (task_ids,),
        )
        cols = [c.name for c in audit.description]
        rows = [dict(zip(cols, r, strict=True)) for r in audit.fetchall()]
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM pyagentdb_demo.reminders),"
            " (SELECT count(*) FROM pyagentdb_demo.notes),"
            " (SELECT count(*) FROM pyagentdb_demo.meetings),"
            " (SELECT count(*) FROM pyagentdb_demo.bookings),"
            " (SELECT count(*) FROM pyagentdb_demo.orders WHERE price <> 99)"
        ).fetchone()
    if as_json:
        print(
            json.dumps(
                {
                    "scenes": results,
                    "audit": rows,
                    "counts": {
                        "reminders": counts[0],
                        "notes": counts[1],
                        "meetings": counts[2],
                        "bookings": counts[3],
                        "orders_repriced": counts[4],
                    },
                },
                default=str,
                ensure_ascii=False,
                indent=2,
            ),
            file=out,
        )
        return 0
    p(textui.paint("Audit trail (agentdb.v_audit) for this run", "bold", color))
    p(textui.table(rows, cols))
    p()
    p(textui.paint("What the database holds now", "bold", color))
    p(f"  reminders: {counts[0]}  (three honest writes; duplicate, replay and late write added none)")
    p(f"  notes: {counts[1]}, meetings: {counts[2]} (only the one that was there before)")
    p(f"  court bookings: {counts[3]}  (only the confirmed draft; the overreach booked nothing)")
    p(f"  orders repriced: {counts[4]} of 500  (the 428-row mismatch was rolled back whole)")
    return 0
