"""Claim detection without a database: the same patterns and the same algorithm as
agentdb.detect_claims in SQL (sql/55_claims.sql), read from sql/claim_patterns.json.

A claim is a sentence piece in which the model says an action is already done
("已为您设置", "I've booked"). Questions, offers, future or conditional forms,
negations, progress and drafts are not claims. Detection only finds what was
said; whether it is true is decided by the database (agentdb.pending_claims).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

import regex

from . import resources

KINDS = ("create", "update", "delete", "done")


@dataclass(frozen=True)
class Claim:
    kind: str
    text: str
    start: int  # character offset, 0-based, end exclusive (as Python slices)
    end: int
    lang: str | None  # None for a clause too long to search

    def as_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "start": self.start, "end": self.end, "lang": self.lang}


@lru_cache(maxsize=1)
def patterns() -> dict:
    path = resources.claim_patterns_path()
    return json.loads(path.read_text(encoding="utf-8"))


# Flag "i" folds ASCII letters only (re.IGNORECASE would also fold İ, ı, ſ, K): the
# clause is matched lowered, as agentdb.detect_claims does. Lowering keeps offsets.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class _Longest:
    """Matches as PostgreSQL's regex engine does: leftmost, then longest. Python's re would take,
    where a pattern's alternatives end in different places, the first that matches. The start is
    found by re (fast, and the leftmost start does not depend on the engine), the end by the
    regex module in POSIX mode, only where there is a match."""

    def __init__(self, pattern: str):
        self.fast = re.compile(pattern)
        self.longest = regex.compile(pattern, flags=regex.POSIX | regex.VERSION0)

    def spans(self, text: str, limit: int | None = None):
        """Matches one after another, each searched from where the last ended; at most `limit`."""
        pos, tries = 0, 0
        while pos < len(text) and (limit is None or tries < limit):
            tries += 1
            found = self.fast.search(text, pos)
            if found is None:
                return
            start = found.start()
            longest = self.longest.match(text, start)
            end = longest.end() if longest is not None else found.end()
            yield start, end
            pos = end if end > start else start + 1


@lru_cache(maxsize=8)
def _compiled(lang: str):
    spec = patterns()["languages"][lang]
    fold = "i" in (spec.get("flags") or "")
    every = [*spec["exclude"], *(c["pattern"] for c in spec["claims"])]
    if fold and any(re.search("[A-Z]", p) for p in every):
        # As agentdb_private.load_claim_patterns refuses it: a lowered clause never matches upper case.
        raise ValueError(f"a claim pattern of {lang!r} (flag i) has an upper-case letter: use lower case")
    # Exclusions and the script are only tested for a match: where it ends does not matter.
    exclude = [re.compile(p) for p in spec["exclude"]]
    claims = [(c["kind"], _Longest(c["pattern"])) for c in spec["claims"]]
    script = re.compile(spec["script"]) if spec.get("script") else None
    return exclude, claims, script, fold


@lru_cache(maxsize=8)
def _labels(lang: str) -> list[tuple[str, re.Pattern]]:
    """The clause recognisers of a language, in byte order of their names (as in SQL)."""
    spec = patterns()["languages"][lang].get("labels") or {}
    return [(name, re.compile(spec[name])) for name in sorted(spec)]


@lru_cache(maxsize=1)
def _question_sep() -> re.Pattern | None:
    sep = patterns().get("question_sep")
    return re.compile(sep) if sep else None


@lru_cache(maxsize=1)
def _split():
    return _Longest(patterns()["clause_split"])


def _clauses(text: str):
    """(start, clause) pieces of text between clause separators."""
    pos = 0
    for start, end in _split().spans(text):
        if start > pos:
            yield pos, text[pos:start]
        pos = max(end, pos + 1) if end == start else end
    if pos < len(text):
        yield pos, text[pos:]


def _pieces(text: str):
    """(start, clause, separator after it or None) for every piece between separators, empty
    ones included: the cuts regexp_split_to_array makes in SQL."""
    pos = 0
    for start, end in _split().spans(text):
        yield pos, text[pos:start], text[start:end]
        pos = end
    yield pos, text[pos:], None


def read_clauses(text: str | None) -> list[dict]:
    """The clauses of `text` and what each is recognised as, exactly as
    agentdb_private.read_clauses: [{start, end, labels}], labels sorted. A label is given when
    its regex matches the clause in a language whose script the clause holds; "question" when
    the separator after the clause matches question_sep; "blank" when the clause holds no
    language's script. Clauses of spaces only are left out."""
    if not text:
        return []
    max_clause = patterns().get("max_clause")
    question = _question_sep()
    out = []
    for start, whole, sep in _pieces(text):
        clause = whole[:max_clause] if max_clause else whole
        if not clause.strip(" "):
            continue
        labels: set[str] = set()
        scripted = False
        for code in sorted(patterns()["languages"]):
            _exclude, _claims, script, fold = _compiled(code)
            if script is not None and not script.search(clause):
                continue
            scripted = True
            subject = clause.translate(_ASCII_LOWER) if fold else clause
            labels.update(name for name, rx in _labels(code) if name not in labels and rx.search(subject))
        if not scripted:
            labels.add("blank")
        if sep is not None and question is not None and question.search(sep):
            labels.add("question")
        out.append({"start": start, "end": start + len(whole), "labels": sorted(labels)})
    return out


def detect_claims(text: str | None, lang: str | None = None) -> list[Claim]:
    """Claims of completed actions in `text`; `lang` 'zh', 'en' or None for every language."""
    if not text:
        return []
    if lang is not None and lang not in patterns()["languages"]:
        raise ValueError(f"no claim patterns for language {lang!r}")
    langs = [lang] if lang is not None else sorted(patterns()["languages"])
    max_clause = patterns().get("max_clause")
    cap = patterns().get("max_per_kind")
    counts: dict[str, int] = {}
    found: list[Claim] = []
    for offset, whole in _clauses(text):
        # Only the clause's first max_clause characters are searched, as in SQL.
        clause = whole[:max_clause] if max_clause else whole
        taken: list[tuple[int, int]] = []
        for code in langs:
            exclude, claims, script, fold = _compiled(code)
            if script is not None and not script.search(clause):
                continue  # no word of this language here: none of its claims can match
            subject = clause.translate(_ASCII_LOWER) if fold else clause
            if any(p.search(subject) for p in exclude):
                continue
            for kind, pattern in claims:
                if cap is not None and counts.get(kind, 0) >= cap:
                    continue  # one more claim of this kind would not change its verdict
                if pattern.fast.search(subject) is None:
                    continue  # the common case, without a generator
                for span in pattern.spans(subject, cap):
                    if span[0] == span[1] or any(s < span[1] and span[0] < e for s, e in taken):
                        continue
                    taken.append(span)
                    text = clause[span[0] : span[1]]
                    found.append(Claim(kind, text, offset + span[0], offset + span[1], code))
                    counts[kind] = counts.get(kind, 0) + 1
                    if cap is not None and counts[kind] >= cap:
                        break
        if max_clause and len(whole) > max_clause and (cap is None or counts.get("done", 0) < cap):
            # A clause longer than what is searched is itself a claim that something is done.
            found.append(Claim("done", whole[:60], offset, offset + min(60, len(whole)), None))
            counts["done"] = counts.get("done", 0) + 1
    return sorted(found, key=lambda c: (c.start, c.end))
