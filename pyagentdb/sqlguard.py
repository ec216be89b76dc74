"""A second net for SQL written by an agent: parse it with pglast (PostgreSQL's own parser)
and accept only one plain INSERT, UPDATE or DELETE on one table, with literal values and the
functions of run_sql's allow-list, which lives in the database (agentdb.sql_function_list()).

The boundary is in the database, not here: `agentdb.run_sql` plans the statement as the
NOLOGIN role `agentdb_sql_writer` (privileges on the tables enabled with `agentdb.allow_sql`
and nothing else), refuses anything that is not one simple write of one enabled table, and
counts and checks what really changed before the step is recorded. This module refuses early,
with a reason the model can act on, and catches what the database side does not look at
(function calls in expressions, tautological WHERE clauses). See docs/sql-guard.md.

    >>> check("DELETE FROM t USING pg_sleep(1) WHERE t.id = 1").code
    'function_in_from'
    >>> r = check("UPDATE public.notes SET done = true WHERE id = 7")
    >>> r.ok, r.statement_kind, r.table
    (True, 'update', 'public.notes')
    >>> check("UPDATE public.notes SET body = lower(body) WHERE id = 7").code  # no list: fail closed
    'no_function_list'

With a connection, Guard(conn).check(sql) reads the list from the database (once, kept with a
refresh rule: see Guard); run_sql() does that itself.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pglast import parser

# Longer statements are refused before they are parsed (the database has the same limit).
MAX_SQL_CHARS = 20_000
# Parse trees bigger than this are refused: an agent's single-row write is far smaller.
MAX_NODES = 20_000

# How the model wrote a function that PostgreSQL's grammar spells as SQL (funcformat
# COERCE_SQL_SYNTAX), for refusals: "COLLATION FOR (...) is not allowed", not pg_collation_for.
SQL_SYNTAX_NAMES = {
    "extract": "EXTRACT(... FROM ...)", "position": "POSITION(... IN ...)",
    "overlay": "OVERLAY(... PLACING ...)", "substring": "SUBSTRING(... FROM ...)",
    "btrim": "TRIM(...)", "ltrim": "TRIM(LEADING ...)", "rtrim": "TRIM(TRAILING ...)",
    "timezone": "AT TIME ZONE", "similar_to_escape": "SIMILAR TO", "overlaps": "OVERLAPS",
    "system_user": "SYSTEM_USER", "pg_collation_for": "COLLATION FOR (...)",
    "is_normalized": "IS NORMALIZED", "normalize": "NORMALIZE(...)", "xmlexists": "XMLEXISTS(...)",
}
# CURRENT_DATE, CURRENT_TIMESTAMP, LOCALTIME ... (not CURRENT_USER and friends).
ALLOWED_SQL_VALUE_FUNCTIONS = frozenset({
    "SVFOP_CURRENT_DATE", "SVFOP_CURRENT_TIME", "SVFOP_CURRENT_TIME_N",
    "SVFOP_CURRENT_TIMESTAMP", "SVFOP_CURRENT_TIMESTAMP_N", "SVFOP_LOCALTIME",
    "SVFOP_LOCALTIME_N", "SVFOP_LOCALTIMESTAMP", "SVFOP_LOCALTIMESTAMP_N",
})

# Expression nodes allowed anywhere in the statement (others have their own checks below).
ALLOWED_NODES = frozenset({
    "A_Const", "A_Expr", "A_ArrayExpr", "A_Indirection", "A_Indices", "A_Star", "BitString",
    "BoolExpr", "Boolean", "BooleanTest", "CaseExpr", "CaseWhen", "CoalesceExpr",
    "CollateClause", "ColumnRef", "Float", "IndexElem", "Integer", "List", "MinMaxExpr",
    "MultiAssignRef", "NamedArgExpr", "NullTest", "ResTarget", "RowExpr", "SetToDefault",
    "String", "TypeCast", "TypeName",
})
# Parse nodes the guard refuses, by what the model wrote.
_NODE_TEXT = {
    "XmlExpr": "an XML function", "XmlSerialize": "XMLSERIALIZE(...)", "JsonIsPredicate": "IS JSON",
    "JsonObjectConstructor": "JSON_OBJECT(...)", "JsonArrayConstructor": "JSON_ARRAY(...)",
    "JsonArrayQueryConstructor": "JSON_ARRAY(SELECT ...)", "JsonObjectAgg": "JSON_OBJECTAGG(...)",
    "JsonArrayAgg": "JSON_ARRAYAGG(...)", "JsonFuncExpr": "JSON_VALUE/JSON_QUERY/JSON_EXISTS(...)",
    "JsonParseExpr": "JSON(...)", "JsonScalarExpr": "JSON_SCALAR(...)",
    "JsonSerializeExpr": "JSON_SERIALIZE(...)", "MergeSupportFunc": "MERGE_ACTION()",
    "GroupingFunc": "GROUPING(...)", "CurrentOfExpr": "WHERE CURRENT OF",
}

_STATEMENT_KINDS = {
    "InsertStmt": "insert", "UpdateStmt": "update", "DeleteStmt": "delete",
    "SelectStmt": "select", "MergeStmt": "merge", "CopyStmt": "copy", "DoStmt": "do",
    "CallStmt": "call", "ExplainStmt": "explain", "VariableSetStmt": "set",
    "VariableShowStmt": "show", "TransactionStmt": "transaction", "ExecuteStmt": "execute",
    "PrepareStmt": "prepare", "DeclareCursorStmt": "declare", "LockStmt": "lock",
    "TruncateStmt": "truncate", "GrantStmt": "grant", "GrantRoleStmt": "grant",
    "NotifyStmt": "notify", "ListenStmt": "listen", "VacuumStmt": "vacuum",
    "CreateTableAsStmt": "ddl", "RefreshMatViewStmt": "ddl",
}

_KIND_TEXT = {
    "select": "a SELECT", "merge": "a MERGE", "copy": "COPY", "do": "a DO block",
    "call": "CALL", "explain": "EXPLAIN", "set": "SET", "show": "SHOW",
    "transaction": "transaction control", "execute": "EXECUTE of a prepared statement",
    "prepare": "PREPARE", "declare": "a cursor", "lock": "LOCK", "truncate": "TRUNCATE",
    "grant": "GRANT/REVOKE", "notify": "NOTIFY", "listen": "LISTEN", "vacuum": "VACUUM/ANALYZE",
    "ddl": "DDL (a schema change)",
}


@dataclass(frozen=True)
class GuardResult:
    """The guard's verdict on one statement. `code` is stable and machine-readable (None when
    accepted); `reason` is one sentence for the model and the audit trail."""

    ok: bool
    reason: str
    code: str | None = None
    statement_kind: str | None = None
    table: str | None = None
    schema: str | None = None
    relname: str | None = None
    functions: tuple[str, ...] = field(default=())

    def __bool__(self) -> bool:
        return self.ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "code": self.code, "reason": self.reason,
            "statement_kind": self.statement_kind, "table": self.table,
            "schema": self.schema, "relname": self.relname, "functions": list(self.functions),
        }


@dataclass(frozen=True)
class Functions:
    """run_sql's function allow-list as the database holds it (agentdb.sql_function_list(),
    read by sql_functions()): the calls a statement may write as schema.name, the names it may
    write unqualified, and every name in the database's order (for the tool description)."""

    qualified: frozenset[tuple[str, str]]
    bare: frozenset[str]
    names: tuple[str, ...] = ()

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, bool]]) -> Functions:
        """From (schema_name, function_name, unqualified) rows, in the order to name them."""
        rows = list(rows)
        return cls(frozenset((schema, name) for schema, name, _ in rows),
                   frozenset(name for _, name, unqualified in rows if unqualified),
                   tuple(dict.fromkeys(name if schema == "pg_catalog" else f"{schema}.{name}"
                                       for schema, name, _ in rows)))

    def allows(self, parts: list[str]) -> bool:
        """Whether a call written as `parts` (["lower"], ["pg_catalog", "lower"]) is on the list."""
        if len(parts) == 2:
            return (parts[0], parts[1]) in self.qualified
        return len(parts) == 1 and parts[0] in self.bare


