"""The distributed suite: the schema distributed on a real Citus cluster, checked end to end.

Runs when PYAGENTDB_CITUS_DSN names a database on a Citus coordinator with active workers
(e.g. postgresql://postgres@127.0.0.1:9700/agentdb); every test here is skipped otherwise.
The suite never touches that database itself: it reads the node list from it, creates its
own database on every node (CREATE DATABASE, CREATE EXTENSION citus, workers registered),
installs and distributes agentdb there, and drops it at the end. The connecting role must be
a superuser on every node (it creates databases and terminates backends).

PYAGENTDB_CITUS_DIST_DSN may name a database the suite prepared before (installed,
distributed, with its tables and tools), to skip the preparation.

Every call goes through the tenant-first entry points (user_id first), as a user of Citus
makes it: each is one statement, delegated to the worker that holds the user.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from functools import cache

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from pyagentdb import distribute, install

CITUS_DSN = os.environ.get("PYAGENTDB_CITUS_DSN")
HERE = os.path.dirname(__file__)

# A business table keyed by its owner, as a user of Citus would write it.
REMINDERS_SQL = """
CREATE TABLE public.reminders (
    id bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL,
    content text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 500),
    remind_at timestamptz NOT NULL,
    done boolean NOT NULL DEFAULT false,
    version bigint NOT NULL DEFAULT 1,
    PRIMARY KEY (user_id, id)
);
CREATE INDEX reminders_owner_time_idx ON public.reminders (user_id, remind_at);
COMMENT ON COLUMN public.reminders.content IS '提醒内容 / what to be reminded of';
COMMENT ON COLUMN public.reminders.remind_at IS '提醒时间 / when to remind';
-- A table whose insert can be held in the middle of a call (after the write, before the
-- step and audit rows): the trigger waits while the test holds advisory lock 4242 on the node.
CREATE TABLE public.held (
    id bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL,
    note text NOT NULL,
    PRIMARY KEY (user_id, id)
);
CREATE FUNCTION public.hold_here() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.note = 'hold' THEN
        PERFORM pg_advisory_xact_lock_shared(4242);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER hold_here AFTER INSERT ON public.held FOR EACH ROW EXECUTE FUNCTION public.hold_here();
"""
TOOLS_SQL = """
SELECT agentdb.register_tool(
    name => 'add_reminder', action => 'insert', target => 'public.reminders',
    label_zh => '记一条提醒', label_en => 'set a reminder',
    owner_column => 'user_id', dedup_columns => ARRAY['content', 'remind_at']);
SELECT agentdb.register_tool(
    name => 'edit_reminder', action => 'update', target => 'public.reminders',
    label_zh => '改一条提醒', label_en => 'change a reminder',
    owner_column => 'user_id', version_column => 'version');
SELECT agentdb.register_tool(
    name => 'finish_reminders', action => 'update', target => 'public.reminders',
    label_zh => '把提醒标为已完成', label_en => 'mark reminders as done', owner_column => 'user_id');
SELECT agentdb.register_tool(
    name => 'delete_reminder', action => 'delete', target => 'public.reminders',
    label_zh => '删一条提醒', label_en => 'delete a reminder', owner_column => 'user_id');
SELECT agentdb.register_tool(
    name => 'book_reminder', action => 'insert', target => 'public.reminders',
    label_zh => '预约一条提醒', label_en => 'book a reminder',
    owner_column => 'user_id', needs_confirm => true);
SELECT agentdb.register_tool(
    name => 'add_held', action => 'insert', target => 'public.held',
    label_zh => '记一条', label_en => 'note it', owner_column => 'user_id');
"""
FAR = "2030-11-30 08:00:00+08"


def pytest_collection_modifyitems(config, items):
    if CITUS_DSN:
        return
    skip = pytest.mark.skip(reason="PYAGENTDB_CITUS_DSN is not set: no Citus coordinator to run on")
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(skip)


@dataclass(frozen=True)
class Node:
    host: str
    port: int
    is_coordinator: bool = False


@dataclass
class Cluster:
    """The nodes behind PYAGENTDB_CITUS_DSN and how to reach a database on each."""

    coordinator: Node
    workers: list[Node]
    user: str
    password: str
    made: list[str] = field(default_factory=list)

    def dsn(self, node: Node, dbname: str) -> str:
        return make_conninfo(host=node.host, port=node.port, user=self.user, password=self.password,
                             dbname=dbname)

    @property
    def nodes(self) -> list[Node]:
        return [self.coordinator, *self.workers]

    def connect(self, node: Node, dbname: str, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.dsn(node, dbname), autocommit=True, **kwargs)

    def create_database(self, name: str) -> str:
        """A new database on every node with Citus, the workers registered. Returns its DSN."""
        for node in self.nodes:
            with self.connect(node, "postgres") as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with self.connect(node, name) as conn:
                conn.execute("CREATE EXTENSION citus")
        self.made.append(name)
        with self.connect(self.coordinator, name) as conn:
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)",
                         (self.coordinator.host, self.coordinator.port))
            for worker in self.workers:
                conn.execute("SELECT citus_add_node(%s, %s)", (worker.host, worker.port))
        return self.dsn(self.coordinator, name)

    def drop(self, name: str) -> None:
        for node in self.nodes:
            with self.connect(node, "postgres") as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        self.made.remove(name)

    def drop_all(self) -> None:
        for name in list(self.made):
            self.drop(name)

    def worker_of(self, dbname: str, user_id: str) -> Node:
        """The worker holding this user's shard of agentdb_private.tasks."""
        with self.connect(self.coordinator, dbname) as conn:
            host, port = conn.execute(
                "SELECT p.nodename, p.nodeport FROM pg_dist_shard_placement AS p"
                " WHERE p.shardid = get_shard_id_for_distribution_column('agentdb_private.tasks', %s::text)",
                (user_id,)).fetchone()
        return next(w for w in self.workers if (w.host, w.port) == (host, port))


