"""Turn an installed agentdb schema into a distributed one on a Citus coordinator.

`pyagentdb distribute --dsn <coordinator>` (see docs/scaling.md):

1. refuses anything that is not a Citus coordinator with workers and the agentdb schema at
   head, not yet distributed, and a schema whose keys and entry points cannot be distributed
   (each reason listed: `readiness()` reads them from the catalogue);
2. distributes the tenant tables by `user_id`, co-located with `agentdb_private.tasks`, the
   user's own business tables (``--table public.reminders:user_id``) with them, and makes the
   registry, messages and claim patterns reference tables (a copy on every node);
3. re-applies sql/ and the claim patterns (on Citus statement by statement, see
   install.apply_sql), so that every function, view and trigger exists on every node;
4. distributes every entry point that takes ``user_id`` by that argument, so that a call in
   autocommit is delegated to the worker holding that user's shard.

Nothing here decides an outcome: it only places tables and functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from . import install

TENANT = "user_id"
ROOT = "agentdb_private.tasks"
# Rows that belong to one user: distributed by user_id, co-located with the tasks.
TENANT_TABLES = ("tasks", "steps", "audit", "claims", "replies", "drafts", "actions", "permissions",
                 "approvers", "change_log", "chain_stripes", "chain_pending", "chain_links")
# Tenant tables whose user column has another name (the stripes of each tenant's hash chains).
TENANT_COLUMN = {"chain_stripes": "tenant"}
# Small tables every call reads: one copy on every node.
REFERENCE_TABLES = ("tools", "messages", "claim_rules", "claim_langs", "fact_rules", "sql_tables",
                    "sql_functions")
# Stay on the coordinator only (installer's bookkeeping, exam snapshots, the watch registry,
# run_sql's per-backend scope).
LOCAL_TABLES = ("install_log", "watched", "snapshots", "snapshot_tables", "snapshot_rows", "sql_scope",
                "chain_sealer")


# Sequences that calls delegated to a worker draw from outside any table (the number of a new
# stripe of a tenant's chain): Citus does not copy them, so each worker gets its own. A number
# need only be new within its tenant, whose rows all live on one worker (docs/scaling.md: after
# a shard move, a new stripe may meet a number the tenant has, and the call is refused).
WORKER_SEQUENCES = ("CREATE SEQUENCE IF NOT EXISTS agentdb_private.chain_stripe_seq AS integer",)


class DistributeError(RuntimeError):
    """The database cannot be distributed as asked; the message says why and what to do."""

    def __init__(self, message: str, problems: Iterable[str] = ()):
        self.problems = list(problems)
        super().__init__(message + "".join(f"\n  - {p}" for p in self.problems))


@dataclass
class Result:
    citus_version: str
    workers: int
    distributed: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    business: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    undelegated: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _q(table: str) -> str:
    return f"agentdb_private.{table}"


def column_of(table: str) -> str:
    return TENANT_COLUMN.get(table, TENANT)


def cluster(conn) -> dict:
    """What the server is: Citus or not, coordinator or worker, how many workers, schema state."""
    found = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()
    info = {"citus": found[0] if found else None, "coordinator": None, "workers": 0,
            "revision": install.current_revision(conn), "head": install.head_revision(),
            "distributed": False}
    if not found:
        return info
    info["coordinator"] = conn.execute("SELECT citus_is_coordinator()").fetchone()[0]
    info["workers"] = conn.execute(
        "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 AND isactive"
    ).fetchone()[0]
    info["version"] = conn.execute("SELECT citus_version()").fetchone()[0]
    if info["revision"]:
        info["distributed"] = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass(%s))",
            (ROOT,)).fetchone()[0]
    return info


_ALREADY = "the agentdb schema is already distributed in this database"


def refusal(info: dict) -> str | None:
    """Why this server cannot be distributed at all (before the schema is looked at), or None."""
    if not info["citus"]:
        return ("this server has no Citus extension: distribute runs on a Citus coordinator "
                "(CREATE EXTENSION citus there, add the workers, then run this again)")
    if not info["coordinator"]:
        return "this is a Citus worker, not the coordinator: point --dsn at the coordinator"
    if info["workers"] == 0:
        return ("the coordinator has no active workers: add them first "
                "(SELECT citus_add_node('host', port))")
    if info["revision"] is None:
        return "the agentdb schema is not installed in this database: run pyagentdb install first"
    if info["revision"] != info["head"]:
        return (f"the agentdb schema is at revision {info['revision']}, this package's head is "
                f"{info['head']}: run pyagentdb install first")
    if info["distributed"]:
        return _ALREADY
    return None


# The readiness checks read the catalogue, so they follow the schema as it changes. Each
# tenant table is paired with its user column (x.col).
_TENANTS = "unnest(%(tables)s::text[], %(columns)s::text[]) AS x (relname, col)"
_COLUMNS_SQL = f"""
SELECT c.relname, x.col, a.attname IS NOT NULL, coalesce(a.attnotnull, false)
  FROM {_TENANTS}
  JOIN pg_class AS c ON c.relname = x.relname AND c.relnamespace = 'agentdb_private'::regnamespace
  LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attname = x.col AND NOT a.attisdropped
