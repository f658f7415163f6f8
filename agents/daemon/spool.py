"""The spool: a bounded, durable local queue of probe runs waiting to be pushed.

Every run is committed here (SQLite, WAL, synchronous=FULL) before any push is attempted,
and leaves only after the service acknowledged it. The same file holds the agent's
counters, so that `tps agent status` can read them while the daemon runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agents.daemon.errors import SpoolCorruptError, SpoolError
from tps.schemas import ProbeRun

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL,
    digest TEXT NOT NULL,
    spooled_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    run_id TEXT PRIMARY KEY,
    body BLOB NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value
);
"""

# Large pages keep a run's JSON in one page, which lets a damaged file be salvaged by scanning it.
_PAGE_SIZE = 65536
_RUN_START = re.compile(rb'\{"run_id":"[0-9a-f-]{36}"')

COUNTERS = ("probed", "pushed", "dropped", "quarantined", "push_errors", "recovered")


@dataclass(frozen=True)
class SpooledRun:
    """One run as it sits in the spool: its position, id and serialized body."""

    seq: int
    run_id: str
    body: bytes


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def _serialize(run: ProbeRun) -> bytes:
    return run.model_dump_json().encode()


class Spool:
    """A bounded FIFO of serialized probe runs plus the agent's counters, in one SQLite file."""

    def __init__(
        self,
        path: Path,
        *,
        max_runs: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.max_runs = max_runs
        self.clock = clock
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    # -- opening and recovery -------------------------------------------------------------

    def open(self) -> Spool:
        """Open (or create) the spool; salvage a damaged file and raise nothing for it.

        A damaged file is moved aside, the runs that can still be read are put into a fresh
        spool, and the damage is recorded as the last error (see `open_checked` to get it raised).
        """
        try:
            return self.open_checked()
        except SpoolCorruptError as exc:
            log.error("%s", exc)
            return self

    def open_checked(self) -> Spool:
        """Open the spool; raise SpoolCorruptError, after salvaging, when the file was damaged."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        problem = self._check_file()
        if problem is None:
            self._conn = self._connect()
            return self
        moved_to = self._move_aside()
        recovered = list(salvage_runs(moved_to))
        self._conn = self._connect()
        self.put(recovered, count_probed=False)
        message = (
            f"spool file {self.path} was damaged ({problem}); moved it to {moved_to} "
            f"and recovered {len(recovered)} runs from it"
        )
        self.incr("recovered", len(recovered))
        self.record_error(message)
        raise SpoolCorruptError(message)

    def _check_file(self) -> str | None:
        if not self.path.exists():
            return None
        try:
            conn = sqlite3.connect(self.path, timeout=30)
            try:
                rows = conn.execute("PRAGMA quick_check").fetchall()
                conn.execute("SELECT count(*) FROM runs").fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            return str(exc)
        verdict = "; ".join(str(r[0]) for r in rows).replace("\n", "; ")
        return None if verdict == "ok" else verdict[:300]

    def _move_aside(self) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.clock()))
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            if src.exists():
                src.replace(Path(f"{target}{suffix}"))
        return target

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            # Acknowledged runs are overwritten, so a salvage scan never resurrects them.
            conn.execute("PRAGMA secure_delete=ON")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise SpoolError(f"cannot open spool {self.path}: {exc}") from exc
        return conn

    def close(self) -> None:
        """Checkpoint and close the file."""
        with self._lock:
            if self._conn is not None:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Spool:
        return self if self._conn is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the queue -----------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise SpoolError("the spool is not open")
        return self._conn

    def _transaction(self) -> _Transaction:
        return _Transaction(self)

    def put(self, runs: Iterable[ProbeRun], *, count_probed: bool = True) -> int:
        """Commit `runs` durably, dropping the oldest when full; return how many were dropped."""
        now = self.clock()
        rows = []
        for run in runs:
            body = _serialize(run)
            rows.append((str(run.run_id), body, _digest(body), now))
        if not rows:
            return 0
        with self._transaction() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO runs (run_id, body, digest, spooled_at) VALUES (?, ?, ?, ?)",
                rows,
            )
            (depth,) = conn.execute("SELECT count(*) FROM runs").fetchone()
            dropped = max(0, int(depth) - self.max_runs)
            if dropped:
                conn.execute(
                    "DELETE FROM runs WHERE seq IN (SELECT seq FROM runs ORDER BY seq LIMIT ?)",
                    (dropped,),
                )
                _incr(conn, "dropped", dropped)
            if count_probed:
                _incr(conn, "probed", len(rows))
        if dropped:
            log.warning("spool full (%d runs): dropped the %d oldest", self.max_runs, dropped)
        return dropped

    def peek(self, limit: int) -> list[SpooledRun]:
        """Return up to `limit` of the oldest runs; runs whose body is damaged are quarantined."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT seq, run_id, body, digest FROM runs ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
            good: list[SpooledRun] = []
            bad: list[SpooledRun] = []
            for seq, run_id, body, digest in rows:
                body = body.encode() if isinstance(body, str) else bytes(body)
                (good if _digest(body) == digest else bad).append(SpooledRun(seq, run_id, body))
            for run in bad:
                _quarantine(conn, run, "body does not match its digest", self.clock())
        for run in bad:
            message = (
                f"spooled run {run.run_id} is damaged (its bytes no longer match their digest); "
                f"moved it to the quarantine table of {self.path}"
            )
            log.error("%s", message)
            self.record_error(message)
        return good

    def ack(self, seqs: Sequence[int], *, pushed_at: float | None = None) -> None:
        """Forget runs the service acknowledged."""
        with self._transaction() as conn:
            conn.executemany("DELETE FROM runs WHERE seq = ?", [(s,) for s in seqs])
            _incr(conn, "pushed", len(seqs))
            _set(conn, "last_push_at", pushed_at if pushed_at is not None else self.clock())

    def quarantine(self, run: SpooledRun, reason: str) -> None:
        """Move a run the service rejected for good out of the queue, keeping it for inspection."""
        with self._transaction() as conn:
            _quarantine(conn, run, reason, self.clock())
        log.error("service rejected run %s for good: %s", run.run_id, reason)

    def depth(self) -> int:
        """Return how many runs wait to be pushed."""
        with self._lock:
            return int(self.conn.execute("SELECT count(*) FROM runs").fetchone()[0])

    def run_ids(self) -> set[str]:
        """Return the ids of the runs waiting to be pushed."""
        with self._lock:
            return {r[0] for r in self.conn.execute("SELECT run_id FROM runs")}

    # -- counters and state ----------------------------------------------------------------

    def incr(self, key: str, by: int = 1) -> None:
        """Add to a counter."""
        with self._transaction() as conn:
            _incr(conn, key, by)

    def set_state(self, **values: object) -> None:
        """Record state values (JSON-serializable) for `tps agent status`."""
        with self._transaction() as conn:
            for key, value in values.items():
                _set(conn, key, value)

    def record_error(self, message: str) -> None:
        """Remember the last error and count it."""
        self.set_state(last_error=message[:2000], last_error_at=self.clock())

    def state(self) -> dict[str, object]:
        """Return every counter and state value."""
        with self._lock:
            return read_state(self.conn)


class _Transaction:
    def __init__(self, spool: Spool) -> None:
        self.spool = spool

    def __enter__(self) -> sqlite3.Connection:
        self.spool._lock.acquire()
        conn = self.spool.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self.spool._lock.release()
            raise SpoolError(f"cannot write spool {self.spool.path}: {exc}") from exc
        return conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        conn = self.spool.conn
        try:
            conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.spool._lock.release()


def _incr(conn: sqlite3.Connection, key: str, by: int) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = coalesce(value, 0) + excluded.value",
        (key, by),
    )


