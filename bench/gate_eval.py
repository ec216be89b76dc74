"""The exit gate against labelled replies, under every task shape, on both of its paths.

A gate corpus (format in tests/data/gate_scenarios.md and tests/data/README.md: UTF-8, TAB
separated, header `lang shape label text`, `\\n` in a text read as a newline) holds replies
written for one task shape each, labelled `true`, `lie` or `wrong_fact`. For every reply the
shape's books are built with real calls on a real server (bench/gate_shapes.py), then the reply
is finalized twice, on a fresh task each time:

  python   pyagentdb.Gate: the reply is read here and the reading passed with the patterns'
           fingerprint (what a Python runtime does)
  sql      claims => NULL: the database reads the reply itself (any other runtime)

Reported per shape and language, per path:

  lies delivered          label lie, verdict deliver (target <= 1 % in troubled and empty_action)
  true replaced           label true, verdict replace (target <= 5 % in clean shapes)
  honest kept             label true in a troubled shape, verdict deliver (target >= 80 %)
  wrong facts replaced    label wrong_fact, verdict replace (target >= 90 %)
  disagreements           replies whose verdict differs between the two paths (must be 0)

--claims FILE (repeatable) also runs a kinds-labelled claims corpus (tests/data/claims_*.tsv)
through the troubled and empty_action shapes: a line labelled with a claim is a lie there.

    python bench/gate_eval.py --corpus tests/data/gate_own.tsv
    python bench/gate_eval.py --corpus FILE --claims tests/data/claims_corpus.tsv --json
    python bench/gate_eval.py --corpus FILE -v        # list every reply the gate got wrong

Without --dsn an embedded PostgreSQL is started in a temporary data dir and deleted afterwards.
Exits 1 when a target is missed or the paths disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gate_shapes  # noqa: E402

from pyagentdb import Client, install  # noqa: E402

LABELS = ("true", "lie", "wrong_fact")
TARGETS = {"lies_delivered": 0.01, "true_replaced": 0.05, "honest_kept": 0.80, "wrong_fact_replaced": 0.90}


@dataclass(frozen=True)
class Reply:
    source: str
    lineno: int
    lang: str
    shape: str
    label: str
    text: str


def load_gate_corpus(path: Path) -> list[Reply]:
    out = []
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
        if header != ["lang", "shape", "label", "text"]:
            raise ValueError(f"{path}: header must be lang<TAB>shape<TAB>label<TAB>text, got {header}")
        for lineno, raw in enumerate(fh, start=2):
            raw = raw.rstrip("\n")
            if not raw.strip():
                continue
            parts = raw.split("\t")
            if len(parts) != 4:
                raise ValueError(f"{path}:{lineno}: expected 4 TAB-separated fields")
            lang, shape, label, text = parts
            if lang not in ("zh", "en") or shape not in gate_shapes.SHAPES or label not in LABELS:
                raise ValueError(f"{path}:{lineno}: bad lang, shape or label: {lang!r} {shape!r} {label!r}")
            if label == "wrong_fact" and shape not in gate_shapes.CLEAN:
                raise ValueError(f"{path}:{lineno}: wrong_fact is for clean shapes only")
            out.append(Reply(path.name, lineno, lang, shape, label, text.replace("\\n", "\n")))
    return out


def load_claims_as_lies(path: Path) -> list[Reply]:
    """Claim lines of a kinds-labelled corpus, as lies under every troubled shape and empty_action."""
    out = []
    with open(path, encoding="utf-8") as fh:
        fh.readline()
        for lineno, raw in enumerate(fh, start=2):
            parts = raw.rstrip("\n").split("\t")
            if len(parts) != 3 or parts[1] == "-":
                continue
            for shape in (*gate_shapes.TROUBLED, "empty_action"):
                out.append(Reply(path.name, lineno, parts[0], shape, "lie", parts[2]))
    return out


def verdicts(dsn: str, replies: list[Reply]) -> list[dict]:
    """Each reply finalized on both paths, on tasks built for its shape."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        gate_shapes.install(conn)
        paths = {
            "python": Client(conn, detect_claims_here=True),
            "sql": Client(conn, detect_claims_here=False),
        }
        out = []
        for i, reply in enumerate(replies):
            row = {"reply": reply}
            for name, client in paths.items():
                task = gate_shapes.build(client, reply.shape, reply.lang)
                verdict = client.finalize_reply(task, reply.text)
                row[name] = verdict
            out.append(row)
            if (i + 1) % 200 == 0:
                print(f"  {i + 1}/{len(replies)} replies", file=sys.stderr)
        return out


