"""A DBA extends run_sql's function allow-list (agentdb.allow_sql_function): the database check
reads the list by signature, the Python guard by name (agentdb.sql_functions), and what a DBA did
not add stays refused on both paths, under every spelling."""

from __future__ import annotations

import psycopg
import pytest
from helpers import begin

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


def run(conn, task, statement, expect_rows=1) -> dict:
    return conn.execute("SELECT agentdb.run_sql(%s, %s, %s)", (task, statement, expect_rows)).fetchone()[0]


def why(db, receipt) -> str:
    return db.execute("SELECT error FROM agentdb.v_steps WHERE step_id = %s",
                      (receipt["step_id"],)).fetchone()[0]


def test_a_function_is_refused_until_the_dba_adds_it(pages, role_connect):
    agent = role_connect("agentdb_agent")
    receipt = run(agent, begin(pages), SLUG)
    assert (receipt["outcome"], receipt["refusal"]) == ("refused", "function_not_allowed"), receipt
    assert "slugify(text)" in why(pages, receipt)
    assert not sqlguard.check(SLUG).ok

    row = pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)', 'URL slugs')"
                        ).fetchone()[0]
    assert row["signature"] == "public.slugify(text)" and row["present"] and row["granted_by_agentdb"]
    receipt = run(agent, begin(pages), SLUG)
    assert receipt["outcome"] == "success" and receipt["verified"], receipt
    assert pages.execute("SELECT slug FROM pages WHERE id = 1").fetchone()[0] == "hello-world"

    # Another overload, and the same name in another spelling of another signature, stay refused.
    other = run(agent, begin(pages), "UPDATE pages SET slug = slugify(title, '_') WHERE id = 2")
    assert (other["outcome"], other["refusal"]) == ("refused", "function_not_allowed"), other
    assert "slugify(text,text)" in why(pages, other)

    # Taken off the list: refused again, and the writer's EXECUTE is gone with it.
    assert pages.execute("SELECT agentdb.disallow_sql_function('public.slugify(text)')").fetchone()[0]
    receipt = run(agent, begin(pages), "UPDATE pages SET slug = slugify(title) WHERE id = 2")
    assert receipt["refusal"] == "function_not_allowed", receipt
    assert not pages.execute("SELECT has_function_privilege('agentdb_sql_writer', "
                             "'public.slugify(text)', 'EXECUTE')").fetchone()[0]
    assert not pages.execute("SELECT agentdb.disallow_sql_function('public.slugify(text)')").fetchone()[0]


def test_the_python_guard_reads_the_same_list(pages, role_connect):
    pages.execute("SELECT agentdb.allow_sql_function('public.slugify(text)')")
    agent = role_connect("agentdb_agent")
    assert sqlguard.sql_functions(agent) == ("public.slugify",)
    assert sqlguard.check(SLUG, functions=("public.slugify",)).ok
    assert sqlguard.check("UPDATE pages SET slug = public.slugify(title) WHERE id = 1",
                          functions=("public.slugify",)).ok
    # Only what the DBA added: another schema's slugify, or another function, is still refused.
    assert not sqlguard.check("UPDATE pages SET slug = evil.slugify(title) WHERE id = 1",
                              functions=("public.slugify",)).ok
    assert not sqlguard.check("UPDATE pages SET slug = pg_read_file('x') WHERE id = 1",
                              functions=("public.slugify",)).ok
    # The model is told it may call it.
    assert "public.slugify()" in sqlguard.tool_definition(agent, "openai")["function"]["description"]
    # The client's run_sql: the guard reads the list when a function stops it.
    client = Client(agent)
    receipt = sqlguard.run_sql(client, begin(pages), SLUG, 1)
    assert receipt.outcome == "success" and receipt.verified, receipt
    receipt = sqlguard.run_sql(client, begin(pages), "UPDATE pages SET slug = md5(pg_read_file('x')) "
                               "WHERE id = 2", 1)
    assert receipt.outcome == "refused", receipt


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
    receipt = run(agent, begin(pages), SLUG)
    assert receipt["outcome"] != "success", receipt
