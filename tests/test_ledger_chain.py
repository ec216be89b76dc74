"""Tamper evidence: audit and change-log rows are hash-chained by the sealer after they commit;
verification seals what has committed, then finds every broken link after an edit made as
superuser (no agentdb role can edit them at all). Rows chained before revision 0015 keep their
own links: tests/test_upgrade_history.py verifies them after upgrading every landed schema."""

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


def seal(conn) -> dict:
    return scalar(conn, "SELECT agentdb.seal_chains()")


def links(conn, chain: str = "audit", user: str = "u1") -> list[tuple[int, int]]:
    """(seq, row id) of a tenant's sealed links, in chain order."""
    return [(r["seq"], r["row_id"]) for r in rows(conn, """
        SELECT seq, row_id FROM agentdb_private.chain_links
         WHERE chain = %s AND user_id = %s ORDER BY seq""", (chain, user))]


def test_untouched_chains_verify(reminders):
    reminders.execute("SET TimeZone = 'Asia/Kathmandu'")  # the writer's settings do not matter
    workload(reminders)
    # written with a note each, linked by nobody yet
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.chain_links") == 0
    audit = scalar(reminders, "SELECT count(*) FROM agentdb_private.audit")
    pending = "SELECT count(*) FROM agentdb_private.chain_pending WHERE chain = 'audit'"
    assert scalar(reminders, pending) == audit
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.change_log") == 7
    reminders.execute("SET TimeZone = 'America/St_Johns'")
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None  # seals first
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.chain_pending") == 0
    assert [seq for seq, _ in links(reminders)] == list(range(1, audit + 1))
    ids = [r["id"] for r in rows(reminders, "SELECT id FROM agentdb_private.audit ORDER BY id")]
    assert [row for _, row in links(reminders)] == ids
    assert seal(reminders) == {"audit": 0, "change": 0}


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
    seal(reminders)
    victim = scalar(reminders, f"SELECT id FROM {table} ORDER BY id OFFSET 2 LIMIT 1")
    tamper(reminders, edit, (victim,))
    assert breaks(reminders, chain) == [(victim, "altered")]
    fn = "verify_audit_chain" if chain == "audit" else "verify_change_chain"
    assert scalar(reminders, f"SELECT agentdb.{fn}()") == victim


def test_an_edit_before_sealing_is_not_evidence(reminders):
    """The window the sealer leaves (docs/ledger.md): a row edited between its commit and the
    next seal is linked as edited. Only someone who can switch the append-only triggers off
    can make such an edit; the worker seals every poll."""
    workload(reminders)
    victim = scalar(reminders, "SELECT id FROM agentdb_private.audit ORDER BY id OFFSET 2 LIMIT 1")
    tamper(reminders, "UPDATE agentdb_private.audit SET detail = 'all fine' WHERE id = %s", (victim,))
    assert breaks(reminders, "audit") == []


def test_a_relinked_edit_breaks_the_next_link(reminders):
    """Recomputing the edited row's own link moves the break to the row after it."""
    task = begin(reminders)
    for i in range(4):
        invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})
    seal(reminders)
    (_, first), (seq, victim), (_, after) = links(reminders)[:3]
    reminders.execute("SET TimeZone = 'UTC'")  # the chain renders timestamps in UTC
    tamper(reminders, "UPDATE agentdb_private.audit SET detail = 'edited' WHERE id = %s", (victim,))
    tamper(reminders, """
        UPDATE agentdb_private.chain_links AS l
           SET hash = sha256(p.hash || agentdb_private.chain_content(to_jsonb(a)))
          FROM agentdb_private.chain_links AS p, agentdb_private.audit AS a
         WHERE l.chain = 'audit' AND l.user_id = 'u1' AND l.seq = %s
           AND p.chain = 'audit' AND p.user_id = 'u1' AND p.seq = %s - 1
           AND a.user_id = 'u1' AND a.id = l.row_id""", (seq, seq))
    assert breaks(reminders, "audit") == [(after, "altered")]


def test_a_deleted_row_is_missing(reminders):
    task = begin(reminders)
    for i in range(4):
        invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})
    seal(reminders)
    victim = links(reminders)[1][1]
    tamper(reminders, "DELETE FROM agentdb_private.audit WHERE id = %s", (victim,))
    assert breaks(reminders, "audit") == [(victim, "missing")]


def test_a_row_deleted_before_it_was_sealed_is_missing(reminders):
    """Its note outlives it: the sealer links the note, and verify names the row."""
    workload(reminders, 2)
    victim = scalar(reminders, "SELECT max(id) FROM agentdb_private.change_log")
    tamper(reminders, "DELETE FROM agentdb_private.change_log WHERE id = %s", (victim,))
    assert breaks(reminders, "change") == [(victim, "missing")]


