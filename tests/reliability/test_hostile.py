"""Hostile input: property-based (hypothesis) and hand-written injection attempts.

Every input must give a structured refusal (a receipt, a verdict, a documented SQL error of a
management function) or a correct result — never an unhandled error, never a write outside a
verified step. Covered: tool arguments and every parameter of invoke, claims text (detect_claims
and finalize_reply), draft refs (confirm / revise / reject), scenario files of the ledger exam,
SQL for the guard (when pyagentdb.sqlguard and agentdb.run_sql exist), and identifier / value
injection through every text parameter of every agentdb function the agent or app role can call.

Examples are derandomized (the same in every CI run) unless PYAGENTDB_HYPOTHESIS_RANDOM is set;
PYAGENTDB_HYPOTHESIS_SCALE multiplies the example counts (bench/soak.py-like runs by hand).
"""

from __future__ import annotations

import os
import random
import re
import string
import time

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from .conftest import detail, record
from .invariants import reconcile

SCALE = float(os.environ.get("PYAGENTDB_HYPOTHESIS_SCALE", "1"))
FAR = "2030-11-30 08:00:00+08"
OUTCOMES = {"success", "refused", "invalid", "duplicate", "conflict", "failed", "unverified",
            "needs_confirmation"}


def bounded(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    derandomize=not os.environ.get("PYAGENTDB_HYPOTHESIS_RANDOM"),
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much],
                    database=None)


INJECTIONS = [
    "'; DROP TABLE public.reminders; --",
    "x'); DELETE FROM public.reminders; --",
    '"; DROP SCHEMA agentdb CASCADE; --',
    "$$; DROP TABLE public.reminders; $$",
    "$_$ || pg_sleep(3) || $_$",
    "%I %s %L %1$s %%",
    "\\'; SELECT pg_sleep(3); --",
    "agentdb_private.tasks",
    "public.reminders WHERE true; --",
    "1 OR 1=1",
    "u1' OR user_id <> '",
    "*/ SELECT 1 /*",
    "{{7*7}} ${jndi:ldap://x}",
    "\u02bc; DROP TABLE public.reminders; --",
    "\u202eevil\u200b\ufeff",
    "已为您设置好提醒 \U0001F600",
    "draft:00000000-0000-4000-8000-000000000000",
    "action:1",
    ":'task' \\gexec",
    "",
    " ",
    "x" * 10_000,
]


def incompressible(n: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


INJECTIONS.append(incompressible(3000))

# Text without NUL: PostgreSQL text cannot hold U+0000 (psycopg refuses it before sending; see
# test_nul_characters_are_refused_before_the_server).
TEXT = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.sampled_from(INJECTIONS),
)
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), TEXT,
    st.sampled_from(["2030-11-30 08:00+08", "tomorrow", "infinity", "-infinity", "2030-02-30",
                     "epoch", "allballs", "now", "1e400", "０５", "true", "t", "yes"]),
)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
COLUMNS = ["id", "user_id", "content", "remind_at", "done", "version", "where", "set"]
ARGS = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(COLUMNS), TEXT), JSON, max_size=6),
    st.fixed_dictionaries({"where": st.dictionaries(st.sampled_from(COLUMNS), JSON, max_size=3),
                           "set": st.dictionaries(st.sampled_from(COLUMNS), JSON, max_size=3)}),
    JSON,
)
TOOLS = st.one_of(st.sampled_from(["add_reminder", "edit_reminder", "finish_reminders", "delete_reminder",
                                   "book_reminder"]), st.none(), TEXT)
TIMES = st.sampled_from(["2030-11-30 08:00+08", "2031-01-01T00:00:00Z", "2030-06-01 12:34:56.789+05:30",
                         "infinity", "2030-12-24"])
CONTENT = TEXT.filter(lambda t: 0 < len(t) <= 500)
PLAUSIBLE = st.one_of(
    st.tuples(st.just("add_reminder"), st.fixed_dictionaries({"content": CONTENT, "remind_at": TIMES})),
    st.tuples(st.just("edit_reminder"), st.fixed_dictionaries(
        {"id": st.integers(1, 6), "content": CONTENT, "version": st.integers(1, 4)})),
    st.tuples(st.just("delete_reminder"), st.fixed_dictionaries({"id": st.integers(1, 40)})),
    st.tuples(st.just("finish_reminders"), st.fixed_dictionaries(
        {"where": st.fixed_dictionaries({"done": st.booleans()}),
         "set": st.fixed_dictionaries({"done": st.booleans()})})),
)
INT4 = st.one_of(st.none(), st.integers(min_value=-(2**31), max_value=2**31 - 1))
INT8 = st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1))


