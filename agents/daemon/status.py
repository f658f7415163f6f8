"""The agent's status, read from its spool file, so it works while the daemon runs elsewhere."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from agents.daemon.errors import SpoolError
from agents.daemon.spool import read_state


class AgentStatus(BaseModel):
    """What `tps agent status` shows."""

    spool_path: str
    state: str = "never started"
    pid: int | None = None
    hardware: str | None = None
    spool_depth: int = 0
    oldest_spooled_at: datetime | None = None
    last_push_at: datetime | None = None
    heartbeat_at: datetime | None = None
    probed: int = 0
    pushed: int = 0
    dropped: int = 0
    quarantined: int = 0
    recovered: int = 0
    push_errors: int = 0
    last_error: str | None = None
    last_error_at: datetime | None = None
    cache_size: int = 0


def _when(value: object) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    return None


def _has_schema(conn: sqlite3.Connection) -> bool:
    # The daemon may have created the file but not yet its tables.
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {"runs", "meta"} <= names


def read_status(spool_path: Path) -> AgentStatus:
    """Read the status an agent left in `spool_path` (no daemon needs to be running)."""
    if not spool_path.exists():
        return AgentStatus(spool_path=str(spool_path))
    try:
        conn = sqlite3.connect(f"file:{spool_path}?mode=ro", uri=True, timeout=10)
        try:
            if not _has_schema(conn):
                return AgentStatus(spool_path=str(spool_path), state="starting")
            state = read_state(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SpoolError(f"cannot read spool {spool_path}: {exc}") from exc
    return AgentStatus(
        spool_path=str(spool_path),
        state=str(state.get("state") or "unknown"),
        pid=state.get("pid"),
        hardware=state.get("hardware"),
        spool_depth=int(state["depth"]),  # type: ignore[call-overload]
        oldest_spooled_at=_when(state.get("oldest_spooled_at")),
        last_push_at=_when(state.get("last_push_at")),
        heartbeat_at=_when(state.get("heartbeat_at")),
        probed=int(state["probed"]),  # type: ignore[call-overload]
        pushed=int(state["pushed"]),  # type: ignore[call-overload]
        dropped=int(state["dropped"]),  # type: ignore[call-overload]
        quarantined=int(state["quarantined"]),  # type: ignore[call-overload]
        recovered=int(state["recovered"]),  # type: ignore[call-overload]
        push_errors=int(state["push_errors"]),  # type: ignore[call-overload]
        last_error=state.get("last_error"),
        last_error_at=_when(state.get("last_error_at")),
        cache_size=int(state.get("cache_size") or 0),  # type: ignore[call-overload]
    )
