"""`pyagentdb distribute` on a real cluster: what it refuses, where it puts each table, the
business tables of the user, a tool registered on a distributed table, delegation."""

from __future__ import annotations

import json

import psycopg
from alembic.script import ScriptDirectory

from pyagentdb import cli, distribute, install

from .conftest import begin, call


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_refuses_a_server_without_citus(capsys, dsn):
    """The ordinary test server (no Citus) is refused with the reason, exit 1."""
    code, out, err = run_cli(capsys, "distribute", "--dsn", dsn)
    assert code == 1
    assert "no Citus extension" in err and "coordinator" in err


def test_refuses_a_worker(capsys, cluster, dist):
    worker = cluster.dsn(cluster.workers[0], psycopg.conninfo.conninfo_to_dict(dist)["dbname"])
    code, out, err = run_cli(capsys, "distribute", "--dsn", worker, "--json")
    assert code == 1
    assert "worker, not the coordinator" in json.loads(out)["error"]


def test_refuses_a_database_without_the_schema(capsys, scratch):
    dsn = scratch("empty")
    code, _, err = run_cli(capsys, "distribute", "--dsn", dsn)
    assert code == 1
    assert "not installed" in err and "pyagentdb install" in err


def test_refuses_twice(capsys, dist):
    code, _, err = run_cli(capsys, "distribute", "--dsn", dist)
    assert code == 1
    assert "already distributed" in err


