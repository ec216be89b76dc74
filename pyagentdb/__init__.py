"""pyagentdb: PostgreSQL decides whether an agent's write happened; Python only asks."""

__version__ = "0.1.0"
