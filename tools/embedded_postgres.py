"""The embedded Postgres (pgserver) that `tps serve`, `tps demo` and the benchmarks start
when TPS_DATABASE_URL is unset; local use only, never part of the service image."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

from services.profiler_api.db import sqlalchemy_url
from services.profiler_api.settings import Settings
from tools.settings import LocalSettings
from tps.errors import TPSError

log = logging.getLogger(__name__)


def start_embedded(data_dir: Path) -> str:
    """Start (or reuse) the embedded Postgres in `data_dir` and return its URL.

    The server stops when the last process that started it exits; the data stays.
    """
    try:
        with warnings.catch_warnings():
            # Without XDG_RUNTIME_DIR, platformdirs warns: pgserver's lock goes to /tmp/runtime-UID.
            warnings.simplefilter("ignore")
            import pgserver  # imported here: only the embedded mode needs the wheel
            from pgserver.postgres_server import PostgresServer
    except ImportError as exc:  # the service image has no embedded Postgres
        raise TPSError(
            "TPS_DATABASE_URL is unset and the embedded Postgres is not installed: "
            "set TPS_DATABASE_URL, or pip install 'tps[local]'"
        ) from exc

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with PostgresServer._lock:  # pgserver's own lock over its handle file
        forget_dead_handles(data_dir)
    server = pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
    url = sqlalchemy_url(server.get_uri())
    log.debug("embedded Postgres at %s (data in %s)", url, data_dir)
    return url


def forget_dead_handles(data_dir: Path) -> list[int]:
    """Drop the pids of processes that died holding the embedded server; return the dropped.

    pgserver stops the server when its last holder exits, and counts holders in a pid file. A
    holder that was killed never takes its pid out, and the server would then run forever.
    """
    import psutil

    handles = data_dir / ".handle_pids.json"
    if not handles.is_file():
        return []
    pids: list[int] = json.loads(handles.read_text() or "[]")
    dead = [pid for pid in pids if not psutil.pid_exists(pid)]
    if dead:
        handles.write_text(json.dumps([pid for pid in pids if pid not in dead]))
        log.info("embedded Postgres: forgot holders %s that exited without letting go", dead)
    return dead


def database_url_or_embedded(settings: Settings, local: LocalSettings | None = None) -> str:
    """Return the configured database URL, starting the embedded server when there is none."""
    if settings.database_url:
        return sqlalchemy_url(settings.database_url)
    return start_embedded((local or LocalSettings()).data_dir)
