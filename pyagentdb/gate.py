"""The exit gate from Python: ask the database whether a reply may be delivered.

agentdb.finalize_reply checks the reply's claims against the task's verified steps
and, if any is not backed, returns an honest replacement built from the database's
own record. The claims are found here, by pyagentdb.detect_claims, when the database
holds the same patterns (it answers to their fingerprint): the same claims the
database would find, without its regex work. Otherwise the database detects them.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import regex
from psycopg.types.json import Jsonb

from .claims import read_reply

# Replies longer than this are left to the database's detector (a real reply is far shorter).
DETECT_HERE_MAX = 4_000


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "deliver" or "replace"
    text: str  # what the user reads: the model's text, or the honest replacement
    pending: list[dict] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    repeated: bool = False
    claims_from: str | None = None  # "runtime", "database" or "declared": who found the claims
    book_state: str | None = None  # "troubled", "empty" or "clean": the books the verdict was decided on
    reason: str | None = None  # why the reply was replaced (for logs; never shown to the user)

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
            claims_from=data.get("claims_from"),
            book_state=data.get("book_state"),
            reason=data.get("reason"),
        )


class Gate:
    """finalize(task, model_text) -> Verdict, decided by agentdb.finalize_reply."""

    def __init__(self, client):
        self.client = client

    def finalize(
        self,
        task: uuid.UUID | str,
        model_text: str,
        claims: list[dict] | None = None,
        *,
        detect_here: bool | None = None,
    ) -> Verdict:
        """claims: declared claims, if the runtime knows what the reply claims; None to detect them
        (here, unless detect_here or the client's detect_claims_here says no)."""
        arg = Jsonb(claims) if claims is not None else None
        fingerprint = None
        if detect_here is None:
            detect_here = getattr(self.client, "detect_claims_here", True)
        # A long reply is left to the database: Python's backtracking regexes can take far longer
        # on a pathological text than PostgreSQL's automata, and it is the application's time.
        if claims is None and detect_here and model_text and len(model_text) <= DETECT_HERE_MAX:
            fingerprint = self.client.claim_patterns_fingerprint()
        if fingerprint:
            try:
                # Read as the database would: the normalised text (offsets refer to it).
                reading = read_reply(model_text)
            except (re.error, regex.error, TypeError, ValueError):
                reading = None  # patterns this detector cannot run: the database detects
            if reading is not None:
                sent = {k: reading[k] for k in ("claims", "clauses", "facts")}
                arg = Jsonb({"patterns": fingerprint, **sent})
            else:
                fingerprint = None
        data = self.client._scalar(
            "SELECT agentdb.finalize_reply(%s::uuid, %s, %s)", (str(task), model_text, arg)
        )
        if fingerprint and data.get("claims_from") == "database":
            # The patterns were reloaded since we asked: ask again next time.
            self.client.claim_patterns_fingerprint(refresh=True)
        return Verdict.from_json(data)
