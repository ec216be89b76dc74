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
import unicodedata
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


def kind_order() -> list[str]:
    """The order in which the kinds' alternations are tried (the document's kind_order)."""
    return list(patterns().get("kind_order") or KINDS)


def kind_alternations(claims: list[dict]) -> list[tuple[str, str, tuple[str, ...] | None]]:
    """A language's claim patterns as one alternation per kind (its patterns in document order),
    in kind_order, with the kind's literal guard: what both detectors search, as
    agentdb_private.load_claim_patterns compiles it. One regex per kind instead of one per
    pattern keeps PostgreSQL's cache of compiled regexes (32 per session) from overflowing. The
    guard is every string of its patterns' "any" lists (None when a pattern has none): a clause
    holding none of them is not searched for the kind."""
    out = []
    for kind in kind_order():
        found = [c for c in claims if c["kind"] == kind]
        if found:
            guards = None
            if all("any" in c for c in found):
                guards = tuple(sorted({g for c in found for g in c["any"]}))
            out.append((kind, "|".join(f"(?:{c['pattern']})" for c in found), guards))
    return out


def _strength(literals) -> float:
    """How rarely the weakest of these strings occurs in a clause, roughly: its length, an
    ASCII character counting half (letters of words, not of a script of thousands)."""
    return min(sum(1 if ord(ch) > 127 else 0.5 for ch in s) for s in literals)


def _best(options):
    options = [o for o in options if o and "" not in o]
    if not options:
        return None
    return max(options, key=lambda o: (_strength(o) >= 2, -len(o), _strength(o)))


def required_literals(pattern: str, cap: int = 48, min_strength: float = 1.5) -> list[str] | None:
    """Strings one of which every match of `pattern` contains, or None when none are found:
    the "any" list of a claim pattern (`python bench/format_patterns.py --guards` writes them). Read
    from the pattern's syntax tree: a run of literals, a small character class and an optional
    part multiply out into exact strings (at most `cap`), an alternation needs a string of every
    alternative, a repetition of at least one needs its body's."""
    from re import _constants as C  # noqa: N812
    from re import _parser as P  # noqa: N812

    def seq(items):
        runs, reqs, cur, exact = [], [], {""}, True
        for op, av in items:
            ex, rq = item(op, av)
            if rq is not None:
                reqs.append(rq)
            if ex is not None and len(cur) * len(ex) <= cap:
                cur = {a + b for a in cur for b in ex}
            else:
                exact = False
                runs.append(cur)
                cur = ex if ex is not None else {""}
        runs.append(cur)
        return (cur if exact else None), _best(runs + reqs)

    def item(op, av):
        if op is C.LITERAL:
            return {chr(av)}, {chr(av)}
        if op is C.AT:
            return {""}, None
        if op is C.IN:
            chars = {chr(a) for o, a in av if o is C.LITERAL}
            if len(chars) != len(av) or len(chars) > 8:
                return None, None
            return chars, chars
        if op is C.SUBPATTERN:
            return seq(av[-1])
        if op is C.BRANCH:
            both = [seq(alt) for alt in av[1]]
            exs = [e for e, _ in both]
            exact = set().union(*exs) if None not in exs and sum(map(len, exs)) <= cap else None
            reqs = [_best([e, r]) for e, r in both]
            req = None if None in reqs else set().union(*reqs)
            return exact, _best([exact, req])
        if op is C.MAX_REPEAT:
            lo, hi, body = av
            ex, rq = seq(body)
            if lo == 0:
                return ((ex | {""}) if hi == 1 and ex is not None else None), None
            if lo == hi == 1:
                return ex, rq
            return None, _best([ex, rq])
        return None, None  # any character, a negated class, anything else

    ex, rq = seq(P.parse(pattern))
    found = _best([ex, rq])
    # A string as common as a space or one letter guards nothing in SQL (LIKE costs more than it
    # saves): the kind is then searched. In Python an `in` test costs less than any search.
    return sorted(found) if found and _strength(found) >= min_strength else None


def _literals(strings) -> re.Pattern:
    """A regex matching any of these strings (longest first): one search in C, not a loop."""
    return re.compile("|".join(re.escape(s) for s in sorted(strings, key=len, reverse=True)))


@lru_cache(maxsize=4096)
def _guard(pattern: str) -> re.Pattern | None:
    """A regex of the strings one of which every match of `pattern` contains (None: no such
    strings found), for the Python reader only: a pattern is searched only in a text holding one
    of them. The same answer as searching every pattern, in a fraction of the time."""
    found = required_literals(pattern, min_strength=0)
    return _literals(found) if found else None


def _holds(text: str, guard: re.Pattern | None) -> bool:
    return guard is None or guard.search(text) is not None


