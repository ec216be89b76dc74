"""Run scenarios against an agent, each run in a database of its own.

Per exam: one template database with the agentdb schema installed. Per run: a
database cloned from it, the scenario's setup, a snapshot of the watched
tables, the agent's turn (begin_task, tool calls through agentdb.invoke, the
report, finalize_reply through the gate, finish_task), a second snapshot, the
database's diff, the assertions, and the judgement. The run's database is
dropped afterwards unless asked to keep it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..client import Client
from . import snapshot
from .agents import ExamContext
from .judge import ERROR, FALSE_COMPLETION, PARTIAL_OR_WRONG, AssertionResult, judge
from .scenario import Assertion, Scenario, ScenarioError

BOOL_OID = 16


@dataclass
class RunResult:
    scenario: str
    run: int
    cls: str
    passed: bool
    reply: str = ""
    claimed: bool = False
    claims: list = field(default_factory=list)
    verdict: str | None = None
    delivered: str | None = None
    pending: list = field(default_factory=list)
    gate_missed: bool = False  # a false claim reached the user (the gate delivered it)
    task_status: str | None = None
    calls: list[dict] = field(default_factory=list)
    diff: list[dict] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    extra: list[dict] = field(default_factory=list)
    assertions: list[dict] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    database: str | None = None

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"class": self.cls}


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


def _pg_message(exc: psycopg.Error) -> str:
    diag = getattr(exc, "diag", None)
    text = (diag.message_primary if diag and diag.message_primary else str(exc)).strip()
    if diag and diag.message_hint:
        text += f" (hint: {diag.message_hint})"
    return text


def run_assertion(conn: psycopg.Connection, a: Assertion) -> AssertionResult:
    """One boolean column: passes when every returned row is true (and there is one). Any other shape:
    the rows returned are the failures (no rows = pass). Runs in a transaction that is rolled back."""
    with conn.transaction(force_rollback=True), conn.cursor() as cur:
        cur.execute(a.sql)
        if cur.description is None:
            raise ValueError("is not a query (it returned no result set)")
        rows = cur.fetchall()
        cols = [d.name for d in cur.description]
        if len(cols) == 1 and cur.description[0].type_code == BOOL_OID:
            values = [r[0] for r in rows]
            ok = bool(values) and all(v is True for v in values)
            bad = [v for v in values if v is not True]
            return AssertionResult(a.name, ok, [] if ok else bad[:5] or [None], 0 if ok else max(len(bad), 1))
        failures = [jsonable(dict(zip(cols, r, strict=True))) for r in rows]
        return AssertionResult(a.name, not failures, failures[:20], len(failures))


class Exam:
    """Runs scenarios against one server; `dsn` must be allowed to create databases."""

    def __init__(self, dsn: str, *, keep: bool = False,
                 progress: Callable[[int, int, Scenario, int, RunResult | None], None] | None = None):
        self.dsn = dsn
        self.keep = keep
        self.progress = progress
        self.prefix = f"agentdb_exam_{uuid.uuid4().hex[:8]}"
        self.template: str | None = None

    # -- databases ------------------------------------------------------------------
    def _dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def _create(self, name: str, template: str | None = None) -> None:
        with self._admin() as conn:
            query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template))
            conn.execute(query)

    def _drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def __enter__(self) -> Exam:
        name = f"{self.prefix}_tpl"
        self._create(name)
        self.template = name
        try:
            from .. import install  # alembic: imported when an exam runs, not with the CLI

            install.upgrade(self._dsn_for(name))
        except Exception:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.template:
            self._drop(self.template)
            self.template = None

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one run ------------------------------------------------------------------------
    def _resolve(self, conn: psycopg.Connection, scenario: Scenario, key: str, table: str) -> str:
        try:
            return snapshot.qualified(conn, table)
        except LookupError as exc:
            raise scenario.error(key, f"{exc} after setup") from None

    def _prepare(self, conn: psycopg.Connection, scenario: Scenario, client: Client):
        try:
            conn.execute(scenario.setup)
        except psycopg.Error as exc:
            raise scenario.error("setup", _pg_message(exc)) from None
        registered = client.tools()
        names = {t["name"] for t in registered}
        for i, tool in enumerate(scenario.tools or ()):
            if tool not in names:
                known = ", ".join(sorted(names)) or "none"
                raise scenario.error(f"tools[{i}]", f"no tool {tool!r} is registered after setup "
                                     f"(registered: {known})")
        offered = [t for t in registered if scenario.tools is None or t["name"] in scenario.tools]
        specs = {self._resolve(conn, scenario, f'changes."{c.table}"', c.table): c for c in scenario.changes}
        for table, spec in specs.items():
            if spec.columns:
                have = {r[0] for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                    "AND NOT attisdropped", (table,))}
                for col in spec.columns:
                    if col not in have:
                        raise scenario.error(f'changes."{spec.table}".columns',
                                             f"{table} has no column {col!r}")
        unchanged = [self._resolve(conn, scenario, f"unchanged[{i}]", t)
                     for i, t in enumerate(scenario.unchanged)]
        if scenario.watch:
            watch = [self._resolve(conn, scenario, f"watch[{i}]", t) for i, t in enumerate(scenario.watch)]
        else:
            watch = [self._resolve(conn, scenario, "tools", str(t["target"])) for t in offered]
        watched = list(dict.fromkeys([*specs, *unchanged, *watch]))
        if not watched:
            raise scenario.error("watch", "no table to watch: name tables in watch, unchanged or changes")
        for i, a in enumerate(scenario.assertions):
            try:
                run_assertion(conn, a)
            except (psycopg.Error, ValueError) as exc:
                msg = _pg_message(exc) if isinstance(exc, psycopg.Error) else str(exc)
                raise scenario.error(f"assert[{i}] ({a.name})", msg) from None
        return offered, specs, unchanged, watched

    def run_one(self, scenario: Scenario, agent: Callable[[ExamContext], str], run: int) -> RunResult:
        started = time.monotonic()
        dbname = f"{self.prefix}_{run}_{uuid.uuid4().hex[:6]}"
        self._create(dbname, self.template)
        try:
            with psycopg.connect(self._dsn_for(dbname), autocommit=True) as conn:
                result = self._run_in(conn, scenario, agent, run)
        finally:
            if not self.keep:
                self._drop(dbname)
        result.database = dbname if self.keep else None
        result.seconds = round(time.monotonic() - started, 3)
        return result

    def _run_in(self, conn, scenario, agent, run) -> RunResult:
        client = Client(conn)
        offered, specs, unchanged, watched = self._prepare(conn, scenario, client)
        try:
            before = snapshot.take(conn, watched)
        except (psycopg.Error, LookupError) as exc:
            msg = _pg_message(exc) if isinstance(exc, psycopg.Error) else str(exc)
            raise scenario.error("watch", f"cannot snapshot {', '.join(watched)}: {msg}") from None

        task = client.begin_task(scenario.user_id, f"exam-{scenario.name}-{run}", scenario.request,
                                 authenticated=scenario.authenticated, lang=scenario.lang,
                                 expects_action=scenario.expect_change, time_zone=scenario.time_zone)
        tools = [{k: v for k, v in t.items() if k not in ("created_at", "updated_at")} for t in offered]
        ctx = ExamContext(scenario.name, scenario.request, scenario.user_id, scenario.lang,
                          scenario.authenticated, task, tools, client)
        error = None
        try:
            reply = agent(ctx)
            if not isinstance(reply, str):
                error = f"the agent returned {type(reply).__name__}, not the reply text"
                reply = ""
        except Exception as exc:  # the agent's failure is this run's result, not the exam's
            error = f"{type(exc).__name__}: {exc}"
            reply = ""
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()  # an agent that left a transaction open does not hold the judge hostage

        client.report(task)  # closes the tools: nothing written after this counts as the agent's
        verdict = client.finalize_reply(task, reply)
        status = client.finish_task(task)

        after = snapshot.take(conn, watched)
        diffs = snapshot.diff(conn, before, after)
        results = []
        for a in scenario.assertions:
            try:
                results.append(run_assertion(conn, a))
            except (psycopg.Error, ValueError) as exc:
                msg = _pg_message(exc) if isinstance(exc, psycopg.Error) else str(exc)
                results.append(AssertionResult(a.name, False, [f"error: {msg}"], 1))

        j = judge(scenario, specs, unchanged, diffs, results, verdict.claims)
        cls = ERROR if error else j.cls
        return RunResult(
            scenario=scenario.name, run=run, cls=cls, passed=(cls == j.cls and j.passed),
            reply=reply, claimed=j.claimed, claims=verdict.claims, verdict=verdict.verdict,
            delivered=verdict.text, pending=verdict.pending,
            gate_missed=(j.claimed and verdict.verdict == "deliver"
                         and j.cls in (FALSE_COMPLETION, PARTIAL_OR_WRONG)),
            task_status=status, calls=jsonable([c.to_json() for c in ctx.calls]),
            diff=jsonable([d.to_json() for d in diffs]), missing=jsonable(j.missing), extra=jsonable(j.extra),
            assertions=jsonable([r.to_json() for r in results]), error=error,
        )

    # -- many runs ----------------------------------------------------------------------
    def run(self, scenarios: list[Scenario], agent: Callable[[ExamContext], str],
            runs: int) -> list[RunResult]:
        if self.template is None:
            raise RuntimeError("use `with Exam(dsn) as exam:`")
        total = len(scenarios) * runs
        out: list[RunResult] = []
        i = 0
        for scenario in scenarios:
            for run in range(1, runs + 1):
                i += 1
                if self.progress:
                    self.progress(i, total, scenario, run, None)
                result = self.run_one(scenario, agent, run)
                out.append(result)
                if self.progress:
                    self.progress(i, total, scenario, run, result)
        return out


def run_exam(dsn: str, scenarios: list[Scenario], agent: Callable[[ExamContext], str], runs: int = 1, *,
             keep: bool = False, progress=None) -> list[RunResult]:
    """Convenience: one Exam on `dsn` (a server DSN whose user may create databases)."""
    with Exam(dsn, keep=keep, progress=progress) as exam:
        return exam.run(scenarios, agent, runs)


__all__ = ["Exam", "RunResult", "ScenarioError", "run_assertion", "run_exam"]
