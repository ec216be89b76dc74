"""pyagentdb: PostgreSQL decides whether an agent's write happened; Python only asks."""

from .client import Client, Receipt, Task

__version__ = "0.1.0"
__all__ = ["Client", "Receipt", "Task", "__version__"]