class _Refused(Exception):
    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _quote_ident(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) and name not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def _reserved() -> frozenset[str]:
    try:
        from pglast.keywords import RESERVED_KEYWORDS

        return frozenset(RESERVED_KEYWORDS)
    except ImportError:  # pragma: no cover - older pglast
        return frozenset()


_RESERVED = _reserved()


def _node(value: Any) -> tuple[str, dict] | None:
    """('FuncCall', body) for a typed parse node, None for a plain struct or scalar."""
    if isinstance(value, dict) and len(value) == 1:
        (name, body), = value.items()
        if name[:1].isupper() and isinstance(body, dict):
            return name, body
    return None


def _walk(value: Any):
    """Every typed node under value (iteratively: deep trees must not exhaust the stack)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            typed = _node(item)
            if typed:
                yield typed
                stack.append(typed[1])
            else:
                stack.extend(reversed(list(item.values())))


def _has_column(value: Any) -> bool:
    return any(name == "ColumnRef" for name, _ in _walk(value))


def _strings(items: list | None) -> list[str]:
    out = []
    for item in items or []:
        typed = _node(item)
        if typed and typed[0] == "String":
            out.append(typed[1].get("sval", ""))
        else:
            out.append("*")
    return out


def _shape(value: Any) -> Any:
    """A parse subtree without source positions, to compare two expressions."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k != "location"}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def _check_where(where: Any) -> None:
    """WHERE must name a column in every branch that could make it true: `WHERE true`,
    `1 = 1`, `id = 7 OR 1 = 1` and `id = id` read as "every row"."""
    if any(name == "CurrentOfExpr" for name, _ in _walk(where)):
        raise _Refused("unsupported", "WHERE CURRENT OF a cursor is not allowed; name the rows by their "
                                      "values")
    if not _has_column(where):
        raise _Refused("trivial_where", "the WHERE clause does not depend on any column, so it matches every "
                                        "row; name the rows to change (e.g. WHERE id = 7)")
    for name, body in _walk(where):
        if name == "BoolExpr" and body.get("boolop") == "OR_EXPR":
            for arg in body.get("args", []):
                if not _has_column(arg):
                    raise _Refused("trivial_where", "a branch of an OR in the WHERE clause does not depend "
                                                    "on any column, so it matches every row")
        if name == "A_Expr" and body.get("kind") == "AEXPR_OP" and _strings(body.get("name")) in (
            ["="], [">="], ["<="], ["pg_catalog", "="]
        ) and _shape(body.get("lexpr")) == _shape(body.get("rexpr")):
            raise _Refused("trivial_where", "the WHERE clause compares a value with itself, so it matches "
                                            "every row")
    typed = _node(where)
    if typed and typed[0] == "NullTest" and typed[1].get("nulltesttype") == "IS_NOT_NULL":
        # `WHERE id IS NOT NULL` on a key column is every row as well.
        raise _Refused("trivial_where", "a WHERE clause that only says IS NOT NULL is not a bound on the "
                                        "rows")