def table_state(db) -> tuple:
    rows = db.execute("SELECT md5(coalesce(string_agg(r::text, ',' ORDER BY id), '')) "
                      "FROM reminders AS r").fetchone()
    log = db.execute("SELECT CASE WHEN to_regclass('agentdb_private.change_log') IS NULL THEN 0 "
                     "ELSE (SELECT count(*) FROM agentdb_private.change_log) END").fetchone()
    return rows[0], log[0]


@pytest.fixture
def hostile(reminders, ledger, login_role, dsn):
    reminders.execute("""SELECT agentdb.register_tool(
        name => 'book_reminder', action => 'insert', target => 'public.reminders',
        label_zh => '预约提醒', label_en => 'book a reminder', owner_column => 'user_id',
        needs_confirm => true)""")
    agent_user = login_role("agentdb_agent")
    agent = psycopg.connect(dsn, user=agent_user[0], password="x", autocommit=True)
    task = str(reminders.execute("SELECT agentdb.begin_task('u1', 'c1', 'seed', "
                                 "authenticated => true)").fetchone()[0])
    for i in range(3):
        agent.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s)",
                      (task, Jsonb({"content": f"seed {i}", "remind_at": FAR})))
    yield {"db": reminders, "agent": agent, "dsn": dsn}
    agent.close()


def begin(db, user="u1", conv="c1", lang="en") -> str:
    return str(db.execute("SELECT agentdb.begin_task(%s, %s, 'hostile', authenticated => true, lang => %s)",
                          (user, conv, lang)).fetchone()[0])


# -- tool arguments ----------------------------------------------------------------------------------


def test_invoke_with_hostile_arguments(hostile):
    db, agent = hostile["db"], hostile["agent"]
    seen = {"inputs": 0, "success": 0, "refusals": 0}

    @bounded(400)
    @given(call=st.one_of(st.tuples(TOOLS, ARGS), PLAUSIBLE), call_id=st.one_of(st.none(), TEXT),
           reason=st.one_of(st.none(), TEXT), expect_rows=INT4, expected_version=INT8)
    def prop(call, call_id, reason, expect_rows, expected_version):
        tool, args = call
        if tool == "finish_reminders" and isinstance(args, dict) and "where" in args:
            expect_rows = expect_rows if expect_rows is None or expect_rows < 0 else expect_rows % 8
        task = begin(db)
        before = table_state(db)
        receipt = agent.execute(
            "SELECT agentdb.invoke(%s, %s, %s, call_id => %s, reason => %s, expect_rows => %s, "
            "expected_version => %s)",
            (task, tool, Jsonb(args), call_id, reason, expect_rows, expected_version)).fetchone()[0]
        seen["inputs"] += 1
        assert isinstance(receipt, dict) and receipt.get("outcome") in OUTCOMES, receipt
        assert isinstance(receipt.get("detail"), str) and receipt["detail"], receipt
        step = db.execute("SELECT outcome, verified, (SELECT count(*) FROM agentdb_private.audit AS a "
                          "WHERE a.step_id = s.id) FROM agentdb_private.steps AS s WHERE id = %s",
                          (receipt["step_id"],)).fetchone()
        assert step is not None and step[0] == receipt["outcome"] and step[2] == 1, (receipt, step)
        if receipt["outcome"] == "success":
            assert receipt["verified"] is True and step[1] is True
            seen["success"] += 1
            if receipt["action"] != "delete" and receipt.get("key"):
                stored = db.execute("SELECT content FROM reminders WHERE id = %s",
                                    (receipt["key"]["id"],)).fetchone()
                assert stored is not None
                # Hostile values are stored verbatim: never interpreted, never altered.
                if isinstance(args, dict) and isinstance(args.get("content"), str):
                    assert stored[0] == args["content"], (stored, args)
        else:
            seen["refusals"] += 1
            assert table_state(db) == before, ("a refused call changed the table", receipt)

    prop()
    result = reconcile(db, reap=True)
    assert result.ok, str(result)
    record("hostile", invoke_inputs=seen["inputs"], invoke_successes=seen["success"],
           invoke_refusals=seen["refusals"], unhandled_errors=0, writes_outside_steps=0)


