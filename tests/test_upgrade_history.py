"""Every landed schema upgrades to head with its data intact, and works after.

For every commit of this branch's history that changed migrations/ (from `git log`), the last
commit before each of those (the final state of the revision it replaced), and the five installs
named in issue 14: the commit's own code (`git archive` into a temporary directory, run in a
subprocess with PYTHONPATH pointing there) installs its schema into a new database on the test
server; tasks, steps, replies, drafts, watched tables, snapshots and agent SQL are added through
the SQL API of that commit; today's code upgrades it to head. Then: every row is still there, the
tables and views are the head's (doctor, and pg_dump against a fresh install), and a turn, a
draft made before the upgrade, snapshots and diffs of a watched and an unwatched table, and the
hash chains all work.

Commits whose migrations/, sql/ and installer are identical to another's are installed once.
Without git history (a tarball, a shallow clone) the test is skipped with the reason.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from schema_tools import schema_dump

from pyagentdb import doctor, install

ROOT = Path(__file__).resolve().parent.parent
# Installs that issue 14 found broken (or, b0cd326, working) after an upgrade.
NAMED = ("f6b504a", "8d43fc3", "4dfb9a8", "b3df47a", "b0cd326")
# What an old install needs of its own tree (the installer, its SQL and its revisions).
TREES = ("migrations", "sql", "pyagentdb/install.py", "pyagentdb/resources.py")
# Tables whose rows are derived or replaced by an install, not user data.
DERIVED = ("agentdb_private.claim_langs", "agentdb_private.claim_rules", "agentdb_private.fact_rules",
           "agentdb_private.install_log",
           "agentdb_private.messages")  # the catalogue: shipped by the package, replaced by an install
# Tables a revision drops by design: the lock rows of the global chain stripes, unused since 0011 (0014).
DROPPED = ("agentdb_private.chain_heads",)
# Tables where revision 0014 gives rows of no user '' where they had NULL (Citus needs a value).
NO_USER = ("agentdb_private.audit", "agentdb_private.change_log")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _plan() -> tuple[list, str | None]:
    """[(short sha, why it is tested, sha of an identical install or None)], or a skip reason."""
    if _git("rev-parse", "--is-inside-work-tree") != "true":
        return [], "no git repository here: the landed history cannot be read"
    changed = (_git("log", "--format=%H", "--", "migrations/") or "").split()
    if not changed or all(_git("cat-file", "-e", f"{sha}^") is None for sha in changed):
        return [], "the git history of migrations/ is absent (a shallow clone?)"
    head = _git("rev-parse", "HEAD")
    wanted: dict[str, str] = {}
    for sha in changed:
        wanted.setdefault(sha, "changed migrations/")
        parent = _git("rev-parse", "--verify", "--quiet", f"{sha}^")
        if parent:
            wanted.setdefault(parent, "the last commit before a change of migrations/")
    for short in NAMED:
        sha = _git("rev-parse", "--verify", "--quiet", f"{short}^{{commit}}")
        if sha and _git("merge-base", "--is-ancestor", sha, "HEAD") is not None:
            wanted[sha] = "named in issue 14"
    order = sorted(wanted, key=lambda sha: int(_git("log", "-1", "--format=%ct", sha)))
    keys = {sha: tuple(_git("rev-parse", "--verify", "--quiet", f"{sha}:{tree}") for tree in TREES)
            for sha in order}
    first: dict[tuple, str] = {}  # one install per distinct tree; the named commits are the ones run
    for sha in sorted(order, key=lambda sha: wanted[sha] != "named in issue 14"):
        first.setdefault(keys[sha], sha[:7])
    plan = []
    for sha in order:
        if sha == head:
            continue  # today's code: the other tests install it
        if keys[sha][2] is None:  # no pyagentdb/install.py: nothing of its own could install it
            plan.append((sha[:7], wanted[sha] + "; no installer at this commit", None))
            continue
        same = first[keys[sha]]
        plan.append((sha[:7], wanted[sha], None if same == sha[:7] else same))
    return plan, None


PLAN, NO_HISTORY = _plan()


def _params():
    if NO_HISTORY:
        return [pytest.param(None, id="no-history", marks=pytest.mark.skip(reason=NO_HISTORY))]
    params = []
    for short, why, same_as in PLAN:
        marks = []
        if "no installer" in why:
            marks.append(pytest.mark.skip(reason=f"{short}: {why}"))
        elif same_as:
            marks.append(pytest.mark.skip(reason=f"{short} installs exactly what {same_as} installs"))
        params.append(pytest.param(short, id=short, marks=marks))
    return params


@pytest.fixture(scope="module")
def server(postgresql_noproc) -> str:
    """Admin DSN of the test server (each commit gets its own database on it)."""
    p = postgresql_noproc
    return make_conninfo(host=p.host, port=p.port, user=p.user, password=p.password or "", dbname="postgres")


def _database(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(
            psycopg.sql.Identifier(name)))
    return make_conninfo(server, dbname=name)


def _drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))


@pytest.fixture(scope="module")
def head_dump(server) -> str:
    """pg_dump of a fresh install of today's head, taken once for every commit."""
    dsn = _database(server, "hist_head")
    try:
        install.upgrade(dsn)
        return schema_dump(dsn, grants_in_order=False)
    finally:
        _drop(server, "hist_head")


