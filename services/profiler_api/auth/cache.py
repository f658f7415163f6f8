"""Tokens known to this replica, so that a request is authenticated without the database.

A revocation reaches every replica through Postgres NOTIFY, delivered when the revoking
transaction commits: each replica's listener drops its whole cache on the notification.
While the listener is not connected (at start, after a lost connection) the cache is
bypassed, so a notification missed while disconnected can never leave a revoked token
accepted. A lookup that raced with a revocation is not cached (the generation moved).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from services.profiler_api.auth.repository import REVOCATION_CHANNEL

log = logging.getLogger(__name__)


class TokenCache:
    """Principals by token hash, each for at most `ttl_s` seconds."""

    def __init__(
        self,
        *,
        ttl_s: float,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[Any, float]] = {}
        self._generation = 0
        self._live = False
        self._lock = threading.Lock()  # put and invalidate run on different threads

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def live(self) -> bool:
        return self._live

    def get(self, token_hash: str) -> Any | None:
        """Return the cached principal, or None (unknown, expired, or the cache is not live)."""
        if not self._live:
            return None
        entry = self._entries.get(token_hash)
        if entry is None or entry[1] < self.clock():
            return None
        return entry[0]

    def put(self, token_hash: str, principal: Any, *, generation: int) -> None:
        """Cache `principal`, unless a revocation arrived since its lookup began."""
        with self._lock:
            if not self._live or generation != self._generation:
                return
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[token_hash] = (principal, self.clock() + self.ttl_s)

    def invalidate(self) -> None:
        """Forget every token (a token was revoked somewhere)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def set_live(self, live: bool) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()
            self._live = live


class RevocationListener:
    """LISTEN for revocations on one connection of its own; reconnect when it is lost."""

    def __init__(self, libpq_url: str, cache: TokenCache, *, retry_s: float = 1.0) -> None:
        self.libpq_url = libpq_url
        self.cache = cache
        self.retry_s = retry_s

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop,), name="tps-token-revocations", daemon=True
        )
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._listen(stop)
            except (psycopg.Error, OSError) as exc:
                log.warning("token revocation listener lost its connection: %s", exc)
            finally:
                self.cache.set_live(False)
            stop.wait(self.retry_s)

    def _listen(self, stop: threading.Event) -> None:
        with psycopg.connect(self.libpq_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"LISTEN {REVOCATION_CHANNEL}")
            self.cache.set_live(True)
            while not stop.is_set():
                for _ in conn.notifies(timeout=1.0):
                    self.cache.invalidate()
                # A dead server ends notifies() quietly: ask, so that the loss raises.
                conn.execute("SELECT 1")