"""
_UNIQUE_SQL = f"""
SELECT c.relname, x.col, i.indexrelid::regclass::text
  FROM {_TENANTS}
  JOIN pg_class AS c ON c.relname = x.relname AND c.relnamespace = 'agentdb_private'::regnamespace
  JOIN pg_index AS i ON i.indrelid = c.oid
 WHERE i.indisunique
   AND NOT EXISTS (SELECT 1 FROM pg_attribute AS a
                    WHERE a.attrelid = c.oid AND a.attname = x.col AND a.attnum = ANY (i.indkey))
 ORDER BY 1, 3
"""
_FOREIGN_SQL = f"""
SELECT c.relname, k.conname, f.relname
  FROM {_TENANTS}
  JOIN pg_class AS c ON c.relname = x.relname AND c.relnamespace = 'agentdb_private'::regnamespace
  JOIN pg_constraint AS k ON k.conrelid = c.oid AND k.contype = 'f'
  JOIN pg_class AS f ON f.oid = k.confrelid
 WHERE (f.relname = ANY (%(tables)s) AND NOT EXISTS (
            SELECT 1 FROM unnest(k.conkey, k.confkey) AS p (mine, theirs)
              JOIN pg_attribute AS a ON a.attrelid = k.conrelid AND a.attnum = p.mine
              JOIN pg_attribute AS b ON b.attrelid = k.confrelid AND b.attnum = p.theirs
             WHERE a.attname = x.col AND b.attname = %(tenant)s))
        OR NOT (f.relname = ANY (%(tables)s) OR f.relname = ANY (%(reference)s))
 ORDER BY 1, 2
"""
# Entry points routed by a task (or an action) that have no form taking the tenant first (the
# same name, or <name>_for: sql/52_tenant_api.sql).
_ROUTING_SQL = """
SELECT p.oid::regprocedure::text
  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
 WHERE n.nspname = 'agentdb'
   AND (has_function_privilege('agentdb_agent', p.oid, 'EXECUTE')
        OR has_function_privilege('agentdb_app', p.oid, 'EXECUTE'))
   AND NOT %(tenant)s = ANY (coalesce(p.proargnames, '{}'))
   AND ('task' = ANY (coalesce(p.proargnames, '{}')) OR 'action' = ANY (coalesce(p.proargnames, '{}')))
   AND NOT EXISTS (SELECT 1 FROM pg_proc AS q
                    WHERE q.pronamespace = p.pronamespace AND q.proname IN (p.proname, p.proname || '_for')
                      AND q.proargnames[1] = %(tenant)s)
 ORDER BY 1
