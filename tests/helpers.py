"""Small helpers shared by the tests: open a task, invoke a tool, read the evidence back.

Every helper goes through SQL on a real server; nothing here decides an outcome.
"""

from __future__ import annotations

import re

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

# Words that must never reach a user-facing detail sentence.
INTERNAL_WORDS = re.compile(
    r"reminders|user_id|remind_at|agentdb|sqlstate|violat|constraint|relation|"
    r"\bnull\b|jsonb|\bseq\b|\brefus|\bunverified\b|\binvalid\b|_",
    re.IGNORECASE,
)

FAR_TIME = "2030-11-30 08:00:00+08"


def begin(conn, user: str = "u1", *, authenticated: bool = True, lang: str = "en",
          conversation: str = "c1", goal: str = "test") -> str:
    """Open a task as the trusted runtime would and return its id."""
    return conn.execute(
        "SELECT agentdb.begin_task(%s, %s, %s, authenticated => %s, lang => %s)",
        (user, conversation, goal, authenticated, lang),
    ).fetchone()[0]


def invoke(conn, task, tool: str | None, args, *, call_id: str | None = None,
           reason: str | None = None, expect_rows: int | None = None,
           expected_version: int | None = None, raw: bool = False) -> dict:
    """agentdb.invoke(...) -> the receipt. `args` is a Python value sent as jsonb,
    or with raw=True a string cast with ::jsonb on the server (None -> SQL NULL)."""
    value = args if raw or args is None else Jsonb(args)
    return conn.execute(
        "SELECT agentdb.invoke(%s, %s, %s::jsonb, call_id => %s, reason => %s, "
        "expect_rows => %s, expected_version => %s)",
        (task, tool, value, call_id, reason, expect_rows, expected_version),
    ).fetchone()[0]