def _written(sql: str, body: dict, name: str) -> str:
    """How the model wrote the call in `body`: "COLLATION FOR (...)" for SQL syntax, else name()."""
    if body.get("funcformat") == "COERCE_SQL_SYNTAX" or (
        name == "pg_catalog.similar_to_escape" and not _source_at(sql, body).lower().startswith(
            ("similar_to_escape", "pg_catalog", '"'))
    ):
        return SQL_SYNTAX_NAMES.get(name.rsplit(".", 1)[-1]) or _source_at(sql, body) or name
    return f"function {name}()"


def _source_at(sql: str, body: dict) -> str:
    """The first words of the source text at a node's location (a byte offset)."""
    loc = body.get("location")
    if not isinstance(loc, int) or loc < 0:
        return ""
    text = sql.encode()[loc:loc + 60].decode(errors="ignore")
    return re.match(r"[^\n(]*\(?", text).group(0).strip()


def _check_function(sql: str, body: dict, functions: Functions | None) -> str:
    parts = _strings(body.get("funcname"))
    name = ".".join(parts)
    written = _written(sql, body, name)
    if body.get("over") or body.get("agg_star") or body.get("agg_distinct") or body.get("agg_filter") \
            or body.get("agg_order") or body.get("agg_within_group"):
        raise _Refused("function_call", f"aggregate or window function {name}() is not allowed")
    if body.get("func_variadic"):
        raise _Refused("function_call", f"VARIADIC call of {name}() is not allowed")
    if functions is None:
        raise _Refused("no_function_list", f"{written} cannot be checked without the database's function "
                                           "allow-list (sqlguard.Guard(conn), or sql-check --dsn)")
    if functions.allows(parts):
        return name
    raise _Refused("function_call", f"{written} is not allowed here; only simple value functions such as "
                                    "now(), lower(), upper(), trim(), round() or coalesce() may be used")


