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
    complete: bool = True  # false: the change log does not account for the whole change

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_json(self) -> dict:
        return {"table": self.table, "added": self.added, "removed": self.removed, "changed": self.changed,
                "complete": self.complete}


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
                             list(item.get("changed") or []), item.get("complete", True) is not False))
    return [d for d in out if not d.empty or not d.complete]