def test_an_unready_schema_is_refused_whole(capsys, scratch):
    """A schema with a key Citus cannot take is refused with every problem, and nothing moved."""
    dsn = scratch("unready")
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE UNIQUE INDEX steps_by_id ON agentdb_private.steps (id)")
        conn.execute("CREATE UNIQUE INDEX claims_by_text ON agentdb_private.claims (claim_text, id)")
    code, out, _ = run_cli(capsys, "distribute", "--dsn", dsn, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["distributed"] is False
    assert set(doc["problems"]) == {
        "unique index agentdb_private.steps_by_id on agentdb_private.steps does not include user_id",
        "unique index agentdb_private.claims_by_text on agentdb_private.claims does not include user_id"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM citus_tables").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pg_views WHERE schemaname = 'agentdb'").fetchone()[0] > 0


def test_check_says_what_is_missing(capsys, scratch):
    dsn = scratch("check")
    install.upgrade(dsn)
    code, out, _ = run_cli(capsys, "distribute", "--check", "--json", "--dsn", dsn)
    doc = json.loads(out)
    assert doc["citus"] and doc["coordinator"] and doc["workers"] >= 2
    assert doc["ready"] is True and doc["problems"] == [] and code == 0
    # What stays on one node is named (the entry points without a user_id-first form).
    assert "agentdb.run_sql(uuid,text,integer,text,text)" in doc["undelegated"]
    assert not any(s.startswith(("agentdb.invoke(", "agentdb.finalize_reply(")) for s in doc["undelegated"])


def test_layout(db):
    placed = distribute.layout(db)
    root = placed[distribute.ROOT]
    assert root["kind"] == "distributed" and root["column"] == "user_id"
    for table in distribute.TENANT_TABLES:
        assert placed[f"agentdb_private.{table}"] == {**root, "column": distribute.column_of(table)}, table
    for table in distribute.REFERENCE_TABLES:
        assert placed[f"agentdb_private.{table}"]["kind"] == "reference", table
    for table in distribute.LOCAL_TABLES:
        assert placed[f"agentdb_private.{table}"]["kind"] == "local", table
    # The shards of the tenant tables are spread over the workers.
    nodes = db.execute("SELECT count(DISTINCT nodeport) FROM citus_shards"
                       " WHERE table_name = 'agentdb_private.tasks'::regclass").fetchone()[0]
    assert nodes >= 2


def test_business_tables_are_colocated(db):
    placed = distribute.layout(db, "public")
    root = distribute.layout(db)[distribute.ROOT]
    assert placed["public.reminders"] == {**root, "column": "user_id"}


def test_business_table_without_the_owner_in_its_key_is_refused(capsys, dist, db):
    db.execute("CREATE TABLE IF NOT EXISTS public.loose (id bigint PRIMARY KEY, user_id text NOT NULL)")
    code, _, err = run_cli(capsys, "distribute", "--dsn", dist, "--table", "public.loose:user_id")
    assert code == 1
    assert "unique index public.loose_pkey on public.loose does not include user_id" in err
    assert db.execute("SELECT count(*) FROM citus_tables WHERE table_name = 'public.loose'::regclass"
                      ).fetchone()[0] == 0


def test_business_table_added_later(capsys, dist, db):
    db.execute("CREATE TABLE IF NOT EXISTS public.later (user_id text NOT NULL, id bigint,"
               " note text, PRIMARY KEY (user_id, id))")
    code, out, _ = run_cli(capsys, "distribute", "--dsn", dist, "--table", "public.later", "--json")
    assert code == 0 and json.loads(out)["business"] == ["public.later:user_id"]
    db.execute("SET citus.enable_unsafe_triggers TO on")
    tool = db.execute("SELECT agentdb.register_tool(name => 'add_later', action => 'insert',"
                      " target => 'public.later', label_zh => '记', label_en => 'note',"
                      " owner_column => 'user_id')").fetchone()[0]
    assert tool["target"] == "public.later"


def test_tool_on_a_distributed_table_resolves_on_every_node(cluster, dist, db):
    """The registry is a reference table: each node's copy names its own table oid."""
    dbname = psycopg.conninfo.conninfo_to_dict(dist)["dbname"]
    for node in cluster.nodes:
        with cluster.connect(node, dbname) as conn:
            ok = conn.execute("SELECT bool_and(t.target = to_regclass('public.reminders'))"
                              " FROM agentdb_private.tools AS t WHERE t.name = 'add_reminder'").fetchone()[0]
            assert ok, node


def _functions(conn) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname LIKE 'agentdb%'").fetchall()}


def test_the_schema_exists_on_every_node(cluster, dist):
    """Every function is on every worker, but those over the coordinator's local snapshot tables;
    the compiled claim patterns (a function load_claim_patterns creates by EXECUTE) are the same."""
    dbname = psycopg.conninfo.conninfo_to_dict(dist)["dbname"]
    compiled = ("SELECT md5(prosrc) FROM pg_proc"
                " WHERE oid = 'agentdb_private.claim_langs_compiled()'::regprocedure")
    with cluster.connect(cluster.coordinator, dbname) as conn:
        want = _functions(conn)
        patterns = conn.execute(compiled).fetchone()[0]
        assert conn.execute("SELECT cardinality(agentdb_private.claim_langs_compiled())").fetchone()[0] >= 2
    for node in cluster.workers:
        with cluster.connect(node, dbname) as conn:
            missing = want - _functions(conn)
            assert conn.execute(compiled).fetchone()[0] == patterns, node
        assert all("snapshot_tables" in f for f in missing), (node, missing)


def remote_commands(db, fn, *args):
    """Run fn(*args) with citus.log_remote_commands on: its result and [(command, node port)]."""
    db.execute("SET citus.log_remote_commands TO on")
    db.execute("SET client_min_messages TO log")
    seen: list[tuple[str, str]] = []
    db.add_notice_handler(lambda d: seen.append((d.message_primary or "", d.message_detail or "")))
    try:
        result = fn(*args)
    finally:
        db.execute("RESET citus.log_remote_commands")
        db.execute("RESET client_min_messages")
    sent = [(m[len("issuing "):], d) for m, d in seen if m.startswith("issuing ")]
    return result, sent


def test_begin_task_is_delegated_to_the_users_worker(cluster, dist, db, user):
    """One statement from the coordinator, sent to exactly the worker holding the user."""
    task, sent = remote_commands(db, begin, db, user)
    calls = [(c, d) for c, d in sent if "begin_task" in c]
    dbname = psycopg.conninfo.conninfo_to_dict(dist)["dbname"]
    home = cluster.worker_of(dbname, user)
    assert len(calls) == 1 and f":{home.port} " in calls[0][1] + " ", sent
    with cluster.connect(home, dbname) as conn:
        found = conn.execute("SELECT count(*) FROM agentdb_private.tasks WHERE id = %s",
                             (task,)).fetchone()[0]
    assert found == 1


def test_install_again_after_distribution(capsys, dist, db):
    """Upgrades keep working on the distributed schema (sql/ is sent statement by statement)."""
    code, out, err = run_cli(capsys, "install", "--force", "--dsn", dist, "--json")
    assert code == 0, err
    assert json.loads(out)["after"] == install.head_revision()
    assert distribute.layout(db)[distribute.ROOT]["kind"] == "distributed"


def test_the_latest_revision_goes_down_and_up_on_a_distributed_schema(scratch):
    """The latest revision is taken back on a distributed schema and applied again, in the one
    transaction that also re-applies sql/ (revision 0016 first altered a distributed table over
    several connections per worker, and the functions re-applied after it then failed)."""
    dsn = scratch("upgrade")
    head = install.head_revision()
    install.upgrade(dsn)
    distribute.distribute(dsn, [])
    install.downgrade(dsn, ScriptDirectory.from_config(install._config()).get_revision(head).down_revision)
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert install.current_revision(conn) == head
        assert distribute.layout(conn)[distribute.ROOT]["kind"] == "distributed"
        assert conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'agentdb_private.tasks'::regclass"
                            ).fetchone()[0] == ["fillfactor=70"]
        task = begin(conn, "u-upgrade")
        verdict = call(conn, "finalize_reply", "u-upgrade", task, model_text="Nothing to do here.")
        assert verdict["verdict"] == "deliver", verdict
