"""Tools compiled at registration (sql/42_compile.sql): each tool is one generated function;
DDL that changes what it was compiled from recompiles it (event trigger) or makes it stale,
and invoke never writes through stale code."""

from __future__ import annotations

import pytest
from helpers import FAR_TIME, begin, check_recorded, count, invoke, one, scalar

from pyagentdb import doctor

ADD = {"content": "stretch", "remind_at": FAR_TIME}


def compiled(db, tool: str) -> bool:
    return scalar(db, "SELECT to_regprocedure(%s) IS NOT NULL",
                  (f"agentdb_tools.{tool}(text, jsonb, integer, bigint, text, boolean, text)",))


def status(db, tool: str) -> dict:
    return one(db, "SELECT tool, stale, stale_reason FROM agentdb.tool_status WHERE tool = %s", (tool,))


def test_each_tool_is_one_function_and_unregister_drops_it(reminders):
    for tool in ("add_reminder", "edit_reminder", "finish_reminders", "delete_reminder"):
        assert compiled(reminders, tool), tool
        assert status(reminders, tool)["stale"] is False
    assert scalar(reminders, "SELECT agentdb.unregister_tool('add_reminder')") is True
    assert not compiled(reminders, "add_reminder")
    task = begin(reminders)
    check_recorded(reminders, invoke(reminders, task, "add_reminder", ADD), outcome="refused",
                   refusal="unknown_tool")


def test_no_role_but_the_owner_can_run_compiled_code(reminders, role_connect):
    import psycopg

    for group in ("agentdb_agent", "agentdb_app", "agentdb_auditor"):
        conn = role_connect(group)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT agentdb_tools.add_reminder('u1', '{}', NULL, NULL, NULL, false, 'en')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT agentdb_tools._run('add_reminder', 'u1', '{}', NULL, NULL, NULL, "
                         "false, 'en')")


def test_the_dispatcher_finds_every_tool_among_many(reminders):
    """agentdb_tools._run searches the names by halves (byte order, whatever the database's
    collation sorts "_" and digits as): each of 40 tools, their names chosen so that byte and
    dictionary order differ, runs its own compiled code, and a name it does not hold runs none."""
    names = [f"{p}{s}" for p in ("a_", "a", "a1", "ab_", "b")
             for s in ("x", "_y", "z1", "0", "_", "aa", "b_c", "q")]
    for name in names:
        reminders.execute(
            "SELECT agentdb.register_tool(name => %s, action => 'insert', target => 'public.reminders', "
            "label_zh => %s, label_en => %s, owner_column => 'user_id')", (name, name, f"file under {name}"))
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.tools") == len(names) + 4
    task = begin(reminders)
    for i, name in enumerate(names):
        receipt = invoke(reminders, task, name, {"content": f"n{i}", "remind_at": FAR_TIME})
        check_recorded(reminders, receipt, outcome="success")
        assert receipt["detail"].startswith(f"File under {name}:"), (name, receipt["detail"])
    for absent in ("a_w", "a0", "zz", "a"):
        assert scalar(reminders, "SELECT agentdb_tools._run(%s, 'u1', '{}', NULL, NULL, NULL, true, 'en')",
                      (absent + "_none",)) is None


def test_an_added_column_is_compiled_in(reminders):
    reminders.execute("ALTER TABLE public.reminders ADD COLUMN place text")
    assert status(reminders, "add_reminder")["stale"] is False
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", {**ADD, "place": "gym"})
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["row"]["place"] == "gym"


def test_a_retyped_column_is_compiled_in(reminders):
    """The compiled variable follows the column's new type: the exact comparison would
    otherwise see '2' stored for '2.50' asked."""
    reminders.execute("ALTER TABLE public.reminders ADD COLUMN weight integer")
    reminders.execute("ALTER TABLE public.reminders ALTER COLUMN weight TYPE numeric(6, 2)")
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", {**ADD, "weight": "2.50"})
    check_recorded(reminders, receipt, outcome="success")
    assert scalar(reminders, "SELECT weight::text FROM reminders") == "2.50"


def test_a_renamed_table_is_compiled_in(reminders):
    reminders.execute("ALTER TABLE public.reminders RENAME TO notes_to_self")
    task = begin(reminders)
    check_recorded(reminders, invoke(reminders, task, "add_reminder", ADD), outcome="success")
    assert count(reminders, "public.notes_to_self") == 1


