"""The task shapes of the gate evaluation (tests/data/gate_scenarios.md), built with real calls.

Each shape's books are made the way an agent's turn makes them: begin_task, then the tool calls
through agentdb.invoke (or none), on the example reminders table plus a court-booking table with
a conflict check, a cancel that is an update, a refunds table and a table whose writes never
check out. Used by bench/gate_eval.py and by the gate tests.

    install(conn)                          # once per database: tables, tools, permissions
    task = build(client, "partial", "en")  # a fresh task whose books are the shape's
"""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from pyagentdb import examples

SHAPES = (
    "empty_action",
    "empty_chat",
    "refused",
    "duplicate",
    "conflict",
    "unverified",
    "partial",
    "clean_insert",
    "clean_update",
    "clean_delete",
    "clean_two_inserts",
    "clean_cancel",
    "clean_bulk",
    "clean_refund",
)
TROUBLED = ("refused", "duplicate", "conflict", "unverified", "partial")
CLEAN = tuple(s for s in SHAPES if s.startswith("clean_"))
ZONES = {"zh": "Asia/Shanghai", "en": "Europe/London"}
CURRENCY = {"zh": "CNY", "en": "GBP"}
GOALS = {
    "empty_action": ("明天早上8点提醒我给妈妈打电话。", "Remind me to call mum tomorrow at 8am."),
    "empty_chat": ("今天天气怎么样?", "What's a good time to call someone in New York?"),
    "conflict": ("帮我订明天下午3点的3号场。", "Book court 3 for tomorrow at 3pm."),
    "partial": (
        "明天早上8点提醒我给妈妈打电话,再帮我订明天下午3点的3号场。",
        "Remind me to call mum tomorrow at 8am, and book court 3 tomorrow at 3pm.",
    ),
    "clean_update": ("把给妈妈打电话的提醒改到9点。", "Move my call-mum reminder to 9am."),
    "clean_delete": ("把给妈妈打电话的提醒删掉。", "Delete my call-mum reminder."),
    "clean_two_inserts": (
        "明天早上8点提醒我给妈妈打电话,晚上9点提醒我吃药。",
        "Remind me to call mum tomorrow at 8am and to take my medicine tomorrow at 9pm.",
    ),
    "clean_cancel": ("把我明天的场地预约取消了。", "Cancel my court booking for tomorrow."),
    "clean_bulk": ("把我今天的提醒都标成已完成。", "Mark all my reminders for today as done."),
    "clean_refund": ("把我上一单退款。", "Refund my last order."),
}
CALL_MUM = {"zh": "给妈妈打电话", "en": "call mum"}
MEDICINE = {"zh": "吃药", "en": "take my medicine"}

SETUP_SQL = """
CREATE TABLE IF NOT EXISTS public.court_bookings (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    court integer NOT NULL,
    starts_at timestamptz NOT NULL,
    status text NOT NULL DEFAULT 'booked' CHECK (status IN ('booked', 'cancelled'))
);
COMMENT ON COLUMN public.court_bookings.starts_at IS '开始时间 / start time';
CREATE OR REPLACE FUNCTION public.court_taken(p_user text, p_args jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('reason', '那个时段已经被别人订了 / that slot is already taken',
                              'alternative', '下午4点 / 4pm')
     WHERE EXISTS (SELECT 1 FROM public.court_bookings AS b
                    WHERE b.court = (p_args ->> 'court')::integer AND b.status = 'booked'
                      AND b.starts_at = (p_args ->> 'starts_at')::timestamptz)
$$;
SELECT agentdb.register_tool(
    name => 'book_court', action => 'insert', target => 'public.court_bookings',
    label_zh => '订一个场地', label_en => 'book a court', owner_column => 'user_id',
    conflict_check => 'public.court_taken(text, jsonb)');
SELECT agentdb.register_tool(
    name => 'cancel_booking', action => 'update', target => 'public.court_bookings',
    label_zh => '取消场地预约', label_en => 'cancel a court booking', owner_column => 'user_id',
    backs => ARRAY['cancel']);
CREATE TABLE IF NOT EXISTS public.refunds (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    order_ref text NOT NULL,
    amount numeric(10, 2) NOT NULL,
    currency text NOT NULL
);
SELECT agentdb.register_tool(
    name => 'issue_refund', action => 'insert', target => 'public.refunds',
    label_zh => '退款', label_en => 'issue a refund', owner_column => 'user_id', backs => ARRAY['pay']);
-- A table whose writes never check out (a trigger swallows them): every call is unverified.
CREATE TABLE IF NOT EXISTS public.flaky_reminders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    content text NOT NULL,
    remind_at timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION public.swallow_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NULL; END $$;
CREATE OR REPLACE TRIGGER swallow BEFORE INSERT ON public.flaky_reminders
FOR EACH ROW EXECUTE FUNCTION public.swallow_row();
SELECT agentdb.register_tool(
    name => 'add_reminder_flaky', action => 'insert', target => 'public.flaky_reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder', owner_column => 'user_id');
"""

