"""Client.invoke keeps one round trip: on an autocommit connection it sends the one statement,
not BEGIN / the statement / COMMIT; inside the caller's transaction it keeps that transaction."""

from __future__ import annotations

import re

import psycopg
from helpers import FAR_TIME

from pyagentdb import Client

ADD = {"content": "water the plants", "remind_at": FAR_TIME}


def sent_queries(conn: psycopg.Connection, action) -> list[str]:
    """The statements the client sent while running action(), from libpq's protocol trace."""
    import tempfile

    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        text = trace.read()
    # Frontend messages: Query "..." (simple protocol) and Parse "name" "..." (extended).
    return re.findall(r'\tF\t\d+\t(?:Query|Parse)\t (?:"[^"]*" )?"([^"]*)"', text)


def test_invoke_on_an_autocommit_connection_sends_one_statement(reminders, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        client = Client(conn)
        task = client.begin_task("u1", "c1", authenticated=True, lang="en")
        receipts = []
        sent = sent_queries(conn, lambda: receipts.append(client.invoke(task, "add_reminder", ADD)))
    assert receipts[0].ok, receipts[0]
    assert len(sent) == 1 and sent[0].startswith("SELECT agentdb.invoke("), sent


def test_invoke_inside_the_callers_transaction_stays_in_it(reminders, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        client = Client(conn)
        task = client.begin_task("u1", "c1", authenticated=True, lang="en")
        with conn.transaction():
            sent = sent_queries(conn, lambda: client.invoke(task, "add_reminder", ADD))
            assert not any(q.upper().startswith(("BEGIN", "COMMIT")) for q in sent), sent
            raise_rollback(conn)
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 0


def raise_rollback(conn: psycopg.Connection) -> None:
    """Leave the caller's transaction by rolling it back: the call went with it."""
    raise psycopg.Rollback()
