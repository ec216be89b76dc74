"""Concurrency: 8+ connections hammer the same rows for a few seconds (tests/reliability/workload.py).

Afterwards, from the database:

  - no lost update: every verified edit moved its row from the version it read to the next one,
    no two verified edits started from the same version of a row, and each row's version and
    content are those of its last verified edit; the losers got `conflict` (stale_version);
  - no duplicate from racing dedup: no two rows hold the same values;
  - a call_id sent by several connections wrote once and every sender got the same step;
  - each draft confirmed at most once, each approved action run exactly once;
  - the gate's verdict at the end of every turn agrees with the receipts of that turn;
  - every receipt a client got is a step with that outcome, every step of the run was received,
    and the counts reconcile exactly (target rows vs steps vs audit rows vs change log).

The second test runs the same while a chaos thread kills random connections: every client
reconnects and resends its call with the same call_id.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from .conftest import detail, record
from .invariants import reconcile
from .workload import Workload, chaos, setup_schema

THREADS = 8


@pytest.fixture
def workload(reminders, ledger, login_role, dsn) -> Workload:
    setup_schema(reminders)
    wl = Workload(dsn, login_role("agentdb_agent"), login_role("agentdb_app"))
    wl.setup(reminders)
    return wl


def run(wl: Workload, dsn: str, seconds: float, kill_every: float | None) -> Counter:
    stop, kills = threading.Event(), Counter()
    threads = [threading.Thread(target=wl.worker, args=(n, stop)) for n in range(THREADS)]
    if kill_every:
        threads.append(threading.Thread(target=chaos, args=(dsn, stop, kill_every, kills)))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    wl.drain()
    return kills


@pytest.mark.parametrize("kill_every", [None, 0.1], ids=["steady", "with-kills"])
def test_many_connections_on_the_same_rows(workload, reminders, dsn, kill_every):
    seconds = 4.0 if kill_every is None else 3.0
    kills = run(workload, dsn, seconds, kill_every)
    problems, figures = workload.verify(reminders)
    assert not problems, problems[:10]
    result = reconcile(reminders, reap=True)
    assert result.ok, str(result)
    if kill_every:
        assert kills["kills"] > 0 and figures["connections_lost"] > 0, (kills, figures)
    name = "concurrency" if kill_every is None else "concurrency_kills"
    record(name, threads=THREADS, seconds=int(seconds), kills=kills["kills"], **figures)
    detail(name, {"ops": dict(workload.ops), "outcomes": workload.outcome_table(),
                  "gate": dict(workload.gate), "reconcile": result.counts})
