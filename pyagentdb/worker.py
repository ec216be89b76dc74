"""`pyagentdb worker`: runs approved actions from the confirmation centre.

Each job is one call of agentdb.run_next_action(), which takes an approved
action with FOR UPDATE SKIP LOCKED and runs it through the guarded write in
the same transaction: several workers share the queue, a worker killed
mid-job leaves its action approved for the next one, and an action is never
run twice. The worker sleeps on LISTEN agentdb_actions (approve() notifies),
and every poll interval sweeps expired drafts and actions and seals the
hash chains (agentdb.seal_chains: audit and change-log rows committed since
get their links; docs/ledger.md).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import psycopg


def run_pending(conn: psycopg.Connection, on_result: Callable[[dict], None] | None = None) -> int:
    """Run approved actions until none is left; returns how many ran."""
    ran = 0
    while True:
        result = conn.execute("SELECT agentdb.run_next_action()").fetchone()[0]
        if result is None:
            return ran
        ran += 1
        if on_result:
            on_result(result)


def run_worker(
    dsn: str,
    *,
    once: bool = False,
    poll: float = 5.0,
    max_seconds: float | None = None,
    out=sys.stdout,
    as_json: bool = False,
) -> int:
    def report(result: dict) -> None:
        receipt = result["receipt"]
        if as_json:
            print(json.dumps(result, ensure_ascii=False), file=out, flush=True)
        else:
            state = "done" if receipt.get("outcome") == "success" else f"failed ({receipt.get('refusal')})"
            print(f"action {result['action_id']}: {state} - {receipt.get('detail')}", file=out, flush=True)

    total = 0
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN agentdb_actions")
        while True:
            conn.execute("SELECT agentdb.sweep_drafts()")
            total += run_pending(conn, report)
            conn.execute("SELECT agentdb.seal_chains()")
            if once or (deadline is not None and time.monotonic() >= deadline):
                return total
            wait = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            # Any notification (or the poll timeout) wakes the loop; the queue is the truth.
            for _ in conn.notifies(timeout=wait, stop_after=1):
                pass