def test_a_dropped_dedup_column_makes_the_tool_stale(reminders):
    reminders.execute("ALTER TABLE public.reminders DROP COLUMN content")
    st = status(reminders, "add_reminder")
    assert st["stale"] is True and "content" in st["stale_reason"]
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", {"remind_at": FAR_TIME})
    step, _ = check_recorded(reminders, receipt, outcome="refused", refusal="stale_tool")
    assert "content" in step["error"]
    assert count(reminders) == 0
    # Tools that do not name the column are recompiled and keep working.
    assert status(reminders, "edit_reminder")["stale"] is False
    report = doctor.check(reminders)
    assert any("add_reminder is stale" in p for p in report["problems"]), report["problems"]
    assert [t["tool"] for t in report["stale_tools"]] == ["add_reminder"]


def test_a_stale_tool_is_refused_without_the_event_trigger(reminders):
    """An installer that is no superuser has no event trigger: invoke compares the signature."""
    reminders.execute("ALTER EVENT TRIGGER agentdb_ddl DISABLE")
    try:
        reminders.execute("ALTER TABLE public.reminders ADD COLUMN place text")
        task = begin(reminders)
        receipt = invoke(reminders, task, "add_reminder", {**ADD, "place": "gym"})
        check_recorded(reminders, receipt, outcome="refused", refusal="stale_tool")
        assert count(reminders) == 0
        assert status(reminders, "add_reminder")["stale"] is True
        rows = reminders.execute("SELECT * FROM agentdb.compile_tools()").fetchall()
        assert ("add_reminder", "compiled") in rows
        check_recorded(reminders, invoke(reminders, task, "add_reminder", {**ADD, "place": "gym"}),
                       outcome="success")
    finally:
        reminders.execute("ALTER EVENT TRIGGER agentdb_ddl ENABLE")


def _compiled_state(db, tool: str) -> tuple:
    return one(db, """SELECT t.compiled_at, t.compiled_sig, p.xmin::text AS code_version, p.prosrc
                        FROM agentdb_private.tools AS t JOIN pg_catalog.pg_proc AS p
                          ON p.oid = to_regprocedure(format('agentdb_tools.%%I(text, jsonb, integer, bigint, '
                                                            'text, boolean, text)', t.name))
                       WHERE t.name = %s""", (tool,))


def test_an_install_leaves_current_tools_alone(reminders):
    """An install generates every tool's code again (sql/95_compile.sql): a tool whose code
    comes out the same keeps its function and its compiled_at."""
    from pyagentdb import install

    before = _compiled_state(reminders, "add_reminder")
    install.apply_sql(reminders)
    after = _compiled_state(reminders, "add_reminder")
    assert after == before
    rows = reminders.execute("SELECT * FROM agentdb.compile_tools(every => true)").fetchall()
    assert ("add_reminder", "unchanged") in rows
    assert _compiled_state(reminders, "add_reminder") == before


def test_an_install_session_compiles_schema_qualified_code(reminders):
    """The installer's session has public on its search_path; invoke runs with pg_catalog only.
    Code compiled at install must name the table with its schema, and its signature must be the
    one invoke computes: without the event trigger (replica mode here, as for an installer that
    is no superuser) nothing would compile it again."""
    from pyagentdb import install

    reminders.execute("ALTER TABLE public.reminders ADD COLUMN place text")  # the code must change
    reminders.execute("SET session_replication_role = replica")  # no event trigger fires
    try:
        install.apply_sql(reminders)
    finally:
        reminders.execute("RESET session_replication_role")
    state = _compiled_state(reminders, "add_reminder")
    assert "public.reminders" in state["prosrc"]
    assert state["compiled_sig"] == scalar(
        reminders, "SELECT agentdb_private.tool_signature(t) FROM agentdb_private.tools AS t "
                   "WHERE t.name = 'add_reminder'")
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", {**ADD, "place": "gym"})
    check_recorded(reminders, receipt, outcome="success")