"""


# Entry points taking user_id, and whether Citus delegates them (distribution argument set).
_ENTRY_POINTS_SQL = """
SELECT p.oid::regprocedure::text
  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
 WHERE n.nspname = 'agentdb' AND %(tenant)s = ANY (coalesce(p.proargnames, '{}'))
   AND (has_function_privilege('agentdb_agent', p.oid, 'EXECUTE')
        OR has_function_privilege('agentdb_app', p.oid, 'EXECUTE'))
   AND EXISTS (SELECT 1 FROM pg_dist_object AS o
                WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid
                  AND o.distribution_argument_index IS NOT NULL) = """


def delegate(conn) -> list[str]:
    """On a distributed schema, delegate by user_id every entry point that takes it and is not
    delegated yet (all of them when distributing; those an upgrade added later). Returns their
    signatures; [] where the tasks are not distributed (one node, or not yet)."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = %s::regclass)",
                        (ROOT,)).fetchone()[0]:
        return []
    done = []
    for (signature,) in conn.execute(_ENTRY_POINTS_SQL + " %(delegated)s ORDER BY 1",
                                     {"tenant": TENANT, "delegated": False}).fetchall():
        conn.execute("SELECT create_distributed_function(%s, %s, colocate_with => %s)",
                     (signature, TENANT, ROOT))
        done.append(signature)
    return done


def _params() -> dict:
    return {"tenant": TENANT, "tables": list(TENANT_TABLES), "columns": [column_of(t) for t in TENANT_TABLES],
            "reference": list(REFERENCE_TABLES)}


def readiness(conn) -> list[str]:
    """What in the installed tables keeps them from being distributed by user, one sentence
    each. Empty when the tables are ready. Needs no Citus: it reads the catalogue only."""
    problems: list[str] = []
    for table, column, has, not_null in conn.execute(_COLUMNS_SQL, _params()).fetchall():
        if not has:
            problems.append(f"{_q(table)} has no {column} column (every tenant row needs its user)")
        elif not not_null:
            problems.append(f"{_q(table)}.{column} may be NULL "
                            "(Citus refuses NULL in the distribution column)")
    for table, column, index in conn.execute(_UNIQUE_SQL, _params()).fetchall():
        problems.append(f"unique index {index} on {_q(table)} does not include {column}")
    for table, name, other in conn.execute(_FOREIGN_SQL, _params()).fetchall():
        problems.append(f"foreign key {name} from {_q(table)} to {_q(other)} does not pair {TENANT}")
    if not conn.execute("SELECT to_regclass('agentdb_private.chain_stripes') IS NOT NULL").fetchone()[0]:
        problems.append("the hash chains append to global stripes (agentdb_private.chain_heads): "
                        "on Citus every call would lock and update a row copied to every node; "
                        "they must be chained per user")
    return problems


def undelegated(conn) -> list[str]:
    """Entry points routed by a task or an action that have no form taking user_id first: on
    Citus they cannot be delegated to the user's worker (their statements find rows by id
    alone, which Citus cannot route), so there they are refused by Citus; one node runs them."""
    return [r[0] for r in conn.execute(_ROUTING_SQL, _params()).fetchall()]


def _views(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c"
        "  JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname IN ('agentdb', 'agentdb_private') AND c.relkind = 'v'").fetchall()]


def parse_table(spec: str) -> tuple[str, str]:
    """'public.reminders:user_id' -> ('public.reminders', 'user_id'); the column defaults to user_id."""
    table, _, column = spec.partition(":")
    if not table.strip():
        raise DistributeError(f"--table {spec!r}: name a table, e.g. public.reminders:user_id")
    return table.strip(), (column.strip() or TENANT)


