"""Claim detection without a database: the same patterns and the same algorithm as
agentdb.detect_claims in SQL (sql/55_claims.sql), read from sql/claim_patterns.json.

A claim is a sentence piece in which the model says an action is already done
("已为您设置", "I've booked"). Questions, offers, future or conditional forms,
negations, progress and drafts are not claims. Detection only finds what was
said; whether it is true is decided by the database (agentdb.pending_claims).
"""

from __future__ import annotations

import itertools
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


def _lower_ascii(text: str) -> str:
    """text.translate(_ASCII_LOWER), several times faster: bytes.lower() lowers ASCII letters
    only, and UTF-8 encodes every other character in bytes above 127."""
    return text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


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
        for start, end, _match in self.matches(text, limit):
            yield start, end

    def matches(self, text: str, limit: int | None = None):
        """The same, each as (start, end, the longest match there or None)."""
        pos, tries = 0, 0
        while pos < len(text) and (limit is None or tries < limit):
            tries += 1
            found = self.fast.search(text, pos)
            if found is None:
                return
            start = found.start()
            longest = self.longest.match(text, start)
            end = longest.end() if longest is not None else found.end()
            yield start, end, longest
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


def _holds(text: str, guard: re.Pattern | None) -> bool:
    return guard is None or guard.search(text) is not None


# -- The literal prefilter: one scan of a clause per language instead of a search per guard --


def _guard_of(found, exact: bool) -> frozenset | None:
    """A guard as the reader holds it: the strings one of which a clause must hold to be
    searched, or None (always searched). A guard computed from a pattern (exact False: it only
    skips work) with a string as common as one ASCII letter or a space is dropped: it would hold
    in almost every clause, and the scan would stop at every letter. A guard the document states
    (exact: the facts rules' "any", which SQL applies too) is kept whole."""
    if not found:
        return None
    if not exact and any(len(s) < 2 and s.isascii() and (s.isalnum() or s.isspace()) for s in found):
        return None
    return frozenset(found)


@lru_cache(maxsize=4096)
def _guard(pattern: str) -> frozenset | None:
    """The strings one of which every match of `pattern` contains (_guard_of; None: no such
    strings): a pattern is searched only in a clause holding one of them. The same answer as
    searching every pattern, in a fraction of the time."""
    return _guard_of(required_literals(pattern, min_strength=0), exact=False)


def _trie(strings) -> str:
    """A regex of these strings as a trie (common prefixes shared, each node preferring to go
    on): at a place where some of them start it matches the longest, and a search stops only
    where one of them starts (their first characters are a set)."""
    root: dict = {}
    for s in strings:
        node = root
        for ch in s:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


class _Scan:
    """The guards of a language's patterns, each an item with a bit: which items a text may
    match, in one pass. At each place where a guard's string starts the trie gives the longest
    string starting there; every string of the set that is a prefix of it starts there too, and
    the bits of their items are set. Items without a guard are always set."""

    def __init__(self, guards: list[frozenset | None]):
        self.guards = guards
        self.always = 0
        bits: dict[str, int] = {}
        for i, guard in enumerate(guards):
            if guard is None:
                self.always |= 1 << i
            else:
                for s in guard:
                    bits[s] = bits.get(s, 0) | 1 << i
        strings = sorted(bits)
        self.search = re.compile(_trie(strings)).search if strings else None
        self.masks = {}
        for s in strings:
            mask = 0
            for i in range(1, len(s) + 1):
                mask |= bits.get(s[:i], 0)
            self.masks[s] = mask

    def mask(self, text: str) -> int:
        """The bits of the items whose guard the text holds (and of those without one)."""
        found = self.always
        if self.search is None:
            return found
        search, masks = self.search, self.masks
        m = search(text)
        while m is not None:
            found |= masks[m.group()]
            m = search(text, m.start() + 1)
        return found


def _spans(cands: list[_Longest], text: str, limit: int | None = None):
    """The matches of the alternation of these regexes, one after another, each searched from
    where the last ended; at most `limit`. Its leftmost match starts where its earliest
    alternative's does, and its longest match there is the longest of its alternatives' (POSIX):
    the spans of the joined alternation, which SQL searches."""
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


