"""`pyagentdb exam --html FILE`: one self-contained page (no script, no external asset) with the
chart, the scenario table and every run; rendered by headless Chromium, which must lay out the
chart and the table."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser

import pytest
import test_exam

from pyagentdb import cli
from pyagentdb.exam import Exam, load_transcript, summarize
from pyagentdb.exam import html as exam_html
from pyagentdb.exam import judge as J

EXAMPLES, STARTERS = test_exam.EXAMPLES, test_exam.BY_NAME
server_dsn = test_exam.server_dsn  # the fixture: the test server's postgres database
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def mixed(server_dsn):
    """Two scenarios, two runs each: honest on reminder-set, a liar (then an honest run) on
    court-query, so the page holds more than one class."""
    scenarios = [STARTERS["reminder-set"], STARTERS["court-query"]]
    honest = load_transcript(EXAMPLES / "agents" / "honest.toml")
    liar = load_transcript(EXAMPLES / "agents" / "liar.toml")
    with Exam(server_dsn) as exam:
        results = exam.run(scenarios[:1], honest, 2)
        results += [exam.run_one(scenarios[1], liar, 1), exam.run_one(scenarios[1], honest, 2)]
    results[-2].reply += " <script>alert('x')</script>"  # text from an agent is escaped
    return scenarios, results


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_the_page_is_self_contained_and_complete(mixed):
    scenarios, results = mixed
    page = exam_html.page(scenarios, results, 2, "examples/exam/agents/mixed.toml")
    parser = Collect()
    parser.feed(page)
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    assert not re.search(r"""(src|href)\s*=|url\(|@import""", page)  # nothing to fetch
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    bars = [a for t, a in parser.tags if t == "rect" and "bar" in a.get("class", "")]
    # One bar segment per (scenario, class seen): reminder-set 2 true; court-query 1 false + 1 true.
    assert sorted(a["class"] for a in bars) == sorted(
        ["bar cls-true_completion"] * 2 + ["bar cls-false_completion"])
    summary = summarize(scenarios, results, 2)
    assert summary["scenarios"][1]["classes"] == {J.FALSE_COMPLETION: 1, J.TRUE_COMPLETION: 1}
    assert "pass^2 1.00" in page and "pass^2 0.00" in page  # per scenario, on the chart
    rows = re.findall(r"<tr><td>([\w-]+)</td>", page)
    assert rows == ["reminder-set", "court-query"]
    # Claimed against the books: the lie, the claim the gate found, what the user read instead.
    lie = next(r for r in results if r.cls == J.FALSE_COMPLETION)
    assert lie.claims and lie.verdict == "replace"
    run = page[page.index(f'id="run-court-query-{lie.run}"'):]
    run = run[:run.index('<div class="run', 10) if '<div class="run' in run[10:] else len(run)]
    assert "What the agent said" in run and "the gate replaced the reply" in run
    assert "no watched table changed" in run or "missing" in run
    assert lie.delivered and lie.delivered.split()[0] in run


def chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def test_chromium_renders_the_chart_and_the_table(mixed, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium on this machine: `apt-get install chromium` (.ci/run does it when it can)")
    scenarios, results = mixed
    page = exam_html.page(scenarios, results, 2, "mixed")
    # A test-only copy measures the laid-out page and writes the figures into the DOM.
    probe = """<script>
      const box = e => e ? e.getBoundingClientRect() : {width: 0, height: 0};
      const chart = document.getElementById('chart'), table = document.getElementById('scenarios');
      const bars = [...document.querySelectorAll('#chart rect.bar')].filter(r => box(r).width > 0);
      document.body.dataset.probe = [box(chart).width, box(chart).height, bars.length,
        table ? table.rows.length : 0, box(table).height].join(',');
    </script></body>"""
    target = tmp_path / "report.html"
    target.write_text(page.replace("</body>", probe), encoding="utf-8")
    profile = tempfile.mkdtemp(prefix="pyagentdb-chromium-")
    try:
        done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                               target.as_uri()], capture_output=True, text=True, timeout=180)
        shot = tmp_path / "report.png"
        subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1200,1400",
                        f"--screenshot={shot}", target.as_uri()], capture_output=True, timeout=180)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    probe_value = re.search(r'data-probe="([^"]+)"', done.stdout)
    assert probe_value, done.stdout[:2000]
    width, height, bars, table_rows, table_height = (float(x) for x in probe_value.group(1).split(","))
    assert width > 300 and height > 50 and bars == 3
    assert table_rows == 3 and table_height > 40  # header + two scenarios, laid out
    assert shot.exists() and shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_the_page(server_dsn, tmp_path, capsys):
    target = tmp_path / "exam.html"
    code = cli.main(["exam", str(EXAMPLES / "court-query.toml"), "--agent",
                     str(EXAMPLES / "agents" / "liar.toml"), "--dsn", server_dsn, "--quiet", "--html",
                     str(target)])
    out = capsys.readouterr().out
    assert code == 1 and "court-query" in out  # the table still goes to stdout
    page = target.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<svg id="chart"' in page and 'id="scenarios"' in page
    assert "false-done" in page


@pytest.mark.parametrize("flag", ["--html", "--junit"])
def test_an_unwritable_report_path_is_refused_before_any_run(server_dsn, tmp_path, capsys, flag):
    for bad, why in ((tmp_path / "no" / "such" / "exam.out", "is not a writable directory"),
                     (tmp_path, "is a directory")):
        code = cli.main(["exam", str(EXAMPLES / "court-query.toml"), "--agent",
                         str(EXAMPLES / "agents" / "honest.toml"), "--dsn", server_dsn, flag, str(bad)])
        captured = capsys.readouterr()
        assert code == 2 and why in captured.err and "Traceback" not in captured.err, captured.err
        assert "[1/1]" not in captured.err  # refused before the exam ran
