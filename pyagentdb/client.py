"""A thin Python client over the agentdb SQL API.

It takes the caller's psycopg connection or pool and never runs DDL. Every
decision (was it written, was it verified) is made by the database; this module
only calls the functions and turns their JSON into typed objects. Business
refusals come back as receipts, not exceptions.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from .claims import patterns as claim_patterns

OUTCOMES = (
    "success",
    "refused",
    "invalid",
    "duplicate",
    "conflict",
    "failed",
    "unverified",
    "needs_confirmation",
)


@dataclass(frozen=True)
class Receipt:
    """What the database says happened to one tool call."""

    outcome: str
    verified: bool
    detail: str
    label: str | None = None
    refusal: str | None = None
    step_id: int | None = None
    task_id: str | None = None
    seq: int | None = None
    call_id: str | None = None
    tool: str | None = None
    action: str | None = None
    affected_rows: int = 0
    attempts: int = 0
    key: dict | None = None
    row: dict | None = None
    field: str | None = None
    replayed: bool = False
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True only when the write happened and was read back as asked."""
        return self.outcome == "success" and self.verified

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Receipt:
        return cls(
            outcome=data["outcome"],
            verified=bool(data.get("verified")),
            detail=data.get("detail") or "",
            label=data.get("label"),
            refusal=data.get("refusal"),
            step_id=data.get("step_id"),
            task_id=data.get("task_id"),
            seq=data.get("seq"),
            call_id=data.get("call_id"),
            tool=data.get("tool"),
            action=data.get("action"),
            affected_rows=data.get("affected_rows") or 0,
            attempts=data.get("attempts") or 0,
            key=data.get("key"),
            row=data.get("row"),
            field=data.get("field"),
            replayed=bool(data.get("replayed")),
            raw=data,
        )


@contextmanager
def _block(conn: psycopg.Connection, single: bool) -> Iterator[psycopg.Cursor]:
    if single and conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        with conn.cursor() as cur:
            yield cur
    else:
        with conn.transaction(), conn.cursor() as cur:
            yield cur


class Task:
    """One user message's unit of work; created by Client.task()."""

    def __init__(self, client: Client, task_id: uuid.UUID):
        self.client = client
        self.id = task_id
        self.status: str | None = None

    def invoke(self, tool: str, args: Any, **kwargs: Any) -> Receipt:
        return self.client.invoke(self.id, tool, args, **kwargs)

    def finish(self) -> str:
        self.status = self.client.finish_task(self.id)
        return self.status