def test_a_deleted_link_leaves_a_gap(reminders):
    task = begin(reminders)
    for i in range(4):
        invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})
    seal(reminders)
    (_, _first), (seq, _victim), (_, after) = links(reminders)[:3]
    tamper(reminders, "DELETE FROM agentdb_private.chain_links WHERE chain = 'audit' AND user_id = 'u1'"
                      " AND seq = %s", (seq,))
    # the row without its link, and the link after the hole
    assert breaks(reminders, "audit") == sorted([(_victim, "not_chained"), (after, "gap")])


def test_a_removed_tail_is_found_against_an_anchor(reminders):
    workload(reminders)
    anchor = scalar(reminders, "SELECT agentdb.chain_anchor()")  # seals first
    assert anchor["audit_links"] and anchor["change_links"]
    kept = psycopg.types.json.Jsonb(anchor)
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain(%s::jsonb)", (kept,)) is None
    last = scalar(reminders, "SELECT max(id) FROM agentdb_private.audit")
    tamper(reminders, "DELETE FROM agentdb_private.audit WHERE id = %s", (last,))
    tamper(reminders, "DELETE FROM agentdb_private.chain_links WHERE chain = 'audit' AND row_id = %s",
           (last,))
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None  # the chain alone cannot tell
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain(%s::jsonb)", (kept,)) == last


def test_an_unchained_row_after_the_chain_began_is_reported(reminders):
    workload(reminders)
    forged = scalar(reminders, """INSERT INTO agentdb_private.audit (user_id, status, outcome, detail)
                                  VALUES ('', 'SUCCESS', 'success', 'forged') RETURNING id""")
    assert breaks(reminders, "audit") == [(forged, "not_chained")]


def test_concurrent_writers_are_all_sealed(reminders, dsn):
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
                    if i % 5 == 0:
                        conn.execute("SELECT agentdb.seal_chains()")  # sealers alongside the writers
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert scalar(reminders, "SELECT count(*) FROM agentdb_private.change_log") == 300
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None
    for chain, count in (("audit", 150), ("change", 300)):
        assert [seq for seq, _ in links(reminders, chain)] == list(range(1, count + 1))


def test_no_writer_waits_for_another_and_the_sealer_waits_for_none(reminders, dsn):
    """Writers read and lock no chain: a transaction left open holds nobody up, neither another
    writer of the same tenant nor the sealer, which links the open one's rows once they commit."""
    holder = psycopg.connect(dsn)  # not autocommit: its rows stay uncommitted
    other = psycopg.connect(dsn, autocommit=True)
    try:
        task1, task2 = begin(reminders), begin(reminders)
        invoke(holder, task1, "add_reminder", {**ADD, "content": "first"})
        other.execute("SET lock_timeout = '2s'")
        second = invoke(other, task2, "add_reminder", {**ADD, "content": "second"})
        assert second["outcome"] == "success", second
        assert scalar(other, "SELECT agentdb.seal_chains()") == {"audit": 1, "change": 1}
        holder.commit()
    finally:
        holder.close()
        other.close()
    assert seal(reminders) == {"audit": 1, "change": 1}
    assert scalar(reminders, "SELECT agentdb.verify_audit_chain()") is None
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None


def test_each_tenant_has_its_own_chain(reminders):
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    for user in ("u1", "u2", "u1"):
        invoke(reminders, begin(reminders, user=user), "add_reminder",
               {**ADD, "content": f"{user} {uuid4()}"})
    seal(reminders)
    found = rows(reminders, """SELECT l.user_id, l.seq FROM agentdb_private.chain_links AS l
                                WHERE l.chain = 'change' ORDER BY l.row_id""")
    assert [(r["user_id"], r["seq"]) for r in found] == [("u1", 1), ("u2", 1), ("u1", 2)]
    anchor = scalar(reminders, "SELECT agentdb.chain_anchor()")
    assert sorted(anchor["change_links"]) == ["u1", "u2"]
    assert scalar(reminders, "SELECT agentdb.verify_change_chain(%s::jsonb)",
                  (psycopg.types.json.Jsonb(anchor),)) is None


def test_any_isolation_level_writes_and_the_sealer_links_it(reminders, dsn):
    """No chain is read by a writer, so a write from an old REPEATABLE READ snapshot appends
    like any other (the per-stripe chain of 0011 had to fail it); a sealer outside READ
    COMMITTED seals nothing and says so."""
    reader = psycopg.connect(dsn, autocommit=True)
    try:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1")  # its snapshot is taken here
        invoke(reminders, begin(reminders), "add_reminder", {**ADD, "content": "committed meanwhile"})
        reader.execute("INSERT INTO public.reminders (user_id, content, remind_at) "
                       "VALUES ('u1', 'from an old snapshot', %s)", (FAR_TIME,))
        assert scalar(reader, "SELECT agentdb.seal_chains()") == {"audit": None, "change": None}
        reader.execute("COMMIT")
    finally:
        reader.close()
    assert seal(reminders) == {"audit": 1, "change": 2}
    assert scalar(reminders, "SELECT agentdb.verify_change_chain()") is None


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