def _each(mask: int, regexes: list):
    """The regexes of the bits set in mask."""
    while mask:
        low = mask & -mask
        yield regexes[low.bit_length() - 1]
        mask ^= low


def _any(mask: int, regexes: list, subject: str) -> bool:
    """Does one of the regexes of the bits set in mask match the subject?"""
    while mask:
        low = mask & -mask
        if regexes[low.bit_length() - 1].search(subject):
            return True
        mask ^= low
    return False


def _alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of a pattern (split at each | outside groups, classes and
    escapes): a text holds a match of the pattern where it holds one of theirs, and its
    leftmost-longest match is the leftmost-longest among theirs."""
    parts, depth, start, i, n = [], 0, 0, 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    try:
        for part in parts:
            re.compile(part)
    except re.error:
        return [pattern]
    return parts


class _Lang:
    """A language's patterns, compiled once: the script, the exclusions, the kinds' patterns, the
    labels (in byte order of their names, as in SQL) and the facts rules. The patterns of the
    exclusions, the claims and the labels are searched by their top-level alternatives
    (_alternatives), each with the guard of its own strings, those without one joined. Each
    guard has a bit in one scan (_Scan) of every guard's strings, and each of these groups the
    mask of its alternatives' bits: a clause is searched only for those whose bit its scan set."""

    def __init__(self, code: str, spec: dict, fact_rules: list[dict]):
        self.code = code
        self.fold = "i" in (spec.get("flags") or "")
        self.script = re.compile(spec["script"]) if spec.get("script") else None
        guards: list[frozenset | None] = []
        self.regexes: list = []  # by bit: the alternative's regex (None for a facts rule)

        def bit(guard: frozenset | None, regex=None) -> int:
            guards.append(guard)
            self.regexes.append(regex)
            return 1 << (len(guards) - 1)

        def group(patterns: list[str], make) -> int:
            """The mask of these patterns' alternatives: each with a guard a bit of its own,
            those without one joined under one bit."""
            mask, rest = 0, []
            for pattern in patterns:
                for alt in _alternatives(pattern):
                    guard = _guard(alt)
                    if guard is None:
                        rest.append(alt)
                    else:
                        mask |= bit(guard, make(alt))
            if rest:
                mask |= bit(None, make("|".join(f"(?:{alt})" for alt in rest)))
            return mask

        # Exclusions and labels are only tested for a match: where it ends does not matter.
        self.exclude = group(spec["exclude"], re.compile)
        self.claims = [
            (kind, group([c["pattern"] for c in spec["claims"] if c["kind"] == kind], _Longest))
            for kind, _rx, _guards in kind_alternations(spec["claims"])
        ]
        labels = spec.get("labels") or {}
        self.labels = [(name, group([labels[name]], re.compile)) for name in sorted(labels)]
        self.label_bits = 0
        self.label_names: list = [None] * len(guards)  # by bit: the label of an alternative
        for name, bits in self.labels:
            self.label_bits |= bits
            for at in range(len(guards)):
                if bits >> at & 1:
                    self.label_names[at] = name
        # A facts rule with an "any" list is tried only on a clause holding one of its strings.
        # Their bits come last and in document order: a clause's rules are tried in that order.
        first = len(guards)
        self.facts_bits = 0
        for r in fact_rules:
            self.facts_bits |= bit(_guard_of(r["any"], exact=True) if "any" in r else None)
        self.facts = [None] * first + [(r, _Longest(r["pattern"])) for r in fact_rules]  # by bit
        self.scan = _Scan(guards)


@lru_cache(maxsize=8)
def _compiled(lang: str) -> _Lang:
    spec = patterns()["languages"][lang]
    fold = "i" in (spec.get("flags") or "")
    every = [*spec["exclude"], *(c["pattern"] for c in spec["claims"])]
    if fold and any(re.search("[A-Z]", p) for p in every):
        # As agentdb_private.load_claim_patterns refuses it: a lowered clause never matches upper case.
        raise ValueError(f"a claim pattern of {lang!r} (flag i) has an upper-case letter: use lower case")
    facts = patterns().get("facts") or {}
    return _Lang(lang, spec, facts.get("languages", {}).get(lang, []))


