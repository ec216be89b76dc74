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
block that is rolled back, so the fixture is the same for each statement; one server-side call
per statement (corpus_check.attempt) runs it and checks what it left, and two sessions share the
corpus (LANES). Every statement runs on both paths on every run. An escape is a
verified success of a statement that must be refused, or any effect beyond the statement's own
table: a row of another table, the catalogs, the session's settings, advisory locks, random seed,
or more than 1 MB of WAL. An attacker's retry is tried too: a statement that was refused for its
row count is sent again with the count the receipt reported.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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
-- owner inside the caller's transaction. PL/pgSQL, so its plan is made once, not on every call.
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
        CREATE FUNCTION corpus_check.state() RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $b$ BEGIN RETURN (
        SELECT jsonb_build_object(%s) || jsonb_build_object('catalogs', jsonb_build_array(
            (SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_proc),
            (SELECT count(*) FROM pg_namespace), (SELECT count(*) FROM pg_authid),
            (SELECT count(*) FROM pg_auth_members),
            (SELECT count(*) FROM pg_largeobject_metadata), (SELECT count(*) FROM pg_policy),
            (SELECT count(*) FROM pg_trigger), (SELECT count(*) FROM pg_rewrite),
            (SELECT count(*) FROM pg_event_trigger), (SELECT count(*) FROM pg_extension),
            (SELECT count(*) FROM pg_db_role_setting), (SELECT count(*) FROM pg_default_acl),
            (SELECT last_value FROM public.s)))); END
        $b$ $f$, v_parts);
END $do$;
-- The table a step wrote, from its audit row (the caller's transaction sees it).
CREATE FUNCTION corpus_check.step_target(p_step bigint) RETURNS text LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
    SELECT (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class AS c
              JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(a.target))
      FROM agentdb_private.audit AS a WHERE a.step_id = p_step
$$;
-- What a session keeps after a rollback (see SESSION below).
CREATE FUNCTION corpus_check.session() RETURNS text LANGUAGE sql AS $$ {session} $$;
-- One statement through agentdb.run_sql, in one round trip, as the caller (the agent). The call,
-- the attacker's retry and the state check run in a block that is then rolled back (a
-- subtransaction: it undoes what a ROLLBACK would, and releases what the statement locked); what
-- a rollback does not undo is read after it: the session's settings and advisory locks, the
-- random seed (set just before), the WAL written, and, when p_settings, every setting of
-- pg_settings (by its hash: reading them all costs as much as the call).
CREATE FUNCTION corpus_check.attempt(p_task uuid, p_statement text, p_expect integer, p_retry boolean,
                                     p_settings boolean)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_lsn pg_lsn;
    v_receipt jsonb;
    v_state jsonb;
    v_target text;
    v_error text;
    v_calls integer := 1;
BEGIN
    PERFORM setseed(0.5);
    v_lsn := pg_current_wal_lsn();
    BEGIN
        v_receipt := agentdb.run_sql(p_task, p_statement, p_expect);
        IF p_retry AND v_receipt ->> 'outcome' = 'unverified'
           AND coalesce((v_receipt ->> 'matched_rows')::bigint, 0) > 0 THEN
            v_calls := 2;
            v_receipt := agentdb.run_sql(p_task, p_statement, (v_receipt ->> 'matched_rows')::integer);
        END IF;
        v_state := corpus_check.state();
        IF v_receipt ->> 'outcome' = 'success' THEN
            v_target := corpus_check.step_target((v_receipt ->> 'step_id')::bigint);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'CK001';
    EXCEPTION
        WHEN SQLSTATE 'CK001' THEN NULL;
        WHEN query_canceled OR others THEN  -- never: every statement must come back as a receipt
            v_error := SQLSTATE || ': ' || split_part(SQLERRM, E'\n', 1);
    END;
    RETURN jsonb_build_object(
        'receipt', v_receipt, 'state', v_state, 'target', v_target, 'error', v_error, 'calls', v_calls,
        'session', corpus_check.session(), 'random', random(),
        'wal', pg_wal_lsn_diff(pg_current_wal_lsn(), v_lsn),
        'settings', CASE WHEN p_settings THEN (
            SELECT md5(string_agg(name || '=' || coalesce(setting, ''), ',' ORDER BY name))
              FROM pg_settings) END);