def test_nul_characters_are_refused_before_the_server(hostile):
    """U+0000 cannot be stored in PostgreSQL text or jsonb: psycopg refuses it as a parameter and
    the server refuses it in jsonb input, before agentdb is called. Nothing is written."""
    db, agent = hostile["db"], hostile["agent"]
    task = begin(db)
    before = table_state(db)
    with pytest.raises(psycopg.DataError):
        agent.execute("SELECT agentdb.invoke(%s, %s, '{}')", (task, "add\x00reminder"))
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        agent.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s)", (task, Jsonb({"content": "a\x00b"})))
    assert table_state(db) == before
    record("hostile", nul_inputs=2)


# -- claims text ------------------------------------------------------------------------------------

CLAIM_WORDS = ["已为您设置", "已经帮你加进去了", "搞定了", "已取消", "I've booked", "I have created",
               "has been cancelled", "all set", "Done!", "不会", "没有", "?", "I'll", "won't", "。",
               ". ", ", "]
CLAIM_TEXT = st.one_of(TEXT, st.lists(st.one_of(st.sampled_from(CLAIM_WORDS), TEXT),
                                      max_size=12).map("".join))


def test_detect_claims_and_the_gate_with_hostile_text(hostile):
    from pyagentdb.claims import detect_claims

    db = hostile["db"]
    empty_task = begin(db)
    seen = {"texts": 0, "claims_found": 0, "verdicts": 0, "declared": 0}

    @bounded(250)
    @given(text=CLAIM_TEXT, lang=st.sampled_from([None, "zh", "en"]))
    def detect(text, lang):
        found = db.execute("SELECT agentdb.detect_claims(%s, %s)", (text, lang)).fetchone()[0]
        seen["texts"] += 1
        assert isinstance(found, list)
        for c in found:
            assert c["kind"] in ("create", "update", "delete", "done"), c
            assert 0 <= c["start"] < c["end"] <= len(text), c
            assert text[c["start"]:c["end"]] == c["text"], c
        seen["claims_found"] += len(found)
        # The Python detector gives the same answer (documented).
        assert [x.as_dict() for x in detect_claims(text, lang)] == found, (text, lang)

    detect()

    @bounded(150)
    @given(text=CLAIM_TEXT, declared=st.one_of(st.none(), JSON,
                                               st.lists(st.one_of(JSON, st.fixed_dictionaries(
                                                   {"kind": st.sampled_from(["create", "done", "x"]),
                                                    "tool": TOOLS, "text": TEXT})), max_size=3)))
    def gate(text, declared):
        task = begin(db, conv=f"gate-{seen['verdicts']}")
        v = db.execute("SELECT agentdb.finalize_reply(%s, %s, %s)",
                       (task, text, None if declared is None else Jsonb(declared))).fetchone()[0]
        seen["verdicts"] += 1
        seen["declared"] += isinstance(declared, list)
        assert v["verdict"] in ("deliver", "replace"), v
        # A turn with no step backs nothing: any claim at all must be replaced, and so is a blank
        # reply (it would tell the user nothing); anything else is delivered.
        blank = v.get("reason") == "empty reply"
        assert blank == (re.search(r"[^\s]", text) is None and not v["claims"]), v
        assert (v["verdict"] == "deliver") == (len(v["claims"]) == 0 and not blank), v
        assert isinstance(v["text"], str)
        if v["verdict"] == "replace":
            assert v["text"] != text or not text

    gate()
    # Unknown task, NULL text, a second call: structured too.
    assert db.execute("SELECT agentdb.finalize_reply('00000000-0000-4000-8000-000000000000', 'done')"
                      ).fetchone()[0]["verdict"] == "replace"
    # A NULL reply says nothing: replaced by what the books show, never delivered as nothing.
    null_reply = db.execute("SELECT agentdb.finalize_reply(%s, NULL)", (empty_task,)).fetchone()[0]
    assert null_reply["verdict"] == "replace" and null_reply["text"].strip(), null_reply
    result = reconcile(db, reap=True)
    assert result.ok, str(result)
    record("hostile", claim_texts=seen["texts"], claims_found=seen["claims_found"],
           gate_inputs=seen["verdicts"],
           unhandled_errors=0)


