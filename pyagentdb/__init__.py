"""pyagentdb: PostgreSQL decides whether an agent's write happened; Python only asks."""

from .claims import Claim, detect_claims
from .client import Client, Receipt, Task
from .gate import Gate, Verdict

__version__ = "0.1.0"
__all__ = ["Claim", "Client", "Gate", "Receipt", "Task", "Verdict", "__version__", "detect_claims"]