def _checkout(sha: str, where: Path) -> Path:
    """The commit's installer, SQL and revisions (what `pip install` of that commit held)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha,
                              "pyagentdb", "sql", "migrations"], capture_output=True, check=True, timeout=60)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    return where


def _old_install(checkout: Path, dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYAGENTDB_", "PYTHON"))}
    env["PYTHONPATH"] = str(checkout)
    script = "import sys; from pyagentdb import install; install.upgrade(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", script, dsn], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=180)
    assert done.returncode == 0, f"the commit's own install failed:\n{done.stderr[-3000:]}"
    assert str(checkout) in subprocess.run(
        [sys.executable, "-c", "import pyagentdb; print(pyagentdb.__file__)"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=60).stdout


def _has(conn, name: str) -> bool:
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = %s"
                        " AND pronamespace = 'agentdb'::regnamespace)", (name,)).fetchone()[0]


def _one(conn, sql: str, params=()):
    return conn.execute(sql, params).fetchone()[0]


SEED_TABLES = """
CREATE TABLE public.hist_notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                user_id text NOT NULL, body text NOT NULL);
CREATE TABLE public.hist_courts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                 user_id text NOT NULL, court text NOT NULL);
CREATE TABLE public.hist_plain (id int PRIMARY KEY, v text);
CREATE TABLE public.hist_sql (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                              user_id text NOT NULL, note text NOT NULL);
INSERT INTO public.hist_plain VALUES (1, 'a'), (2, 'b');
SELECT agentdb.register_tool(name => 'hist_note', action => 'insert', target => 'public.hist_notes',
    label_zh => '记笔记', label_en => 'save a note', owner_column => 'user_id',
    dedup_columns => ARRAY['body']);