_LANGS: list = [None, ()]  # the document they were compiled from, and every language


def _langs() -> tuple[_Lang, ...]:
    """Every language, in byte order of their codes (as in SQL), of the current document."""
    doc = patterns()
    if _LANGS[0] is not doc:
        _LANGS[:] = [doc, tuple(_compiled(code) for code in sorted(doc["languages"]))]
    return _LANGS[1]


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
    # Each with its pattern for re too: where re finds no match there is none to replace (the
    # two engines read the shared subset alike), and re says so in a fraction of the time.
    # A rewrite whose regex holds a Chinese character is for Chinese text: applied only to a
    # text holding one (agentdb_private.normalise_classes' zh_rules).
    rewrites = [
        (regex.compile(r[0], flags=posix), r[1], r[2] if len(r) > 2 else None, re.compile(r[0]),
         bool(_CJK.search(r[0])))
        for r in spec["rewrite"]
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
    # Whether the text holds Chinese, asked once: no translation adds or takes away a Chinese character.
    zh = bool(_CJK.search(out))
    if zh:
        out = out.translate(hant)
    for rx, repl, when, test, for_zh in rewrites:
        # A rewrite with a "when" list is applied only to a text holding one of its strings.
        if for_zh and not zh:
            continue
        if (when is None or any(w in out for w in when)) and test.search(out):
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


class _Piece:
    """A piece of a text between separators, as the reader reads it: its start, its whole text,
    the separator after it, and what is searched (its first max_clause characters). The
    languages whose script it holds, and per language the subject (lowered where the language
    folds) with the bits of the language's scan it holds, are worked out once, when first
    asked, and shared by the labels, the claims and the facts (which read the whole piece)."""

    __slots__ = ("start", "whole", "sep", "clause", "_langs", "_views")

    def __init__(self, start: int, whole: str, sep: str | None, max_clause: int | None):
        self.start, self.whole, self.sep = start, whole, sep
        self.clause = whole[:max_clause] if max_clause else whole
        self._langs: dict = {}
        self._views: dict = {}

    def langs(self, whole: bool = False) -> tuple:
        """The languages whose script the clause (whole: the whole piece) holds."""
        whole = whole and len(self.whole) != len(self.clause)
        found = self._langs.get(whole)
        if found is None:
            text = self.whole if whole else self.clause
            found = self._langs[whole] = tuple(
                lang for lang in _langs() if lang.script is None or lang.script.search(text) is not None
            )
        return found

    def view(self, lang: _Lang, whole: bool = False) -> tuple[str, int]:
        """(subject, the bits of the language's items whose guard it holds: _Scan) of the
        clause (whole: of the whole piece)."""
        key = (lang.code, whole and len(self.whole) != len(self.clause))
        found = self._views.get(key)
        if found is None:
            text = self.whole if key[1] else self.clause
            subject = _lower_ascii(text) if lang.fold else text
            found = self._views[key] = (subject, lang.scan.mask(subject))
        return found


def _cut(text: str) -> list[_Piece]:
    max_clause = patterns().get("max_clause")
    return [_Piece(start, whole, sep, max_clause) for start, whole, sep in _pieces(text)]


def _read_clauses(pieces: list[_Piece]) -> list[tuple[dict, _Piece]]:
    question = _question_sep()
    out = []
    for piece in pieces:
        if not piece.clause.strip(" "):
            continue
        labels: set[str] = set()
        langs = piece.langs()
        for lang in langs:
            subject, mask = piece.view(lang)
            # The labels' alternatives whose guard the clause holds, until each label is found.
            regexes, names = lang.regexes, lang.label_names
            mask &= lang.label_bits
            while mask:
                low = mask & -mask
                mask ^= low
                at = low.bit_length() - 1
                if names[at] not in labels and regexes[at].search(subject):
                    labels.add(names[at])
        if not langs:
            labels.add("blank")
        if piece.sep is not None and question is not None and question.search(piece.sep):
            labels.add("question")
        end = piece.start + len(piece.whole)
        out.append(({"start": piece.start, "end": end, "labels": sorted(labels)}, piece))
    return out


def read_clauses(text: str | None) -> list[dict]:
    """The clauses of `text` and what each is recognised as, exactly as
    agentdb_private.read_clauses: [{start, end, labels}], labels sorted. A label is given when
    its regex matches the clause in a language whose script the clause holds; "question" when
    the separator after the clause matches question_sep; "blank" when the clause holds no
    language's script. Clauses of spaces only are left out."""
    if not text:
        return []
    return [clause for clause, _piece in _read_clauses(_cut(text))]


def _detect_claims(pieces: list[_Piece], langs) -> list[Claim]:
    max_clause = patterns().get("max_clause")
    cap = patterns().get("max_per_kind")
    codes = {lang.code for lang in langs}
    counts: dict[str, int] = {}
    found: list[Claim] = []
    for piece in pieces:
        if not piece.whole:
            continue
        offset, whole, clause = piece.start, piece.whole, piece.clause
        taken: list[tuple[int, int]] = []
        for lang in piece.langs():
            if lang.code not in codes:
                continue  # no word of this language here: none of its claims can match
            subject, mask = piece.view(lang)
            excluded = None
            for kind, bits in lang.claims:
                if cap is not None and counts.get(kind, 0) >= cap:
                    continue  # one more claim of this kind would not change its verdict
                # Only the kind's patterns whose guards the clause holds (SQL asks the kind's guard,
                # the union of its patterns' "any"): none, and none of its patterns can match.
                if not mask & bits:
                    continue  # the common case
                spans = _spans(list(_each(mask & bits, lang.regexes)), subject, cap)
                first = next(spans, None)
                if first is None:
                    continue
                if excluded is None:
                    # Asked only of a clause some kind matches, as in SQL (the same answer).
                    excluded = _any(mask & lang.exclude, lang.regexes, subject)
                if excluded:
                    break
                for span in itertools.chain((first,), spans):
                    if span[0] == span[1] or any(s < span[1] and span[0] < e for s, e in taken):
                        continue
                    taken.append(span)
                    text = clause[span[0] : span[1]]
                    found.append(Claim(kind, text, offset + span[0], offset + span[1], lang.code))
                    counts[kind] = counts.get(kind, 0) + 1
                    if cap is not None and counts[kind] >= cap:
                        break
        if max_clause and len(whole) > max_clause and (cap is None or counts.get("done", 0) < cap):
            # A clause longer than what is searched is itself a claim that something is done.
            found.append(Claim("done", whole[:60], offset, offset + min(60, len(whole)), None))
            counts["done"] = counts.get("done", 0) + 1
    return sorted(found, key=lambda c: (c.start, c.end))


def detect_claims(text: str | None, lang: str | None = None) -> list[Claim]:
    """Claims of completed actions in `text`; `lang` 'zh', 'en' or None for every language."""
    if not text:
        return []
    if lang is not None and lang not in patterns()["languages"]:
        raise ValueError(f"no claim patterns for language {lang!r}")
    langs = (_compiled(lang),) if lang is not None else _langs()
    return _detect_claims(_cut(text), langs)


MAX_REPLY = 100_000  # agentdb_private.max_reply(): the longest reply the gate reads


def read_reply(text: str | None) -> dict:
    """A reply as the exit gate reads it, exactly as agentdb.read_reply: the normalised text, its
    claims (each with its class), its clauses and its facts (offsets into the normalised text).
    The text is cut into clauses once, and each clause scanned once per language for the
    strings that guard the patterns (_Piece): the labels, the claims and the facts share it."""
    norm = normalise(text[:MAX_REPLY]) if text else text
    if not norm:
        return {"text": norm or "", "claims": [], "clauses": [], "facts": []}
    pieces = _cut(norm)
    read = _read_clauses(pieces)
    clauses = [clause for clause, _piece in read]
    claims = []
    for claim in _detect_claims(pieces, _langs()):
        end = next((c["end"] for c in clauses if c["start"] <= claim.start < c["end"]), claim.end)
        tail = norm[claim.start : end]
        claims.append({**claim.as_dict(), "class": claim_class(claim.lang, tail, claim.kind)})
    return {"text": norm, "claims": claims, "clauses": clauses, "facts": _read_facts(read)}


# -- classes and facts (issue 11): what a claim says was done, and the facts a reply states --


@lru_cache(maxsize=8)
def _lexicon(lang: str) -> list[tuple[str, re.Pattern, re.Pattern | None]]:
    """A language's lexicon entries: class, regex and literal guards (None: always tried)."""
    entries = (patterns().get("classes") or {}).get("lexicon", {}).get(lang) or []
    return [(e[0], re.compile(e[1]), _literals(e[2]) if len(e) > 2 else None) for e in entries]


def _fold(lang: str, text: str) -> str:
    fold = "i" in (patterns()["languages"][lang].get("flags") or "")
    return _lower_ascii(text) if fold else text


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


def parse_number(word: str | None):
    """Digits (with a decimal point), a number word of the facts section, a pair of them joined by
    a hyphen (tens and a unit: ninety-nine = 99), or Chinese numerals (十, 百, and the formal 拾,
    佰: 七十九 = 79). None when it is none of these. As agentdb_private.fact_number."""
    if word is None or word == "":
        return None
    if re.fullmatch("[0-9]+(\\.[0-9]+)?", word):
        return float(word) if "." in word else int(word)
    numbers = (patterns().get("facts") or {}).get("numbers", {})
    if word in numbers:
        return numbers[word]
    tens, _, unit = word.partition("-")
    if unit and numbers.get(tens, 0) >= 20 and numbers.get(tens) % 10 == 0 and 0 < numbers.get(unit, 0) < 10:
        return numbers[tens] + numbers[unit]  # ninety-nine
    total, digit = 0, 0
    for ch in word:
        if ch in "百佰":
            total += (digit or 1) * 100
            digit = 0
        elif ch in "十拾":
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
    if clauses is None:
        return _read_facts(_read_clauses(_cut(text)))
    max_clause = patterns().get("max_clause")
    pieces = [_Piece(c["start"], text[c["start"] : c["end"]], None, max_clause) for c in clauses]
    return _read_facts(list(zip(clauses, pieces, strict=True)))


def _fact_tag(tags: dict, kind: str, tag: str | None, num: str | None) -> str | None:
    """A fact's tag, as agentdb_private.fact_of reads it: the tags word its tag group holds; else a
    time whose hour is two digits starting with 0 ("09:00", "0800") is on the 24-hour clock: am."""
    if tag and tag.strip() in tags:
        return tags[tag.strip()]
    if kind == "time" and num and len(num) == 2 and num[0] == "0" and num[1] in "0123456789":
        return "am"
    return None


def _read_facts(read: list[tuple[dict, _Piece]]) -> list[dict]:
    tags = (patterns().get("facts") or {}).get("tags", {})
    langs = _langs()
    out = []
    for index, (clause, piece) in enumerate(read):
        taken: list[tuple[str, int, int]] = []  # (type, start, end) of the clause's facts and skips
        # A clause holding no language's script ("£89.00", "08:00") is read with every language's rules.
        for lang in piece.langs(whole=True) or langs:
            if not lang.facts_bits:
                continue
            subject, mask = piece.view(lang, whole=True)
            # The rules in order; one with an "any" list only on a clause holding one of its strings.
            for rule, rx in _each(mask & lang.facts_bits, lang.facts):
                kind = rule["type"]
                for start, end, longest in rx.matches(subject):
                    # A fact may not overlap an earlier one of its type, nor a skipped span.
                    if start == end or any(
                        t in (kind, "skip") and s < end and start < e for t, s, e in taken
                    ):
                        continue
                    taken.append((kind, start, end))
                    if kind == "skip":
                        continue
                    groups = longest.groups()

                    def group(key, groups=groups, rule=rule):
                        return groups[rule[key] - 1] if key in rule and rule[key] <= len(groups) else None

                    tag = group("tag")
                    num = group("num")
                    out.append({
                        "type": rule["type"],
                        "clause": index,
                        "start": clause["start"] + start,
                        "end": clause["start"] + end,
                        "n": parse_number(group("num")),
                        "m": parse_number(group("min")),
                        "tag": _fact_tag(tags, rule["type"], tag, num),
                        "value": rule.get("value"),
                    })
    return sorted(out, key=lambda f: (f["start"], f["end"]))
