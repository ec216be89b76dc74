"""The exit gate from Python: ask the database whether a reply may be delivered.

Python only passes the text along; agentdb.finalize_reply detects the claims,
checks them against the task's verified steps and, if any is not backed,
returns an honest replacement built from the database's own record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "deliver" or "replace"
    text: str  # what the user reads: the model's text, or the honest replacement
    pending: list[dict] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    repeated: bool = False

    @property
    def replaced(self) -> bool:
        return self.verdict == "replace"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        return cls(
            verdict=data["verdict"],
            text=data["text"],
            pending=list(data.get("pending") or []),
            claims=list(data.get("claims") or []),
            repeated=bool(data.get("repeated")),
        )


class Gate:
    """finalize(task, model_text) -> Verdict, decided by agentdb.finalize_reply."""

    def __init__(self, client):
        self.client = client

    def finalize(self, task: uuid.UUID | str, model_text: str, claims: list[dict] | None = None) -> Verdict:
        data = self.client._scalar(
            "SELECT agentdb.finalize_reply(%s::uuid, %s, %s)",
            (str(task), model_text, Jsonb(claims) if claims is not None else None),
        )
        return Verdict.from_json(data)