SELECT agentdb.grant_permission('u1', 'WRITE');
"""


def _task(conn, user: str, conversation: str, *, authenticated: bool = True):
    return _one(conn, "SELECT agentdb.begin_task(%s, %s, 'history', authenticated => %s, lang => 'en')",
                (user, conversation, authenticated))


def _invoke(conn, task, tool: str, args: dict, call_id: str | None = None) -> dict:
    return _one(conn, "SELECT agentdb.invoke(%s, %s, %s, call_id => %s)", (task, tool, Jsonb(args), call_id))


def _seed(conn) -> dict:
    """Data of every kind this commit's SQL API can make; what later checks need to know."""
    seeded: dict = {}
    conn.execute(SEED_TABLES)
    gate = _has(conn, "finalize_reply")
    t1 = _task(conn, "u1", "c1")
    first = _invoke(conn, t1, "hist_note", {"body": "before"}, call_id="k1")
    assert first["outcome"] == "success" and first["verified"] is True, first
    assert _invoke(conn, t1, "hist_note", {"body": "before"})["outcome"] == "duplicate"
    assert _invoke(conn, t1, "no_such_tool", {})["outcome"] == "refused"
    if gate:
        _one(conn, "SELECT agentdb.report_text(%s)", (t1,))
        _one(conn, "SELECT agentdb.finalize_reply(%s, %s)", (t1, 'I saved the note "before".'))
    _one(conn, "SELECT agentdb.finish_task(%s)", (t1,))
    t2 = _task(conn, "guest", "c2", authenticated=False)
    assert _invoke(conn, t2, "hist_note", {"body": "guest"})["outcome"] == "refused"
    if gate:
        _one(conn, "SELECT agentdb.finalize_reply(%s, %s)", (t2, "Done, I've saved your note."))
    _one(conn, "SELECT agentdb.finish_task(%s)", (t2,))

    if _has(conn, "propose") and gate:
        conn.execute("SELECT agentdb.register_tool(name => 'hist_court', action => 'insert',"
                     " target => 'public.hist_courts', label_zh => '订场地', label_en => 'book a court',"
                     " owner_column => 'user_id', needs_confirm => true)")
        for number, court in ((1, "3"), (2, "4")):  # draft 1 confirmed now, draft 2 after the upgrade
            task = _task(conn, "u1", "c3")
            draft = _one(conn, "SELECT agentdb.propose(%s, 'hist_court', %s)",
                         (task, Jsonb({"court": court})))
            assert draft["outcome"] == "proposed" and draft["ordinal"] == number, draft
            _one(conn, "SELECT agentdb.finalize_reply(%s, %s)",
                 (task, f"Draft {number}: court {court}. Reply to confirm."))
            _one(conn, "SELECT agentdb.finish_task(%s)", (task,))
            if number == 1:
                task = _task(conn, "u1", "c3")
                assert _one(conn, "SELECT agentdb.confirm(%s, '1')", (task,))["outcome"] == "success"
                _one(conn, "SELECT agentdb.finish_task(%s)", (task,))
        seeded["pending_draft"] = "2"
    if _has(conn, "snapshot"):
        seeded["old_snapshot"] = _one(
            conn, "SELECT agentdb.snapshot(ARRAY['public.hist_notes', 'public.hist_plain']::regclass[])")
    if _has(conn, "run_sql"):
        conn.execute("SELECT agentdb.allow_sql('public.hist_sql', owner_column => 'user_id')")
        task = _task(conn, "u1", "c6")
        seeded["run_sql"] = _one(conn, "SELECT agentdb.run_sql(%s, %s, 1)",
                                 (task, "INSERT INTO public.hist_sql (note) VALUES ('by sql')"))
        _one(conn, "SELECT agentdb.finish_task(%s)", (task,))
    return seeded


def _tables(conn) -> list[str]:
    return [r[0] for r in conn.execute("""
        SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname IN ('agentdb_private', 'public') AND c.relkind IN ('r', 'p')
           AND c.relname NOT LIKE 'agentdb\\_alembic%%' ORDER BY 1""") if r[0] not in DERIVED + DROPPED]


def _rows(conn) -> dict[str, list]:
    def row(table: str) -> str:
        if table in NO_USER:
            return """CASE WHEN to_jsonb(x) -> 'user_id' = 'null' THEN to_jsonb(x) || '{"user_id": ""}'
                           ELSE to_jsonb(x) END"""
        return "to_jsonb(x)"
    return {table: _one(conn, f"SELECT coalesce(jsonb_agg({row(table)}), '[]') FROM {table} AS x")
            for table in _tables(conn)}


def _lost(conn, before: dict[str, list]) -> dict[str, list]:
    """Rows of `before` that no row of today's table contains (new columns may be added)."""
    lost = {}
    for table, rows in before.items():
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            lost[table] = rows
            continue
        missing = _one(conn, f"""
            SELECT coalesce(jsonb_agg(o.value), '[]') FROM jsonb_array_elements(%s) AS o
             WHERE NOT EXISTS (SELECT 1 FROM {table} AS x WHERE to_jsonb(x) @> o.value)""", (Jsonb(rows),))
        if missing:
            lost[table] = missing
    return lost