def rows(conn, sql: str, params=()) -> list[dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()


def one(conn, sql: str, params=()) -> dict | None:
    found = rows(conn, sql, params)
    assert len(found) <= 1, found
    return found[0] if found else None


def scalar(conn, sql: str, params=()):
    return conn.execute(sql, params).fetchone()[0]


def count(conn, table: str = "public.reminders", where: str = "true", params=()) -> int:
    return scalar(conn, f"SELECT count(*) FROM {table} WHERE {where}", params)


def steps(conn, task) -> list[dict]:
    return rows(conn, "SELECT * FROM agentdb.v_steps WHERE task_id = %s ORDER BY seq", (task,))


def audits(conn, task) -> list[dict]:
    return rows(conn, "SELECT * FROM agentdb.v_audit WHERE task_id = %s ORDER BY audit_id", (task,))


def expected_status(receipt: dict) -> str:
    if receipt["outcome"] == "success" and receipt["verified"]:
        return "SUCCESS"
    if receipt["outcome"] in ("refused", "invalid", "needs_confirmation", "duplicate", "conflict"):
        return "REFUSED"
    return "FAILED"


def check_recorded(conn, receipt: dict, *, outcome: str, refusal: str | None = None,
                   verified: bool | None = None) -> tuple[dict, dict]:
    """Assert the receipt says `outcome` and that exactly one step row and one audit row
    record the same thing. Returns (step, audit)."""
    assert receipt["outcome"] == outcome, receipt
    if refusal is not None:
        assert receipt["refusal"] == refusal, receipt
    if verified is None:
        verified = outcome == "success"
    assert receipt["verified"] is verified, receipt
    assert isinstance(receipt["detail"], str) and receipt["detail"], receipt
    # The tool's label is the author's everyday phrase; everything else must be plain words.
    plain = re.sub(re.escape(receipt["label"] or ""), "", receipt["detail"], flags=re.IGNORECASE)
    assert not INTERNAL_WORDS.search(plain), receipt["detail"]
    assert "{" not in receipt["detail"], receipt["detail"]
    if outcome != "success":
        assert receipt["affected_rows"] == 0, receipt

    step = one(conn, "SELECT * FROM agentdb.v_steps WHERE step_id = %s", (receipt["step_id"],))
    assert step is not None, f"no step row for {receipt}"
    assert str(step["task_id"]) == str(receipt["task_id"])
    assert step["seq"] == receipt["seq"]
    assert step["outcome"] == outcome
    assert step["refusal"] == receipt["refusal"]
    assert step["verified"] is verified
    assert step["affected_rows"] == receipt["affected_rows"]
    assert step["attempts"] == receipt["attempts"]
    assert step["detail"] == receipt["detail"]
    assert step["call_id"] == receipt["call_id"]
    if outcome != "success":
        assert step["error"], step

    audit = one(conn, "SELECT * FROM agentdb.v_audit WHERE step_id = %s", (receipt["step_id"],))
    assert audit is not None, f"no audit row for {receipt}"
    assert audit["status"] == expected_status(receipt)
    assert audit["status"] == ("SUCCESS" if outcome == "success" and verified else audit["status"])
    if outcome != "success":
        assert audit["status"] in ("REFUSED", "FAILED")
    assert audit["outcome"] == outcome
    assert audit["refusal"] == receipt["refusal"]
    assert str(audit["task_id"]) == str(receipt["task_id"])
    assert audit["tool"] == receipt["tool"]
    return step, audit


def register(conn, **kw) -> dict:
    """agentdb.register_tool with named arguments."""
    names = ", ".join(f"{k} => %({k})s" for k in kw)
    return scalar(conn, f"SELECT agentdb.register_tool({names})", kw)


def ident(name: str) -> psycopg.sql.Identifier:
    return psycopg.sql.Identifier(name)


# -- run_sql: the tables and calls of tests/test_run_sql.py and tests/reliability/test_hostile*.py

SQL_TABLES = """
CREATE TABLE public.notes (
    id integer PRIMARY KEY,
    user_id text NOT NULL,
    body text,
    done boolean NOT NULL DEFAULT false,
    n integer NOT NULL DEFAULT 0,
    at timestamptz NOT NULL DEFAULT '2030-01-02 03:04:05+00'
);
CREATE TABLE public.stock (sku text PRIMARY KEY, qty integer NOT NULL CHECK (qty >= 0), name text);
CREATE TABLE public.secrets (id integer PRIMARY KEY, s text);
INSERT INTO public.notes (id, user_id, body) VALUES
    (1, 'u1', 'buy milk'), (2, 'u1', 'call mom'), (3, 'u2', 'u2 private');
INSERT INTO public.stock VALUES ('a', 10, 'apple'), ('b', 20, 'pear'), ('c', 30, 'melon');
INSERT INTO public.secrets VALUES (1, 'top secret');
SELECT agentdb.allow_sql('public.notes', owner_column => 'user_id');
SELECT agentdb.allow_sql('public.stock');
SELECT agentdb.grant_permission('u1', 'WRITE');
SELECT agentdb.grant_permission('u1', 'DELETE');
"""


def enable_sql_tables(conn):
    """notes (per-user, owner column user_id) and stock (shared) enabled for run_sql, secrets
    not; u1 may write and delete. Returns conn."""
    conn.execute(SQL_TABLES)
    return conn


def run_sql(conn, task, statement, expect_rows=1, **kw) -> dict:
    """agentdb.run_sql straight, as any language would call it (named arguments in kw)."""
    names = "".join(f", {k} => %({k})s" for k in kw)
    return conn.execute(
        f"SELECT agentdb.run_sql(%(task)s, %(statement)s, %(expect_rows)s{names})",
        {"task": task, "statement": statement, "expect_rows": expect_rows, **kw},
    ).fetchone()[0]


def stock(conn) -> dict:
    """public.stock as {sku: qty}."""
    return dict(conn.execute("SELECT sku, qty FROM public.stock").fetchall())
