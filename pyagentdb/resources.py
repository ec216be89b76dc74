"""Where the SQL and the migrations live: inside the wheel, or beside the package in a checkout."""

from __future__ import annotations

import hashlib
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(installed: str, checkout: str) -> Path:
    for candidate in (_PKG / installed, _PKG.parent / checkout):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"pyagentdb is missing its {checkout}/ folder (looked in {_PKG})")


def sql_dir() -> Path:
    return _find("_sql", "sql")


def migrations_dir() -> Path:
    return _find("_migrations", "migrations")


def sql_files() -> list[Path]:
    """The files that define functions, views and triggers, in load order."""
    return sorted(sql_dir().glob("*.sql"))


def claim_patterns_path() -> Path:
    return sql_dir() / "claim_patterns.json"


def claim_patterns_text() -> str:
    text = claim_patterns_path().read_text(encoding="utf-8")
    if "$claims$" in text:  # it is dollar-quoted in the offline install script
        raise ValueError("claim_patterns.json must not contain $claims$")
    return text


def split_statements(text: str) -> list[str]:
    """The statements of an SQL file, split by PostgreSQL's own parser (pglast)."""
    import pglast

    return list(pglast.split(text))


def sql_checksum() -> str:
    """One hash over every sql/ file, to tell whether a re-apply would change anything."""
    digest = hashlib.sha256()
    for path in [*sql_files(), claim_patterns_path()]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
