"""The claim patterns as the database holds them: compiled per language by
agentdb_private.load_claim_patterns into agentdb_private.claim_langs and into the constant
that agentdb.detect_claims' cached plans hold. A reload must reach sessions that already
detected with the old patterns, and a document either engine would read wrongly is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import psycopg
import pytest
from helpers import begin
from psycopg.types.json import Jsonb

from pyagentdb import claims
from pyagentdb.claims import kind_alternations, kind_order, patterns


def load(conn: psycopg.Connection, doc: dict) -> None:
    conn.execute("SELECT agentdb_private.load_claim_patterns(%s)", (Jsonb(doc),))


def detect(conn: psycopg.Connection, text: str, lang: str | None = None) -> list[dict]:
    return conn.execute("SELECT agentdb.detect_claims(%s, %s)", (text, lang)).fetchone()[0]


def test_compiled_rows_follow_the_document(db):
    doc = patterns()
    rows = {r[0]: r[1:] for r in db.execute(
        "SELECT lang, flags, guarded, guard_kinds, claim_kinds, claim_res, claim_guards"
        " FROM agentdb_private.claim_langs ORDER BY lang")}
    assert sorted(rows) == sorted(doc["languages"])
    for lang, spec in doc["languages"].items():
        flags, guarded, guard_kinds, claim_kinds, claim_res, claim_guards = rows[lang]
        assert flags == spec.get("flags", "")
        assert not guarded  # each kind's alternation is its own guard
        # One alternation per kind, in kind_order, as the Python detector searches them, with
        # the same literal guard (LIKE patterns in SQL).
        kinds = kind_alternations(spec["claims"])
        assert list(zip(claim_kinds, claim_res, strict=True)) == [k[:2] for k in kinds]

        def unlike(p):
            return p[1:-1].replace("\\_", "_").replace("\\%", "%").replace("\\\\", "\\")

        like = [None if g is None else sorted(unlike(p) for p in g.split("\n")) for g in claim_guards]
        assert like == [None if k[2] is None else sorted(k[2]) for k in kinds]
        assert claim_kinds == [k for k in kind_order() if any(c["kind"] == k for c in spec["claims"])]
        assert guard_kinds == claim_kinds
    # The constants the gate reads hold the same rows as the tables.
    same = db.execute(
        "SELECT agentdb_private.claim_langs_compiled()"
        " = ARRAY(SELECT l FROM agentdb_private.claim_langs AS l ORDER BY l.lang)"
        " AND agentdb_private.fact_rules_compiled()"
        " = ARRAY(SELECT f FROM agentdb_private.fact_rules AS f ORDER BY f.lang, f.n)").fetchone()[0]
    assert same
    rules = db.execute("SELECT count(*) FROM agentdb_private.fact_rules").fetchone()[0]
    assert rules == sum(len(r) for r in doc["facts"]["languages"].values())


def test_literal_guards_are_written_from_the_patterns_and_hold_on_every_corpus():
    """Each claim's "any" is what required_literals reads from its pattern (so the document
    cannot drift from its patterns: `python bench/format_patterns.py sql/claim_patterns.json
    --guards` rewrites them), and on every clause of every corpus a pattern or lexicon entry
    that matches holds one of its strings: a guard never hides a match."""
    import re

    doc = patterns()
    for spec in doc["languages"].values():
        for claim in spec["claims"]:
            assert claim.get("any") == claims.required_literals(claim["pattern"]), claim["pattern"][:60]
    data = Path(__file__).parent / "data"
    texts = [line.rstrip("\n").split("\t")[-1].replace("\\n", "\n")
             for path in sorted(data.glob("*.tsv")) if path.name.startswith(("claims_", "gate_"))
             for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert len(texts) > 3000
    checks = []
    for code, spec in doc["languages"].items():
        checks += [(code, re.compile(c["pattern"]), c["any"]) for c in spec["claims"] if "any" in c]
        lexicon = doc["classes"]["lexicon"].get(code, [])
        checks += [(code, re.compile(e[1]), e[2]) for e in lexicon if len(e) > 2]
    for text in texts:
        norm = claims.normalise(text)
        for _start, clause in claims._clauses(norm):
            for code, rx, guards in checks:
                subject = claims._fold(code, clause)
                if rx.search(subject):
                    assert any(g in subject for g in guards), (rx.pattern[:60], clause)


def test_python_prefilter_sets_the_bits_of_every_guard_a_clause_holds():
    """The Python reader's one scan per clause and language (claims._Scan) sets exactly the bits
    of the guards whose strings the clause holds, and of those without a guard: the same as
    testing every guard's strings one by one, on every clause of the gate corpora. And each
    pattern it searches by its top-level alternatives is cut where they join."""
    data = Path(__file__).parent / "data"
    texts = [line.rstrip("\n").split("\t")[-1].replace("\\n", "\n")
             for path in sorted(data.glob("gate_*.tsv"))
             for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert len(texts) > 1000
    texts += ["abcd bcd", "n't n’t I'll", "已为您 为您设置"]
    for lang in claims._langs():
        guards = lang.scan.guards
        for text in texts:
            for piece in claims._cut(claims.normalise(text)):
                subject, mask = piece.view(lang)
                want = sum(1 << i for i, g in enumerate(guards) if g is None or any(s in subject for s in g))
                assert mask == want, (lang.code, subject)
    for spec in patterns()["languages"].values():
        for pattern in [*spec["exclude"], *(c["pattern"] for c in spec["claims"]), *spec["labels"].values()]:
            assert "|".join(claims._alternatives(pattern)) == pattern
    assert claims._alternatives(r"a[|\]]b|(c|d)|\|e|[]|]") == [r"a[|\]]b", "(c|d)", r"\|e", "[]|]"]


def test_a_reload_reaches_a_session_that_already_detected(db, dsn):
    other = psycopg.connect(dsn, autocommit=True)
    try:
        text = "I've booked the court for Friday."
        # Warm the other session: its plans now hold the loaded patterns.
        for _ in range(3):
            assert [c["kind"] for c in detect(other, text)] == ["create"]
        narrowed = copy.deepcopy(patterns())
        en = narrowed["languages"]["en"]
        en["claims"] = [c for c in en["claims"] if c["kind"] != "create"]
        load(db, narrowed)
        assert detect(other, text) == []
        load(db, patterns())
        assert [c["kind"] for c in detect(other, text)] == ["create"]
    finally:
        other.close()


def test_a_reload_with_an_unchanged_document_keeps_the_answers(db):
    text = "好的，已为您设置明天早上8点的提醒。I've also moved the meeting to 3pm."
    before = detect(db, text)
    load(db, patterns())
    assert detect(db, text) == before
    assert before == [c.as_dict() for c in claims.detect_claims(text)]


def _set(path, value):
    def mutate(doc):
        *parents, last = path
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value
    return mutate


@pytest.mark.parametrize("mutate, message", [
    (_set(["languages", "en", "flags"], "x"), "flags must be empty or i"),
    (_set(["languages", "en", "claims", 0, "pattern"], "I've BOOKED"), "upper-case letter"),
    (lambda d: d["languages"]["en"]["exclude"].append("NOT"), "upper-case letter"),
    (_set(["languages"], []), "has no languages"),
    (_set(["languages"], {}), "has no languages"),
    (_set(["languages", "en", "claims", 0, "pattern"], "(booked"), "not a valid regex"),
    (lambda d: d["languages"]["zh"]["exclude"].append("[没"), "not a valid regex"),
    (_set(["languages", "en", "script"], "[a-"), "not a valid regex"),
    (_set(["clause_split"], "(,"), "not a valid regex"),
    (_set(["clause_split"], ",|x*"), "matches an empty string"),
    (lambda d: d.pop("clause_split"), "clause_split must be"),
    (_set(["max_clause"], 0), "max_clause"),
    (_set(["max_clause"], "400"), "max_clause"),
    (_set(["languages", "en", "claims", 0, "kind"], "teleport"), "kind"),
    (_set(["languages", "en", "claims", 0, "pattern"], 42), "pattern string"),
    (_set(["languages", "en", "claims"], []), "non-empty claims"),
    (_set(["languages", "en"], "en"), "non-empty claims"),
    (lambda d: d["languages"]["en"].pop("exclude"), "exclude array"),
    (_set(["languages", "en", "precheck"], "maybe"), "boolean precheck"),
    (_set(["languages", "en", "exclude", 0], ["not"]), "exclusion must be"),
    (_set(["max_clause"], 400.5), "max_clause"),
    (_set(["max_per_kind"], 0), "max_per_kind"),
    (_set(["languages", "en", "flags"], None), "flags must be"),
    (_set(["languages", "en", "claims", 0, "pattern"], "a.*?b"), "outside the subset"),
    (_set(["languages", "en", "claims", 0, "pattern"], "x[[:digit:]]+"), "outside the subset"),
    (lambda d: d["languages"]["en"]["exclude"].append("(?i)never"), "outside the subset"),
    (lambda d: d["languages"]["en"]["exclude"].append("***=a.b"), "outside the subset"),
    (_set(["clause_split"], ",|(?=z)"), "outside the subset"),
    (_set(["clause_split"], "[,.]"), "cut at a newline"),
    (_set(["did"], ["i grabbed"]), "must map language codes to pattern strings"),
    (_set(["did", "en"], 7), "must map language codes to pattern strings"),
    (_set(["extra", "zh"], ["并"]), "must map language codes to pattern strings"),
    (_set(["reason", "en"], "(since"), "not a valid regex"),
    (_set(["extra_any", "en"], ["ALSO"]), "lists of lower-case strings"),
    (_set(["extra_any", "zh"], "也"), "lists of lower-case strings"),
    (_set(["did", "en"], "(i grabbed"), "not a valid regex"),
    (_set(["did", "zh"], "帮你.*?订"), "outside the subset"),
    (_set(["recovered"], "it worked"), "must map language codes to pattern strings"),
    (_set(["recovered", "en"], "(it worked"), "not a valid regex"),
    (_set(["recovered", "zh"], "就.*?成功了"), "outside the subset"),
    (_set(["recovered_not", "en"], ["seemed"]), "must map language codes to pattern strings"),
])
def test_a_document_either_engine_would_misread_is_refused(db, mutate, message):
    rules = "SELECT doc, fingerprint, loaded_at FROM agentdb_private.claim_rules"
    before = db.execute(rules).fetchall()
    compiled = db.execute("SELECT agentdb_private.claim_langs_compiled()::text").fetchone()[0]
    doc = copy.deepcopy(patterns())
    mutate(doc)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        load(db, doc)
    # Nothing was replaced: the document, its fingerprint and the compiled constant are the same.
    assert db.execute(rules).fetchall() == before
    assert db.execute("SELECT agentdb_private.claim_langs_compiled()::text").fetchone()[0] == compiled


def test_reapplying_the_sql_file_keeps_the_loaded_patterns(db):
    from pyagentdb import resources

    before = db.execute("SELECT agentdb_private.claim_langs_compiled()::text").fetchone()[0]
    assert before != "{}"
    (path,) = [p for p in resources.sql_files() if p.name == "55_claims.sql"]
    db.execute(path.read_text(encoding="utf-8"))
    assert db.execute("SELECT agentdb_private.claim_langs_compiled()::text").fetchone()[0] == before
    assert [c["kind"] for c in detect(db, "I've booked it.")] == ["create"]


def test_python_refuses_an_upper_case_pattern_too(monkeypatch):
    doc = copy.deepcopy(patterns())
    doc["languages"]["en"]["claims"][0]["pattern"] = "BOOKED"
    monkeypatch.setattr(claims, "patterns", lambda: doc)
    claims._compiled.cache_clear()
    try:
        with pytest.raises(ValueError, match="upper-case letter"):
            claims.detect_claims("BOOKED it", "en")
    finally:
        claims._compiled.cache_clear()


def test_not_loaded_is_a_clear_error(db):
    # The state of a database where sql/ was applied by hand and the patterns never loaded:
    # the compiled constant is still the empty placeholder.
    db.execute("DELETE FROM agentdb_private.claim_langs")
    db.execute(
        "CREATE OR REPLACE FUNCTION agentdb_private.claim_langs_compiled()"
        " RETURNS agentdb_private.claim_langs[] LANGUAGE sql IMMUTABLE"
        " AS $$ SELECT '{}'::agentdb_private.claim_langs[] $$")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="not loaded") as err:
        detect(db, "I've booked it.")
    assert "pyagentdb install" in (err.value.diag.message_hint or "")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        detect(db, "I've booked it.", "en")


def test_unknown_language_after_a_load(db):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no claim patterns for language xx"):
        detect(db, "hello", "xx")


def test_separators_and_offsets_over_many_clauses(db):
    # Offsets are counted over clauses and the separators between them (found in one pass).
    text = "。".join(["还有别的需要吗"] * 30 + ["已为您取消周五的预约"])
    text += "! Done: moved it to 5pm and all set."
    got = detect(db, text)
    assert got == [c.as_dict() for c in claims.detect_claims(text)]
    for c in got:
        assert text[c["start"]:c["end"]] == c["text"]
    assert {c["kind"] for c in got} >= {"delete", "done"}
    assert json.dumps(got, ensure_ascii=False)


def test_doctor_tells_when_the_database_detects_with_other_patterns(db):
    from pyagentdb import doctor

    assert not [p for p in doctor.check(db)["problems"] if "claim patterns" in p]
    narrowed = copy.deepcopy(patterns())
    narrowed["languages"]["en"]["claims"].pop()
    load(db, narrowed)
    problems = [p for p in doctor.check(db)["problems"] if "claim patterns" in p]
    assert problems and "pyagentdb install --force" in problems[0]
    load(db, patterns())
    report = doctor.check(db)
    assert not [p for p in report["problems"] if "claim patterns" in p]
    assert report["claim_patterns_version"] == patterns()["version"]


# -- claims detected by the runtime, passed with the patterns' fingerprint ----------------

LIE = "Sure, I've set a reminder for 8am tomorrow."


def fingerprint(conn, doc=None):
    return conn.execute("SELECT agentdb.claim_patterns_fingerprint(%s)",
                        (Jsonb(doc) if doc is not None else None,)).fetchone()[0]


def finalize(conn, task, text, claims_arg):
    return conn.execute("SELECT agentdb.finalize_reply(%s, %s, %s)",
                        (task, text, Jsonb(claims_arg) if claims_arg is not None else None)).fetchone()[0]


def test_fingerprint_names_the_loaded_document_only(db):
    fp = fingerprint(db, patterns())
    assert fp and fp == fingerprint(db)
    other = copy.deepcopy(patterns())
    other["languages"]["en"]["claims"].pop()
    assert fingerprint(db, other) is None
    load(db, other)
    assert fingerprint(db, other) not in (None, fp)
    assert fingerprint(db, patterns()) is None


def test_runtime_claims_with_the_fingerprint_are_used_as_detected(reminders):
    task = begin(reminders, lang="en")
    found = [c.as_dict() for c in claims.detect_claims(LIE)]
    verdict = finalize(reminders, task, LIE, {"patterns": fingerprint(reminders), "claims": found})
    assert verdict["claims_from"] == "runtime" and verdict["verdict"] == "replace"
    assert verdict["claims"] == found
    stored = reminders.execute(
        "SELECT kind, claim_text, span_start, span_end, source FROM agentdb_private.claims"
        " WHERE task_id = %s", (task,)).fetchall()
    assert stored == [(c["kind"], c["text"], c["start"], c["end"], "runtime") for c in found]
    payload = reminders.execute(
        "SELECT payload FROM agentdb_private.audit WHERE task_id = %s AND action = 'reply'",
        (task,)).fetchone()[0]
    assert payload["claims_from"] == "runtime"


@pytest.mark.parametrize("stale", [
    "not-the-fingerprint",
    None,
    "",
])
def test_a_runtime_with_other_patterns_cannot_hide_a_claim(reminders, stale):
    task = begin(reminders, lang="en")
    # A runtime that found nothing, with the wrong fingerprint: the database detects itself.
    verdict = finalize(reminders, task, LIE, {"patterns": stale, "claims": []})
    assert verdict["claims_from"] == "database"
    assert verdict["verdict"] == "replace" and [p["kind"] for p in verdict["pending"]] == ["create"]


@pytest.mark.parametrize("junk", [
    [{"kind": "teleport", "start": "x", "end": 1e300, "text": 5, "lang": {"a": 1}}],
    ["just a string", 42, None, [1, 2]],
    [{"kind": "create", "start": -3, "end": 2.7, "text": "y" * 10_000}],
])
def test_odd_runtime_claims_are_normalised_not_an_error(reminders, junk):
    task = begin(reminders, lang="en")
    verdict = finalize(reminders, task, LIE, {"patterns": fingerprint(reminders), "claims": junk})
    assert verdict["claims_from"] == "runtime" and verdict["verdict"] == "replace"
    for c in verdict["claims"]:
        assert c["kind"] in claims.KINDS
        assert c["start"] is None or 0 <= c["start"] <= 100_000
        assert c["end"] is None or 0 <= c["end"] <= 100_000
        assert c["text"] is None or len(c["text"]) <= 500
    if junk[0] == {"kind": "teleport", "start": "x", "end": 1e300, "text": 5, "lang": {"a": 1}}:
        assert verdict["claims"][0]["start"] is None and verdict["claims"][0]["end"] is None


def test_only_the_runtime_role_asks_for_the_fingerprint(db, role_connect):
    assert fingerprint(role_connect("agentdb_app"), patterns())
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        fingerprint(role_connect("agentdb_agent"))


def test_the_python_gate_detects_here_and_follows_a_reload(reminders):
    from pyagentdb import Client

    client = Client(reminders)
    first = client.finalize_reply(begin(reminders, lang="en", conversation="a"), LIE)
    assert first.claims_from == "runtime" and first.replaced
    # The database's patterns change under a running client: it falls back, then asks again.
    other = copy.deepcopy(patterns())
    other["languages"]["en"]["claims"].pop()
    load(reminders, other)
    second = client.finalize_reply(begin(reminders, lang="en", conversation="b"), LIE)
    assert second.claims_from == "database" and second.replaced
    assert client.claim_patterns_fingerprint() is None  # refreshed: these are not the package's
    third = client.finalize_reply(begin(reminders, lang="en", conversation="c"), LIE)
    assert third.claims_from == "database"
    load(reminders, patterns())
    assert client.claim_patterns_fingerprint(refresh=True)
    assert client.finalize_reply(begin(reminders, lang="en", conversation="d"), LIE).claims_from == "runtime"
    off = Client(reminders, detect_claims_here=False)
    assert off.finalize_reply(begin(reminders, lang="en", conversation="e"), LIE).claims_from == "database"


# -- the two detectors on text made to part them ----------------------------------------

def _corpus_texts() -> list[str]:
    from pathlib import Path

    path = Path(__file__).parent / "data" / "claims_corpus.tsv"
    return [line.split("\t")[2] for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def _sql_many(db, texts):
    rows = db.execute(
        "SELECT agentdb.detect_claims(t.x) FROM unnest(%s::text[]) WITH ORDINALITY AS t (x, i) ORDER BY t.i",
        (texts,)).fetchall()
    return [r[0] for r in rows]


def test_alternatives_that_end_in_different_places_give_the_same_span(db):
    # Found by review: Python's re took the first alternative that matched, PostgreSQL the
    # longest, and the spans then decided which later match the overlap rule dropped. Here the
    # create alternation's longest match at 0 ("Booked tomorrow's", 0-18) overlaps the update
    # found first (17-27) and is dropped; its first alternative (0-16) would not have been.
    texts = ["Booked tomorrow's we moved has been cancelled",
             "给你安排查挪过去把提醒预约完成了提醒帮你改成"]
    assert _sql_many(db, texts) == [[c.as_dict() for c in claims.detect_claims(t)] for t in texts]
    kinds = {c["kind"] for c in _sql_many(db, texts[:1])[0]}
    assert kinds == {"update"}


def test_detectors_agree_on_fragments_shuffled_together(db):
    """Pieces of corpus lines cut at random places (words for en, 1-4 characters for zh) and
    glued in random order: text no one wrote, made of the words the patterns look for."""
    import random

    rng = random.Random(20261130)
    texts = _corpus_texts()
    zh_bits = [t[i:i + rng.randint(1, 4)] for t in texts if not t.isascii() for i in range(0, len(t), 3)]
    en_bits = [w for t in texts if t.isascii() for w in t.split()]
    samples = []
    for _ in range(2500):
        bits = zh_bits if rng.random() < 0.5 else en_bits
        glue = "" if bits is zh_bits else " "
        samples.append(glue.join(rng.choice(bits) for _ in range(rng.randint(2, 14))))
    sql = _sql_many(db, samples)
    bad = [(s, r) for s, r in zip(samples, sql, strict=True)
           if r != [c.as_dict() for c in claims.detect_claims(s)]]
    assert bad == []


@pytest.mark.parametrize("text", [
    "把" * 100_000,
    "已" * 100_000,
    "已为您" * 33_000 + "查",
    "i've " * 20_000,
    ("已为您把提醒改到了" + "x" * 10) * 5_000,
    # Found by review: with a separator every few hundred characters the cap on a clause's length
    # did not bound the database's work (8 s at 16 kB), because every match was kept.
    ("搞定" * 200 + "，") * 250,
    ("已为您" * 133 + "，") * 250,
    ("把" * 399 + "，") * 250,
    "I've booked it, " * 6_000,
])
def test_a_pathological_text_is_bounded_work(db, text):
    # Not a speed measurement (that is bench/) and no wall-clock bound (it would fail under load):
    # a guard against runaway work. Before clauses were capped, the work grew with the square of a
    # clause's length (9 s at 8,000 characters, so hours at these 100,000); a generous statement
    # timeout catches that, and the answers must agree.
    py = [c.as_dict() for c in claims.detect_claims(text)]
    db.execute("SET statement_timeout = '300s'")
    assert detect(db, text) == py


def test_a_client_against_a_schema_without_fingerprints_lets_the_database_detect(reminders, dsn):
    from pyagentdb import Client

    reminders.execute("DROP FUNCTION agentdb.claim_patterns_fingerprint(jsonb)")
    verdict = Client(reminders).finalize_reply(begin(reminders, lang="en", conversation="old"), LIE)
    assert verdict.claims_from == "database" and verdict.replaced
    # Inside the caller's open transaction the failed probe does not abort it.
    with psycopg.connect(dsn) as conn:
        task = begin(conn, lang="en", conversation="tx")
        verdict = Client(conn).finalize_reply(task, LIE)
        assert verdict.claims_from == "database"
        assert conn.execute("SELECT count(*) FROM agentdb_private.replies WHERE task_id = %s",
                            (task,)).fetchone()[0] == 1


def test_a_downgrade_to_0005_leaves_nothing_of_0006_behind(db, dsn):
    from pyagentdb import install

    name = "claims_down_" + __import__("uuid").uuid4().hex[:8]
    db.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        target = psycopg.conninfo.make_conninfo(dsn, dbname=name)
        install.upgrade(target)
        install.downgrade(target, "0005")
        with psycopg.connect(target, autocommit=True) as conn:
            left = conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
                " WHERE p.proname IN ('claim_patterns_fingerprint', 'claim_is_backed', 'detect_claims_in',"
                " 'mark_shown', 'claim_langs_compiled')").fetchall()
            assert left == []
            assert conn.execute("SELECT to_regclass('agentdb_private.claim_langs')").fetchone()[0] is None
        install.upgrade(target)  # and back: the package's own sql/ re-applied
        with psycopg.connect(target, autocommit=True) as conn:
            assert [c["kind"] for c in detect(conn, "I've booked it.")] == ["create"]
    finally:
        db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")



def test_each_kind_keeps_at_most_max_per_kind_claims(db):
    text = "，".join(["已为您取消"] * 30 + ["搞定了"] * 30)
    got = detect(db, text)
    assert got == [c.as_dict() for c in claims.detect_claims(text)]
    cap = patterns()["max_per_kind"]
    assert sum(c["kind"] == "delete" for c in got) == cap
    assert sum(c["kind"] == "done" for c in got) == cap


def test_a_claim_cannot_hide_beyond_the_searched_part_of_a_clause(reminders):
    text = "Lorem ipsum dolor sit amet " * 15 + "I have booked your table"
    got = detect(reminders, text)
    assert got == [c.as_dict() for c in claims.detect_claims(text)]
    assert [(c["kind"], c["start"], c["end"]) for c in got] == [("done", 0, 60)]
    # On a task with no step, that reply is replaced, whoever detected.
    from pyagentdb import Client

    for here in (True, False):
        task = begin(reminders, lang="en", conversation=f"long-{here}")
        verdict = Client(reminders, detect_claims_here=here).finalize_reply(task, text)
        assert verdict.replaced and [p["kind"] for p in verdict.pending] == ["done"]


def test_a_long_reply_is_left_to_the_database(reminders):
    from pyagentdb import Client
    from pyagentdb.gate import DETECT_HERE_MAX

    text = ("Noted. " * (DETECT_HERE_MAX // 7 + 1)) + "I've booked it."
    verdict = Client(reminders).finalize_reply(begin(reminders, lang="en", conversation="longer"), text)
    assert verdict.claims_from == "database" and verdict.replaced


def test_the_governing_labels_are_one_alternation_per_language_built_at_load(db):
    # agentdb_private.clause_says_done asks, per language, one alternation of the labels that
    # govern a statement that something is done: built when the patterns are loaded, from the
    # document's "governs" list (default: nothing_done ... question), in that order.
    default = ["nothing_done", "ack", "attempt", "offer", "condition", "future", "draft", "question"]

    def governs():
        return db.execute("SELECT agentdb_private.claim_doc_compiled() -> 'governs'").fetchone()[0]

    def says_done(text):
        return db.execute("SELECT agentdb_private.clause_says_done(%s, %s, false)",
                          (text, Jsonb({"start": 0, "end": len(text)}))).fetchone()[0]

    for code, spec in patterns()["languages"].items():
        labels = spec["labels"]
        assert governs()[code] == "|".join(f"(?:{labels[g]})" for g in default if g in labels)
    assert says_done("I can get it all set") is None  # an offer governs the statement
    narrowed = copy.deepcopy(patterns())
    narrowed["governs"] = ["question"]
    load(db, narrowed)
    try:
        assert governs() == {c: f"(?:{s['labels']['question']})" for c, s in patterns()["languages"].items()}
        assert says_done("I can get it all set") == "states"  # an offer no longer does
    finally:
        load(db, patterns())
    assert says_done("I can get it all set") is None