# -- draft refs -------------------------------------------------------------------------------------

DRAFT_REFS = st.one_of(
    TEXT, st.integers(min_value=-10, max_value=10**12).map(str), st.uuids().map(str),
    st.sampled_from(["1", " 1 ", "01", "0001", "\t1", "1.0", "1e0", "٣", "１", "-1", "0", "999999999",
                     "9999999999", "one", "第一个", "1; DROP TABLE public.reminders"]),
)


def test_draft_refs(hostile):
    db, agent = hostile["db"], hostile["agent"]
    proposing = begin(db, conv="drafts")
    draft = agent.execute("SELECT agentdb.propose(%s, 'book_reminder', %s)",
                          (proposing, Jsonb({"content": "booked once", "remind_at": FAR}))).fetchone()[0]
    db.execute("SELECT agentdb.finalize_reply(%s, 'Draft 1 is ready.')", (proposing,))
    time.sleep(0.002)
    state = {"confirmed": 0, "tried": 0}

    def resolves(ref: str) -> bool:
        stripped = ref.strip(" ")
        return (re.fullmatch(r"[0-9]{1,9}", stripped, re.ASCII) is not None and int(stripped) == 1) \
            or ref.lower() == draft["draft_id"]

    @bounded(200)
    @given(ref=st.one_of(DRAFT_REFS, st.just(draft["draft_id"]), st.just(draft["draft_id"].upper())),
           verb=st.sampled_from(["confirm", "revise", "reject"]))
    def prop(ref, verb):
        task = begin(db, conv="drafts")
        state["tried"] += 1
        if verb == "confirm":
            r = agent.execute("SELECT agentdb.confirm(%s, %s)", (task, ref)).fetchone()[0]
        elif verb == "revise":
            r = agent.execute("SELECT agentdb.revise(%s, %s, %s)",
                              (task, ref, Jsonb({"content": "revised", "remind_at": FAR}))).fetchone()[0]
        else:
            r = agent.execute("SELECT agentdb.reject(%s, %s)", (task, ref)).fetchone()[0]
        assert isinstance(r, dict) and "outcome" in r, r
        if not resolves(ref):
            assert r["outcome"] == "refused" and r["refusal"] == "draft_not_found", (ref, r)
        elif r["outcome"] == "success":
            state["confirmed"] += 1
        db.execute("SELECT agentdb.finish_task(%s)", (task,))

    prop()
    assert state["confirmed"] <= 1
    assert db.execute("SELECT count(*) FROM reminders WHERE content = 'booked once'").fetchone()[0] == \
        state["confirmed"]
    result = reconcile(db, reap=True)
    assert result.ok, str(result)
    record("hostile", draft_refs=state["tried"], unhandled_errors=0)


# -- injection through every text parameter of every callable function -------------------------------

# SQLSTATEs a management function may raise on purpose for bad input (documented in sql-api.md).
BY_DESIGN = {"22023", "P0002", "42704", "55000"}


def callable_functions(db) -> list[dict]:
    return [dict(zip(("name", "role", "args", "types", "defaults", "sig"), r,
                     strict=True)) for r in db.execute("""
        SELECT p.proname,
               CASE WHEN has_function_privilege('agentdb_agent', p.oid, 'EXECUTE') THEN 'agentdb_agent'
                    ELSE 'agentdb_app' END,
               p.proargnames, (SELECT array_agg(format_type(t, NULL) ORDER BY o)
                                 FROM unnest(p.proargtypes) WITH ORDINALITY AS u(t, o)),
               p.pronargdefaults, p.oid::regprocedure::text
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'agentdb' AND p.prokind = 'f'
           AND (has_function_privilege('agentdb_agent', p.oid, 'EXECUTE')
                OR has_function_privilege('agentdb_app', p.oid, 'EXECUTE'))
         ORDER BY p.proname, p.oid""").fetchall()]


