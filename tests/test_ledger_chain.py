"""Tamper evidence: audit and change-log rows are hash-chained; verification finds the first
broken link after an edit made as superuser (no agentdb role can edit them at all)."""

from __future__ import annotations

import threading
from uuid import uuid4

import psycopg
import pytest
from helpers import FAR_TIME, begin, invoke, rows, scalar

ADD = {"content": "dentist", "remind_at": FAR_TIME}


def workload(conn, calls: int = 6) -> None:
    task = begin(conn)
    for i in range(calls):
        invoke(conn, task, "add_reminder", {**ADD, "content": f"r{i}"})
    invoke(conn, task, "add_reminder", {**ADD, "content": "r0"})  # a duplicate: refused, audited
    conn.execute("UPDATE public.reminders SET done = true WHERE content = 'r1'")  # a direct write


def tamper(conn, sql: str, params=()) -> None:
    """Edit evidence as a superuser would: with every trigger (append-only included) off."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(sql, params)


def breaks(conn, chain: str) -> list[tuple[int, str]]:
    return [(r["id"], r["problem"]) for r in rows(conn, "SELECT * FROM agentdb.verify_chain(%s)", (chain,))]


def stripe_tail(conn, table: str, row_id: int) -> list[int]:
    """Ids of the rows after row_id in its stripe (of its tenant's chain), in chain order."""
    return [r["id"] for r in rows(conn, f"""
        SELECT r.id FROM {table} AS r, {table} AS x
         WHERE x.id = %s AND r.chain_tenant IS NOT DISTINCT FROM x.chain_tenant
           AND r.chain_stripe = x.chain_stripe AND r.chain_seq > x.chain_seq
         ORDER BY r.chain_seq""", (row_id,))]


def test_untouched_chains_verify(reminders):
    reminders.execute("SET TimeZone = 'Asia/Kathmandu'")  # the writer's settings do not matter
    workload(reminders)
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.audit WHERE hash IS NULL") == 0
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.change_log") == 7
    reminders.execute("SET TimeZone = 'America/St_Johns'")
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None


@pytest.mark.parametrize(("table", "chain", "edit"), [
    ("agentdb_private.audit", "audit", "UPDATE agentdb_private.audit SET detail = 'all fine' WHERE id = %s"),
    ("agentdb_private.audit", "audit",
     "UPDATE agentdb_private.audit SET status = CASE status WHEN 'SUCCESS' THEN 'FAILED' ELSE 'SUCCESS' END "
     "WHERE id = %s"),
    ("agentdb_private.change_log", "change",
     "UPDATE agentdb_private.change_log SET new_row = new_row || '{\"content\": \"other\"}' WHERE id = %s"),
    ("agentdb_private.change_log", "change",
     "UPDATE agentdb_private.change_log SET task_id = NULL, seq = NULL WHERE id = %s"),
])
def test_an_edited_row_is_the_first_broken_link(reminders, table, chain, edit):
    workload(reminders)
    victim = scalar(reminders, f"SELECT id FROM {table} ORDER BY id OFFSET 2 LIMIT 1")
    tamper(reminders, edit, (victim,))
    assert breaks(reminders, chain) == [(victim, "altered")]
    fn = "verify_audit_chain" if chain == "audit" else "verify_change_chain"
    assert scalar(reminders, f"SELECT agentdb.{fn}()") == victim


def test_a_rehashed_edit_breaks_the_next_link(reminders):
    """Recomputing the edited row's own hash moves the break to the row after it."""
    task = begin(reminders)
    with reminders.transaction():  # one transaction: one stripe, rows in a row
        for i in range(4):
            invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})
    victim = scalar(reminders, "SELECT min(id) + 1 FROM agentdb_private.audit")
    reminders.execute("SET TimeZone = 'UTC'")  # the chain renders timestamps in UTC
    tamper(reminders, """
        UPDATE agentdb_private.audit AS a SET detail = 'edited',
               hash = sha256(p.hash || agentdb_private.chain_content(to_jsonb(a) || '{"detail": "edited"}'))
          FROM agentdb_private.audit AS p
         WHERE a.id = %s AND p.chain_tenant = a.chain_tenant AND p.chain_stripe = a.chain_stripe
           AND p.chain_seq = a.chain_seq - 1""", (victim,))
    (after,) = stripe_tail(reminders, "agentdb_private.audit", victim)[:1]
    assert breaks(reminders, "audit") == [(after, "altered")]


def test_a_deleted_row_leaves_a_gap(reminders):
    task = begin(reminders)
    with reminders.transaction():
        for i in range(4):
            invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})
    victim = scalar(reminders, "SELECT min(id) + 1 FROM agentdb_private.audit")
    after = stripe_tail(reminders, "agentdb_private.audit", victim)[0]
    tamper(reminders, "DELETE FROM agentdb_private.audit WHERE id = %s", (victim,))
    assert breaks(reminders, "audit") == [(after, "gap")]


def test_a_removed_tail_is_found_against_an_anchor(reminders):
    workload(reminders)
    anchor = scalar(reminders, "SELECT agentdb.chain_anchor()")
    assert anchor["audit"] and anchor["change"]
    kept = psycopg.types.json.Jsonb(anchor)
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain(%s::jsonb)", (kept,)) is None
    last = scalar(reminders, "SELECT max(id) FROM agentdb_private.audit")
    tamper(reminders, "DELETE FROM agentdb_private.audit WHERE id = %s", (last,))
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None  # the chain alone cannot tell
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain(%s::jsonb)", (kept,)) == last