def check_business_table(conn, table: str, column: str) -> list[str]:
    """Why a user's table cannot be distributed by `column` with the tenants, or []."""
    oid = conn.execute("SELECT to_regclass(%s)::oid", (table,)).fetchone()[0]
    if oid is None:
        return [f"there is no table {table}"]
    problems = []
    has = conn.execute("SELECT attnotnull FROM pg_attribute WHERE attrelid = %s AND attname = %s"
                       " AND NOT attisdropped", (oid, column)).fetchone()
    if has is None:
        return [f"{table} has no column {column}"]
    if not has[0]:
        problems.append(f"{table}.{column} may be NULL (Citus refuses NULL in the distribution column)")
    for (index,) in conn.execute(
            "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_index AS i"
            "  JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE i.indrelid = %s AND i.indisunique"
            " AND NOT EXISTS (SELECT 1 FROM pg_attribute AS a WHERE a.attrelid = i.indrelid"
            " AND a.attname = %s AND a.attnum = ANY (i.indkey)) ORDER BY 1", (oid, column)).fetchall():
        problems.append(f"unique index {index} on {table} does not include {column}: "
                        f"make it ({column}, ...) so each user's rows can live on one shard")
    # Citus copies a table's triggers to its shards, except those that fire on TRUNCATE, and
    # copies their arguments as written (an oid names another table on another node).
    for (name,) in conn.execute(
            "SELECT g.tgname FROM pg_trigger AS g"
            " WHERE g.tgrelid = %s AND NOT g.tgisinternal AND g.tgtype & 32 <> 0 ORDER BY 1",
            (oid,)).fetchall():
        problems.append(f"trigger {name} on {table} fires on TRUNCATE: Citus does not copy such a trigger "
                        "to the shards, so it would not fire there")
    for (name,) in conn.execute(
            "SELECT g.tgname FROM pg_trigger AS g WHERE g.tgrelid = %s AND NOT g.tgisinternal"
            " AND g.tgnargs > 0 AND split_part(encode(g.tgargs, 'escape'), '\\000', 1) = %s::text"
            " ORDER BY 1", (oid, oid)).fetchall():
        problems.append(f"trigger {name} on {table} passes the table's oid as an argument: "
                        "on a worker that oid names another table")
    owners = conn.execute(
        "SELECT string_agg(DISTINCT coalesce(t.owner_column, '(none)'), ', ') FROM agentdb_private.tools AS t"
        " WHERE t.target = %s AND t.owner_column IS DISTINCT FROM %s", (oid, column)).fetchone()[0]
    if owners:
        problems.append(f"tools on {table} take their owner from {owners}, not {column}: "
                        "a call would not stay on the user's shard")
    return problems


def _undistributed_targets(conn, business: list[tuple[str, str]]) -> list[str]:
    given = {conn.execute("SELECT to_regclass(%s)::oid", (t,)).fetchone()[0] for t, _ in business}
    return [f"tool {name} writes {target}, which is neither given with --table nor distributed"
            for name, target, oid in conn.execute(
                "SELECT t.name, t.target::text, t.target::oid FROM agentdb_private.tools AS t"
                " WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition AS p WHERE p.logicalrelid = t.target)"
                " ORDER BY 1").fetchall()
            if oid not in given]


def distribute_table(conn, table: str, column: str = TENANT) -> None:
    """Distribute one business table by its owner column, co-located with the tenants' rows."""
    problems = check_business_table(conn, table, column)
    if problems:
        raise DistributeError(f"cannot distribute {table} by {column}:", problems)
    conn.execute("SET LOCAL citus.enable_unsafe_triggers TO on")  # the watch triggers
    conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)", (table, column, ROOT))