def test_injection_through_every_text_parameter(hostile, login_role):
    db, dsn = hostile["db"], hostile["dsn"]
    conns = {g: psycopg.connect(dsn, user=login_role(g)[0], password="x", autocommit=True)
             for g in ("agentdb_agent", "agentdb_app")}
    objects = db.execute("SELECT count(*) FROM pg_class").fetchone()[0]
    functions = callable_functions(db)
    tried, by_design, results, unhandled, slow = 0, 0, 0, [], []
    covered = set()
    try:
        for fn in functions:
            names, types = fn["args"] or [], fn["types"] or []
            for i, (pname, ptype) in enumerate(zip(names, types, strict=False)):
                if ptype not in ("text", "text[]"):
                    continue
                covered.add(f"{fn['name']}.{pname}")
                for payload in INJECTIONS + [None]:
                    values = {}
                    for j, (n2, t2) in enumerate(zip(names, types, strict=False)):
                        values[n2] = payload_value(db, fn, n2, t2, payload if j == i else None)
                    tried += 1
                    started = time.monotonic()
                    outcome = call(conns[fn["role"]], fn["name"], values, types, names)
                    if time.monotonic() - started > 2:
                        slow.append((fn["sig"], pname, (payload or "")[:40]))
                    if outcome is None:
                        results += 1
                    elif outcome in BY_DESIGN:
                        by_design += 1
                    else:
                        unhandled.append((fn["sig"], pname, (payload or "NULL")[:60], outcome))
    finally:
        for c in conns.values():
            c.close()
    assert db.execute("SELECT count(*) FROM pg_class").fetchone()[0] >= objects - 0, "objects were dropped"
    assert db.execute("SELECT to_regclass('public.reminders') IS NOT NULL").fetchone()[0]
    detail("injection", {"functions": len(functions), "text_parameters": sorted(covered), "calls": tried,
                         "results": results, "documented_errors": by_design, "unhandled": unhandled})
    record("hostile", injection_calls=tried, injection_parameters=len(covered),
           injection_unhandled=len(unhandled), injection_slow=len(slow))
    assert not slow, slow
    assert not unhandled, unhandled
    result = reconcile(db, reap=True)
    assert result.ok, str(result)


def payload_value(db, fn, name, ptype, payload):
    """A valid value for every other parameter, the payload for the one under test."""
    if payload is not None:
        return [payload] if ptype == "text[]" else payload
    fixed = {"uuid": None, "jsonb": Jsonb({"content": "ok", "remind_at": FAR}),
             "regclass": "public.reminders",
             "integer": None, "bigint": None, "boolean": True, "interval": "1 hour", "text[]": None,
             "regprocedure": None}
    if ptype == "uuid":
        return begin(db, user="u1", conv="inject")
    if ptype == "text":
        return {"user_id": "u1", "conversation_id": "inject", "permission": "WRITE", "tool": "add_reminder",
                "lang": None, "approver": "u1", "name": None, "chain": "audit"}.get(name, "x")
    if ptype == "bigint" and name == "action":
        return 1
    return fixed.get(ptype)


def call(conn, name, values, types, names) -> str | None:
    """Call agentdb.<name> with named arguments; None when it returned, else the SQLSTATE."""
    parts = sql.SQL(", ").join(
        sql.SQL("{} => {}::{}").format(sql.Identifier(n), sql.Placeholder(), sql.SQL(t))
        for n, t in zip(names, types, strict=False) if values.get(n) is not None)
    query = sql.SQL("SELECT * FROM agentdb.{}({})").format(sql.Identifier(name), parts)
    try:
        conn.execute(query, [values[n] for n in names if values.get(n) is not None]).fetchall()
        return None
    except psycopg.Error as exc:
        return exc.sqlstate or type(exc).__name__


# -- scenario files of the ledger exam --------------------------------------------------------------

def _scenario_module():
    return pytest.importorskip("pyagentdb.exam.scenario")


TOML_VALUE = st.recursive(
    st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
              st.floats(allow_nan=False), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8)
SCENARIO_KEYS = ["name", "description", "request", "setup", "tools", "expect_change", "watch", "unchanged",
                 "user", "changes", "assert"]