def test_an_unchained_row_after_the_chain_began_is_reported(reminders):
    workload(reminders)
    with reminders.transaction():
        reminders.execute("SET LOCAL session_replication_role = replica")
        forged = scalar(reminders, """INSERT INTO agentdb_private.audit (user_id, status, outcome, detail)
                                      VALUES ('', 'SUCCESS', 'success', 'forged') RETURNING id""")
    assert breaks(reminders, "audit") == [(forged, "not_chained")]


def test_concurrent_writers_keep_every_stripe_linear(reminders, dsn):
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                task = begin(conn)
                for i in range(25):
                    receipt = invoke(conn, task, "add_reminder", {**ADD, "content": f"w{n}-{i}"})
                    assert receipt["outcome"] == "success", receipt
                    conn.execute("UPDATE public.reminders SET done = true WHERE id = %s",
                                 (receipt["key"]["id"],))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.change_log") == 300
    assert scalar(reminders, "SELECT count(DISTINCT chain_stripe) FROM agentdb_private.audit") > 1
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None


def test_no_writer_waits_for_another_to_append(reminders, dsn):
    """A transaction holding a stripe of its tenant's chain open makes the next writer of the
    same tenant take another stripe, not wait (the 16 global stripes made it wait)."""
    holder = psycopg.connect(dsn)  # not autocommit: its stripes stay held
    other = psycopg.connect(dsn, autocommit=True)
    try:
        task1, task2 = begin(reminders), begin(reminders)
        invoke(holder, task1, "add_reminder", {**ADD, "content": "first"})
        other.execute("SET lock_timeout = '2s'")
        second = invoke(other, task2, "add_reminder", {**ADD, "content": "second"})
        assert second["outcome"] == "success", second
        holder.commit()
    finally:
        holder.close()
        other.close()
    stripes = rows(reminders, """SELECT chain_stripe, chain_seq FROM agentdb_private.audit
                                  WHERE chain_tenant = 'u1' ORDER BY id""")
    # two stripes (numbered from a sequence), each starting its own chain
    assert [r["chain_seq"] for r in stripes] == [1, 1]
    assert stripes[0]["chain_stripe"] != stripes[1]["chain_stripe"]
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None


def test_each_tenant_has_its_own_chain(reminders):
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    for user in ("u1", "u2", "u1"):
        invoke(reminders, begin(reminders, user=user), "add_reminder",
               {**ADD, "content": f"{user} {uuid4()}"})
    links = rows(reminders, """SELECT chain_tenant, chain_stripe, chain_seq FROM agentdb_private.change_log
                                ORDER BY id""")
    assert [(r["chain_tenant"], r["chain_seq"]) for r in links] == [("u1", 1), ("u2", 1), ("u1", 2)]
    assert scalar(reminders,
                  "SELECT count(*) FROM agentdb_private.change_log WHERE user_id = chain_tenant") == 3
    anchor = scalar(reminders, "SELECT agentdb.chain_anchor()")
    assert sorted(key.split(":", 1)[1] for key in anchor["change"]) == ["u1", "u2"]
    assert scalar(reminders, "SELECT agentdb.verify_change_chain(%s::jsonb)",
                  (psycopg.types.json.Jsonb(anchor),)) is None


def test_repeatable_read_gets_a_serialization_failure_not_a_fork(reminders, dsn):
    reader = psycopg.connect(dsn, autocommit=True)
    writer = psycopg.connect(dsn, autocommit=True)
    try:
        task1 = begin(reminders)
        # the tenant's stripe exists before the reader's snapshot (else the reader opens a new one)
        invoke(writer, task1, "add_reminder", {**ADD, "content": "before the snapshot"})
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1")  # its snapshot is taken here
        invoke(writer, task1, "add_reminder", {**ADD, "content": "committed meanwhile"})
        # invoke refuses a caller outside READ COMMITTED (tests/test_proof_holes.py); a direct
        # write to the watched table appends to the change-log chain from the old snapshot.
        with pytest.raises(psycopg.errors.SerializationFailure):
            reader.execute("INSERT INTO public.reminders (user_id, content, remind_at) "
                           "VALUES ('u1', 'from an old snapshot', %s)", (FAR_TIME,))
        reader.execute("ROLLBACK")
    finally:
        reader.close()
        writer.close()
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None


def test_only_the_auditor_verifies(reminders, role_connect):
    workload(reminders, 2)
    auditor = role_connect("agentdb_auditor")
    assert scalar(auditor, "SELECT agentdb.verify_audit_chain()") is None
    assert scalar(auditor, "SELECT count(*) FROM agentdb.verify_chain('change')") == 0
    assert scalar(auditor, "SELECT agentdb.chain_anchor() ? 'audit'") is True
    for group in ("agentdb_agent", "agentdb_app"):
        conn = role_connect(group)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT agentdb.verify_audit_chain()")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no chain named steps"):
        reminders.execute("SELECT * FROM agentdb.verify_chain('steps')")
