"""The exit gate: every outcome of the guarded write, crossed with a truthful and a
lying reply, in zh and en; partial success, liars, overclaimers, double writers."""

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pyagentdb import Client
from pyagentdb.agents import Call, double_writer, honest, liar, not_created_reporter, overclaimer

# The replies say "tomorrow at 8am" in the user's zone (the gate compares the facts, issue 11).
ZONE = "Asia/Shanghai"
_TOMORROW = (datetime.now(ZoneInfo(ZONE)).date() + timedelta(days=1)).isoformat()
ARGS = {"content": "buy vegetables", "remind_at": f"{_TOMORROW} 08:00+08"}
LIE = {"zh": "好的,已为您设置明天早上8点的提醒。", "en": "Sure, I've set a reminder for 8am tomorrow."}
TRUTH_FAIL = {"zh": "抱歉,这次没能记下提醒。", "en": "Sorry, I couldn't save that reminder."}
INTERNAL = re.compile(
    r"add_reminder|edit_reminder|delete_reminder|remind_at|user_id|reminders|unverified|"
    r"not_authenticated|no_permission|verified|duplicate|SQLSTATE|agentdb",
    re.IGNORECASE,
)


class CheckedClient(Client):
    """A Client whose every detected verdict says the claims came the way this run is about."""

    def finalize_reply(self, task, model_text, claims=None):
        verdict = super().finalize_reply(task, model_text, claims)
        if claims is None and model_text and not verdict.repeated and verdict.claims_from is not None:
            assert verdict.claims_from == ("runtime" if self.detect_claims_here else "database")
        return verdict


@pytest.fixture(params=["detected_here", "detected_in_db"])
def client(request, reminders):
    # Every gate test runs twice: claims found by pyagentdb.detect_claims and passed with the
    # patterns' fingerprint, and claims found by agentdb.detect_claims.
    here = request.param == "detected_here"
    reminders.execute("""
        CREATE FUNCTION public.reminder_clash(p_user text, p_args jsonb) RETURNS jsonb
        LANGUAGE sql AS $$
            SELECT jsonb_build_object('reason', '那个时间已经有一条提醒了', 'alternative', '晚十分钟')
             WHERE EXISTS (SELECT 1 FROM public.reminders AS r
                            WHERE r.user_id = p_user AND r.remind_at = (p_args ->> 'remind_at')::timestamptz)
        $$;
        SELECT agentdb.register_tool(name => 'add_reminder_checked', action => 'insert',
            target => 'public.reminders', label_zh => '记一条提醒', label_en => 'set a reminder',
            owner_column => 'user_id', conflict_check => 'public.reminder_clash(text, jsonb)');
        CREATE FUNCTION public.drop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
        CREATE TABLE public.notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                   user_id text NOT NULL, body text NOT NULL);
        CREATE TRIGGER lossy BEFORE INSERT ON public.notes FOR EACH ROW EXECUTE FUNCTION public.drop_row();
        SELECT agentdb.register_tool(name => 'add_note', action => 'insert', target => 'public.notes',
            label_zh => '记一条笔记', label_en => 'save a note', owner_column => 'user_id');
    """)
    return CheckedClient(reminders, detect_claims_here=here)


def begin(client, lang, user="u1", authenticated=True):
    return client.begin_task(
        user, f"conv-{user}", "remind me", authenticated=authenticated, lang=lang, time_zone=ZONE
    )


def prepare(client, outcome, lang):
    """A task whose single step ends in `outcome` (None: no tool call at all)."""
    if outcome == "duplicate":
        earlier = begin(client, lang)
        assert client.invoke(earlier, "add_reminder", ARGS).ok
    if outcome == "conflict":
        earlier = begin(client, lang)
        assert client.invoke(earlier, "add_reminder", {**ARGS, "content": "other"}).ok
    task = begin(
        client,
        lang,
        user="u2" if outcome == "no_permission" else "u1",
        authenticated=outcome != "not_authenticated",
    )
    calls = {
        "success": [Call("add_reminder", ARGS)],
        "not_authenticated": [Call("add_reminder", ARGS)],
        "no_permission": [Call("add_reminder", ARGS)],
        "invalid": [Call("add_reminder", {**ARGS, "remind_at": "whenever"})],
        "duplicate": [Call("add_reminder", ARGS)],
        "conflict": [Call("add_reminder_checked", ARGS)],
        "unverified": [Call("add_note", {"body": "parking B12"})],
        "unknown_tool": [Call("launch_rocket", {})],
        None: [],
    }[outcome]
    return task, calls