def _smoke(conn, seeded: dict) -> None:
    """Today's API on the upgraded database: a turn, the old draft, snapshots and diffs, chains."""
    task = _task(conn, "u1", "c9")
    receipt = _invoke(conn, task, "hist_note", {"body": "after"}, call_id="k9")
    assert receipt["outcome"] == "success" and receipt["verified"] is True, receipt
    assert "Tools are closed" in _one(conn, "SELECT agentdb.report_text(%s)", (task,))
    verdict = _one(conn, "SELECT agentdb.finalize_reply(%s, %s)", (task, 'I saved the note "after".'))
    assert verdict["verdict"] == "deliver", verdict
    assert _one(conn, "SELECT agentdb.finish_task(%s)", (task,)) == "success"
    liar = _task(conn, "u1", "c10")
    assert _one(conn, "SELECT agentdb.finalize_reply(%s, %s)",
                (liar, "I've saved a note for you."))["verdict"] == "replace"

    if "pending_draft" in seeded:  # proposed and shown before the upgrade, confirmed after it
        task = _task(conn, "u1", "c3")
        confirmed = _one(conn, "SELECT agentdb.confirm(%s, %s)", (task, seeded["pending_draft"]))
        assert confirmed["outcome"] == "success" and confirmed["verified"] is True, confirmed
        _one(conn, "SELECT agentdb.finish_task(%s)", (task,))

    conn.execute("SELECT agentdb.watch('public.hist_notes')")
    tables = "ARRAY['public.hist_notes', 'public.hist_plain']::regclass[]"
    s1 = _one(conn, f"SELECT agentdb.snapshot({tables})")
    task = _task(conn, "u1", "c11")
    assert _invoke(conn, task, "hist_note", {"body": "diffed"})["outcome"] == "success"
    _one(conn, "SELECT agentdb.finish_task(%s)", (task,))
    conn.execute("INSERT INTO public.hist_plain VALUES (3, 'c')")
    s2 = _one(conn, f"SELECT agentdb.snapshot({tables})")
    modes = dict(conn.execute("SELECT table_name, mode FROM agentdb.snapshots WHERE snapshot_id = %s", (s2,)))
    assert modes == {"public.hist_notes": "log", "public.hist_plain": "rows"}, modes
    diff = {d["table"]: d for d in _one(conn, "SELECT agentdb.diff(%s, %s)", (s1, s2))}
    assert [r["body"] for r in diff["public.hist_notes"]["added"]] == ["diffed"], diff
    assert [r["id"] for r in diff["public.hist_plain"]["added"]] == [3], diff
    assert all(d["complete"] for d in diff.values()), diff
    if "old_snapshot" in seeded:  # a snapshot taken before the upgrade still diffs
        old = {d["table"]: d for d in _one(conn, "SELECT agentdb.diff(%s, %s)", (seeded["old_snapshot"], s2))}
        assert 3 in [r["id"] for r in old["public.hist_plain"]["added"]], old

    assert _one(conn, "SELECT agentdb.verify_audit_chain()") is None
    assert _one(conn, "SELECT agentdb.verify_change_chain()") is None


@pytest.mark.parametrize("commit", _params())
def test_landed_install_upgrades_to_head(commit, server, head_dump, tmp_path):
    name = f"hist_{commit}"
    dsn = _database(server, name)
    try:
        _old_install(_checkout(commit, tmp_path / commit), dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            old_revision = install.current_revision(conn)
            seeded = _seed(conn)
            before = _rows(conn)
        install.upgrade(dsn)  # today's code
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert install.current_revision(conn) == install.head_revision()
            assert _lost(conn, before) == {}, f"rows lost upgrading from {commit} ({old_revision})"
            report = doctor.check(conn)
            assert report["ok"], report["problems"]
        assert schema_dump(dsn, grants_in_order=False) == head_dump
        with psycopg.connect(dsn, autocommit=True) as conn:
            _smoke(conn, seeded)
    finally:
        _drop(server, name)


def test_the_named_installs_are_in_the_plan():
    if NO_HISTORY:
        pytest.skip(NO_HISTORY)
    planned = {short for short, _, _ in PLAN}
    present = {s for s in NAMED if _git("rev-parse", "--verify", "--quiet", f"{s}^{{commit}}")}
    assert present <= planned, present - planned
