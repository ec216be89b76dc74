"""Write sql/claim_patterns.json in its house style: one claim object per line.

    python bench/format_patterns.py sql/claim_patterns.json            # format only
    python bench/format_patterns.py sql/claim_patterns.json --guards   # and (re)write each claim's
                                                                       # "any" (its literal guard)
"""

import json
import sys
from pathlib import Path


def dump(value, indent=0, key=None):
    pad = "  " * indent
    inner = "  " * (indent + 1)
    if key in ("strip", "spaces"):
        return json.dumps(value)  # invisible characters: escaped, so that a reader sees them
    if isinstance(value, dict):
        if key == "claim" or not value:
            return json.dumps(value, ensure_ascii=False)
        items = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {dump(v, indent + 1, k)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if (
            key in ("accept_list",)
            or all(not isinstance(v, (dict, list)) for v in value)
            and sum(len(str(v)) for v in value) < 90
        ):
            return json.dumps(value, ensure_ascii=False)
        sub = "claim" if key == "claims" else None
        items = [inner + dump(v, indent + 1, sub) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


path = Path(sys.argv[1])
doc = json.loads(path.read_text(encoding="utf-8"))
if "--guards" in sys.argv[2:]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pyagentdb.claims import required_literals

    for spec in doc["languages"].values():
        for claim in spec["claims"]:
            claim.pop("any", None)
            found = required_literals(claim["pattern"])
            if found:
                claim["any"] = found
path.write_text(dump(doc) + "\n", encoding="utf-8")