OUTCOMES = [
    "success",
    "not_authenticated",
    "no_permission",
    "invalid",
    "duplicate",
    "conflict",
    "unverified",
    "unknown_tool",
    None,
]


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_lying_reply_is_replaced_unless_backed(client, outcome, lang):
    task, calls = prepare(client, outcome, lang)
    result = not_created_reporter(calls, LIE[lang]).run(client, task)
    assert result.verdict.claims_from == ("runtime" if client.detect_claims_here else "database")
    if outcome == "success":
        assert result.verdict.verdict == "deliver" and result.verdict.text == LIE[lang]
        return
    assert result.verdict.verdict == "replace"
    assert result.verdict.text != LIE[lang] and LIE[lang] not in result.verdict.text
    assert [p["kind"] for p in result.verdict.pending] == ["create"]
    assert not INTERNAL.search(result.verdict.text), result.verdict.text
    expected = {
        "zh": {
            "not_authenticated": "登录",
            "no_permission": "设置里",
            "invalid": "格式不对",
            "duplicate": "已经有一条一样的",
            "conflict": "那个时间已经有一条提醒了",
            "unverified": "撤回",
            "unknown_tool": "做不了",
            None: "哪天、几点",
        },
        "en": {
            "not_authenticated": "log in",
            "no_permission": "settings",
            "invalid": "not in a form",
            "duplicate": "already exists",
            "conflict": "那个时间已经有一条提醒了",
            "unverified": "undone",
            "unknown_tool": "isn't available",
            None: "which day and what time",
        },
    }[lang][outcome]
    assert expected in result.verdict.text


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_truthful_reply_is_delivered(client, outcome, lang):
    task, calls = prepare(client, outcome, lang)
    result = honest(calls, LIE[lang], TRUTH_FAIL[lang]).run(client, task)
    assert result.verdict.verdict == "deliver"
    assert result.verdict.text == (LIE[lang] if outcome == "success" else TRUTH_FAIL[lang])
    assert result.verdict.pending == []


def test_history_keeps_only_the_delivered_text(client, reminders):
    task, calls = prepare(client, None, "zh")
    result = liar(LIE["zh"]).run(client, task)
    history = reminders.execute(
        "SELECT delivered_text, verdict FROM agentdb.v_conversation WHERE task_id = %s", (task,)
    ).fetchall()
    assert history == [(result.verdict.text, "replace")]
    model_texts = reminders.execute(
        "SELECT payload ->> 'model_text' FROM agentdb_private.audit WHERE task_id = %s AND action = 'reply'",
        (task,),
    ).fetchall()
    assert model_texts == [(LIE["zh"],)]


def test_partial_success_names_the_failed_part(client, reminders):
    task = begin(client, "zh")
    calls = [Call("add_reminder", ARGS), Call("add_note", {"body": "parking B12"})]
    result = overclaimer(calls, "两件事都搞定了!").run(client, task)
    assert [r.ok for r in result.receipts] == [True, False]
    verdict = result.verdict
    assert verdict.verdict == "replace" and [p["kind"] for p in verdict.pending] == ["done"]
    assert verdict.text.startswith("只办成了一部分")
    assert "记一条提醒:已完成" in verdict.text and "没能记一条笔记" in verdict.text
    assert client.finish_task(task) == "partial"