def _check_target(relation: dict) -> tuple[str | None, str, str]:
    if relation.get("catalogname"):
        raise _Refused("bad_target", "a database-qualified table name (db.schema.table) is not allowed")
    schema, relname = relation.get("schemaname"), relation.get("relname")
    if not relname:
        raise _Refused("bad_target", "the statement names no table")
    if relation.get("relpersistence") not in (None, "p"):
        raise _Refused("bad_target", "only ordinary tables can be written")
    table = f"{_quote_ident(schema)}.{_quote_ident(relname)}" if schema else _quote_ident(relname)
    return schema, relname, table


def _check_returning(stmt: dict) -> None:
    returning = stmt.get("returningClause") or {}
    if returning.get("options"):
        raise _Refused("returning", "RETURNING WITH (OLD/NEW aliases) is not allowed")
    for item in returning.get("exprs", stmt.get("returningList", [])) or []:
        typed = _node(item)
        val = typed[1].get("val") if typed and typed[0] == "ResTarget" else None
        if _node(val) is None or _node(val)[0] != "ColumnRef":
            raise _Refused("returning", "RETURNING may list columns (or *) only, not expressions")


def _check_statement(kind: str, stmt: dict) -> None:
    if stmt.get("withClause"):
        raise _Refused("with_clause", "WITH (a common table expression) is not allowed: a writable CTE "
                                      "could change another table; write one plain statement")
    if kind == "update" and stmt.get("fromClause") or kind == "delete" and stmt.get("usingClause"):
        items = stmt.get("fromClause") or stmt.get("usingClause")
        if any(name == "RangeFunction" for name, _ in _walk(items)):
            raise _Refused("function_in_from", "a function in FROM/USING is not allowed (it runs for "
                                               "every row and can do anything the function can)")
        word = "FROM" if kind == "update" else "USING"
        raise _Refused("other_table", f"{word} brings other tables into the statement; change one table "
                                      "and name its rows in WHERE")
    if kind in ("update", "delete"):
        where = stmt.get("whereClause")
        if where is None:
            raise _Refused("no_where", f"{kind.upper()} without WHERE would change every row; name the rows "
                                       "to change (e.g. WHERE id = 7)")
        _check_where(where)
    if kind == "insert":
        select = stmt.get("selectStmt")
        if select is not None:
            typed = _node(select)
            body = typed[1] if typed and typed[0] == "SelectStmt" else {}
            extra = {k for k in body if k not in ("valuesLists", "limitOption", "op")}
            if not body.get("valuesLists") or extra or body.get("op") != "SETOP_NONE":
                raise _Refused("insert_select", "INSERT ... SELECT is not allowed; give the values with "
                                                "VALUES (...)")
        conflict = stmt.get("onConflictClause")
        if conflict and conflict.get("action") != "ONCONFLICT_NOTHING":
            raise _Refused("upsert", "ON CONFLICT DO UPDATE is not allowed (an upsert is an insert or an "
                                     "update, so its row count proves nothing); use ON CONFLICT DO NOTHING, "
                                     "or an UPDATE")
        if stmt.get("override") not in (None, "OVERRIDING_NOT_SET"):
            raise _Refused("unsupported", "OVERRIDING ... VALUE is not allowed")
    _check_returning(stmt)