END
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
STATE = STATE.replace("{session}", SESSION.strip())
SETTINGS_EVERY = 100
# Sessions that share the corpus (each its own task and its own checks): on a 2-core machine
# two run it in about half the time. Nothing is committed, so they cannot see each other's rows;
# a write of the same row waits for the other's rollback. Each session acts for its own user (the
# fixture's tables are shared, with no owner column), so no per-user lock is shared either.
LANES = 2
USERS = ("u1", "u2")


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
    """The fixture schema, the state functions, and connect(): a new session of one login member
    of agentdb_agent."""
    db.execute((DATA / "hostile_sql_schema.sql").read_text(encoding="utf-8"))
    db.execute(STATE)
    for user in USERS[1:LANES]:  # the fixture grants u1's permissions
        db.execute("SELECT agentdb.grant_permission(%s, 'WRITE'), agentdb.grant_permission(%s, 'DELETE')",
                   (user, user))
    name, password = login_role("agentdb_agent")
    role = psycopg.sql.Identifier(name)
    db.execute(psycopg.sql.SQL("GRANT USAGE ON SCHEMA corpus_check TO {}").format(role))
    db.execute(psycopg.sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA corpus_check TO {}").format(role))
    sessions: list[psycopg.Connection] = []

    def connect() -> psycopg.Connection:
        sessions.append(psycopg.connect(dsn, user=name, password=password, autocommit=True,
                                        options="-c statement_timeout=3s"))
        return sessions[-1]

    yield db, connect
    for session in sessions:
        session.close()


class Harness:
    """Runs one statement in a rolled-back transaction of the agent's session and says what it
    did beyond its own table: one round trip (corpus_check.attempt). One task serves every
    statement: each call is rolled back, so the task never keeps a step."""

    def __init__(self, db, agent, user: str):
        self.db, self.agent = db, agent
        self.task = db.execute("SELECT agentdb.begin_task(%s, 'corpus', 'hostile corpus', "
                               "authenticated => true)", (user,)).fetchone()[0]
        with agent.transaction(force_rollback=True):
            self.baseline = agent.execute("SELECT corpus_check.state()").fetchone()[0]
        # One plain call first: it loads PL/pgSQL (whose settings then show in pg_settings) and
        # defines agentdb.call, as every later call would. Then a call that changes nothing gives
        # the session, the settings and the first random() after setseed(0.5) to compare with.
        self._attempt("DELETE FROM old_data WHERE id = 1", 1, False)
        quiet = self._attempt("SELECT 1", 1, False, settings=True)
        assert quiet["receipt"]["refusal"] == "sql_not_dml" and quiet["state"] == self.baseline, quiet
        self.session, self.settings, self.first_random = quiet["session"], quiet["settings"], quiet["random"]
        self.calls = 0
        self.max_wal = 0

    def _attempt(self, statement: str, expect_rows: int, retry: bool, settings: bool = False) -> dict:
        return self.agent.execute("SELECT corpus_check.attempt(%s, %s, %s, %s, %s)",
                                  (self.task, statement, expect_rows, retry, settings)).fetchone()[0]

    def run(self, statement: str, expect_rows: int | None, retry: bool,
            settings: bool = False) -> tuple[dict, list[str]]:
        """settings: compare every setting of pg_settings too (a change since the last time)."""
        done = self._attempt(statement, expect_rows or 1, retry, settings)
        self.calls += done["calls"]
        receipt, state, problems = done["receipt"], done["state"], []
        if done["error"]:
            receipt = {"outcome": "error", "verified": False, "refusal": done["error"][:5],
                       "affected_rows": 0}
            problems.append(f"run_sql raised {done['error'][:120]}")
            state = self.baseline  # rolled back with the call; nothing to compare
        changed = sorted(k for k in set(state) | set(self.baseline) if state.get(k) != self.baseline.get(k))
        beyond = [k for k in changed if k != done["target"]]
        if beyond:
            problems.append("changed " + ", ".join(beyond))
        if done["session"] != self.session:
            problems.append("session settings or advisory locks changed")
            self.session = done["session"]  # the next statement is judged from here
        if settings and done["settings"] != self.settings:
            problems.append(f"a setting of pg_settings changed (since {SETTINGS_EVERY} statements before)")
            self.settings = done["settings"]
        if done["random"] != self.first_random:
            problems.append("the random seed was touched")
        self.max_wal = max(self.max_wal, int(done["wal"]))
        if done["wal"] > WAL_LIMIT:
            problems.append(f"{int(done['wal'])} bytes of WAL")
        return receipt, problems


def _cpu_ms(conn) -> int:
    """CPU time of a session's server process so far (0 if the server is not on this machine)."""
    try:
        fields = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0


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
    db, connect = corpus
    started = time.monotonic()
    # The Python path's first step, the guard, for every statement; then each statement to the
    # database on the direct path, and again on the Python path when the guard accepted it.
    guard = sqlguard.Guard(db)  # the database's allow-list, read once and kept
    verdicts = [guard.check(row["statement"]) for row in CORPUS]
    jobs = [(i, path) for i, verdict in enumerate(verdicts)
            for path in ("direct", "python") if path == "direct" or verdict.ok]
    harnesses = [Harness(db, connect(), USERS[n]) for n in range(LANES)]
    results: dict[tuple[int, str], tuple[dict, list[str]]] = {}

    def lane(number: int) -> None:
        mine = jobs[number::LANES]
        for n, (i, path) in enumerate(mine, 1):
            row = CORPUS[i]
            results[i, path] = harnesses[number].run(
                row["statement"], row["expect_rows"], retry=row["expect"] != "allow",
                settings=n % SETTINGS_EVERY == 0 or n == len(mine))

    client_cpu = time.process_time()
    with ThreadPoolExecutor(LANES) as pool:
        list(pool.map(lane, range(LANES)))  # re-raises what a lane raised
    client_cpu = time.process_time() - client_cpu

    found: list[dict] = []
    figures: Counter = Counter()
    refusals: Counter = Counter()
    for i, row in enumerate(CORPUS):
        figures["cases"] += 1
        figures[f"label_{row['expect']}"] += 1
        receipt, problems = results[i, "direct"]
        refusals[receipt.get("refusal") or receipt["outcome"]] += 1
        _judge(row, "direct", receipt, problems, found, figures)
        if verdicts[i].ok:
            receipt, problems = results[i, "python"]
            _judge(row, "python", receipt, problems, found, figures)
        else:
            refused = {"outcome": "refused", "verified": False, "refusal": f"guard:{verdicts[i].code}",
                       "affected_rows": 0}
            _judge(row, "python", refused, [], found, figures)
    figures["run_sql_calls"] = sum(h.calls for h in harnesses)
    figures["max_wal_bytes"] = max(h.max_wal for h in harnesses)
    # Work done, which load does not change much (wall time it does): the sessions' server
    # processes (when the server runs on this machine) and this process, in CPU milliseconds.
    figures["server_cpu_ms"] = sum(_cpu_ms(h.agent) for h in harnesses)
    figures["client_cpu_ms"] = round(client_cpu * 1000)
    figures["seconds"] = round(time.monotonic() - started)
    record("sql_corpus", **figures)
    for item in found:
        detail("sql_corpus", item)
    detail("sql_corpus_refusals", dict(refusals.most_common()))
    escapes = [f for f in found if "over_blocked" not in f]
    over = [f for f in found if "over_blocked" in f]
    assert escapes == [], escapes[:10]
    assert over == [], over[:10]