class Client:
    """Calls the agentdb SQL API over a psycopg Connection or a psycopg_pool pool."""

    def __init__(self, conn_or_pool: Any, *, detect_claims_here: bool = True):
        """detect_claims_here: the gate finds a reply's claims in Python when the database holds
        the same patterns (False: the database always detects them)."""
        self._source = conn_or_pool
        self.detect_claims_here = detect_claims_here
        self._claim_fingerprint: str | None = None
        self._claim_fingerprint_known = False

    @contextmanager
    def _cursor(self, *, single: bool = False) -> Iterator[psycopg.Cursor]:
        """A cursor in a transaction block: it commits on exit, or becomes a savepoint when the
        caller already has a transaction open (the caller's choice is kept).

        single: the block will send one statement. On an autocommit connection with no
        transaction open, that statement is its own transaction, so it goes alone: one round
        trip instead of BEGIN, the statement and COMMIT."""
        source = self._source
        if isinstance(source, psycopg.Connection):
            with _block(source, single) as cur:
                yield cur
        else:
            with source.connection() as conn, _block(conn, single) as cur:
                yield cur

    def _scalar(self, query: str, params: tuple | dict = ()) -> Any:
        with self._cursor(single=True) as cur:
            row = cur.execute(query, params).fetchone()
            return row[0] if row else None

    # -- tasks ---------------------------------------------------------------
    def begin_task(
        self,
        user_id: str,
        conversation_id: str,
        goal: str | None = None,
        *,
        authenticated: bool = False,
        lang: str = "zh",
        expects_action: bool = False,
        time_zone: str | None = None,
    ) -> uuid.UUID:
        """expects_action: the user asked for something to be done (tools were offered), so a reply
        with no step behind it is delivered only as a question, an offer, a draft or "nothing was
        done". time_zone: the user's (IANA name); None for the server's."""
        return self._scalar(
            "SELECT agentdb.begin_task(%s, %s, %s, authenticated => %s, lang => %s,"
            " expects_action => %s, time_zone => %s)",
            (user_id, conversation_id, goal, authenticated, lang, expects_action, time_zone),
        )

    def finish_task(self, task: uuid.UUID | str) -> str:
        return self._scalar("SELECT agentdb.finish_task(%s::uuid)", (str(task),))

    @contextmanager
    def task(
        self,
        user_id: str,
        conversation_id: str,
        goal: str | None = None,
        *,
        authenticated: bool = False,
        lang: str = "zh",
        expects_action: bool = False,
        time_zone: str | None = None,
    ) -> Iterator[Task]:
        """Open a task for one user message; it is settled in `finally`, even on error."""
        task = Task(
            self,
            self.begin_task(
                user_id,
                conversation_id,
                goal,
                authenticated=authenticated,
                lang=lang,
                expects_action=expects_action,
                time_zone=time_zone,
            ),
        )
        try:
            yield task
        finally:
            task.finish()

    # -- the guarded write ---------------------------------------------------
    def invoke(
        self,
        task: uuid.UUID | str,
        tool: str,
        args: Any,
        *,
        call_id: str | None = None,
        reason: str | None = None,
        expect_rows: int | None = None,
        expected_version: int | None = None,
    ) -> Receipt:
        """Run one tool call through agentdb.invoke; the receipt says what the database saw."""
        data = self._scalar(
            "SELECT agentdb.invoke(%s::uuid, %s, %s, call_id => %s, reason => %s,"
            " expect_rows => %s, expected_version => %s)",
            (str(task), tool, Jsonb(args), call_id, reason, expect_rows, expected_version),
        )
        return Receipt.from_json(data)

    # -- drafts ----------------------------------------------------------------
    def propose(
        self,
        task: uuid.UUID | str,
        tool: str,
        args: Any,
        *,
        reason: str | None = None,
        expect_rows: int | None = None,
    ) -> dict:
        """agentdb.propose: a draft (outcome 'proposed'), or a refusal receipt as a dict."""
        return self._scalar(
            "SELECT agentdb.propose(%s::uuid, %s, %s, %s, %s)",
            (str(task), tool, Jsonb(args), reason, expect_rows),
        )

    def confirm(self, task: uuid.UUID | str, draft_ref: str | int) -> Receipt:
        """agentdb.confirm: runs the draft through the guarded write, or refuses."""
        return Receipt.from_json(
            self._scalar("SELECT agentdb.confirm(%s::uuid, %s)", (str(task), str(draft_ref)))
        )

    # -- the exit gate ---------------------------------------------------------
    def report(self, task: uuid.UUID | str) -> dict:
        """The execution report; taking it closes the task's tools (later invokes are refused)."""
        return self._scalar("SELECT agentdb.report(%s::uuid)", (str(task),))

    def report_text(self, task: uuid.UUID | str, lang: str | None = None) -> str:
        return self._scalar("SELECT agentdb.report_text(%s::uuid, %s)", (str(task), lang))

    def context_rules(self, task: uuid.UUID | str, lang: str | None = None) -> list[str]:
        return self._scalar("SELECT agentdb.context_rules(%s::uuid, %s)", (str(task), lang))

    def finalize_reply(self, task: uuid.UUID | str, model_text: str, claims: list[dict] | None = None):
        """The gate's verdict on a reply (see pyagentdb.gate.Verdict)."""
        from .gate import Gate

        return Gate(self).finalize(task, model_text, claims)

    def claim_patterns_fingerprint(self, *, refresh: bool = False) -> str | None:
        """The fingerprint of the database's claim patterns if they are this package's, else None.

        Asked once and remembered: with it, the gate detects claims here, with the same
        patterns, and the database skips its own detection (see Gate.finalize)."""
        if refresh or not self._claim_fingerprint_known:
            try:
                # The document this process detects with (read once), not the file as it is now.
                self._claim_fingerprint = self._scalar(
                    "SELECT agentdb.claim_patterns_fingerprint(%s::jsonb)", (json.dumps(claim_patterns()),)
                )
            except (errors.UndefinedFunction, errors.UndefinedColumn, errors.InsufficientPrivilege):
                # An older schema, or a role without it: the database detects (the failed
                # probe was rolled back on its own, in a savepoint inside a caller's transaction).
                self._claim_fingerprint = None
            self._claim_fingerprint_known = True
        return self._claim_fingerprint

    def pending_claims(self, task: uuid.UUID | str) -> list[dict]:
        with self._cursor() as cur:
            cur.execute(
                "SELECT to_jsonb(p) FROM agentdb.pending_claims AS p WHERE p.task_id = %s::uuid"
                " ORDER BY p.claim_id",
                (str(task),),
            )
            return [row[0] for row in cur.fetchall()]

    # -- registry and permissions (owner / app role) -------------------------
    def tools(self) -> list[dict]:
        with self._cursor() as cur:
            cur.execute("SELECT to_jsonb(t) FROM agentdb.tools AS t ORDER BY t.name")
            return [row[0] for row in cur.fetchall()]

    def register_tool(self, **params: Any) -> dict:
        """agentdb.register_tool with named parameters (name=, action=, target=, label_zh=, ...)."""
        names = sorted(params)
        bad = [name for name in names if not name.isidentifier() or not name.islower()]
        if bad:
            raise ValueError(f"not a register_tool parameter: {', '.join(bad)}")
        placeholders = ", ".join(f"{name} => %({name})s" for name in names)
        return self._scalar(f"SELECT agentdb.register_tool({placeholders})", params)

    def grant_permission(
        self, user_id: str, permission: str, *, tool: str | None = None, target: str | None = None
    ) -> bool:
        return self._scalar(
            "SELECT agentdb.grant_permission(%s, %s, %s, %s::regclass)", (user_id, permission, tool, target)
        )

    def revoke_permission(
        self, user_id: str, permission: str, *, tool: str | None = None, target: str | None = None
    ) -> bool:
        return self._scalar(
            "SELECT agentdb.revoke_permission(%s, %s, %s, %s::regclass)", (user_id, permission, tool, target)
        )