def test_scenario_files(tmp_path):
    scenario = _scenario_module()
    seen = {"dicts": 0, "files": 0, "valid": 0, "refused": 0}

    @bounded(300)
    @given(data=st.dictionaries(st.one_of(st.sampled_from(SCENARIO_KEYS), TEXT), TOML_VALUE, max_size=8))
    def parsed(data):
        seen["dicts"] += 1
        try:
            scenario.parse_scenario(data, "fuzz.toml")
            seen["valid"] += 1
        except scenario.ScenarioError:
            seen["refused"] += 1

    parsed()

    valid = ('name = "x"\nrequest = "remind me"\nsetup = "SELECT 1"\n[user]\nid = "u1"\n'
             '[[assert]]\nname = "a"\nsql = "SELECT true"\n')

    @bounded(200)
    @given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                         st.tuples(st.integers(0, len(valid)), st.text(max_size=30)).map(
                             lambda p: (valid[:p[0]] + p[1] + valid[p[0]:]).encode())))
    def loaded(raw):
        seen["files"] += 1
        path = tmp_path / "fuzz.toml"
        path.write_bytes(raw)
        try:
            scenario.load_scenario(path)
            seen["valid"] += 1
        except scenario.ScenarioError:
            seen["refused"] += 1

    loaded()
    record("hostile", scenario_inputs=seen["dicts"] + seen["files"], scenario_refused=seen["refused"],
           unhandled_errors=0)


# -- SQL for the guard ------------------------------------------------------------------------------

SQL_PIECES = ["INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())",
              "UPDATE public.reminders SET done = true WHERE id = 1",
              "DELETE FROM public.reminders WHERE id = 2",
              "DELETE FROM public.reminders", "DELETE FROM public.reminders WHERE true",
              "DELETE FROM public.reminders USING pg_sleep(1) WHERE reminders.id = 1",
              "UPDATE public.reminders SET content = (SELECT string_agg(goal, ',') "
              "FROM agentdb_private.tasks)",
              "SELECT pg_sleep(1)", "; DROP TABLE public.reminders",
              "WITH x AS (DELETE FROM public.reminders "
              "RETURNING *) SELECT 1", "COPY public.reminders TO PROGRAM 'id'", "BEGIN", "COMMIT",
              "SET ROLE postgres",
              "INSERT INTO agentdb_private.audit (status, outcome) VALUES ('SUCCESS', 'x')",
              "UPDATE public.reminders SET user_id = 'u2' WHERE id = 1", "/* */", "--", "$$", "'", '"']
SQL_TEXT = st.one_of(st.sampled_from(SQL_PIECES), TEXT,
                     st.lists(st.sampled_from(SQL_PIECES + ["WHERE", "OR 1=1", "RETURNING *", ";", " "]),
                              max_size=6).map(" ".join))


def test_sql_guard(hostile):
    guard = pytest.importorskip("pyagentdb.sqlguard")
    seen = {"sql": 0, "accepted": 0, "db_calls": 0}

    @bounded(300)
    @given(text=SQL_TEXT)
    def parsed(text):
        seen["sql"] += 1
        result = guard.check(text)
        assert isinstance(result.ok, bool)
        if not result.ok:
            assert result.code and result.reason
        seen["accepted"] += result.ok

    parsed()
    db, agent = hostile["db"], hostile["agent"]
    has_run_sql = db.execute("SELECT to_regproc('agentdb.run_sql') IS NOT NULL").fetchone()[0]
    if has_run_sql:
        db.execute("SELECT agentdb.allow_sql('public.reminders')") if db.execute(
            "SELECT to_regproc('agentdb.allow_sql') IS NOT NULL").fetchone()[0] else None

        @bounded(150)
        @given(text=SQL_TEXT, expect_rows=INT4)
        def in_db(text, expect_rows):
            task = begin(db)
            before = table_state(db)
            try:
                r = agent.execute("SELECT agentdb.run_sql(%s, %s, expect_rows => %s)",
                                  (task, text, expect_rows)).fetchone()[0]
            except psycopg.Error as exc:  # a documented refusal would come back as a receipt
                raise AssertionError(f"run_sql raised {exc.sqlstate}: {exc} for {text!r}") from exc
            seen["db_calls"] += 1
            assert r["outcome"] in OUTCOMES, r
            if r["outcome"] != "success":
                assert table_state(db) == before, (text, r)

        in_db()
        result = reconcile(db, reap=True)
        assert result.ok, str(result)
    record("hostile", guard_sql=seen["sql"], guard_accepted=seen["accepted"], run_sql_calls=seen["db_calls"],
           unhandled_errors=0)
