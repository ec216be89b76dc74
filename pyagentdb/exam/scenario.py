"""Scenario files: one TOML file per exam case, checked before anything runs.

A scenario says how to build the world (setup SQL), who asks what (user and
request), which tools the agent is shown, and how to judge the state it leaves
behind: SQL assertions, expected change counts per table, and tables that must
not change. See docs/exam.md for the format.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
TOOL_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
KNOWN_KEYS = {
    "name", "description", "request", "setup", "tools", "expect_change", "watch", "unchanged",
    "user", "changes", "assert",
}
USER_KEYS = {"id", "authenticated", "lang", "time_zone"}
CHANGE_KEYS = {"added", "removed", "changed", "columns"}
ASSERT_KEYS = {"name", "sql"}


class ScenarioError(ValueError):
    """A scenario file is wrong: names the file, the key and what is wrong."""

    def __init__(self, path: str | Path, key: str | None, message: str):
        self.path = str(path)
        self.key = key
        self.message = message
        where = f"{self.path}: {key}: " if key else f"{self.path}: "
        super().__init__(where + message)


@dataclass(frozen=True)
class Assertion:
    name: str
    sql: str


@dataclass(frozen=True)
class ChangeSpec:
    """Exactly how many rows of one table the task should add, remove and change."""

    table: str
    added: int = 0
    removed: int = 0
    changed: int = 0
    columns: tuple[str, ...] | None = None  # columns a changed row may differ in (None: any)


@dataclass(frozen=True)
class Scenario:
    path: str
    name: str
    request: str
    setup: str
    user_id: str
    authenticated: bool = True
    lang: str = "en"
    time_zone: str | None = None  # the user's: the gate reads the reply's times in it
    description: str = ""
    tools: tuple[str, ...] | None = None  # None: every registered tool
    expect_change: bool = True
    watch: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    changes: tuple[ChangeSpec, ...] = ()
    assertions: tuple[Assertion, ...] = field(default_factory=tuple)

    def error(self, key: str | None, message: str) -> ScenarioError:
        return ScenarioError(self.path, key, message)


def _type_name(value: Any) -> str:
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


class _Reader:
    def __init__(self, path: str | Path):
        self.path = str(path)

    def fail(self, key: str | None, message: str) -> ScenarioError:
        return ScenarioError(self.path, key, message)

    def unknown(self, data: dict, allowed: set[str], prefix: str = "") -> None:
        for key in data:
            if key not in allowed:
                hint = ", ".join(sorted(allowed))
                raise self.fail(prefix + key, f"unknown key (expected one of: {hint})")

    def string(self, data: dict, key: str, *, prefix: str = "", required: bool = False,
               default: str | None = None, nonempty: bool = True) -> str | None:
        if key not in data:
            if required:
                raise self.fail(prefix + key, "is required")
            return default
        value = data[key]
        if not isinstance(value, str):
            raise self.fail(prefix + key, f"must be a string, got {_type_name(value)}")
        if nonempty and not value.strip():
            raise self.fail(prefix + key, "must not be empty")
        return value

    def boolean(self, data: dict, key: str, default: bool, prefix: str = "") -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(prefix + key, f"must be true or false, got {_type_name(value)}")
        return value

    def count(self, data: dict, key: str, prefix: str) -> int:
        value = data.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(prefix + key, f"must be a whole number >= 0, got {value!r}")
        return value

    def strings(self, data: dict, key: str, *, prefix: str = "", pattern: re.Pattern | None = None,
                what: str = "name") -> tuple[str, ...] | None:
        if key not in data:
            return None
        value = data[key]
        if not isinstance(value, list):
            raise self.fail(prefix + key, f"must be a list of strings, got {_type_name(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.fail(f"{prefix}{key}[{i}]", f"must be a non-empty string, got {item!r}")
            if pattern is not None and not pattern.match(item):
                raise self.fail(f"{prefix}{key}[{i}]", f"{item!r} is not a valid {what}")
            out.append(item.strip())
        if len(set(out)) != len(out):
            raise self.fail(prefix + key, "lists the same entry twice")
        return tuple(out)


def parse_scenario(data: dict, path: str | Path = "<scenario>") -> Scenario:
    """Check a decoded TOML document and build the Scenario; raises ScenarioError."""
    r = _Reader(path)
    r.unknown(data, KNOWN_KEYS)

    name = r.string(data, "name", default=Path(str(path)).stem)
    if not NAME_RE.match(name):
        raise r.fail("name", f"{name!r}: use letters, digits, '-', '_' or '.' (at most 100)")
    request = r.string(data, "request", required=True)
    setup = r.string(data, "setup", required=True)
    description = r.string(data, "description", default="", nonempty=False) or ""

    user = data.get("user")
    if user is None:
        raise r.fail("user", "is required: a table with id (and authenticated, lang)")
    if not isinstance(user, dict):
        raise r.fail("user", f"must be a table ([user]), got {_type_name(user)}")
    r.unknown(user, USER_KEYS, "user.")
    user_id = r.string(user, "id", prefix="user.", required=True)
    authenticated = r.boolean(user, "authenticated", True, "user.")
    lang = r.string(user, "lang", prefix="user.", default="en")
    if lang not in ("en", "zh"):
        raise r.fail("user.lang", f"must be 'en' or 'zh', got {lang!r}")
    time_zone = r.string(user, "time_zone", prefix="user.")

    tools = r.strings(data, "tools", pattern=TOOL_RE, what="tool name")
    if tools is not None and not tools:
        raise r.fail("tools", "is empty: leave it out to offer every registered tool")
    expect_change = r.boolean(data, "expect_change", True)
    watch = r.strings(data, "watch", what="table") or ()
    unchanged = r.strings(data, "unchanged", what="table") or ()

    changes_raw = data.get("changes", {})
    if not isinstance(changes_raw, dict):
        raise r.fail("changes", f"must be a table of tables ([changes.\"schema.table\"]), got "
                     f"{_type_name(changes_raw)}")
    changes = []
    for table, spec in changes_raw.items():
        prefix = f'changes."{table}".'
        if not isinstance(spec, dict):
            raise r.fail(f'changes."{table}"', f"must be a table with added/removed/changed, got "
                         f"{_type_name(spec)}")
        r.unknown(spec, CHANGE_KEYS, prefix)
        columns = r.strings(spec, "columns", prefix=prefix, what="column")
        change = ChangeSpec(table, r.count(spec, "added", prefix), r.count(spec, "removed", prefix),
                            r.count(spec, "changed", prefix), columns)
        if columns is not None and not change.changed:
            raise r.fail(prefix + "columns", "is only meaningful with changed > 0")
        if not (change.added or change.removed or change.changed):
            raise r.fail(f'changes."{table}"', "expects no change at all: list the table in "
                         "`unchanged` instead")
        if table in unchanged:
            raise r.fail(f'changes."{table}"', "the same table is also listed in `unchanged`")
        changes.append(change)
    if not expect_change and changes:
        raise r.fail("changes", "expect_change = false, so no table may have expected changes")

    raw_asserts = data.get("assert", [])
    if not isinstance(raw_asserts, list) or not all(isinstance(a, dict) for a in raw_asserts):
        raise r.fail("assert", "must be an array of tables ([[assert]] with name and sql)")
    assertions = []
    for i, item in enumerate(raw_asserts):
        prefix = f"assert[{i}]."
        r.unknown(item, ASSERT_KEYS, prefix)
        sql = r.string(item, "sql", prefix=prefix, required=True)
        aname = r.string(item, "name", prefix=prefix, default=f"assert[{i}]")
        assertions.append(Assertion(aname, sql))
    if len({a.name for a in assertions}) != len(assertions):
        raise r.fail("assert", "two assertions have the same name")
    if expect_change and not assertions and not changes:
        raise r.fail(None, "expect_change = true but there is nothing to check: add [[assert]] "
                     "queries or [changes.\"table\"] counts")

    return Scenario(
        path=str(path), name=name, request=request, setup=setup, user_id=user_id,
        authenticated=authenticated, lang=lang, time_zone=time_zone, description=description, tools=tools,
        expect_change=expect_change, watch=watch, unchanged=unchanged, changes=tuple(changes),
        assertions=tuple(assertions),
    )


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(path, None, f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(path, None, f"not UTF-8 text: {exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(path, None, f"not valid TOML: {exc}") from exc
    return parse_scenario(data, path)


def collect(paths: list[str | Path]) -> list[Scenario]:
    """Scenario files and directories (every *.toml directly inside) -> scenarios, names unique."""
    files: list[Path] = []
    for item in paths:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.toml"))
            if not found:
                raise ScenarioError(p, None, "directory holds no *.toml scenario files")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise ScenarioError(p, None, "no such file or directory")
    scenarios = [load_scenario(f) for f in files]
    seen: dict[str, str] = {}
    for s in scenarios:
        if s.name in seen:
            raise ScenarioError(s.path, "name", f"{s.name!r} is already the name of {seen[s.name]}")
        seen[s.name] = s.path
    return scenarios
