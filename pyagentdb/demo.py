"""`pyagentdb demo`: walk through every failure class against a real database.

The demo lives in its own schema (pyagentdb_demo) with tools named demo_*, and
resets both at the start of each run, so it can run again and again on the
same server without touching anything else.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import psycopg

from . import install, textui
from .client import Client, Receipt

SETUP_SQL = """
CREATE SCHEMA pyagentdb_demo;

CREATE TABLE pyagentdb_demo.reminders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    content text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 200),
    remind_at timestamptz NOT NULL,
    version bigint NOT NULL DEFAULT 1
);

-- A table whose trigger silently drops rows: "executed, not persisted".
CREATE TABLE pyagentdb_demo.lossy_notes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    body text NOT NULL
);
CREATE FUNCTION pyagentdb_demo.drop_row() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER lossy BEFORE INSERT ON pyagentdb_demo.lossy_notes
FOR EACH ROW EXECUTE FUNCTION pyagentdb_demo.drop_row();

-- A table whose trigger moves every meeting 30 minutes: "persisted, not what was asked".
CREATE TABLE pyagentdb_demo.meetings (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    title text NOT NULL,
    starts_at timestamptz NOT NULL
);
CREATE FUNCTION pyagentdb_demo.shift_time() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN NEW.starts_at := NEW.starts_at + interval '30 minutes'; RETURN NEW; END $$;
CREATE TRIGGER shifted BEFORE INSERT ON pyagentdb_demo.meetings
FOR EACH ROW EXECUTE FUNCTION pyagentdb_demo.shift_time();

-- 500 orders: 428 in category 'shoes', 72 in 'boots'.
CREATE TABLE pyagentdb_demo.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    shop_id text NOT NULL,
    category text NOT NULL,
    price numeric(10, 2) NOT NULL
);
INSERT INTO pyagentdb_demo.orders (shop_id, category, price)
SELECT 'alice', CASE WHEN g <= 428 THEN 'shoes' ELSE 'boots' END, 99.00
FROM generate_series(1, 500) AS g;

SELECT agentdb.register_tool(name => 'demo_add_reminder', action => 'insert',
    target => 'pyagentdb_demo.reminders', label_zh => '记一条提醒', label_en => 'set a reminder',
    owner_column => 'user_id', dedup_columns => ARRAY['content', 'remind_at']);
SELECT agentdb.register_tool(name => 'demo_edit_reminder', action => 'update',
    target => 'pyagentdb_demo.reminders', label_zh => '改一条提醒', label_en => 'change a reminder',
    owner_column => 'user_id', version_column => 'version');
SELECT agentdb.register_tool(name => 'demo_delete_reminder', action => 'delete',
    target => 'pyagentdb_demo.reminders', label_zh => '删一条提醒', label_en => 'delete a reminder',
    owner_column => 'user_id');
SELECT agentdb.register_tool(name => 'demo_add_note', action => 'insert',
    target => 'pyagentdb_demo.lossy_notes', label_zh => '记一条笔记', label_en => 'save a note',
    owner_column => 'user_id');
SELECT agentdb.register_tool(name => 'demo_book_meeting', action => 'insert',
    target => 'pyagentdb_demo.meetings', label_zh => '约一个会议', label_en => 'book a meeting',
    owner_column => 'user_id');
SELECT agentdb.register_tool(name => 'demo_reprice_orders', action => 'update',
    target => 'pyagentdb_demo.orders', label_zh => '批量改价', label_en => 'reprice orders',
    owner_column => 'shop_id');
SELECT agentdb.grant_permission('alice', 'WRITE');
SELECT agentdb.grant_permission('alice', 'DELETE');
"""


def reset(conn: psycopg.Connection) -> None:
    """Remove the previous run's demo tools and schema, then create them afresh."""
    with conn.transaction():
        conn.execute("SELECT agentdb.unregister_tool(name) FROM agentdb.tools WHERE name LIKE 'demo\\_%'")
        conn.execute("SELECT agentdb.revoke_permission('alice', 'WRITE')")
        conn.execute("SELECT agentdb.revoke_permission('alice', 'DELETE')")
        conn.execute("DROP SCHEMA IF EXISTS pyagentdb_demo CASCADE")
        conn.execute(SETUP_SQL)


@dataclass
class Scene:
    title: str
    failure_class: str
    user: str
    authenticated: bool
    calls: list[tuple[str, dict, dict]]  # (tool, args, invoke options)
    finish_first: bool = False


