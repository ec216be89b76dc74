"""docs/sql-api.md states each entry point's signature in an illustrative block (a signature is not
runnable SQL). This holds those blocks to the installed functions: every documented signature is
the real one (argument names, types, defaults, result), and every function a runtime may call is
documented."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "sql-api.md"
SIGNATURE = re.compile(
    r"agentdb\.(\w+)\((.*?)\)\s*RETURNS\s+(TABLE\s*\(.*?\)|[\w\[\] ]+?)\s*(?=agentdb\.|$)", re.S)


def canonical(db, args: str, result: str) -> tuple[str, str]:
    """One spelling of an argument list and a result: single spaces, lower case, and each default
    evaluated by the server in the argument's type (the doc's '1 hour' is the catalogue's
    '01:00:00'::interval)."""
    def spaced(text: str) -> str:
        text = re.sub(r"\s+", " ", text).strip().lower()
        return text.replace("( ", "(").replace(" )", ")").replace("table (", "table(")

    out = []
    for arg in filter(None, (a.strip() for a in spaced(args).split(", "))):
        head, _, default = arg.partition(" default ")
        if default:
            kind = head.split(" ", 1)[1]
            value = db.execute(f"SELECT ({default})::{kind}::text").fetchone()[0]
            head += f" default {value!r}"
        out.append(head)
    return ", ".join(out), spaced(result)


def documented(db) -> dict[str, list[tuple[str, str]]]:
    blocks = re.findall(r"<!-- illustrative -->\n```sql\n(.*?)```", DOC.read_text(), re.S)
    found: dict[str, list[tuple[str, str]]] = {}
    for block in blocks:
        for name, args, result in SIGNATURE.findall(re.sub(r"--[^\n]*", "", block)):
            found.setdefault(name, []).append(canonical(db, args, result))
    return found


def installed(db) -> dict[str, list[tuple[str, str]]]:
    rows = db.execute("""
        SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
        FROM pg_proc AS p
        WHERE p.pronamespace = 'agentdb'::regnamespace AND p.prokind = 'f'""").fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for name, args, result in rows:
        found.setdefault(name, []).append(canonical(db, args, result))
    return found


def test_the_doc_has_signatures_to_check(db):
    assert len(documented(db)) >= 40  # the parser still reads the doc's blocks


def test_every_documented_signature_is_the_installed_one(db):
    have = installed(db)
    wrong = {name: (sig, have.get(name)) for name, sigs in documented(db).items() for sig in sigs
             if sig not in have.get(name, [])}
    assert not wrong, "docs/sql-api.md differs from the installed functions:\n" + "\n".join(
        f"{name}: doc {doc}, installed {real}" for name, (doc, real) in sorted(wrong.items()))



def test_every_function_is_documented(db):
    missing = sorted(set(installed(db)) - set(documented(db)))
    assert not missing, f"agentdb functions with no signature in docs/sql-api.md: {missing}"
