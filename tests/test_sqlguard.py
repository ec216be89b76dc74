"""The pglast guard for agent-written SQL (pyagentdb.sqlguard.check): table-driven. The server
is asked once, for the function allow-list it holds (the guard has no copy of its own).

Each refusal names a stable code; each acceptance names the statement kind and the table.
Known bypass shapes of parser allow-lists are here (function in FROM, comments hiding
semicolons, casing and quoting, CTEs, semicolons inside strings). The guard is a second net:
tests/test_run_sql.py shows the database refusing the same shapes without it.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

from pyagentdb import sqlguard
from pyagentdb.sqlguard import MAX_SQL_CHARS


@pytest.fixture(scope="module")
def functions(postgresql_noproc) -> sqlguard.Functions:
    """The allow-list of a fresh install (a database cloned from the tests' template)."""
    proc = postgresql_noproc
    name = f"guard_{uuid.uuid4().hex[:8]}"
    with DatabaseJanitor(user=proc.user, host=proc.host, port=proc.port, dbname=name,
                         template_dbname=proc.template_dbname, password=proc.password,
                         maintenance_dbname=proc.maintenance_dbname), \
            psycopg.connect(host=proc.host, port=proc.port, user=proc.user, password=proc.password,
                            dbname=name) as conn:
        return sqlguard.sql_functions(conn)


@pytest.fixture
def check(functions):
    """sqlguard.check with the database's allow-list."""
    return lambda sql: sqlguard.check(sql, functions=functions)

# (statement, kind, table)
ACCEPTED = [
    ("UPDATE notes SET done = true WHERE id = 7", "update", "notes"),
    ("update NOTES set DONE = TRUE where ID = 7", "update", "notes"),
    ('UPDATE "Notes" SET done = true WHERE id = 7', "update", '"Notes"'),
    ("UPDATE pUbLiC.notes SET done = true WHERE id = 7", "update", "public.notes"),
    ('UPDATE "public"."notes" SET done = true WHERE id = 7', "update", "public.notes"),
    ('DELETE FROM "notes; DROP TABLE x" WHERE id = 1', "delete", '"notes; DROP TABLE x"'),
    ("UPDATE ONLY notes AS n SET done = NOT n.done WHERE n.id = 1", "update", "notes"),
    ("UPDATE notes SET (body, done) = ('x', true) WHERE id = 1", "update", "notes"),
    ("DELETE FROM notes WHERE id IN (1, 2, 3)", "delete", "notes"),
    ("DELETE FROM notes WHERE user_id = 'u1' AND done AND created_at < current_date - 30", "delete", "notes"),
    ("DELETE FROM notes WHERE id BETWEEN 1 AND 3 AND body IS NULL", "delete", "notes"),
    ("INSERT INTO notes DEFAULT VALUES", "insert", "notes"),
    ("INSERT INTO notes (user_id, body) VALUES ('u1', 'a'), ('u1', 'b')", "insert", "notes"),
    ("INSERT INTO notes (user_id, body) VALUES (agentdb.sql_user(), lower('X'))", "insert", "notes"),
    ("INSERT INTO notes (id, body) VALUES (1, 'x') ON CONFLICT (id) DO NOTHING", "insert", "notes"),
    ("INSERT INTO notes (body) VALUES ('a') RETURNING *", "insert", "notes"),
    ("UPDATE notes SET body = coalesce(body, '') || '!' WHERE id = 1 RETURNING id, body", "update", "notes"),
    ("UPDATE notes SET remind_at = now() + interval '1 day' WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET remind_at = '2030-01-01 09:00+08'::timestamptz WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET n = CASE WHEN n > 1 THEN greatest(n, 2) ELSE nullif(n, 0) END WHERE id = 1",
     "update", "notes"),
    ("UPDATE notes SET d = localtimestamp(2), e = current_date WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET tags = ARRAY['a', 'b'] WHERE id = ANY ('{1,2}')", "update", "notes"),
    ("UPDATE notes SET body = body COLLATE \"C\" WHERE id = 1", "update", "notes"),
    # semicolons inside strings, dollar quotes, escapes and identifiers are data
    ("INSERT INTO notes (user_id, body) VALUES ('u1', 'a;b')", "insert", "notes"),
    ("UPDATE notes SET body = 'a''; DELETE FROM notes; --' WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET body = $$x; DROP TABLE notes$$ WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET body = $q$x$$; DROP TABLE notes$q$ WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET body = E'it\\'s; fine' WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET body = U&'\\0041;' WHERE id = 1", "update", "notes"),
    # comments, and a trailing semicolon
    ("/* leading ; comment */ UPDATE notes SET done = true WHERE id = 1 -- trailing; comment",
     "update", "notes"),
    ("UPDATE notes /* a /* nested ; */ comment */ SET done = true WHERE id = 1", "update", "notes"),
    ("UPDATE notes SET done = true WHERE id = 1;", "update", "notes"),
    ("UPDATE notes SET done = true WHERE id = 1 ;; ", "update", "notes"),
    ("\n\tDELETE\nFROM notes\nWHERE id = 1\n", "delete", "notes"),
]

# (statement, code)
REFUSED = [
    # not one statement
    ("", "empty"),
    ("   ;  ;", "empty"),
    ("-- only a comment", "empty"),
    ("UPDATE notes SET done = true WHERE id = 1; DELETE FROM notes", "multiple_statements"),
    ("UPDATE notes SET body = 'a' WHERE id = 1; DROP TABLE notes; --", "multiple_statements"),
    ("UPDATE notes SET body = 'a' /* ; */ WHERE id = 1; SELECT 1", "multiple_statements"),
    ("UPDATE notes SET done = true WHERE id = 1 -- x\n; DELETE FROM notes WHERE id = 2",
     "multiple_statements"),
    ("UPDATE notes SET done = true WHERE id = 1 -- ;\nDELETE FROM notes WHERE id = 2", "unparsable"),
    ("UPDATE notes SET body = 'x'';' WHERE id = 1;SELECT pg_sleep(1)", "multiple_statements"),
    # not an INSERT, UPDATE or DELETE
    ("SELECT 1", "not_dml"),
    ("SELECT set_config('role', 'postgres', false)", "not_dml"),
    ("SELECT * FROM secrets", "not_dml"),
    ("COPY notes FROM '/etc/passwd'", "not_dml"),
    ("COPY (SELECT 1) TO PROGRAM 'id'", "not_dml"),
    ("DO $$ BEGIN DELETE FROM notes; END $$", "not_dml"),
    ("CALL cleanup()", "not_dml"),
    ("DROP TABLE notes", "not_dml"),
    ("CREATE TABLE x (a int)", "not_dml"),
    ("ALTER TABLE notes ADD COLUMN c int", "not_dml"),
    ("TRUNCATE notes", "not_dml"),
    ("GRANT ALL ON notes TO PUBLIC", "not_dml"),
    ("SET ROLE postgres", "not_dml"),
    ("SET search_path = evil", "not_dml"),
    ("BEGIN", "not_dml"),
    ("EXPLAIN ANALYZE DELETE FROM notes", "not_dml"),
    ("PREPARE p AS DELETE FROM notes", "not_dml"),
    ("EXECUTE p", "not_dml"),
    ("MERGE INTO notes USING secrets ON true WHEN MATCHED THEN DELETE", "not_dml"),
    ("LOCK TABLE notes", "not_dml"),
    ("NOTIFY agentdb_actions", "not_dml"),
    ("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'", "not_dml"),
    # functions in FROM / USING (the postgres-mcp bypass), other tables, joins
    ("DELETE FROM notes USING pg_sleep(1) WHERE notes.id = 1", "function_in_from"),
    ("UPDATE notes SET done = true FROM dblink('dbname=x', 'DROP TABLE notes') AS d(a int) "
     "WHERE notes.id = d.a", "function_in_from"),
    ("UPDATE notes SET done = true FROM generate_series(1, 10) AS g WHERE notes.id = g", "function_in_from"),
    ("UPDATE notes SET done = true FROM ROWS FROM (pg_sleep(1)) AS s WHERE notes.id = 1", "function_in_from"),
    ("UPDATE notes SET done = true FROM secrets WHERE notes.id = secrets.id", "other_table"),
    ("DELETE FROM notes USING secrets WHERE notes.id = secrets.id", "other_table"),
    ("DELETE FROM notes USING notes AS n2 WHERE notes.id = n2.id", "other_table"),
    ("UPDATE notes SET done = true FROM (SELECT 1 AS id) AS s WHERE notes.id = s.id", "other_table"),
    # CTEs, writable or not
    ("WITH x AS (DELETE FROM notes RETURNING *) INSERT INTO notes SELECT * FROM x", "with_clause"),
    ("WITH x AS (SELECT 1) UPDATE notes SET done = true WHERE id = 1", "with_clause"),
    ("WITH RECURSIVE x AS (SELECT 1) DELETE FROM notes WHERE id = 1", "with_clause"),
    # other rows or tables read through subqueries / INSERT ... SELECT
    ("INSERT INTO notes SELECT * FROM secrets", "insert_select"),
    ("INSERT INTO notes (body) SELECT 'x'", "insert_select"),
    ("INSERT INTO notes (body) VALUES ('a') UNION SELECT s FROM secrets", "insert_select"),
    ("INSERT INTO notes (body) VALUES ((SELECT s FROM secrets LIMIT 1))", "subquery"),
    ("UPDATE notes SET body = (SELECT s FROM secrets) WHERE id = 1", "subquery"),
    ("DELETE FROM notes WHERE id IN (SELECT id FROM notes WHERE user_id = 'u2')", "subquery"),
    ("DELETE FROM notes WHERE id = 1 AND EXISTS (SELECT 1 FROM secrets)", "subquery"),
    ("UPDATE notes SET body = ARRAY(SELECT s FROM secrets)::text WHERE id = 1", "subquery"),
    # unbounded or trivially true WHERE
    ("UPDATE notes SET done = true", "no_where"),
    ("DELETE FROM notes", "no_where"),
    ("DELETE FROM notes WHERE true", "trivial_where"),
    ("DELETE FROM notes WHERE 1 = 1", "trivial_where"),
    ("DELETE FROM notes WHERE 'a' = 'a'", "trivial_where"),
    ("DELETE FROM notes WHERE NOT false", "trivial_where"),
    ("DELETE FROM notes WHERE now() > '2000-01-01'", "trivial_where"),
    ("DELETE FROM notes WHERE id = 1 OR 1 = 1", "trivial_where"),
    ("DELETE FROM notes WHERE (id = 1 AND done) OR true", "trivial_where"),
    ("DELETE FROM notes WHERE id = id", "trivial_where"),
    ("DELETE FROM notes WHERE notes.id = notes.id", "trivial_where"),
    ("DELETE FROM notes WHERE id IS NOT NULL", "trivial_where"),
    ("UPDATE notes SET a = 1 WHERE CURRENT OF c", "unsupported"),
    # functions outside the allow-list, anywhere
    ("UPDATE notes SET body = pg_read_file('/etc/passwd') WHERE id = 1", "function_call"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 AND set_config('search_path', 'evil', false) IS NOT NULL",
     "function_call"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 AND pg_advisory_lock(1) IS NOT NULL", "function_call"),
    ("UPDATE notes SET body = 'x' WHERE id = pg_sleep(10)::text::int", "function_call"),
    ("UPDATE notes SET body = lo_import('/etc/passwd')::text WHERE id = 1", "function_call"),
    ("UPDATE notes SET body = query_to_xml('select * from secrets', true, true, '')::text WHERE id = 1",
     "function_call"),
    ("UPDATE notes SET body = public.lower('X') WHERE id = 1", "function_call"),
    ("UPDATE notes SET body = LOWER(body) WHERE id = 1 AND PG_CATALOG.SET_CONFIG('a.b', 'c', true) = 'c'",
     "function_call"),
    ('UPDATE notes SET body = "set_config"(\'a.b\', \'c\', true) WHERE id = 1', "function_call"),
    ("UPDATE notes SET n = count(*) WHERE id = 1", "function_call"),
    ("UPDATE notes SET body = lower(body) OVER () WHERE id = 1", "function_call"),
    ("UPDATE notes SET body = current_user WHERE id = 1", "function_call"),
    ("UPDATE notes SET body = session_user WHERE id = 1", "function_call"),
    ("INSERT INTO notes (body) VALUES (nextval('notes_id_seq'))", "function_call"),
    ("DELETE FROM notes WHERE id = 1 OPERATOR(public.=) 1", "operator"),
    ("UPDATE notes SET body = $1 WHERE id = 1", "parameter"),
    # upserts and RETURNING
    ("INSERT INTO notes (id, body) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET body = excluded.body",
     "upsert"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 RETURNING pg_sleep(1)", "returning"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 RETURNING (SELECT s FROM secrets)", "returning"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 RETURNING lower(body)", "returning"),
    ("INSERT INTO notes OVERRIDING SYSTEM VALUE VALUES (1)", "unsupported"),
    # names and garbage
    ("UPDATE mydb.public.notes SET done = true WHERE id = 1", "bad_target"),
    ("UPDATE notes SET WHERE", "unparsable"),
    ("UPDATE notes SET body = 'unterminated WHERE id = 1", "unparsable"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 /* unterminated comment", "unparsable"),
    ("UPDATE notes SET body = $$x WHERE id = 1", "unparsable"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 FOR UPDATE", "unparsable"),
    ("UPDATE notes SET body = 'x\x00' WHERE id = 1", "unparsable"),
    ("DELETE FROM notes WHERE id = 1\x00; DROP TABLE notes", "unparsable"),
]


@pytest.mark.parametrize(("sql", "kind", "table"), ACCEPTED)
def test_accepted(check, sql, kind, table):
    result = check(sql)
    assert result.ok, result
    assert bool(result) is True
    assert result.code is None
    assert result.statement_kind == kind
    assert result.table == table


@pytest.mark.parametrize(("sql", "code"), REFUSED)
def test_refused(check, sql, code):
    result = check(sql)
    assert not result.ok, result
    assert bool(result) is False
    assert result.code == code, result
    assert result.reason and len(result.reason) < 400
    assert result.table is None


def test_refusal_names_the_statement_kind(check):
    assert check("DROP TABLE notes").statement_kind == "ddl"
    assert check("SELECT 1").statement_kind == "select"
    assert check("COPY notes TO STDOUT").statement_kind == "copy"
    assert check("DELETE FROM notes").statement_kind == "delete"
    assert "DDL" in check("ALTER TABLE notes DROP COLUMN body").reason


def test_functions_used_are_reported(check):
    result = check("INSERT INTO notes (user_id, body) VALUES (agentdb.sql_user(), lower(trim(' X ')))")
    assert result.ok
    # TRIM(...) is SQL syntax for pg_catalog.btrim
    assert set(result.functions) == {"agentdb.sql_user", "lower", "pg_catalog.btrim"}
    assert check("UPDATE notes SET done = true WHERE id = 1").functions == ()


def test_refusal_reason_names_the_function(check):
    result = check("UPDATE notes SET body = pg_read_file('/etc/passwd') WHERE id = 1")
    assert "pg_read_file" in result.reason


@pytest.mark.parametrize("value", [None, 42, b"DELETE FROM notes WHERE id = 1", ["DELETE"]])
def test_not_text(check, value):
    assert check(value).code == "not_text"


def test_huge_input_is_refused_before_parsing(check):
    big = "INSERT INTO notes (body) VALUES ('" + "x" * (MAX_SQL_CHARS + 1) + "')"
    result = check(big)
    assert result.code == "too_large"
    assert str(MAX_SQL_CHARS) in result.reason
    huge = "UPDATE notes SET body = 'x' WHERE id = 1; " * 200_000  # 8 MB
    assert check(huge).code == "too_large"


def test_largest_accepted_input_parses(check):
    rows = ", ".join(f"('u1', 'row {i}')" for i in range(900))
    sql = f"INSERT INTO notes (user_id, body) VALUES {rows}"
    assert len(sql) < MAX_SQL_CHARS
    assert check(sql).ok


@pytest.mark.parametrize("sql", [
    "UPDATE notes SET n = " + "1 + " * 3000 + "1 WHERE id = 1",
    "UPDATE notes SET n = " + "-" * 1 + "(" * 4000 + "1" + ")" * 4000 + " + " + "abs(" * 2000 + "1"
    + ")" * 2000 + " WHERE id = 1",
])
def test_deep_nesting_is_refused_not_a_crash(check, sql):
    result = check(sql)
    assert not result.ok
    assert result.code in ("too_complex", "unparsable", "too_large")


def test_parentheses_alone_do_not_make_a_tree_deep(check):
    assert check("UPDATE notes SET n = " + "(" * 5000 + "1" + ")" * 5000 + " WHERE id = 1").ok


def test_every_refusal_code_is_documented():
    codes = {code for _, code in REFUSED} | {"not_text", "too_large", "too_complex"}
    with open(__file__.replace("tests/test_sqlguard.py", "docs/sql-guard.md"), encoding="utf-8") as fh:
        doc = fh.read()
    missing = sorted(code for code in codes if f"`{code}`" not in doc)
    assert missing == []


def test_as_dict_is_json_ready(check):
    import json

    data = check("DELETE FROM notes WHERE id = 1").as_dict()
    assert json.loads(json.dumps(data))["table"] == "notes"
    assert data["ok"] is True and data["code"] is None
    assert sqlguard.check("DELETE FROM notes").as_dict()["code"] == "no_where"
    assert sqlguard.check("DELETE FROM notes WHERE id = abs(-1)").as_dict()["code"] == "no_function_list"


def test_cli_sql_check(capsys):
    from pyagentdb import cli

    assert cli.main(["sql-check", "DELETE FROM t USING pg_sleep(1) WHERE t.id = 1"]) == 1
    assert "function_in_from" in capsys.readouterr().out
    assert cli.main(["sql-check", "--json", "UPDATE t SET x = 'a;b' WHERE id = 1"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["table"] == "t"
