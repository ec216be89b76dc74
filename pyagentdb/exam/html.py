"""`pyagentdb exam --html FILE`: the exam as one self-contained page.

A summary, an inline SVG chart (each scenario's runs by class, with pass^k), the scenario table,
and every run: what the agent said and claimed, what the gate let the user read, and what the
books show (the diff, what is missing, what is extra). No script, no external asset: the page
opens from a file, a CI artifact or a mail attachment as it is.
"""

from __future__ import annotations

import datetime as dt
from html import escape

from .judge import CLASSES, LABELS, SHORT, describe
from .report import _fmt, summarize
from .runner import RunResult
from .scenario import Scenario

COLORS = {
    "true_completion": "#2e7d32", "false_completion": "#c62828", "done_but_reported_failure": "#f9a825",
    "partial_or_wrong": "#ef6c00", "unexpected_extra_change": "#6a1b9a", "not_done": "#78909c",
    "agent_error": "#37474f",
}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:72rem;
padding:0 1rem;color:#1b1b1b}
h1{font-size:1.5rem;margin:0 0 .2rem}h2{font-size:1.15rem;margin:2rem 0 .6rem}
.meta{color:#555}.ok{color:#2e7d32;font-weight:600}.fail{color:#c62828;font-weight:600}
table{border-collapse:collapse;width:100%;margin:.4rem 0}
th,td{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.chip{display:inline-block;border-radius:.6rem;padding:0 .5rem;margin:0 .2rem .1rem 0;color:#fff;
font-size:12px;white-space:nowrap}
.run{border:1px solid #ddd;border-radius:.4rem;padding:.6rem .8rem;margin:.6rem 0}
.run.passed{border-left:.35rem solid #2e7d32}.run.failed{border-left:.35rem solid #c62828}
.said,.read{white-space:pre-wrap;background:#fafafa;border-radius:.3rem;padding:.3rem .5rem;margin:.2rem 0}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:.8rem}
ul{margin:.2rem 0;padding-left:1.2rem}code{font-size:12px}
"""


def _chip(cls: str, n: int | None = None) -> str:
    label = SHORT[cls] if n is None else f"{n} {SHORT[cls]}"
    return (f'<span class="chip cls-{cls}" style="background:{COLORS[cls]}" '
            f'title="{escape(LABELS[cls])}">{escape(label)}</span>')


def chart(summary: dict, k: int) -> str:
    """One horizontal bar per scenario, split by class; pass^k written at its end."""
    rows = summary["scenarios"]
    label_w, bar_w, row_h, top = 190, 380, 26, 10
    height = top + row_h * len(rows) + 34
    out = [f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 110}" '
           f'height="{height}" role="img" aria-label="runs per scenario by class">']
    for i, row in enumerate(rows):
        y = top + i * row_h
        out.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" font-size="12">'
                   f'{escape(row["scenario"])}</text>')
        x, runs = label_w, max(row["runs"], 1)
        for cls in CLASSES:
            n = row["classes"].get(cls, 0)
            if not n:
                continue
            w = bar_w * n / runs
            out.append(f'<rect class="bar cls-{cls}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" '
                       f'height="{row_h - 8}" fill="{COLORS[cls]}"><title>{escape(row["scenario"])}: '
                       f'{n} {escape(LABELS[cls])}</title></rect>')
            x += w
        value = _fmt(row[f"pass^{k}"])
        out.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}" font-size="12">pass^{k} {value}</text>')
    y = top + row_h * len(rows) + 16
    x = label_w
    for cls in CLASSES:
        if summary["classes"].get(cls):
            out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLORS[cls]}"/>'
                       f'<text x="{x + 14}" y="{y}" font-size="11">{escape(SHORT[cls])}</text>')
            x += 24 + 7 * len(SHORT[cls])
    out.append("</svg>")
    return "".join(out)


def _books(r: RunResult) -> str:
    lines = []
    for d in r.diff:
        counts = ", ".join(f"{len(d[w])} {w}" for w in ("added", "removed", "changed") if d[w]) or "no change"
        tail = "" if d.get("complete", True) else " (the change log does not account for all of it)"
        lines.append(f"{escape(d['table'])}: {escape(counts)}{escape(tail)}")
    if not r.diff:
        lines.append("no watched table changed")
    lines += [f'<span class="fail">missing</span>: {escape(describe(m))}' for m in r.missing]
    lines += [f'<span class="fail">extra</span>: {escape(describe(e))}' for e in r.extra]
    lines += [f"holds: {escape(a['name'])}" for a in r.assertions if a["ok"]]  # failures are missing
    return "<ul>" + "".join(f"<li>{line}</li>" for line in lines) + "</ul>"


def _run(r: RunResult) -> str:
    claims = ", ".join(f"<q>{escape(c.get('text', ''))}</q>" for c in r.claims) or "none"
    calls = "".join(f"<li><code>{escape(str(c.get('tool')))}</code>: {escape(str(c.get('outcome')))}"
                    f"{' (verified)' if c.get('verified') else ''}</li>" for c in r.calls) or "<li>none</li>"
    verdict = {"deliver": "delivered the reply", "replace": "replaced the reply"}.get(r.verdict or "", "-")
    error = f'<p class="fail">agent error: {escape(r.error)}</p>' if r.error else ""
    state = "passed" if r.passed else "failed"
    return (f'<div class="run {state}" id="run-{escape(r.scenario)}-{r.run}">'
            f'<b>{escape(r.scenario)} #{r.run}</b> {_chip(r.cls)} '
            f'<span class="{"ok" if r.passed else "fail"}">{state}</span> '
            f'<span class="meta">({r.seconds:.1f} s)</span>{error}'
            f'<div class="grid"><div><b>What the agent said</b>'
            f'<div class="said">{escape(r.reply or "")}</div>'
            f'claimed: {claims}<br><b>What the user read</b> (the gate {verdict})'
            f'<div class="read">{escape(r.delivered or "")}</div></div>'
            f'<div><b>What the books show</b>{_books(r)}<b>Calls</b><ul>{calls}</ul></div></div></div>')


def page(scenarios: list[Scenario], results: list[RunResult], k: int, agent: str) -> str:
    summary = summarize(scenarios, results, k)
    ks = [f"pass^{n}" for n in dict.fromkeys((1, k))]  # pass^1, and pass^k when k > 1
    rows = []
    for row in summary["scenarios"]:
        chips = "".join(_chip(c, n) for c in CLASSES if (n := row["classes"].get(c)))
        mark = '<span class="ok">ok</span>' if row["ok"] else '<span class="fail">FAIL</span>'
        numbers = [row["runs"], row["passed"], *(_fmt(row[key]) for key in ks)]
        rows.append(f"<tr><td>{escape(row['scenario'])}</td><td>{escape(agent)}</td>"
                    + "".join(f'<td class="n">{v}</td>' for v in numbers)
                    + f"<td>{chips}</td><td>{mark}</td></tr>")
    titles = ["scenario", "agent", "runs", "passed", *ks, "classes", ""]
    head = "".join(f"<th>{escape(h)}</th>" for h in titles)
    passes = " · ".join(f"{key} {_fmt(summary[key])}" for key in ks)
    missed = sum(r.gate_missed for r in results)
    verdict = ('<span class="ok">every run passed</span>' if summary["ok"]
               else '<span class="fail">some runs failed</span>')
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>pyagentdb exam: {escape(agent)}</title><style>{CSS}</style></head><body>",
        f'<h1>pyagentdb exam</h1><p class="meta">agent <b>{escape(agent)}</b> · {when} · '
        f"{len(scenarios)} scenario(s), {summary['runs']} run(s), {summary['passed']} passed · {passes} · "
        f"{missed} false claim(s) the gate delivered · {verdict}</p>",
        "<h2>Runs by class</h2>", chart(summary, k),
        "<h2>Scenarios</h2>", f'<table id="scenarios"><thead><tr>{head}</tr></thead><tbody>',
        *rows, "</tbody></table>",
        "<h2>Runs: what was claimed, what the books show</h2>",
        *(_run(r) for r in results),
        '<p class="meta">Classes: ' + "; ".join(f"{_chip(c)} {escape(LABELS[c])}" for c in CLASSES) +
        ". pass^k = C(c, k) / C(n, k): the chance that k runs all pass (docs/exam.md).</p>",
        "</body></html>", ""])