def _check_expressions(sql: str, stmt: dict, functions: Functions | None) -> tuple[str, ...]:
    called: list[str] = []
    count = 0
    for name, body in _walk({k: v for k, v in stmt.items() if k != "relation"}):
        count += 1
        if count > MAX_NODES:
            raise _Refused("too_complex", "the statement is too complex to check")
        if name in ("SubLink", "SelectStmt") and not (name == "SelectStmt" and body is _values(stmt)):
            raise _Refused("subquery", "a subquery is not allowed: it could read other rows or tables; "
                                       "use literal values")
        if name == "RangeFunction":
            raise _Refused("function_in_from", "a function in FROM is not allowed")
        if name in ("RangeVar", "JoinExpr", "RangeSubselect"):
            raise _Refused("other_table", "only the target table may appear in the statement")
        if name == "FuncCall":
            called.append(_check_function(sql, body, functions))
        elif name == "SQLValueFunction":
            if body.get("op") not in ALLOWED_SQL_VALUE_FUNCTIONS:
                what = body.get("op", "?").removeprefix("SVFOP_")
                raise _Refused("function_call", f"{what} is not allowed")
        elif name == "ParamRef":
            raise _Refused("parameter", "parameters ($1) cannot be bound here; write the values as literals")
        elif name == "CurrentOfExpr":
            raise _Refused("unsupported", "WHERE CURRENT OF a cursor is not allowed")
        elif name == "A_Expr":
            op = _strings(body.get("name"))
            if len(op) > 1 and op[0] != "pg_catalog":
                raise _Refused("operator", f"operator {'.'.join(op)} from another schema is not allowed")
        elif name == "SelectStmt":
            continue
        elif name not in ALLOWED_NODES:
            what = _NODE_TEXT.get(name) or _source_at(sql, body) or name
            raise _Refused("unsupported", f"{what} is not supported in an agent's statement")
    return tuple(dict.fromkeys(called))


def _values(stmt: dict) -> dict | None:
    typed = _node(stmt.get("selectStmt"))
    return typed[1] if typed else None


def check(sql: Any, *, functions: Functions | None = None) -> GuardResult:
    """Accept exactly one plain INSERT/UPDATE/DELETE of one table, or say why not.

    `functions`: run_sql's function allow-list as the database holds it (sql_functions(conn),
    or a Guard, which reads and keeps it). Without it the guard cannot tell an allowed call from
    another, so it refuses every function call (`no_function_list`): it never guesses."""
    kind = None
    try:
        if not isinstance(sql, str):
            raise _Refused("not_text", "the statement must be text")
        if len(sql) > MAX_SQL_CHARS:
            raise _Refused("too_large", f"the statement is {len(sql)} characters; the limit is "
                                        f"{MAX_SQL_CHARS}")
        if "\x00" in sql:
            raise _Refused("unparsable", "the statement contains a NUL character")
        if not sql.strip():
            raise _Refused("empty", "the statement is empty")
        try:
            tree = json.loads(parser.parse_sql_json(sql))
        except RecursionError:
            raise _Refused("too_complex", "the statement is nested too deeply to check") from None
        except Exception as exc:  # pglast.parser.ParseError and friends
            raise _Refused("unparsable", f"the statement does not parse: {exc}") from None
        stmts = tree.get("stmts") or []
        if not stmts:
            raise _Refused("empty", "the statement is empty (only comments or semicolons)")
        if len(stmts) > 1:
            raise _Refused("multiple_statements", f"{len(stmts)} statements were given; send exactly one")
        typed = _node(stmts[0].get("stmt"))
        if typed is None:
            raise _Refused("unparsable", "the statement could not be read")
        name, stmt = typed
        kind = _STATEMENT_KINDS.get(name) or ("ddl" if re.match(r"(Create|Alter|Drop|Rename|Comment)", name)
                                              else name.removesuffix("Stmt").lower())
        if kind not in ("insert", "update", "delete"):
            what = _KIND_TEXT.get(kind, f"a {kind} statement")
            raise _Refused("not_dml", f"{what} is not allowed; only one INSERT, UPDATE or DELETE")
        relation = stmt.get("relation") or {}
        schema, relname, table = _check_target(relation)
        _check_statement(kind, stmt)
        called = _check_expressions(sql, stmt, functions)
    except _Refused as refused:
        return GuardResult(False, refused.reason, refused.code, kind)
    return GuardResult(True, f"one {kind.upper()} of {table}", None, kind, table, schema, relname, called)


# -- the allow-list, read from the database -------------------------------------------------------


def _client(source: Any):
    """A pyagentdb Client for a Client, a psycopg connection or a pool."""
    from .client import Client

    return source if isinstance(source, Client) else Client(source)


def sql_functions(source: Any) -> Functions:
    """run_sql's function allow-list from agentdb.sql_function_list() (the built-in list, the
    DBA's additions and agentdb.sql_user()), through a Client or a psycopg connection or pool.
    Read afresh on every call; a Guard keeps it."""
    with _client(source)._cursor() as cur:
        cur.execute("SELECT f.schema_name, f.function_name, f.unqualified"
                    " FROM agentdb.sql_function_list() AS f ORDER BY f.ordinal")
        return Functions.from_rows(cur.fetchall())