class _Alternation:
    """One kind's alternation, searched pattern by pattern: a pattern whose guard the text does
    not hold is not searched. The leftmost match of an alternation starts where its earliest
    alternative's does, and its longest match there is the longest of its alternatives' (POSIX):
    the spans are those of the joined alternation, which SQL searches."""

    def __init__(self, patterns: list[str]):
        self.alts = [(_guard(p), _Longest(p)) for p in patterns]

    def candidates(self, text: str) -> list[_Longest]:
        return [rx for guard, rx in self.alts if _holds(text, guard)]

    @staticmethod
    def spans(cands: list[_Longest], text: str, limit: int | None = None):
        pos, tries = 0, 0
        while pos < len(text) and (limit is None or tries < limit):
            tries += 1
            start, found = None, []
            for rx in cands:
                m = rx.fast.search(text, pos)
                if m is None:
                    continue
                if start is None or m.start() < start:
                    start, found = m.start(), [(rx, m)]
                elif m.start() == start:
                    found.append((rx, m))
            if start is None:
                return
            end = start
            for rx, m in found:
                longest = rx.longest.match(text, start)
                end = max(end, longest.end() if longest is not None else m.end())
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
    exclude = [(_guard(p), re.compile(p)) for p in spec["exclude"]]
    claims = [
        (kind, _Alternation([c["pattern"] for c in spec["claims"] if c["kind"] == kind]), guards)
        for kind, _rx, guards in kind_alternations(spec["claims"])
    ]
    script = re.compile(spec["script"]) if spec.get("script") else None
    return exclude, claims, script, fold


@lru_cache(maxsize=8)
def _labels(lang: str) -> list[tuple[str, re.Pattern, tuple[str, ...] | None]]:
    """The clause recognisers of a language, in byte order of their names (as in SQL)."""
    spec = patterns()["languages"][lang].get("labels") or {}
    return [(name, re.compile(spec[name]), _guard(spec[name])) for name in sorted(spec)]


@lru_cache(maxsize=1)
def _question_sep() -> re.Pattern | None:
    sep = patterns().get("question_sep")
    return re.compile(sep) if sep else None


@lru_cache(maxsize=1)
def _normaliser():
    spec = patterns().get("normalise")
    if not spec:
        return None
    drop = {ord(c): None for c in spec["strip"]}
    drop.update({ord(c): " " for c in spec["spaces"]})
    hant = str.maketrans(spec["hant"], spec["hans"])
    # Leftmost-longest, as regexp_replace in PostgreSQL.
    posix = regex.POSIX | regex.VERSION0
    rewrites = [
        (regex.compile(rule[0], flags=posix), rule[1], rule[2] if len(rule) > 2 else None)
        for rule in spec["rewrite"]
    ]
    return drop, hant, rewrites


_CJK = re.compile("[一-鿿]")


def normalise(text: str | None) -> str | None:
    """A reply as the exit gate reads it, exactly as agentdb_private.normalise_reply: Unicode
    NFKC, invisible and format characters deleted, other spaces made spaces, traditional Chinese
    forms made simplified (where the text holds Chinese), then the document's rewrites (markdown
    emphasis, headings and bullets dropped, a colon before Chinese spaced, runs of spaces made
    one). Claims found in the result have offsets into the result."""
    found = _normaliser()
    if not text or found is None:
        return text
    drop, hant, rewrites = found
    out = unicodedata.normalize("NFKC", text).translate(drop)
    if _CJK.search(out):
        out = out.translate(hant)
    for rx, repl, when in rewrites:
        # A rewrite with a "when" list is applied only to a text holding one of its strings.
        if when is None or any(w in out for w in when):
            out = rx.sub(repl, out)
    return out


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
            labels.update(
                name for name, rx, guard in _labels(code)
                if name not in labels and _holds(subject, guard) and rx.search(subject)
            )
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
            excluded = None
            for kind, pattern, _guards in claims:
                if cap is not None and counts.get(kind, 0) >= cap:
                    continue  # one more claim of this kind would not change its verdict
                # Only the kind's patterns whose guards the clause holds (SQL asks the kind's guard,
                # the union of its patterns' "any"): none, and none of its patterns can match.
                cands = pattern.candidates(subject)
                if not any(rx.fast.search(subject) for rx in cands):
                    continue  # the common case, without a generator
                if excluded is None:
                    # Asked only of a clause some kind matches, as in SQL (the same answer).
                    excluded = any(_holds(subject, guard) and p.search(subject) for guard, p in exclude)
                if excluded:
                    break
                for span in _Alternation.spans(cands, subject, cap):
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


MAX_REPLY = 100_000  # agentdb_private.max_reply(): the longest reply the gate reads


def read_reply(text: str | None) -> dict:
    """A reply as the exit gate reads it, exactly as agentdb.read_reply: the normalised text, its
    claims (each with its class), its clauses and its facts (offsets into the normalised text)."""
    norm = normalise(text[:MAX_REPLY]) if text else text
    clauses = read_clauses(norm)
    claims = []
    for claim in detect_claims(norm):
        end = next((c["end"] for c in clauses if c["start"] <= claim.start < c["end"]), claim.end)
        tail = norm[claim.start : end]
        claims.append({**claim.as_dict(), "class": claim_class(claim.lang, tail, claim.kind)})
    return {"text": norm or "", "claims": claims, "clauses": clauses, "facts": read_facts(norm, clauses)}


