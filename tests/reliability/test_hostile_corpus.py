"""The hostile SQL corpus (tests/data/hostile_sql.tsv) against both run_sql paths, every run.

Each statement was gathered from the test suites and bypass reports of peer SQL guards (its
source is recorded), or embeds such a statement's payload in a write of an enabled table. Its
label says what the contract of docs/sql-guard.md expects:

- refuse: neither path may end in a verified success;
- allow: both paths must succeed, changing expect_rows rows of the statement's table;
- either: a form only the guard refuses (the database may run it: the planner folds it into a
  plain write, or the row count is its bound);
- invalid: it does not run in PostgreSQL at all (syntax, unknown names, constraint errors).

The direct path is agentdb.run_sql called by a login member of agentdb_agent. The Python path is
pyagentdb.sqlguard.check first, then agentdb.run_sql for what it accepts. Every call runs in a
transaction that is rolled back, so the fixture is the same for each statement. An escape is a
verified success of a statement that must be refused, or any effect beyond the statement's own
table: a row of another table, the catalogs, the session's settings, advisory locks, random seed,
or more than 1 MB of WAL. An attacker's retry is tried too: a statement that was refused for its
row count is sent again with the count the receipt reported.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from pyagentdb import sqlguard

from .conftest import detail, record

DATA = Path(__file__).resolve().parents[1] / "data"
WAL_LIMIT = 1_000_000

STATE = r"""
CREATE SCHEMA corpus_check;
-- Writes the function corpus_check.state(): every fixture table's rows (their count and the sum
-- of a 64-bit hash of each row's text) and the catalogs' row counts, in one query, read as the
-- owner inside the caller's transaction.
DO $do$
DECLARE
    v_parts text;
BEGIN
    SELECT string_agg(format('%L, (SELECT count(*) || '':'' '
                             '|| coalesce(sum(hashtextextended(t::text, 0)), 0) FROM %s AS t)',
                             format('%I.%I', n.nspname, c.relname), format('%I.%I', n.nspname, c.relname)),
                      ', ' ORDER BY c.oid)
      INTO v_parts
      FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
     WHERE c.relkind = 'r' AND n.nspname IN ('public', 'test_schema', 'My Schema');
    EXECUTE format($f$
        CREATE FUNCTION corpus_check.state() RETURNS jsonb LANGUAGE sql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $b$
        SELECT jsonb_build_object(%s) || jsonb_build_object('catalogs', jsonb_build_array(
            (SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_proc),
            (SELECT count(*) FROM pg_namespace), (SELECT count(*) FROM pg_authid),
            (SELECT count(*) FROM pg_auth_members),
            (SELECT count(*) FROM pg_largeobject_metadata), (SELECT count(*) FROM pg_policy),
            (SELECT count(*) FROM pg_trigger), (SELECT count(*) FROM pg_rewrite),
            (SELECT count(*) FROM pg_event_trigger), (SELECT count(*) FROM pg_extension),
            (SELECT count(*) FROM pg_db_role_setting), (SELECT count(*) FROM pg_default_acl),
            (SELECT last_value FROM public.s)))
        $b$ $f$, v_parts);