SCENES = [
    Scene(
        "Reminder while logged out",
        "not executed",
        "guest-42",
        False,
        [("demo_add_reminder", {"content": "buy vegetables", "remind_at": "2026-12-01 08:00+08"}, {})],
    ),
    Scene(
        "Permission switched off",
        "not executed",
        "bob",
        True,
        [("demo_add_reminder", {"content": "call mum", "remind_at": "2026-12-01 20:00+08"}, {})],
    ),
    Scene(
        "Honest success",
        "verified",
        "alice",
        True,
        [
            (
                "demo_add_reminder",
                {"content": "buy vegetables", "remind_at": "2026-12-01 08:00+08"},
                {"call_id": "call-1"},
            )
        ],
    ),
    Scene(
        "The same call sent twice (retry storm)",
        "no double write",
        "alice",
        True,
        [
            (
                "demo_add_reminder",
                {"content": "pay rent", "remind_at": "2026-12-02 09:00+08"},
                {"call_id": "rent"},
            ),
            (
                "demo_add_reminder",
                {"content": "pay rent", "remind_at": "2026-12-02 09:00+08"},
                {"call_id": "rent"},
            ),
        ],
    ),
    Scene(
        "Duplicate request",
        "not created",
        "alice",
        True,
        [("demo_add_reminder", {"content": "buy vegetables", "remind_at": "2026-12-01 08:00+08"}, {})],
    ),
    Scene(
        "Unusable argument",
        "executed, not persisted",
        "alice",
        True,
        [("demo_add_reminder", {"content": "dentist", "remind_at": "sometime next week"}, {})],
    ),
    Scene(
        "Write silently dropped by a trigger",
        "executed, not persisted",
        "alice",
        True,
        [("demo_add_note", {"body": "parking spot B12"}, {})],
    ),
    Scene(
        "Time shifted by a trigger",
        "persisted, not what was asked",
        "alice",
        True,
        [("demo_book_meeting", {"title": "standup", "starts_at": "2026-12-01 10:00+08"}, {})],
    ),
    Scene(
        "Update of a row that is not there",
        "executed, not persisted",
        "alice",
        True,
        [("demo_edit_reminder", {"id": 9999, "content": "x", "version": 1}, {})],
    ),
    Scene(
        "Update with a stale version",
        "no lost update",
        "alice",
        True,
        [("demo_edit_reminder", {"id": 1, "content": "buy fruit", "version": 7}, {})],
    ),
    Scene(
        "Bulk reprice: 500 expected, 428 match",
        "persisted, not what was asked",
        "alice",
        True,
        [
            (
                "demo_reprice_orders",
                {"where": {"category": "shoes"}, "set": {"price": 89}},
                {"expect_rows": 500},
            )
        ],
    ),
    Scene(
        "Delete with no bound",
        "overreach",
        "alice",
        True,
        [("demo_delete_reminder", {"where": {}}, {"expect_rows": 1})],
    ),
    Scene(
        "A second write after the task was settled",
        "no double write",
        "alice",
        True,
        [("demo_add_reminder", {"content": "water plants", "remind_at": "2026-12-03 07:00+08"}, {})],
        finish_first=True,
    ),
]


def _verdict(receipt: Receipt, color: bool) -> str:
    if receipt.ok:
        return textui.paint("written and verified", "green", color)
    return textui.paint(f"NOT done ({receipt.outcome}: {receipt.refusal})", "red", color)


def run(
    dsn: str, *, lang: str = "en", color: bool | None = None, as_json: bool = False, out=sys.stdout
) -> int:
    color = textui.use_color(out, color) and not as_json
    install.upgrade(dsn)
    results = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        reset(conn)
        client = Client(conn)
        for number, scene in enumerate(SCENES, 1):
            task = client.begin_task(
                scene.user, f"demo-{number}", scene.title, authenticated=scene.authenticated, lang=lang
            )
            if scene.finish_first:
                client.finish_task(task)
            receipts = [client.invoke(task, tool, args, **opts) for tool, args, opts in scene.calls]
            client.finish_task(task)
            results.append(
                {
                    "scene": scene.title,
                    "class": scene.failure_class,
                    "task": str(task),
                    "receipts": [r.raw for r in receipts],
                }
            )
            if as_json:
                continue
            print(
                textui.paint(f"{number:2}. {scene.title}", "bold", color)
                + "  "
                + textui.paint(f"[{scene.failure_class}]", "dim", color),
                file=out,
            )
            for (tool, args, _opts), receipt in zip(scene.calls, receipts, strict=True):
                print(f"    agent calls  {tool}({json.dumps(args, ensure_ascii=False)})", file=out)
                replay = " (replayed: first receipt returned, nothing written)" if receipt.replayed else ""
                print(f"    database     {_verdict(receipt, color)}{replay}", file=out)
                print(f"    user reads   {receipt.detail}", file=out)
            print(file=out)

        audit = conn.execute(
            "SELECT a.at::time(0) AS at, a.user_id, a.tool, a.status, a.outcome, a.refusal, a.detail"
            " FROM agentdb.v_audit AS a WHERE a.task_id = ANY(%s::uuid[]) ORDER BY a.audit_id",
            ([r["task"] for r in results],),
        )
        cols = [c.name for c in audit.description]
        rows = [dict(zip(cols, r, strict=True)) for r in audit.fetchall()]
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM pyagentdb_demo.reminders),"
            " (SELECT count(*) FROM pyagentdb_demo.lossy_notes),"
            " (SELECT count(*) FROM pyagentdb_demo.meetings),"
            " (SELECT count(*) FROM pyagentdb_demo.orders WHERE price <> 99)"
        ).fetchone()
    if as_json:
        print(
            json.dumps({"scenes": results, "audit": rows}, default=str, ensure_ascii=False, indent=2),
            file=out,
        )
        return 0
    print(textui.paint("Audit trail (agentdb.v_audit) for this run", "bold", color), file=out)
    print(textui.table(rows, cols), file=out)
    print(file=out)
    print(textui.paint("What the database holds now", "bold", color), file=out)
    print(
        f"  reminders: {counts[0]} (two honest writes; duplicate, replay and late write added none)", file=out
    )
    print(f"  lossy notes: {counts[1]}, meetings: {counts[2]} (unverified writes were rolled back)", file=out)
    print(f"  orders repriced: {counts[3]} of 500 (the 428-row mismatch was rolled back whole)", file=out)
    return 0