def test_an_update_of_trigger_fires_only_for_its_column(reminders):
    """A table with UPDATE OF triggers gets an update that names only the columns given."""
    reminders.execute("""
        CREATE TABLE public.moves (n serial PRIMARY KEY, col text);
        CREATE FUNCTION public.note_move() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.moves (col) VALUES (TG_ARGV[0]); RETURN NEW; END $$;
        CREATE TRIGGER time_moved AFTER UPDATE OF remind_at ON public.reminders
        FOR EACH ROW EXECUTE FUNCTION public.note_move('remind_at');
    """)
    task = begin(reminders)
    rid = invoke(reminders, task, "add_reminder", ADD)["key"]["id"]
    edit = invoke(reminders, task, "edit_reminder", {"id": rid, "content": "run", "version": 1})
    check_recorded(reminders, edit, outcome="success")
    assert count(reminders, "public.moves") == 0
    check_recorded(reminders, invoke(reminders, task, "edit_reminder",
                                     {"id": rid, "remind_at": "2031-01-01 08:00+00", "version": 2}),
                   outcome="success")
    bulk = invoke(reminders, task, "finish_reminders", {"where": {"id": rid}, "set": {"done": True}},
                  expect_rows=1)
    check_recorded(reminders, bulk, outcome="success")
    assert scalar(reminders, "SELECT array_agg(col) FROM public.moves") == ["remind_at"]
    assert one(reminders, "SELECT content, done, version FROM reminders") == {
        "content": "run", "done": True, "version": 3}


def test_columns_named_like_the_generated_variables(reminders):
    reminders.execute("""
        CREATE TABLE public.odd (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            p_user text NOT NULL, v_1 text, v_set text, v_bulk boolean, "where" text, agentdb_target text
        );
        SELECT agentdb.register_tool(name => 'add_odd', action => 'insert', target => 'public.odd',
            label_zh => '记一条', label_en => 'save one', owner_column => 'p_user',
            dedup_columns => ARRAY['v_1', 'agentdb_target']);
        SELECT agentdb.register_tool(name => 'edit_odd', action => 'update', target => 'public.odd',
            label_zh => '改一条', label_en => 'change one', owner_column => 'p_user');
    """)
    task = begin(reminders)
    row = {"v_1": "a", "v_set": "b", "v_bulk": True, "where": "w", "agentdb_target": "t"}
    added = invoke(reminders, task, "add_odd", row)
    check_recorded(reminders, added, outcome="success")
    assert {k: added["row"][k] for k in row} == row and added["row"]["p_user"] == "u1"
    check_recorded(reminders, invoke(reminders, task, "add_odd", row), outcome="duplicate")
    # "where" is a column of this table, so {"where": ...} is an update by key, not the bulk form.
    edit = invoke(reminders, task, "edit_odd", {"id": added["key"]["id"], "where": "w2", "v_set": None})
    check_recorded(reminders, edit, outcome="success")
    assert one(reminders, 'SELECT "where", v_set FROM odd') == {"where": "w2", "v_set": None}


def test_a_domain_with_a_modifier_is_checked_for_loss(reminders):
    reminders.execute("""
        CREATE DOMAIN public.money2 AS numeric(8, 2) CHECK (VALUE >= 0);
        CREATE TABLE public.charges (id serial PRIMARY KEY, owner text NOT NULL, amount public.money2);
        SELECT agentdb.register_tool(name => 'charge', action => 'insert', target => 'public.charges',
            label_zh => '记一笔', label_en => 'record a charge', owner_column => 'owner');
    """)
    task = begin(reminders)
    lossy = invoke(reminders, task, "charge", {"amount": "12.345"})
    check_recorded(reminders, lossy, outcome="invalid", refusal="lossy_value")
    negative = invoke(reminders, task, "charge", {"amount": -1})
    check_recorded(reminders, negative, outcome="invalid", refusal="bad_value")
    assert negative["field"] == "amount"
    check_recorded(reminders, invoke(reminders, task, "charge", {"amount": 12.5}), outcome="success")
    assert scalar(reminders, "SELECT amount::text FROM charges") == "12.50"


def test_an_identity_by_default_key_given_or_not(reminders):
    reminders.execute("""
        CREATE TABLE public.tags (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, owner text NOT NULL,
                                  name text NOT NULL, made_at timestamptz NOT NULL DEFAULT now());
        SELECT agentdb.register_tool(name => 'add_tag', action => 'insert', target => 'public.tags',
            label_zh => '加标签', label_en => 'add a tag', owner_column => 'owner');
    """)
    task = begin(reminders)
    first = invoke(reminders, task, "add_tag", {"name": "a"})
    check_recorded(reminders, first, outcome="success")
    given = invoke(reminders, task, "add_tag", {"id": 100, "name": "b"})
    check_recorded(reminders, given, outcome="success")
    assert (first["key"], given["key"]) == ({"id": 1}, {"id": 100})
    assert scalar(reminders, "SELECT count(*) FROM tags WHERE made_at IS NOT NULL") == 2