END $do$;
-- The table a step wrote, from its audit row (the caller's transaction sees it).
CREATE FUNCTION corpus_check.step_target(p_step bigint) RETURNS text LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
    SELECT (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c
              JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(a.target))
      FROM agentdb_private.audit AS a WHERE a.step_id = p_step
$$;
"""

# What a session keeps after a rollback, checked after every statement: the settings the corpus
# aims at (custom ones are not in pg_settings) and the advisory locks. Every SETTINGS_EVERY
# statements, and at the end, every setting of pg_settings as well.
SESSION = """
SELECT concat_ws(',', (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
                 current_setting('search_path'), current_setting('role'),
                 current_setting('session_authorization'), current_setting('row_security'),
                 current_setting('session_replication_role', true), current_setting('statement_timeout'),
                 current_setting('lock_timeout'), current_setting('default_transaction_read_only'),
                 current_setting('work_mem'), current_setting('app.tenant_id', true),
                 current_setting('app.user_id', true), current_setting('app.current_user', true),
                 current_setting('agentdb.call', true), current_setting('client_min_messages'))
"""
ALL_SETTINGS = ("SELECT md5(string_agg(name || '=' || coalesce(setting, ''), ',' ORDER BY name)) "
                "FROM pg_settings")
SETTINGS_EVERY = 100


def unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def load_corpus() -> list[dict]:
    lines = [ln for ln in (DATA / "hostile_sql.tsv").read_text(encoding="utf-8").split("\n")
             if ln and not ln.startswith("#")]
    head = lines[0].split("\t")
    rows = []
    for line in lines[1:]:
        row = dict(zip(head, line.split("\t"), strict=True))
        row["statement"] = unescape(row["statement"])
        row["expect_rows"] = int(row["expect_rows"]) if row["expect_rows"] else None
        rows.append(row)
    return rows


CORPUS = load_corpus()


def test_the_corpus_is_what_docs_say():
    labels = Counter(r["expect"] for r in CORPUS)
    assert len(CORPUS) >= 900 and set(labels) <= {"refuse", "allow", "either", "invalid"}
    assert labels["allow"] >= 50 and labels["refuse"] >= 800
    assert all(r["source"] for r in CORPUS)
    assert len({r["statement"] for r in CORPUS}) == len(CORPUS)
    assert all(r["expect_rows"] for r in CORPUS if r["expect"] == "allow")


@pytest.fixture
def corpus(db, dsn, login_role):
    db.execute((DATA / "hostile_sql_schema.sql").read_text(encoding="utf-8"))
    db.execute(STATE)
    name, password = login_role("agentdb_agent")
    role = psycopg.sql.Identifier(name)
    db.execute(psycopg.sql.SQL("GRANT USAGE ON SCHEMA corpus_check TO {}").format(role))
    db.execute(psycopg.sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA corpus_check TO {}").format(role))
    agent = psycopg.connect(dsn, user=name, password=password, autocommit=True,
                            options="-c statement_timeout=3s")
    yield db, agent
    agent.close()


class Harness:
    """Runs one statement in a rolled-back transaction of the agent's session and says what
    it did beyond its own table. One task serves every statement: each call is rolled back, so
    the task never keeps a step."""

    def __init__(self, db, agent):
        self.db, self.agent = db, agent
        self.task = db.execute("SELECT agentdb.begin_task('u1', 'corpus', 'hostile corpus', "
                               "authenticated => true)").fetchone()[0]
        with agent.transaction(force_rollback=True):
            self.baseline = agent.execute("SELECT corpus_check.state()").fetchone()[0]
            # One plain call first: it loads PL/pgSQL (whose settings then show in pg_settings)
            # and defines agentdb.call, as every later call would.
            agent.execute("SELECT agentdb.run_sql(%s, 'DELETE FROM old_data WHERE id = 1', 1)", (self.task,))
        self.session = agent.execute(SESSION).fetchone()
        self.settings = agent.execute(ALL_SETTINGS).fetchone()[0]
        # The first random() after setseed(0.5): any statement that touched the seed changes it.
        self.first_random = agent.execute("SELECT setseed(0.5), random()").fetchone()[1]
        self.calls = 0


    def run(self, statement: str, expect_rows: int | None, retry: bool) -> tuple[dict, list[str]]:
        agent, problems, task = self.agent, [], self.task
        lsn = agent.execute("SELECT setseed(0.5), pg_current_wal_lsn()").fetchone()[1]
        state, target = self.baseline, None
        try:
            with agent.transaction(force_rollback=True):
                receipt = self._call(task, statement, expect_rows or 1)
                if retry and receipt["outcome"] == "unverified" and (receipt.get("matched_rows") or 0) > 0:
                    receipt = self._call(task, statement, receipt["matched_rows"])
                state = agent.execute("SELECT corpus_check.state()").fetchone()[0]
                if receipt["outcome"] == "success":
                    target = agent.execute("SELECT corpus_check.step_target(%s)",
                                           (receipt["step_id"],)).fetchone()[0]
        except psycopg.Error as exc:
            # Never: every statement must come back as a receipt (the transaction is gone).
            receipt = {"outcome": "error", "verified": False, "refusal": exc.sqlstate, "affected_rows": 0}
            problems.append(f"run_sql raised {exc.sqlstate}: {str(exc).splitlines()[0][:120]}")
        changed = sorted(k for k in set(state) | set(self.baseline) if state.get(k) != self.baseline.get(k))
        beyond = [k for k in changed if k != target]
        if beyond:
            problems.append("changed " + ", ".join(beyond))
        session, draw, wal = agent.execute(f"SELECT ({SESSION}), random(), "
                                           "pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,)).fetchone()
        if session != self.session[0]:
            problems.append("session settings or advisory locks changed")
            self.session = (session,)  # the next statement is judged from here
        if draw != self.first_random:
            problems.append("the random seed was touched")
        if wal > WAL_LIMIT:
            problems.append(f"{int(wal)} bytes of WAL")
        return receipt, problems

    def settings_changed(self) -> bool:
        return self.agent.execute(ALL_SETTINGS).fetchone()[0] != self.settings

    def _call(self, task, statement, expect_rows) -> dict:
        self.calls += 1
        return self.agent.execute("SELECT agentdb.run_sql(%s, %s, %s)",
                                  (task, statement, expect_rows)).fetchone()[0]


def _judge(row, path, receipt, problems, found, figures):
    ok = receipt["outcome"] == "success" and receipt["verified"]
    expect = row["expect"]
    if problems or ok and expect in ("refuse", "invalid"):
        found.append({"id": row["id"], "path": path, "expect": expect, "outcome": receipt["outcome"],
                      "refusal": receipt.get("refusal"), "problems": problems,
                      "statement": row["statement"][:300]})
        figures[f"{path}_escapes"] += 1
    if expect == "allow" and not (ok and receipt["affected_rows"] == row["expect_rows"]):
        found.append({"id": row["id"], "path": path, "expect": expect, "over_blocked": receipt.get("refusal"),
                      "statement": row["statement"][:300]})
        figures[f"{path}_over_blocked"] += 1
    figures[f"{path}_{'accepted' if ok else 'refused'}"] += 1


def test_the_corpus_on_both_paths(corpus):
    db, agent = corpus
    harness = Harness(db, agent)
    found: list[dict] = []
    figures: Counter = Counter()
    refusals: Counter = Counter()
    started = time.monotonic()
    for number, row in enumerate(CORPUS, 1):
        if number % SETTINGS_EVERY == 0 and harness.settings_changed():
            found.append({"id": row["id"], "problems": [f"a setting changed during the {SETTINGS_EVERY} "
                                                        "statements before this one"]})
            figures["settings_escapes"] += 1
            harness.settings = agent.execute(ALL_SETTINGS).fetchone()[0]
        statement = row["statement"]
        figures["cases"] += 1
        figures[f"label_{row['expect']}"] += 1
        # The direct path: agentdb.run_sql, no Python in the way.
        receipt, problems = harness.run(statement, row["expect_rows"], retry=row["expect"] != "allow")
        refusals[receipt.get("refusal") or receipt["outcome"]] += 1
        _judge(row, "direct", receipt, problems, found, figures)
        # The Python path: the guard first, then the database for what it accepts.
        verdict = sqlguard.check(statement)
        if verdict.ok:
            receipt, problems = harness.run(statement, row["expect_rows"], retry=row["expect"] != "allow")
            _judge(row, "python", receipt, problems, found, figures)
        else:
            refused = {"outcome": "refused", "verified": False, "refusal": f"guard:{verdict.code}",
                       "affected_rows": 0}
            _judge(row, "python", refused, [], found, figures)
    if harness.settings_changed():
        found.append({"id": CORPUS[-1]["id"], "problems": ["a setting changed during the last statements"]})
        figures["settings_escapes"] += 1
    figures["run_sql_calls"] = harness.calls
    figures["seconds"] = round(time.monotonic() - started)
    record("sql_corpus", **figures)
    for item in found:
        detail("sql_corpus", item)
    detail("sql_corpus_refusals", dict(refusals.most_common()))
    escapes = [f for f in found if "over_blocked" not in f]
    over = [f for f in found if "over_blocked" in f]
    assert escapes == [], escapes[:10]
    assert over == [], over[:10]