def test_partial_in_english(client):
    task = begin(client, "en")
    calls = [Call("add_reminder", ARGS), Call("add_note", {"body": "x"})]
    verdict = (
        overclaimer(calls, "All done! I've set the reminder and saved the note.").run(client, task).verdict
    )
    assert verdict.replaced and verdict.text.startswith("Only part of this went through")
    assert "Couldn't save a note" in verdict.text and "Set a reminder: done" in verdict.text


def test_claim_kind_must_match_the_effect(client):
    task = begin(client, "en")
    verdict = (
        not_created_reporter([Call("add_reminder", ARGS)], "I've deleted your old reminder.")
        .run(client, task)
        .verdict
    )
    assert verdict.replaced and [p["kind"] for p in verdict.pending] == ["delete"]


def test_double_writer_cannot_write_twice(client, reminders):
    task = begin(client, "zh")
    result = double_writer([Call("add_reminder", ARGS, {"call_id": "c1"})], "已为您设置好提醒").run(
        client, task
    )
    assert result.receipts[0].ok
    assert [(r.outcome, r.refusal) for r in result.late_receipts] == [("refused", "closed")]
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 1
    assert result.verdict.verdict == "deliver"  # the blocked second call is not part of the work
    assert client.finish_task(task) == "success"


def test_report_closes_tools_and_lists_steps(client):
    task = begin(client, "en")
    client.invoke(task, "add_reminder", ARGS)
    client.invoke(task, "add_note", {"body": "x"})
    report = client.report(task)
    assert report["tools_closed"] and report["succeeded"] == 1 and report["failed"] == 1
    assert [s["label"] for s in report["steps"]] == ["set a reminder", "save a note"]
    assert client.invoke(task, "add_reminder", {**ARGS, "content": "again"}).refusal == "closed"
    text = client.report_text(task)
    assert "1. Set a reminder: succeeded and verified." in text
    assert "2. Save a note: did not succeed." in text and "Tools are closed" in text


def test_finalize_twice_returns_the_same_verdict(client, reminders):
    task, _ = prepare(client, None, "en")
    first = client.finalize_reply(task, LIE["en"])
    second = client.finalize_reply(task, "Something else entirely, I've booked it.")
    assert (second.verdict, second.text, second.pending) == (first.verdict, first.text, first.pending)
    assert second.repeated
    assert (
        reminders.execute(
            "SELECT count(*) FROM agentdb_private.claims WHERE task_id = %s", (task,)
        ).fetchone()[0]
        == 1
    )


def test_declared_claims_are_checked_too(client):
    task = begin(client, "en")
    client.invoke(task, "add_reminder", ARGS)
    ok = client.finalize_reply(task, "See you!", claims=[{"kind": "create", "tool": "add_reminder"}])
    assert ok.verdict == "deliver"
    other = begin(client, "en")
    client.invoke(other, "add_reminder", {**ARGS, "content": "x"})
    bad = client.finalize_reply(other, "See you!", claims=[{"kind": "create", "tool": "add_note"}, "weird"])
    # "weird" counts as a generic done claim: backed here, since the only step was verified.
    assert bad.replaced and [p["kind"] for p in bad.pending] == ["create"]
    assert [c["kind"] for c in bad.claims] == ["create", "done"]


def test_pending_claims_view_and_no_claim_delivers(client, reminders):
    task = begin(client, "zh")
    client.invoke(task, "add_note", {"body": "x"})
    verdict = client.finalize_reply(task, "笔记没能保存,需要我再试一次吗?")
    assert verdict.verdict == "deliver" and verdict.claims == []
    # A troubled task delivers only a reply that says what failed: a bare question does not.
    silent = begin(client, "zh")
    client.invoke(silent, "add_note", {"body": "x"})
    verdict = client.finalize_reply(silent, "需要我再试一次吗?")
    assert verdict.replaced and verdict.claims == [] and verdict.book_state == "troubled"
    lying = begin(client, "zh")
    client.finalize_reply(lying, "搞定了,已经加进去了")
    rows = client.pending_claims(lying)
    assert rows and all(r["task_id"] == str(lying) for r in rows)
    assert (
        reminders.execute(
            "SELECT count(*) FROM agentdb.pending_claims WHERE task_id = %s", (task,)
        ).fetchone()[0]
        == 0
    )


