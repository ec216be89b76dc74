"""Before/after state of the watched tables, and what differs between them.

The database does the work: agentdb.snapshot(regclass[]) records the tables
and returns an id, agentdb.diff(before, after) returns one object per table
that differs ({"table", "added", "removed", "changed": [{key, columns, before,
after}]}). This module only calls them and types the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg


@dataclass
class TableDiff:
    table: str
    added: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    changed: list[dict] = field(default_factory=list)  # {key, columns, before, after}

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_json(self) -> dict:
        return {"table": self.table, "added": self.added, "removed": self.removed, "changed": self.changed}


def qualified(conn: psycopg.Connection, table: str) -> str:
    """'orders' / 'public.orders' / '"Odd"' -> schema.table as the database spells it; raises if absent."""
    row = conn.execute(
        "SELECT format('%%s.%%s', quote_ident(n.nspname), quote_ident(c.relname)), c.relkind::text"
        " FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE c.oid = to_regclass(%s)",
        (table,),
    ).fetchone()
    if row is None:
        raise LookupError(f"no table {table!r}")
    if row[1] not in ("r", "p"):
        raise LookupError(f"{table!r} is not a table")
    return row[0]


def take(conn: psycopg.Connection, tables: list[str]) -> int:
    """Snapshot the tables (schema-qualified names); returns the snapshot id."""
    return conn.execute("SELECT agentdb.snapshot(%s::regclass[])", (list(tables),)).fetchone()[0]


def diff(conn: psycopg.Connection, before: int, after: int) -> list[TableDiff]:
    """The tables that differ between two snapshots, by the database's own diff."""
    data = conn.execute("SELECT agentdb.diff(%s, %s)", (before, after)).fetchone()[0] or []
    out = []
    for item in data:
        # Name tables the same way as qualified(), whatever spelling the function chose.
        name = qualified(conn, item["table"])
        out.append(TableDiff(name, list(item.get("added") or []), list(item.get("removed") or []),
                             list(item.get("changed") or [])))
    return [d for d in out if not d.empty]


# --- TEMPORARY: used only while agentdb.snapshot/diff are not installed. ------------------
# Remove once sql/ defines them (truth lives in SQL).
_FALLBACK: dict[int, dict[str, dict]] = {}


def _has_sql(conn: psycopg.Connection) -> bool:
    return conn.execute(
        "SELECT to_regprocedure('agentdb.snapshot(regclass[])') IS NOT NULL"
        " AND to_regprocedure('agentdb.diff(bigint,bigint)') IS NOT NULL"
    ).fetchone()[0]


def _fallback_take(conn, tables):
    snap = {}
    for t in tables:
        pk = [r[0] for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY (i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey, a.attnum)", (t,)).fetchall()]
        if not pk:
            raise LookupError(f"table {t} has no primary key")
        rows = {}
        for (row,) in conn.execute(f"SELECT to_jsonb(x) FROM {t} AS x"):
            rows[tuple(str(row[c]) for c in pk)] = ({c: row[c] for c in pk}, row)
        snap[t] = rows
    sid = len(_FALLBACK) + 1
    _FALLBACK[sid] = snap
    return sid


def _fallback_diff(conn, before, after):
    a, b = _FALLBACK[before], _FALLBACK[after]
    out = []
    for t in a:
        ra, rb = a[t], b.get(t, {})
        d = TableDiff(t)
        d.added = [rb[k][1] for k in rb if k not in ra]
        d.removed = [ra[k][1] for k in ra if k not in rb]
        for k in ra:
            if k in rb and ra[k][1] != rb[k][1]:
                cols = sorted(c for c in set(ra[k][1]) | set(rb[k][1]) if ra[k][1].get(c) != rb[k][1].get(c))
                d.changed.append({"key": ra[k][0], "columns": cols,
                                  "before": {c: ra[k][1].get(c) for c in cols},
                                  "after": {c: rb[k][1].get(c) for c in cols}})
        if not d.empty:
            out.append(d)
    return out


_sql_take, _sql_diff = take, diff


def take(conn, tables):  # noqa: F811
    return _sql_take(conn, tables) if _has_sql(conn) else _fallback_take(conn, tables)


def diff(conn, before, after):  # noqa: F811
    return _sql_diff(conn, before, after) if _has_sql(conn) else _fallback_diff(conn, before, after)