def distribute(dsn: str, tables: Iterable[str] = (), *, progress: Callable[[str], None] | None = None
               ) -> Result:
    """Distribute the installed schema (and the given business tables) on the coordinator at `dsn`.
    One transaction: it raises DistributeError (or the database's error), changing nothing,
    when it cannot."""
    say = progress or (lambda _msg: None)
    business = [parse_table(t) for t in tables]
    with psycopg.connect(dsn, autocommit=True) as conn:
        info = cluster(conn)
        reason = refusal(info)
        if info["distributed"] and business and reason == _ALREADY:
            # A business table created after the schema was distributed.
            result = Result(citus_version=info["version"], workers=info["workers"])
            with conn.transaction():
                for table, column in business:
                    say(f"distributing {table} by {column}")
                    distribute_table(conn, table, column)
                    result.business.append(f"{table}:{column}")
            return result
        if reason:
            raise DistributeError(f"pyagentdb distribute: {reason}")
        result = Result(citus_version=info["version"], workers=info["workers"])
        with conn.transaction():
            conn.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
            conn.execute("SET LOCAL citus.enable_unsafe_triggers TO on")
            # Views are re-created from sql/ below: Citus refuses to distribute a table while a
            # view over it calls a function on its row type, and a view may use the old keys.
            for view in _views(conn):
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {} CASCADE").format(sql.SQL(view)))
            problems = readiness(conn)
            problems += [p for t, c in business for p in check_business_table(conn, t, c)]
            problems += _undistributed_targets(conn, business)
            if problems:
                raise DistributeError(
                    "pyagentdb distribute: this schema cannot be distributed yet (nothing was changed):",
                    problems)
            # Order: the tasks fix the colocation; the business tables must exist on the workers
            # before the registry (whose regclass values name them) is copied there; the
            # permissions' foreign key to the registry needs the registry on every node first.
            # Foreign keys from tenant tables to the registry (permissions.tool) wait until the
            # registry is a reference table: with them, Citus would first turn the tenant table
            # into a "Citus local" one, which it cannot convert again (identity columns).
            to_reference = conn.execute(
                "SELECT k.conrelid::regclass::text, k.conname, pg_get_constraintdef(k.oid)"
                "  FROM pg_constraint AS k WHERE k.contype = 'f'"
                "   AND k.confrelid = ANY (%s::regclass[]) AND k.conrelid = ANY (%s::regclass[])",
                ([_q(t) for t in REFERENCE_TABLES], [_q(t) for t in TENANT_TABLES])).fetchall()
            for table, name, _definition in to_reference:
                conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                    sql.SQL(table), sql.Identifier(name)))
            say(f"distributing {len(TENANT_TABLES)} tenant tables by {TENANT}")
            conn.execute("SELECT create_distributed_table(%s, %s)", (ROOT, TENANT))
            for table in TENANT_TABLES[1:]:
                conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                             (_q(table), column_of(table), ROOT))
            result.distributed = [_q(t) for t in TENANT_TABLES]
            for table, column in business:
                say(f"distributing {table} by {column}")
                distribute_table(conn, table, column)
                result.business.append(f"{table}:{column}")
            for table in REFERENCE_TABLES:
                conn.execute("SELECT create_reference_table(%s)", (_q(table),))
            result.reference = [_q(t) for t in REFERENCE_TABLES]
            for table, name, definition in to_reference:
                conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} ").format(
                    sql.SQL(table), sql.Identifier(name)) + sql.SQL(definition))
            # Every later session (an upgrade re-creates the triggers on the shards); Citus
            # propagates the setting to the workers.
            conn.execute(sql.SQL("ALTER DATABASE {} SET citus.enable_unsafe_triggers = on").format(
                sql.Identifier(conn.info.dbname)))
            say("re-applying sql/ on every node")
            install.apply_sql(conn)  # which delegates the entry points, the tables being distributed
            delegated = conn.execute(_ENTRY_POINTS_SQL + " %(delegated)s ORDER BY 1",
                                     {"tenant": TENANT, "delegated": True}).fetchall()
            result.functions = [r[0] for r in delegated]
            for statement in WORKER_SEQUENCES:
                failed = conn.execute(
                    "SELECT nodename, nodeport, result FROM run_command_on_workers(%s) WHERE NOT success",
                    (statement,)).fetchall()
                if failed:
                    raise DistributeError("pyagentdb distribute: a worker refused a sequence",
                                          [f"{h}:{p}: {r}" for h, p, r in failed])
            result.undelegated = undelegated(conn)
        say(f"{len(result.functions)} entry points delegated by {TENANT}")
    return result


def layout(conn, schema: str = "agentdb_private") -> dict[str, dict]:
    """How each table of a schema is placed: Citus kind, distribution column, colocation, or local."""
    rows = conn.execute(
        "SELECT format('%%I.%%I', n.nspname, c.relname), t.citus_table_type, t.distribution_column,"
        "       t.colocation_id"
        "  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        "  LEFT JOIN citus_tables AS t ON t.table_name = c.oid::regclass"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY 1", (schema,)).fetchall()
    return {name: {"kind": kind or "local", "column": None if column in (None, "<none>") else column,
                   "colocation": colocation}
            for name, kind, column, colocation in rows}