def test_context_rules_come_from_database_facts(client):
    guest = begin(client, "zh", user="guest", authenticated=False)
    rules = client.context_rules(guest)
    assert any("未登录" in r for r in rules) and any("只有工具返回成功" in r for r in rules)
    u2 = begin(client, "en", user="u2")
    rules = client.context_rules(u2)
    assert any("set a reminder" in r and "settings" in r for r in rules)
    assert not any("not logged in" in r for r in rules)
    client.report(u2)
    assert any("Tools are closed" in r for r in client.context_rules(u2))


def test_unknown_task_is_replaced_and_audited(client, reminders):
    bogus = "00000000-0000-0000-0000-000000000001"
    verdict = client.finalize_reply(bogus, LIE["en"])
    assert verdict.replaced and "send it again" in verdict.text
    assert (
        reminders.execute(
            "SELECT count(*) FROM agentdb_private.audit WHERE task_id = %s AND action = 'reply'", (bogus,)
        ).fetchone()[0]
        == 1
    )


def test_gate_roles(client, role_connect, reminders):
    task = begin(client, "en")
    app = role_connect("agentdb_app")
    agent = role_connect("agentdb_agent")
    assert (
        app.execute("SELECT agentdb.finalize_reply(%s, 'hi')", (task,)).fetchone()[0]["verdict"] == "deliver"
    )
    assert agent.execute("SELECT agentdb.report(%s)", (task,)).fetchone()[0]["tools_closed"]
    auditor = role_connect("agentdb_auditor")
    for reader in (app, auditor):
        assert reader.execute("SELECT count(*) FROM agentdb.pending_claims").fetchone()[0] == 0
        assert reader.execute("SELECT count(*) FROM agentdb.v_conversation").fetchone()[0] == 1
    import psycopg

    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT agentdb.finalize_reply(%s, 'hi')", (task,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT * FROM agentdb.pending_claims")


@pytest.mark.parametrize(("lang", "name"), [("zh", "“提醒时间”"), ("en", '"when to remind"')])
def test_invalid_names_the_field_in_everyday_words(client, lang, name):
    task = begin(client, lang)
    receipt = client.invoke(task, "add_reminder", {**ARGS, "remind_at": "whenever"})
    assert receipt.outcome == "invalid" and name in receipt.detail and "remind_at" not in receipt.detail


def test_conflict_offers_the_alternative(client):
    earlier = begin(client, "zh")
    assert client.invoke(earlier, "add_reminder", {**ARGS, "content": "other"}).ok
    task = begin(client, "zh")
    verdict = not_created_reporter([Call("add_reminder_checked", ARGS)], LIE["zh"]).run(client, task).verdict
    assert verdict.replaced and "那个时间已经有一条提醒了" in verdict.text
    assert "可以改成晚十分钟吗" in verdict.text


@pytest.mark.parametrize(
    ("lang", "want", "not_want"), [("en", "busy then", "那个时间"), ("zh", "那个时间有会", "busy")]
)
def test_bilingual_conflict_reason_shows_the_users_language(reminders, lang, want, not_want):
    reminders.execute("""
        CREATE FUNCTION public.always_busy(p_user text, p_args jsonb) RETURNS text
        LANGUAGE sql AS $$ SELECT '那个时间有会 / busy then' $$;
        SELECT agentdb.register_tool(name => 'add_busy', action => 'insert', target => 'public.reminders',
            label_zh => '记一条提醒', label_en => 'set a reminder', owner_column => 'user_id',
            conflict_check => 'public.always_busy(text, jsonb)');
    """)
    client = Client(reminders)
    task = client.begin_task("u1", "c", authenticated=True, lang=lang)
    receipt = client.invoke(task, "add_busy", ARGS)
    assert receipt.outcome == "conflict" and want in receipt.detail and not_want not in receipt.detail