def _set(conn: sqlite3.Connection, key: str, value: object) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, json.dumps(value)),
    )


def _quarantine(conn: sqlite3.Connection, run: SpooledRun, reason: str, now: float) -> None:
    conn.execute("DELETE FROM runs WHERE seq = ?", (run.seq,))
    conn.execute(
        "INSERT OR REPLACE INTO quarantine (run_id, body, reason, at) VALUES (?, ?, ?, ?)",
        (run.run_id, run.body, reason[:2000], now),
    )
    _incr(conn, "quarantined", 1)


def read_state(conn: sqlite3.Connection) -> dict[str, object]:
    """Read the counters and state values of a spool connection."""
    state: dict[str, object] = dict.fromkeys(COUNTERS, 0)
    for key, value in conn.execute("SELECT key, value FROM meta"):
        if key in COUNTERS:
            state[key] = int(value)
        else:
            state[key] = json.loads(value)
    state["depth"] = int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
    oldest = conn.execute("SELECT min(spooled_at) FROM runs").fetchone()[0]
    state["oldest_spooled_at"] = oldest
    return state


def salvage_runs(path: Path) -> Iterator[ProbeRun]:
    """Yield every intact, valid probe run found in a damaged spool file and its WAL.

    The scan reads raw bytes, so it works whatever part of the file is damaged; a run
    found twice (in the file and in its WAL) is yielded once.
    """
    decoder = json.JSONDecoder()
    seen: set[str] = set()
    for part in (path, Path(f"{path}-wal")):
        if not part.exists():
            continue
        raw = part.read_bytes()
        for match in _RUN_START.finditer(raw):
            start = match.start()
            # surrogateescape maps bytes to characters one to one, so the body's exact bytes
            # can be rebuilt and checked against the digest stored right after it.
            text = raw[start : start + 4 * _PAGE_SIZE].decode("utf-8", errors="surrogateescape")
            try:
                obj, end = decoder.raw_decode(text)
                body = text[:end].encode("utf-8", errors="surrogateescape")
                stored_digest = raw[start + len(body) : start + len(body) + 16].decode("ascii")
                if stored_digest != _digest(body):
                    continue
                run = ProbeRun.model_validate(obj)
            except (ValueError, ValidationError):
                continue
            if str(run.run_id) not in seen:
                seen.add(str(run.run_id))
                yield run
