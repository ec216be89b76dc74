"""Exam results: pass^k, the terminal table, JSON and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from math import comb

from .. import textui
from .judge import CLASSES, LABELS, SHORT, describe
from .runner import RunResult
from .scenario import Scenario


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """Unbiased estimate of the chance that k independent runs ALL succeed, from c successes in n runs:
    C(c, k) / C(n, k). None when k > n (not enough runs to say)."""
    if k < 1 or n < 0 or not 0 <= c <= n:
        raise ValueError(f"pass^k needs 1 <= k and 0 <= c <= n (got n={n}, c={c}, k={k})")
    if k > n:
        return None
    return comb(c, k) / comb(n, k)


def summarize(scenarios: list[Scenario], results: list[RunResult], k: int) -> dict:
    rows = []
    for s in scenarios:
        mine = [r for r in results if r.scenario == s.name]
        n, c = len(mine), sum(r.passed for r in mine)
        rows.append({
            "scenario": s.name, "runs": n, "passed": c,
            "pass^1": pass_hat_k(n, c, 1) if n else None,
            f"pass^{k}": pass_hat_k(n, c, k) if n else None,
            "classes": dict(Counter(r.cls for r in mine)),
            "gate_missed": sum(r.gate_missed for r in mine),
            "ok": n > 0 and c == n,
        })
    defined = [r[f"pass^{k}"] for r in rows if r[f"pass^{k}"] is not None]
    return {
        "k": k,
        "scenarios": rows,
        f"pass^{k}": sum(defined) / len(defined) if defined else None,
        "pass^1": (sum(r["pass^1"] for r in rows if r["pass^1"] is not None) / len(rows)) if rows else None,
        "classes": dict(Counter(r.cls for r in results)),
        "runs": len(results),
        "passed": sum(r.passed for r in results),
        "ok": all(r["ok"] for r in rows),
    }


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def render(scenarios: list[Scenario], results: list[RunResult], k: int, *, color: bool = False) -> str:
    summary = summarize(scenarios, results, k)
    table_rows = []
    for row in summary["scenarios"]:
        classes = ", ".join(f"{n} {SHORT[c]}" for c in CLASSES if (n := row["classes"].get(c)))
        table_rows.append({
            "scenario": row["scenario"], "runs": row["runs"], "passed": row["passed"],
            "pass^1": _fmt(row["pass^1"]), f"pass^{k}": _fmt(row[f"pass^{k}"]), "classes": classes,
            "": textui.paint("ok", "green", color) if row["ok"] else textui.paint("FAIL", "red", color),
        })
    cols = ["scenario", "runs", "passed", "pass^1"] + ([f"pass^{k}"] if k != 1 else []) + ["classes", ""]
    out = [textui.table(table_rows, cols), ""]
    failed = [r for r in results if not r.passed]
    if failed:
        out.append("Failed runs:")
        for r in failed:
            out.append(f"  {r.scenario} #{r.run}: {LABELS[r.cls]}")
            if r.error:
                out.append(f"    error: {r.error}")
            if r.reply:
                out.append(f"    said: {textui._cell(r.reply)}")
            if r.claims:
                gate = "delivered it" if r.verdict == "deliver" else "replaced it"
                said = ", ".join(repr(c.get("text", "")) for c in r.claims)
                out.append(f"    claimed: {said} (the gate {gate})")
            for item in r.missing:
                out.append(f"    missing: {describe(item)}")
            for item in r.extra:
                out.append(f"    extra:   {describe(item)}")
        out.append("")
    total = summary["runs"]
    line = (f"{len(scenarios)} scenario(s), {total} run(s), {summary['passed']} passed; "
            f"pass^1 {_fmt(summary['pass^1'])}")
    if k != 1:
        line += f", pass^{k} {_fmt(summary[f'pass^{k}'])}"
    missed = sum(r.gate_missed for r in results)
    if missed:
        line += f"; {missed} false claim(s) the gate delivered"
    out.append(textui.paint(line, "green" if summary["ok"] else "red", color))
    return "\n".join(out)


def to_json(scenarios: list[Scenario], results: list[RunResult], k: int, agent: str) -> dict:
    return {"agent": agent, "summary": summarize(scenarios, results, k),
            "runs": [r.to_json() for r in results]}


def junit_xml(scenarios: list[Scenario], results: list[RunResult], k: int) -> bytes:
    """JUnit XML for CI: one testsuite, one testcase per scenario x run."""
    failures = sum(1 for r in results if not r.passed and r.cls != "agent_error")
    errors = sum(1 for r in results if r.cls == "agent_error")
    suite = ET.Element("testsuite", name="pyagentdb-exam", tests=str(len(results)), failures=str(failures),
                       errors=str(errors), skipped="0", time=f"{sum(r.seconds for r in results):.3f}")
    props = ET.SubElement(suite, "properties")
    summary = summarize(scenarios, results, k)
    ET.SubElement(props, "property", name="k", value=str(k))
    for row in summary["scenarios"]:
        ET.SubElement(props, "property", name=f"pass^{k}:{row['scenario']}", value=_fmt(row[f"pass^{k}"]))
    paths = {s.name: s.path for s in scenarios}
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"exam.{r.scenario}", name=f"run {r.run}",
                             file=paths.get(r.scenario, ""), time=f"{r.seconds:.3f}")
        if r.passed:
            continue
        lines = [f"class: {LABELS[r.cls]}"]
        if r.reply:
            lines.append(f"said: {r.reply}")
        lines += [f"missing: {describe(m)}" for m in r.missing]
        lines += [f"extra: {describe(e)}" for e in r.extra]
        if r.error:
            lines.append(f"error: {r.error}")
        tag = "error" if r.cls == "agent_error" else "failure"
        el = ET.SubElement(case, tag, message=LABELS[r.cls], type=r.cls)
        el.text = "\n".join(lines)
        out = ET.SubElement(case, "system-out")
        out.text = json.dumps(r.to_json(), ensure_ascii=False, default=str, indent=1)
    ET.indent(suite)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)