class _Kept:
    """The allow-list one connection or pool last read; shared by every Guard over it."""

    functions: Functions | None = None


_KEPT: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


class Guard:
    """check() against the allow-list of the database behind `source` (a Client, a psycopg
    connection or pool). The list is kept per connection (or pool): every Guard over it shares
    it. When it is read:

    - at the first check;
    - again, once, before the guard refuses a call the kept list does not allow (a DBA may have
      just added the function);
    - after forget(): run_sql() calls it when the database refused (function_not_allowed) a
      statement the guard had passed (a DBA may have just removed a function);
    - on refresh() (exposed_tool() reads it so, for the description and the guard alike).

    If it cannot be read (an install without agentdb.sql_function_list(), or a role that may
    not read it), nothing is kept and every function call is refused (`no_function_list`)."""

    def __init__(self, source: Any):
        self.client = _client(source)
        try:
            self._kept = _KEPT.setdefault(self.client._source, _Kept())
        except TypeError:  # a source that cannot be weakly referenced: this guard keeps its own
            self._kept = _Kept()

    def functions(self) -> Functions | None:
        """The kept list (read first if there is none)."""
        return self._kept.functions or self.refresh()

    def refresh(self) -> Functions | None:
        """Read the list again and keep it."""
        import psycopg

        try:
            self._kept.functions = sql_functions(self.client)
        except (psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege):
            self._kept.functions = None
        return self._kept.functions

    def forget(self) -> None:
        """Drop the kept list: the next check reads it again."""
        self._kept.functions = None

    def check(self, sql: Any) -> GuardResult:
        """check(sql) with the database's list (see the class for when it is read)."""
        kept = self._kept.functions
        verdict = check(sql, functions=self.functions())
        if kept is not None and verdict.code in ("function_call", "no_function_list"):
            verdict = check(sql, functions=self.refresh())
        return verdict


# -- the run_sql tool ---------------------------------------------------------------------------

DEFAULT_TIMEOUT = "5s"


def run_sql(client: Any, task: Any, sql: str, expect_rows: int | None, *, call_id: str | None = None,
            reason: str | None = None, timeout: str | None = DEFAULT_TIMEOUT):
    """Check `sql` with the guard, then run it through agentdb.run_sql (which checks again, as
    the boundary). A refusal by the guard is recorded in the database as a refused step with an
    audit row (agentdb.record_sql_refusal), so both paths return a Receipt from the database.

    `client` is a pyagentdb Client or a psycopg connection/pool. `timeout` bounds the whole call
    (statement_timeout applies to the top-level statement only, so it is set here, by the caller).
    """
    from .client import Receipt

    client = _client(client)
    guard = Guard(client)
    verdict = guard.check(sql)
    text = sql if isinstance(sql, str) else repr(sql)
    text = text[:MAX_SQL_CHARS].replace("\x00", "")
    with client._cursor() as cur:
        if timeout:
            cur.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout),))
        if verdict.ok:
            cur.execute(
                "SELECT agentdb.run_sql(%s::uuid, %s, %s, call_id => %s, reason => %s)",
                (str(task), text, expect_rows, call_id, reason),
            )
        else:
            cur.execute(
                "SELECT agentdb.record_sql_refusal(%s::uuid, %s, %s, call_id => %s, reason => %s,"
                " expect_rows => %s)",
                (str(task), text, f"{verdict.code}: {verdict.reason}", call_id, reason, expect_rows),
            )
        data = cur.fetchone()[0]
    if verdict.ok and data.get("refusal") == "function_not_allowed":
        guard.forget()  # the database knows a list the guard did not: read it again next time
    return Receipt.from_json(data)


# -- run_sql as a tool for LLM APIs ------------------------------------------------------------

TOOL_NAME = "run_sql"
_MAX_DESCRIPTION = 1024  # the OpenAI limit for a function's description
_MAX_FUNCTIONS = 240  # of it, at most for the names of the functions a statement may call


def sql_tables(source: Any) -> list[dict]:
    """Rows of agentdb.sql_tables (the tables run_sql may write) from a Client, a psycopg
    connection or pool, or rows already read."""
    if isinstance(source, (list, tuple)):
        return [dict(row) for row in source]
    with _client(source)._cursor() as cur:
        cur.execute("SELECT to_jsonb(t) FROM agentdb.sql_tables AS t ORDER BY t.table_name")
        return [row[0] for row in cur.fetchall()]


