"""Claim detection: the labelled corpus (tests/data/claims_corpus.tsv) through both detectors.

The Python detector (pyagentdb.detect_claims) and the SQL one (agentdb.detect_claims) must
return the same claims, offsets included, on every line; on the corpus both must reach
recall >= 0.97 (the detected set of kinds equals the labelled one) and a false-positive
rate <= 0.02 (a claim found on a line labelled "-"). The scoring is bench/claims_eval.py's.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import psycopg
import pytest

from pyagentdb import detect_claims
from pyagentdb.claims import KINDS, patterns

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("claims_eval", ROOT / "bench" / "claims_eval.py")
claims_eval = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("claims_eval", claims_eval)  # dataclasses look their module up there
_spec.loader.exec_module(claims_eval)

CORPUS = claims_eval.load_corpus(ROOT / "tests" / "data" / "claims_corpus.tsv")


def sql_detect(db, text, lang=None):
    return db.execute("SELECT agentdb.detect_claims(%s, %s)", (text, lang)).fetchone()[0]


def py_detect(text, lang=None):
    return [c.as_dict() for c in detect_claims(text, lang)]


def test_corpus_shape():
    assert len(CORPUS) >= 200
    assert {ln.lang for ln in CORPUS} == {"zh", "en"}
    for lang in ("zh", "en"):
        lines = [ln for ln in CORPUS if ln.lang == lang]
        claims = sum(bool(ln.expected) for ln in lines)
        assert claims >= 50 and len(lines) - claims >= 50, (lang, claims, len(lines))
    assert {k for ln in CORPUS for k in ln.expected} == set(KINDS)
    texts = [ln.text for ln in CORPUS]
    assert len(texts) == len(set(texts)), "a reply appears twice"


def test_python_and_sql_agree_on_every_line(db):
    py = claims_eval.python_claims(CORPUS)
    sql = claims_eval.sql_claims(db, CORPUS)
    assert claims_eval.disagreements(CORPUS, py, sql) == []


def test_python_and_sql_agree_with_a_language_given(db):
    py = claims_eval.python_claims(CORPUS, lang_hint=True)
    sql = claims_eval.sql_claims(db, CORPUS, lang_hint=True)
    assert claims_eval.disagreements(CORPUS, py, sql) == []


def test_python_and_sql_agree_on_spliced_text(db):
    """Pieces of corpus replies glued with separators, spaces and case changes: the places
    where PostgreSQL (longest match) and Python (first alternative) could part ways."""
    rng = random.Random(20240501)
    glue = ["", " ", "\u3000", "\u00a0", "\n", "。", "，", ". ", ", ", "! ", "？", " — ", " and ",
            ": ", "：", "’"]
    texts = [ln.text for ln in CORPUS]
    samples = []
    for _ in range(400):
        parts = []
        for _ in range(rng.randint(1, 3)):
            t = rng.choice(texts)
            a = rng.randint(0, len(t))
            parts.append(t[a:rng.randint(a, len(t))] if rng.random() < 0.5 else t)
            parts.append(rng.choice(glue))
        s = "".join(parts)
        samples.append(s.upper() if rng.random() < 0.15 else s)
    rows = db.execute(
        "SELECT agentdb.detect_claims(t.x) FROM unnest(%s::text[]) WITH ORDINALITY AS t (x, i) ORDER BY t.i",
        (samples,)).fetchall()
    bad = [(s, py_detect(s), r[0]) for s, r in zip(samples, rows, strict=True) if py_detect(s) != r[0]]
    assert bad == []


@pytest.mark.parametrize("detector", ["python", "sql"])
def test_recall_and_false_positives_meet_the_targets(db, detector):
    found = (claims_eval.python_claims(CORPUS) if detector == "python"
             else claims_eval.sql_claims(db, CORPUS))
    scores = claims_eval.score(CORPUS, found)
    g = scores["all"]
    report = json.dumps({"misses": g["misses"], "false_positives": g["false_positives"]},
                        ensure_ascii=False, indent=1)
    assert g["recall_strict"] >= claims_eval.TARGET_RECALL, report
    assert g["fp_rate"] <= claims_eval.TARGET_FP, report
    for lang in ("zh", "en"):
        assert scores[lang]["recall_strict"] >= claims_eval.TARGET_RECALL, (lang, report)
        assert scores[lang]["fp_rate"] <= claims_eval.TARGET_FP, (lang, report)


def test_offsets_slice_the_text(db):
    texts = [ln.text for ln in CORPUS if ln.expected] + [
        "🎉🎉 搞定了！I’ve booked court 3 👍 and 已为您设置明早8点的提醒。",
        "\u3000\u3000已删除。\n\nDone.",
    ]
    for text in texts:
        claims = py_detect(text)
        for c in claims:
            assert text[c["start"]:c["end"]] == c["text"], (text, c)
            assert c["kind"] in KINDS and c["lang"] in ("zh", "en")
        assert sql_detect(db, text) == claims
        assert [(c["start"], c["end"]) for c in claims] == sorted((c["start"], c["end"]) for c in claims)
    assert [c["kind"] for c in py_detect(texts[-2])] == ["done", "create", "create"]


def test_language_filter(db):
    text = "I've booked court 3. 已为您设置明天8点的提醒。"
    both = py_detect(text)
    assert [(c["lang"], c["kind"]) for c in both] == [("en", "create"), ("zh", "create")]
    assert py_detect(text, "en") == [both[0]]
    assert py_detect(text, "zh") == [both[1]]
    for lang in (None, "en", "zh"):
        assert sql_detect(db, text, lang) == py_detect(text, lang)
    # each language's exclusions apply to its own patterns only
    assert py_detect("Shall I book it?", "en") == [] and py_detect("要我帮你预约吗？", "zh") == []


def test_empty_and_null_text(db):
    assert detect_claims(None) == [] and detect_claims("") == []
    assert sql_detect(db, None) == [] and sql_detect(db, "") == []
    assert py_detect("   ") == sql_detect(db, "   ") == []


def test_unknown_language_is_an_error(db):
    with pytest.raises(ValueError, match="no claim patterns"):
        detect_claims("I've booked it.", "fr")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no claim patterns"):
        sql_detect(db, "I've booked it.", "fr")


def test_patterns_stay_in_the_shared_regex_subset():
    """What PostgreSQL and Python read differently: \\b (backspace in PostgreSQL), \\s and case
    folding beyond ASCII (locale-dependent in PostgreSQL), lookaround, backreferences and
    non-greedy quantifiers."""
    doc = patterns()
    regexes = [doc["clause_split"]]
    for spec in doc["languages"].values():
        regexes += spec["exclude"] + [c["pattern"] for c in spec["claims"]]
        assert all(c["kind"] in KINDS for c in spec["claims"])
        assert len(spec.get("exclude_notes", spec["exclude"])) == len(spec["exclude"])
    for rx in regexes:
        re.compile(rx)
        assert not re.search(r"\\[bBsSwWdD]|\\[1-9]|\(\?|[*+?}]\?", rx), rx