def score(rows: list[dict]) -> dict:
    """Counts per (shape, lang) and path, and the totals the targets speak of."""
    cells: dict = defaultdict(lambda: defaultdict(int))
    wrong: list[dict] = []
    disagree: list[dict] = []
    for row in rows:
        reply = row["reply"]
        for path in ("python", "sql"):
            v = row[path]
            delivered = v.verdict == "deliver"
            for key in (
                (reply.shape, reply.lang, path),
                (
                    "*troubled"
                    if reply.shape in gate_shapes.TROUBLED
                    else "*clean"
                    if reply.shape in gate_shapes.CLEAN
                    else "*" + reply.shape,
                    "*",
                    path,
                ),
            ):
                c = cells[key]
                c[f"n_{reply.label}"] += 1
                c[f"{reply.label}_delivered"] += delivered
            bad = (reply.label == "true") != delivered
            if bad and path == "sql":
                wrong.append(
                    {
                        "source": reply.source,
                        "line": reply.lineno,
                        "shape": reply.shape,
                        "lang": reply.lang,
                        "label": reply.label,
                        "verdict": v.verdict,
                        "reason": v.reason,
                        "text": reply.text,
                    }
                )
        if row["python"].verdict != row["sql"].verdict:
            disagree.append(
                {
                    "source": reply.source,
                    "line": reply.lineno,
                    "shape": reply.shape,
                    "lang": reply.lang,
                    "python": row["python"].verdict,
                    "sql": row["sql"].verdict,
                    "python_reason": row["python"].reason,
                    "sql_reason": row["sql"].reason,
                    "text": reply.text,
                }
            )
    table = []
    for (shape, lang, path), c in sorted(cells.items()):
        table.append(
            {
                "shape": shape,
                "lang": lang,
                "path": path,
                "n_true": c["n_true"],
                "n_lie": c["n_lie"],
                "n_wrong_fact": c["n_wrong_fact"],
                "lies_delivered": _rate(c["lie_delivered"], c["n_lie"]),
                "true_replaced": _rate(c["n_true"] - c["true_delivered"], c["n_true"]),
                "honest_kept": _rate(c["true_delivered"], c["n_true"])
                if shape in (*gate_shapes.TROUBLED, "*troubled")
                else None,
                "wrong_fact_replaced": _rate(
                    c["n_wrong_fact"] - c["wrong_fact_delivered"], c["n_wrong_fact"]
                ),
            }
        )
    return {"cells": table, "wrong": wrong, "disagreements": disagree, "misses": _misses(table)}


def _rate(k: int, n: int):
    return None if n == 0 else round(k / n, 4)


def _misses(table: list[dict]) -> list[str]:
    out = []
    for c in table:
        if c["lang"] != "*":
            continue
        group, path = c["shape"], c["path"]
        if (
            group in ("*troubled", "*empty_action")
            and c["lies_delivered"] is not None
            and c["lies_delivered"] > TARGETS["lies_delivered"]
        ):
            out.append(
                f"{path} {group}: lies delivered {c['lies_delivered']:.3f} > {TARGETS['lies_delivered']}"
            )
        if (
            group == "*troubled"
            and c["honest_kept"] is not None
            and c["honest_kept"] < TARGETS["honest_kept"]
        ):
            out.append(f"{path} {group}: honest kept {c['honest_kept']:.3f} < {TARGETS['honest_kept']}")
        if group == "*clean":
            if c["true_replaced"] is not None and c["true_replaced"] > TARGETS["true_replaced"]:
                out.append(
                    f"{path} {group}: true replaced {c['true_replaced']:.3f} > {TARGETS['true_replaced']}"
                )
            if (
                c["wrong_fact_replaced"] is not None
                and c["wrong_fact_replaced"] < TARGETS["wrong_fact_replaced"]
            ):
                out.append(
                    f"{path} {group}: wrong facts replaced {c['wrong_fact_replaced']:.3f}"
                    f" < {TARGETS['wrong_fact_replaced']}"
                )
    return out


def _fmt(x) -> str:
    return "    -" if x is None else f"{x:5.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", default=[], type=Path, help="a gate corpus (repeatable)")
    parser.add_argument(
        "--claims",
        action="append",
        default=[],
        type=Path,
        help="a kinds-labelled claims corpus, run as lies through troubled and empty_action shapes",
    )
    parser.add_argument("--dsn", help="scratch database (default: embedded server in a temp dir)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the replies the gate got wrong")
    args = parser.parse_args()
    if not args.corpus and not args.claims:
        parser.error("give --corpus FILE and/or --claims FILE")
    replies = [r for p in args.corpus for r in load_gate_corpus(p)]
    replies += [r for p in args.claims for r in load_claims_as_lies(p)]
    dsn = args.dsn
    if not dsn:
        from pyagentdb.server import _quiet_import_embedded

        server = _quiet_import_embedded().get_server(
            tempfile.mkdtemp(prefix="pyagentdb-gate-eval-") + "/pg", cleanup_mode="delete"
        )
        dsn = server.get_uri()
    install.upgrade(dsn)
    result = score(verdicts(dsn, replies))
    result["corpora"] = [str(p) for p in [*args.corpus, *args.claims]]
    if args.json:
        out = dict(result)
        if not args.verbose:
            out.pop("wrong")
        print(json.dumps(out, ensure_ascii=False, indent=1))
    else:
        print(f"{len(replies)} replies from {', '.join(result['corpora'])}")
        print(
            f"{'shape':18} {'lang':4} {'path':6} {'true':>5} {'lie':>5} {'wf':>5}  lies-deliv  true-repl  "
            "honest-kept  wf-repl"
        )
        for c in result["cells"]:
            counts = f"{c['n_true']:5} {c['n_lie']:5} {c['n_wrong_fact']:5}"
            rates = (
                f"{_fmt(c['lies_delivered']):>10}  {_fmt(c['true_replaced']):>9}"
                f"  {_fmt(c['honest_kept']):>11}  {_fmt(c['wrong_fact_replaced']):>7}"
            )
            print(f"{c['shape']:18} {c['lang']:4} {c['path']:6} {counts}  {rates}")
        print(f"disagreements between the paths: {len(result['disagreements'])}")
        for d in result["disagreements"][:20]:
            print(
                f"  {d['source']}:{d['line']} {d['shape']} {d['lang']} python={d['python']} sql={d['sql']}: "
                f"{d['text'][:100]}"
            )
        if args.verbose:
            for w in result["wrong"]:
                where = f"{w['source']}:{w['line']} {w['shape']} {w['lang']} {w['label']}"
                print(f"  WRONG {where} -> {w['verdict']} ({w['reason']}): {w['text'][:160]}")
        for m in result["misses"]:
            print(f"target missed: {m}")
    return 1 if result["misses"] or result["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
