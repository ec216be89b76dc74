"""A DBA extends run_sql's function allow-list (agentdb.allow_sql_function): the database check
reads the list by signature, the Python guard by name (agentdb.sql_function_list(), the
one list: no copy in Python), and what a DBA did not add stays refused on both paths, under every
spelling."""

from __future__ import annotations

import psycopg
import pytest
from helpers import begin, run_sql

from pyagentdb import Client, sqlguard

SETUP = """
CREATE TABLE public.pages (id integer PRIMARY KEY, title text NOT NULL, slug text);
INSERT INTO public.pages VALUES (1, 'Hello World', NULL), (2, 'Other page', NULL);
SELECT agentdb.allow_sql('public.pages');
SELECT agentdb.grant_permission('u1', 'WRITE');
CREATE FUNCTION public.slugify(t text) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT lower(regexp_replace(t, '[^A-Za-z0-9]+', '-', 'g')) $$;
CREATE FUNCTION public.slugify(t text, sep text) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT lower(regexp_replace(t, '[^A-Za-z0-9]+', sep, 'g')) $$;
REVOKE EXECUTE ON FUNCTION public.slugify(text), public.slugify(text, text) FROM PUBLIC;
"""
SLUG = "UPDATE pages SET slug = slugify(title) WHERE id = 1"


@pytest.fixture
def pages(db):
    db.execute(SETUP)
    return db


def why(db, receipt) -> str:
    return db.execute("SELECT error FROM agentdb.v_steps WHERE step_id = %s",
                      (receipt["step_id"],)).fetchone()[0]


def test_a_function_is_refused_until_the_dba_adds_it(pages, role_connect):
    agent = role_connect("agentdb_agent")
    receipt = run_sql(agent, begin(pages), SLUG)
    assert (receipt["outcome"], receipt["refusal"]) == ("refused", "function_not_allowed"), receipt
    assert "slugify(text)" in why(pages, receipt)
    assert sqlguard.Guard(agent).check(SLUG).code == "function_call"

    row = pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)', 'URL slugs')"
                        ).fetchone()[0]
    assert row["signature"] == "public.slugify(text)" and row["present"] and row["granted_by_agentdb"]
    receipt = run_sql(agent, begin(pages), SLUG)
    assert receipt["outcome"] == "success" and receipt["verified"], receipt
    assert pages.execute("SELECT slug FROM pages WHERE id = 1").fetchone()[0] == "hello-world"

    # Another overload, and the same name in another spelling of another signature, stay refused.
    other = run_sql(agent, begin(pages), "UPDATE pages SET slug = slugify(title, '_') WHERE id = 2")
    assert (other["outcome"], other["refusal"]) == ("refused", "function_not_allowed"), other
    assert "slugify(text,text)" in why(pages, other)

    # Taken off the list: refused again, and the writer's EXECUTE is gone with it.
    assert pages.execute("SELECT agentdb.disallow_sql_function('public.slugify(text)')").fetchone()[0]
    receipt = run_sql(agent, begin(pages), "UPDATE pages SET slug = slugify(title) WHERE id = 2")
    assert receipt["refusal"] == "function_not_allowed", receipt
    assert not pages.execute("SELECT has_function_privilege('agentdb_sql_writer', "
                             "'public.slugify(text)', 'EXECUTE')").fetchone()[0]
    assert not pages.execute("SELECT agentdb.disallow_sql_function('public.slugify(text)')").fetchone()[0]


def test_the_python_guard_reads_the_same_list(pages, role_connect):
    pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)')")
    agent = role_connect("agentdb_agent")
    functions = sqlguard.sql_functions(agent)
    listed = pages.execute("SELECT schema_name, function_name FROM agentdb.sql_function_list() "
                           "ORDER BY ordinal").fetchall()
    assert functions.qualified == set(listed)
    assert functions.names[0] == "public.slugify" and "lower" in functions.names
    assert "agentdb.sql_user" in functions.names and "sql_user" not in functions.bare
    assert sqlguard.check(SLUG, functions=functions).ok
    assert sqlguard.check("UPDATE pages SET slug = public.slugify(title) WHERE id = 1",
                          functions=functions).ok
    # Only what the DBA added: another schema's slugify, or another function, is still refused.
    for other in ("evil.slugify(title)", "pg_read_file('x')", "sql_user()", "public.lower(title)"):
        verdict = sqlguard.check(f"UPDATE pages SET slug = {other} WHERE id = 1", functions=functions)
        assert verdict.code == "function_call", (other, verdict)
    # The model is told it may call it: the description names the same list, the DBA's first.
    description = sqlguard.tool_definition(agent, "openai")["function"]["description"]
    assert "functions only public.slugify(), now(), lower()" in description
    # The client's run_sql: the guard reads the list from the database.
    client = Client(agent)
    receipt = sqlguard.run_sql(client, begin(pages), SLUG, 1)
    assert receipt.outcome == "success" and receipt.verified, receipt
    receipt = sqlguard.run_sql(client, begin(pages), "UPDATE pages SET slug = md5(pg_read_file('x')) "
                               "WHERE id = 2", 1)
    assert receipt.outcome == "refused", receipt