def _table_line(row: dict) -> str:
    cols = []
    for col in row.get("columns") or []:
        name = col["name"]
        cols.append(f"{name}=agentdb.sql_user()" if name == row.get("owner_column") else name)
    return f"{row.get('table_name') or row['target']}({', '.join(cols)})"


def exposed_tool(source: Any):
    """run_sql as a pyagentdb.schemas.ExposedTool (render it with .render(format))."""
    from .schemas import ExposedTool

    rows = sql_tables(source)
    # The allow-list the guard checks with (read afresh, and kept for it): as many names as fit
    # in _MAX_FUNCTIONS characters, in the database's order (the DBA's additions first), so
    # that the tables keep their room. Rows already read say nothing of it: no function then.
    functions = None if isinstance(source, (list, tuple)) else Guard(source).refresh()
    named = ""
    for name in functions.names if functions else ():
        if len(named) + len(name) + 4 > _MAX_FUNCTIONS:
            named += ", …"
            break
        named += f", {name}()"
    calls = f"functions only {named[2:]}" if named else "no function calls"
    head = ("Change data with ONE SQL statement: a single INSERT, UPDATE or DELETE of one of these "
            "tables: ")
    rules = (". Literal values only; UPDATE/DELETE need a WHERE naming the rows; no subqueries, joins, "
             f"WITH or other tables; {calls} (and COALESCE, CASE, casts). expect_rows must be the "
             "exact number of rows it changes, or it is undone. "
             "It is done only when the result says DONE; anything else means NOT done: tell the user.")
    tables = "; ".join(_table_line(row) for row in rows) or "(none enabled)"
    room = _MAX_DESCRIPTION - len(head) - len(rules)
    if len(tables) > room:
        tables = tables[: max(room - 1, 0)].rstrip() + "…"
    schema = {
        "type": "object",
        "properties": {
            "statement": {"type": "string", "maxLength": MAX_SQL_CHARS,
                          "description": "one INSERT, UPDATE or DELETE statement"},
            "expect_rows": {"type": "integer", "minimum": 1,
                            "description": "how many rows the statement must change"},
            "reason": {"type": "string", "description": "why, in a few words"},
        },
        "required": ["statement", "expect_rows"],
        "additionalProperties": False,
    }
    return ExposedTool(
        name=TOOL_NAME, kind="run_sql", tool=None, title="Run one SQL change",
        description=head + tables + rules, input_schema=schema,
        annotations={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                     "openWorldHint": False},
    )


def tool_definition(source: Any, format: str = "openai") -> dict:  # noqa: A002 - schemas' word
    """The run_sql tool for `format` (openai, openai-responses, anthropic, mcp)."""
    return exposed_tool(source).render(format)


def call_tool(client: Any, task: Any, arguments: Any, *, call_id: str | None = None,
              timeout: str | None = DEFAULT_TIMEOUT):
    """One model call of the run_sql tool -> a Receipt from the database. Malformed arguments
    are a recorded refusal too; pyagentdb.schemas.render_result(receipt.raw) gives the text for
    the model."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = None
    args = arguments if isinstance(arguments, dict) else {}
    statement, expect = args.get("statement"), args.get("expect_rows")
    reason = args.get("reason") if isinstance(args.get("reason"), str) else None
    if isinstance(expect, bool) or not isinstance(expect, int):
        expect = None
    if not isinstance(statement, str) or set(args) - {"statement", "expect_rows", "reason"}:
        from .client import Receipt

        why = ("bad_arguments: the arguments must be an object with statement (text), expect_rows "
               "(integer) and optionally reason")
        with _client(client)._cursor() as cur:
            cur.execute("SELECT agentdb.record_sql_refusal(%s::uuid, %s, %s, call_id => %s, reason => %s)",
                        (str(task), json.dumps(arguments, default=str)[:MAX_SQL_CHARS], why, call_id, reason))
            return Receipt.from_json(cur.fetchone()[0])
    return run_sql(client, task, statement, expect, call_id=call_id, reason=reason, timeout=timeout)


__all__ = ["MAX_SQL_CHARS", "TOOL_NAME", "Functions", "Guard", "GuardResult", "call_tool", "check",
           "exposed_tool", "run_sql", "sql_functions", "sql_tables", "tool_definition"]
