"""Would a small learned model help the exit gate? (issue 11, item 7: "measure before you choose")

Trains a logistic regression on one gate corpus (tests/data/gate_*.tsv: lang, shape, label,
text) and measures it on another, alone and in union with the gate's own verdicts (the union
replaces a reply when the gate or the model would). Features: character 1-4-grams of the
normalised reply (hashed), and the task's book state (troubled, empty action turn, empty small
talk, clean), so the model can learn that the same words are honest in one state and a lie in
another. The model predicts "this reply is true" (label true) against lie and wrong_fact.

The gate's verdicts come from a `bench/gate_eval.py -v` listing of the same corpus (the WRONG
lines; every other reply got its right verdict), so no database is needed here. Pure Python: no
dependency the package does not have.

    python bench/gate_eval.py --corpus tests/data/gate_heldout_a.tsv -v > a.txt
    python bench/gate_model.py --train tests/data/gate_dev.tsv --test tests/data/gate_heldout_a.tsv \\
        --gate-verdicts a.txt

The threshold of the union is chosen on the training corpus (cross-validated, five folds): the
lowest p(true) cut that replaces no more than --max-extra-true of its true replies beyond what
the gate already replaces.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import zlib
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gate_shapes  # noqa: E402

from pyagentdb.claims import normalise  # noqa: E402

DIM = 1 << 18


def state(shape: str) -> str:
    if shape in gate_shapes.TROUBLED:
        return "troubled"
    if shape in gate_shapes.CLEAN:
        return "clean"
    return shape  # empty_action, empty_chat


def load(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()[1:], start=2):
        lang, shape, label, text = line.split("\t")
        rows.append({"line": n, "lang": lang, "shape": shape, "state": state(shape), "label": label,
                     "text": normalise(text.replace("\\n", "\n")) or ""})
    return rows


def features(row: dict) -> Counter:
    text = row["text"].lower()
    out: Counter = Counter()
    st = row["state"]
    out[zlib.crc32(f"state={st}".encode()) % DIM] += 1.0
    for n in range(1, 5):
        for i in range(len(text) - n + 1):
            gram = text[i : i + n]
            out[zlib.crc32(f"{gram}".encode()) % DIM] += 1.0
            # The same gram, by state: words honest in a troubled task may be a lie in a clean one.
            out[zlib.crc32(f"{st}|{gram}".encode()) % DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in out.values())) or 1.0
    return Counter({k: v / norm for k, v in out.items()})


def train(rows: list[dict], epochs: int = 30, rate: float = 0.5, l2: float = 1e-5, seed: int = 7):
    weights: dict[int, float] = {}
    bias = 0.0
    data = [(features(r), 1.0 if r["label"] == "true" else 0.0) for r in rows]
    order = list(range(len(data)))
    rng = random.Random(seed)
    for _ in range(epochs):
        rng.shuffle(order)
        for i in order:
            x, y = data[i]
            z = bias + sum(weights.get(k, 0.0) * v for k, v in x.items())
            p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
            g = p - y
            bias -= rate * g
            for k, v in x.items():
                w = weights.get(k, 0.0)
                weights[k] = w - rate * (g * v + l2 * w)
    return weights, bias


def prob(model, row: dict) -> float:
    weights, bias = model
    z = bias + sum(weights.get(k, 0.0) * v for k, v in features(row).items())
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def gate_verdicts(path: Path, corpus: str) -> dict[int, str]:
    """line -> the gate's verdict where it was wrong (deliver or replace)."""
    wrong = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*WRONG (\S+):(\d+) \S+ \S+ \S+ -> (deliver|replace)", line)
        if m and m.group(1) == corpus:
            wrong[int(m.group(2))] = m.group(3)
    return wrong


def verdict_of_gate(row: dict, wrong: dict[int, str]) -> str:
    if row["line"] in wrong:
        return wrong[row["line"]]
    return "deliver" if row["label"] == "true" else "replace"


def score(rows: list[dict], verdicts: list[str]) -> dict:
    out = {}
    for st in ("troubled", "empty_action", "empty_chat", "clean"):
        sel = [(r, v) for r, v in zip(rows, verdicts, strict=True) if r["state"] == st]
        lies = [v for r, v in sel if r["label"] != "true"]
        trues = [v for r, v in sel if r["label"] == "true"]
        out[st] = {"lies_delivered": f"{lies.count('deliver')}/{len(lies)}",
                   "true_replaced": f"{trues.count('replace')}/{len(trues)}"}
    return out


def choose_threshold(rows: list[dict], wrong: dict[int, str] | None, max_extra_true: float) -> float:
    """The p(true) cut, by five-fold cross-validation on the training corpus."""
    rng = random.Random(11)
    idx = list(range(len(rows)))
    rng.shuffle(idx)
    held: dict[int, float] = {}
    for fold in range(5):
        test = [rows[i] for i in idx[fold::5]]
        model = train([rows[i] for i in idx if i not in set(idx[fold::5])])
        for r in test:
            held[r["line"]] = prob(model, r)
    trues = [r for r in rows if r["label"] == "true"]
    best = 0.0
    for cut in [x / 100 for x in range(1, 100)]:
        extra = sum(1 for r in trues if held[r["line"]] < cut
                    and (wrong is None or verdict_of_gate(r, wrong) == "deliver"))
        if extra <= max_extra_true * len(trues):
            best = cut
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--test", type=Path, required=True)
    parser.add_argument("--gate-verdicts", type=Path, required=True, help="gate_eval.py -v output for --test")
    parser.add_argument("--train-verdicts", type=Path, help="gate_eval.py -v output for --train (threshold)")
    parser.add_argument("--max-extra-true", type=float, default=0.02)
    args = parser.parse_args()
    train_rows, test_rows = load(args.train), load(args.test)
    train_wrong = gate_verdicts(args.train_verdicts, args.train.name) if args.train_verdicts else None
    cut = choose_threshold(train_rows, train_wrong, args.max_extra_true)
    model = train(train_rows)
    wrong = gate_verdicts(args.gate_verdicts, args.test.name)
    gate = [verdict_of_gate(r, wrong) for r in test_rows]
    alone = ["deliver" if prob(model, r) >= 0.5 else "replace" for r in test_rows]
    union = [
        g if g == "replace" or prob(model, r) >= cut else "replace"
        for r, g in zip(test_rows, gate, strict=True)
    ]
    print(f"trained on {args.train} ({len(train_rows)}), tested on {args.test} ({len(test_rows)});"
          f" union cut p(true) < {cut:.2f}")
    for name, verdicts in (("gate", gate), ("model alone (p < 0.5)", alone), ("gate + model", union)):
        print(f"{name}:")
        for st, s in score(test_rows, verdicts).items():
            lies, trues = s["lies_delivered"], s["true_replaced"]
            print(f"  {st:13} lies delivered {lies:>7}   true replaced {trues:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