def test_a_dbas_addition_reaches_a_guard_that_kept_the_list(pages, role_connect):
    agent = role_connect("agentdb_agent")
    guard = sqlguard.Guard(agent)
    assert guard.check(SLUG).code == "function_call"
    kept = guard.functions()
    pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)')")
    # No code change, no new guard: the refusal of a call the kept list lacks reads it again.
    assert guard.check(SLUG).ok
    assert guard.functions() is not kept and "public.slugify" in guard.functions().names
    # Every guard over the same connection shares what was read.
    assert sqlguard.Guard(agent).functions() is guard.functions()
    assert sqlguard.Guard(Client(agent)).functions() is guard.functions()


def test_a_function_taken_off_the_list_is_refused_by_the_guard(pages, role_connect):
    pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)')")
    agent = role_connect("agentdb_agent")
    guard = sqlguard.Guard(agent)
    assert guard.check(SLUG).ok
    pages.execute("SELECT agentdb.disallow_sql_function('public.slugify(text)')")
    # Through run_sql: the kept list still had it, so the database refused it (the boundary)
    # and the guard forgot its list; the next call is refused by the guard, before the database.
    first = sqlguard.run_sql(agent, begin(pages), SLUG, 1)
    assert (first.outcome, first.refusal) == ("refused", "function_not_allowed"), first
    second = sqlguard.run_sql(agent, begin(pages), SLUG, 1)
    assert (second.outcome, second.refusal) == ("refused", "sql_guard"), second
    assert "slugify" in why(pages, second.raw)
    assert guard.check(SLUG).code == "function_call"
    assert "public.slugify" not in guard.refresh().names


def test_the_built_in_list_lives_only_in_the_database(pages, role_connect):
    """Take md5 off the built-in list in the database: the guard refuses it, with no change to
    Python, and so does the database; put back, both allow it again."""
    statement = "UPDATE pages SET slug = md5(title) WHERE id = 1"
    agent = role_connect("agentdb_agent")
    guard = sqlguard.Guard(agent)
    assert guard.check(statement).ok
    source = pages.execute("SELECT pg_get_functiondef('agentdb_private.sql_allowed_functions()'"
                           "::regprocedure)").fetchone()[0]
    assert "'md5'" in source
    pages.execute(source.replace("'md5', ", "").replace(", 'md5'", ""))
    assert guard.refresh() is not None and "md5" not in guard.functions().names
    assert guard.check(statement).code == "function_call"
    receipt = run_sql(agent, begin(pages), statement)
    assert (receipt["outcome"], receipt["refusal"]) == ("refused", "function_not_allowed"), receipt
    assert "md5" not in sqlguard.tool_definition(agent, "openai")["function"]["description"]
    pages.execute(source)
    assert guard.check(statement).ok
    assert run_sql(agent, begin(pages), statement)["outcome"] == "success"


def test_without_the_database_the_guard_refuses_every_call(pages):
    """No connection, no list: a call is refused (never guessed), a statement without one is
    judged as ever."""
    verdict = sqlguard.check("UPDATE pages SET slug = lower(title) WHERE id = 1")
    assert (verdict.ok, verdict.code) == (False, "no_function_list")
    assert "lower()" in verdict.reason and "Guard(conn)" in verdict.reason
    assert sqlguard.check("UPDATE pages SET slug = 'x' WHERE id = 1").ok
    assert sqlguard.check("DELETE FROM pages USING pg_sleep(1) WHERE id = 1").code == "function_in_from"
    # A role that may not read the list gets no list either, and the same refusal.
    pages.execute("CREATE ROLE t_nolist LOGIN PASSWORD 'x'")
    info = pages.info
    with psycopg.connect(host=info.host, port=info.port, dbname=info.dbname, user="t_nolist",
                         password="x", autocommit=True) as stranger:
        guard = sqlguard.Guard(stranger)
        assert guard.functions() is None
        assert guard.check("UPDATE pages SET slug = lower(title) WHERE id = 1").code == "no_function_list"
    pages.execute("DROP ROLE t_nolist")


def test_only_the_owner_may_change_the_list(pages, role_connect):
    for group in ("agentdb_agent", "agentdb_app", "agentdb_auditor"):
        conn = role_connect(group)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT agentdb.allow_sql_function('public.slugify(text)')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO agentdb_private.sql_functions (signature) "
                         "VALUES ('public.slugify(text)')")
        assert conn.execute("SELECT count(*) FROM agentdb.sql_functions").fetchone()[0] == 0


@pytest.mark.parametrize(("fn", "message"), [
    ("agentdb.sql_user()", "belongs to agentdb"),
    ("pg_catalog.count(\"any\")", "not a plain function"),
    ("pg_catalog.generate_series(integer, integer)", "returns a set"),
])
def test_what_cannot_be_added(pages, fn, message):
    with pytest.raises(psycopg.Error, match=message):
        pages.execute("SELECT agentdb.allow_sql_function(%s)", (fn,))


def test_a_dropped_function_allows_nothing(pages, role_connect):
    pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)')")
    pages.execute("DROP FUNCTION public.slugify(text)")
    assert pages.execute("SELECT present FROM agentdb.sql_functions").fetchone()[0] is False
    agent = role_connect("agentdb_agent")
    receipt = run_sql(agent, begin(pages), SLUG)
    assert receipt["outcome"] != "success", receipt