_serial = itertools.count(1)
_RUN = uuid.uuid4().hex[:6]  # users of another run (same database) never collide


def install(conn) -> None:
    """Tables and tools of every shape (idempotent). `conn` is an owner psycopg connection."""
    examples.install_reminders(conn)
    conn.execute(SETUP_SQL)


def at(lang: str, days: int, hour: int, minute: int = 0) -> str:
    """An ISO timestamp `days` after today at hour:minute in the user's time zone."""
    zone = ZoneInfo(ZONES[lang])
    day = datetime.now(zone).date() + timedelta(days=days)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone).isoformat()


def _user(client, shape: str, lang: str) -> str:
    user = f"{shape}-{lang}-{_RUN}-{next(_serial)}"
    client.grant_permission(user, "WRITE")
    client.grant_permission(user, "DELETE")
    return user


def _begin(client, user, lang, goal, *, authenticated=True, expects_action=True):
    return client.begin_task(
        user,
        f"conv-{user}",
        goal,
        authenticated=authenticated,
        lang=lang,
        expects_action=expects_action,
        time_zone=ZONES[lang],
    )


def _ok(receipt):
    assert receipt.ok, receipt
    return receipt


def build(client, shape: str, lang: str):
    """A fresh task of `shape` in `lang` (its user is fresh too), its tool calls made. Returns its id."""
    user = _user(client, shape, lang)
    zh = lang == "zh"
    goal = GOALS.get(shape, GOALS["empty_action"])[0 if zh else 1]
    mum = {"content": CALL_MUM[lang], "remind_at": at(lang, 1, 8)}
    court = {"court": 3, "starts_at": at(lang, 1, 15)}
    if shape in ("duplicate", "clean_update", "clean_delete"):
        _ok(client.invoke(_begin(client, user, lang, goal), "add_reminder", mum))
    if shape in ("conflict", "partial"):
        # Someone else holds the slot (written by the owner, as another app would).
        client._scalar(
            "INSERT INTO public.court_bookings (user_id, court, starts_at)"
            " SELECT 'someone-else', 3, %s::timestamptz WHERE NOT EXISTS (SELECT 1 FROM public.court_bookings"
            " WHERE court = 3 AND starts_at = %s::timestamptz AND status = 'booked') RETURNING 1",
            (court["starts_at"], court["starts_at"]),
        )
    if shape == "clean_cancel":
        client._scalar(
            "DELETE FROM public.court_bookings WHERE court = 3 AND starts_at = %s::timestamptz RETURNING 1",
            (court["starts_at"],),
        )
        booked = _ok(client.invoke(_begin(client, user, lang, goal), "book_court", court))
    if shape == "clean_bulk":
        setup = _begin(client, user, lang, goal)
        for i in range(5):
            _ok(
                client.invoke(
                    setup, "add_reminder", {"content": f"item {i + 1}", "remind_at": at(lang, 0, 9 + i)}
                )
            )

    task = _begin(
        client, user, lang, goal, authenticated=shape != "refused", expects_action=shape != "empty_chat"
    )
    if shape in ("refused", "duplicate", "clean_insert", "partial", "clean_two_inserts"):
        client.invoke(task, "add_reminder", mum)
    if shape in ("conflict", "partial"):
        client.invoke(task, "book_court", court)
    if shape == "unverified":
        client.invoke(task, "add_reminder_flaky", mum)
    if shape == "clean_two_inserts":
        client.invoke(task, "add_reminder", {"content": MEDICINE[lang], "remind_at": at(lang, 1, 21)})
    if shape == "clean_update":
        row = _reminder(client, user)
        client.invoke(task, "edit_reminder", {"id": row[0], "remind_at": at(lang, 1, 9), "version": row[1]})
    if shape == "clean_delete":
        client.invoke(task, "delete_reminder", {"id": _reminder(client, user)[0]})
    if shape == "clean_cancel":
        client.invoke(task, "cancel_booking", {"id": booked.key["id"], "status": "cancelled"})
    if shape == "clean_bulk":
        client.invoke(
            task, "finish_reminders", {"where": {"done": False}, "set": {"done": True}}, expect_rows=5
        )
    if shape == "clean_refund":
        refund = {"order_ref": f"order-{user}", "amount": "89.00", "currency": CURRENCY[lang]}
        client.invoke(task, "issue_refund", refund)
    return task


def _reminder(client, user):
    return client._scalar(
        "SELECT ARRAY[id, version] FROM public.reminders WHERE user_id = %s ORDER BY id LIMIT 1", (user,)
    )


def expected_state(shape: str) -> str:
    if shape.startswith("empty"):
        return "empty"
    return "troubled" if shape in TROUBLED else "clean"