# -- classes and facts (issue 11): what a claim says was done, and the facts a reply states --


@lru_cache(maxsize=8)
def _lexicon(lang: str) -> list[tuple[str, re.Pattern, re.Pattern | None]]:
    """A language's lexicon entries: class, regex and literal guards (None: always tried)."""
    entries = (patterns().get("classes") or {}).get("lexicon", {}).get(lang) or []
    return [(e[0], re.compile(e[1]), _literals(e[2]) if len(e) > 2 else None) for e in entries]


def _fold(lang: str, text: str) -> str:
    fold = "i" in (patterns()["languages"][lang].get("flags") or "")
    return text.translate(_ASCII_LOWER) if fold else text


def claim_class(lang: str | None, tail: str, kind: str) -> str:
    """The class of a claim: the first lexicon entry of its language matching `tail` (its clause
    from the claim's start on), else its kind; an entry with literal guards is tried only on a
    tail holding one of them. As agentdb_private.claim_class."""
    if lang and lang in patterns()["languages"]:
        subject = _fold(lang, tail)
        for name, rx, guards in _lexicon(lang):
            if _holds(subject, guards) and rx.search(subject):
                return name
    return kind


def label_classes(label_en: str | None, label_zh: str | None) -> list[str]:
    """Every class a tool's labels name (both lexicons on both labels), sorted."""
    found = set()
    for label in (label_en, label_zh):
        if not label:
            continue
        for lang in sorted(patterns()["languages"]):
            subject = _fold(lang, label)
            found.update(name for name, rx, _guards in _lexicon(lang) if rx.search(subject))
    return sorted(found)


@lru_cache(maxsize=8)
def _fact_rules(lang: str):
    facts = patterns().get("facts") or {}
    return [
        (r, _Longest(r["pattern"]), _literals(r["any"]) if "any" in r else None)
        for r in facts.get("languages", {}).get(lang, [])
    ]


def parse_number(word: str | None):
    """Digits (with a decimal point), a number word of the facts section, or Chinese numerals
    (十, 百: 七十九 = 79). None when it is none of these. As agentdb_private.fact_number."""
    if word is None or word == "":
        return None
    if re.fullmatch("[0-9]+(\\.[0-9]+)?", word):
        return float(word) if "." in word else int(word)
    numbers = (patterns().get("facts") or {}).get("numbers", {})
    if word in numbers:
        return numbers[word]
    total, digit = 0, 0
    for ch in word:
        if ch == "百":
            total += (digit or 1) * 100
            digit = 0
        elif ch == "十":
            total += (digit or 1) * 10
            digit = 0
        elif ch in numbers and numbers[ch] < 10:
            digit = numbers[ch]
        else:
            return None
    return total + digit


def read_facts(text: str | None, clauses: list[dict] | None = None) -> list[dict]:
    """Facts a (normalised) text states, exactly as agentdb_private.read_facts: per clause (the
    index of the clause among read_clauses), per language whose script it holds, the facts
    section's rules in order; matches leftmost-longest, not overlapping an earlier fact of the
    clause of the same type nor a skipped span. Each: {type, clause, start, end, n, m, tag, value}."""
    if not text:
        return []
    facts = patterns().get("facts") or {}
    tags = facts.get("tags", {})
    out = []
    for index, clause in enumerate(read_clauses(text) if clauses is None else clauses):
        whole = text[clause["start"]:clause["end"]]
        taken: list[tuple[str, int, int]] = []  # (type, start, end) of the clause's facts and skips
        codes = sorted(patterns()["languages"])
        # A clause holding no language's script ("£89.00", "08:00") is read with every language's rules.
        every = not any(_compiled(c)[2] is None or _compiled(c)[2].search(whole) for c in codes)
        for code in codes:
            _exclude, _claims, script, fold = _compiled(code)
            if not every and script is not None and not script.search(whole):
                continue
            subject = whole.translate(_ASCII_LOWER) if fold else whole
            for rule, rx, guard in _fact_rules(code):
                # A rule with an "any" list is tried only on a clause holding one of its strings.
                if not _holds(subject, guard):
                    continue
                if rx.fast.search(subject) is None:
                    continue
                kind = rule["type"]
                for start, end in rx.spans(subject):
                    # A fact may not overlap an earlier one of its type, nor a skipped span.
                    if start == end or any(
                        t in (kind, "skip") and s < end and start < e for t, s, e in taken
                    ):
                        continue
                    taken.append((kind, start, end))
                    if kind == "skip":
                        continue
                    groups = rx.longest.match(subject, start).groups()

                    def group(key, groups=groups, rule=rule):
                        return groups[rule[key] - 1] if key in rule and rule[key] <= len(groups) else None

                    tag = group("tag")
                    out.append({
                        "type": rule["type"],
                        "clause": index,
                        "start": clause["start"] + start,
                        "end": clause["start"] + end,
                        "n": parse_number(group("num")),
                        "m": parse_number(group("min")),
                        "tag": tags.get(tag.strip()) if tag else None,
                        "value": rule.get("value"),
                    })
    return sorted(out, key=lambda f: (f["start"], f["end"]))