@cache
def _cluster() -> Cluster:
    info = conninfo_to_dict(CITUS_DSN)
    with psycopg.connect(CITUS_DSN, autocommit=True) as conn:
        if not conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()[0]:
            pytest.exit(f"PYAGENTDB_CITUS_DSN ({CITUS_DSN}) has no Citus extension", returncode=2)
        workers = [Node(h, p) for h, p in conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0"
            " AND isactive ORDER BY nodeid").fetchall()]
        coord = conn.execute("SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0").fetchone()
    coordinator = Node(coord[0], coord[1], True) if coord else Node(
        info.get("host", "localhost"), int(info.get("port") or 5432), True)
    if len(workers) < 2:
        pytest.exit("the distributed suite needs a coordinator with at least two active workers",
                    returncode=2)
    return Cluster(coordinator, workers, info.get("user", "postgres"), info.get("password", ""))


@pytest.fixture(scope="session")
def cluster():
    c = _cluster()
    yield c
    c.drop_all()


@pytest.fixture(scope="session")
def dist(cluster) -> str:
    """DSN of a database with agentdb installed and distributed, and the business tables
    distributed with the users' rows and their tools registered. Shared by the session: tests
    use their own user ids."""
    prepared = os.environ.get("PYAGENTDB_CITUS_DIST_DSN")
    if prepared:  # a database this fixture made before (same tables and tools), kept for speed
        return prepared
    dbname = f"pyagentdb_dist_{os.getpid()}"
    dsn = cluster.create_database(dbname)
    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(REMINDERS_SQL)
    distribute.distribute(dsn, ["public.reminders:user_id", "public.held:user_id"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET citus.enable_unsafe_triggers TO on")
        conn.execute(TOOLS_SQL)
    return dsn


@pytest.fixture
def scratch(cluster):
    """scratch('name') -> the DSN of a new Citus database on every node, dropped after the test."""
    made: list[str] = []

    def make(name: str) -> str:
        full = f"pyagentdb_{name}_{os.getpid()}"
        made.append(full)
        return cluster.create_database(full)

    yield make
    for name in made:
        cluster.drop(name)


@pytest.fixture
def db(dist) -> psycopg.Connection:
    """Owner connection to the coordinator, autocommit (one statement, one transaction)."""
    with psycopg.connect(dist, autocommit=True) as conn:
        yield conn


@pytest.fixture
def user(db) -> str:
    """A fresh user allowed to write and delete, so tests never see each other's rows."""
    name = f"u-{uuid.uuid4().hex[:10]}"
    db.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (name,))
    db.execute("SELECT agentdb.grant_permission(%s, 'DELETE')", (name,))
    return name


def begin(conn, user: str, conversation: str = "c1", *, authenticated: bool = True, lang: str = "en") -> str:
    return conn.execute("SELECT agentdb.begin_task(%s, %s, 'test', authenticated => %s, lang => %s)",
                        (user, conversation, authenticated, lang)).fetchone()[0]


def call(conn, function: str, user: str, task, *args, **named):
    """agentdb.<function>_for(user_id => user, task => task, <named>...) — the tenant-first
    form (begin_task and the permission calls take user_id first under their own name)."""
    params = [("user_id", user), ("task", task)]
    params += [(k, Jsonb(v) if isinstance(v, dict | list) else v) for k, v in named.items()]
    placeholders = ", ".join(f"{k} => %s" for k, _ in params)
    query = f"SELECT agentdb.{function}_for({placeholders})"
    return conn.execute(query, [v for _, v in params]).fetchone()[0]


def invoke(conn, user: str, task, tool: str, args: dict, **named) -> dict:
    return call(conn, "invoke", user, task, tool=tool, args=args, **named)
