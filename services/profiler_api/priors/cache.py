"""Answers of /v1/priors kept in the process, forgotten when the data under them changes.

A fleet asks the same questions again and again (every host of a job, every restart), so a
replica keeps each answer, already encoded as JSON, for `priors_cache_s` seconds. What
changes an answer is written by some replica into Postgres, so Postgres tells every replica:
ingest and model activation `NOTIFY tps_priors` in their transaction (delivered on commit)
with the (hardware, problem) pairs that changed, or `*` for everything; each replica LISTENs
on one connection of its own and drops what changed. While that connection is down the cache
neither answers nor stores, so a replica never serves what it may have missed. The time
limit bounds what a lagging read replica can leave behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

import psycopg

log = logging.getLogger(__name__)

CHANNEL = "tps_priors"
EVERYTHING = "*"
# NOTIFY payloads are limited to 8000 bytes; past this many pairs, say "everything".
MAX_NOTIFIED_PAIRS = 200

Pair = tuple[str, str]  # (hardware fingerprint, problem hash)


def encode_pairs(pairs: Iterable[Pair]) -> str:
    """Return the NOTIFY payload naming `pairs`, or `*` when there are too many."""
    unique = sorted(set(pairs))
    if len(unique) > MAX_NOTIFIED_PAIRS:
        return EVERYTHING
    return ",".join(f"{h}:{p}" for h, p in unique)


def decode_pairs(payload: str) -> set[Pair] | None:
    """Return the pairs a payload names, or None for everything."""
    if payload == EVERYTHING or not payload:
        return None
    pairs = set()
    for item in payload.split(","):
        hardware, _, problem = item.partition(":")
        pairs.add((hardware, problem))
    return pairs


@dataclass(frozen=True)
class CachedAnswer:
    body: bytes
    source: str
    expires_at: float


class PriorAnswerCache:
    """An LRU of encoded answers with a time limit, dropped by pair or all at once."""

    def __init__(
        self, *, size: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.size, self.ttl_s, self.clock = size, ttl_s, clock
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[Pair | None, CachedAnswer]] = OrderedDict()
        self._by_pair: dict[Pair | None, set[Hashable]] = {}
        self.enabled = False  # until the listener is connected
        # Counts what was dropped: an answer read before a drop may be older than it.
        self.generation = 0

    def get(self, key: Hashable) -> CachedAnswer | None:
        """Return the answer stored under `key` if it is still good."""
        if not self.enabled:
            return None
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if item[1].expires_at <= self.clock():
                self._remove(key)
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(
        self, key: Hashable, pair: Pair | None, answer: tuple[bytes, str], *, since: int
    ) -> None:
        """Store an encoded answer and its source, read when the generation was `since`.

        `pair` is what the answer was built from (None: unknown; any change drops it). An
        answer read before something was dropped is not stored: it may predate the change.
        """
        if not self.enabled or self.ttl_s <= 0:
            return
        body, source = answer
        cached = CachedAnswer(body=body, source=source, expires_at=self.clock() + self.ttl_s)
        with self._lock:
            if self.generation != since:
                return
            self._remove(key)
            self._items[key] = (pair, cached)
            self._by_pair.setdefault(pair, set()).add(key)
            while len(self._items) > self.size:
                self._remove(next(iter(self._items)))

    def forget(self, pairs: set[Pair] | None) -> None:
        """Drop the answers built from `pairs` (and those of unknown pairs); None drops all."""
        with self._lock:
            self.generation += 1
            if pairs is None:
                self._items.clear()
                self._by_pair.clear()
                return
            for pair in (*pairs, None):
                for key in list(self._by_pair.get(pair, ())):
                    self._remove(key)

    def __len__(self) -> int:
        return len(self._items)

    def _remove(self, key: Hashable) -> None:
        item = self._items.pop(key, None)
        if item is None:
            return
        keys = self._by_pair.get(item[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_pair[item[0]]


class ChangeListener:
    """LISTEN for changes on one connection of its own; drop what they name from the cache."""

    def __init__(
        self,
        cache: PriorAnswerCache,
        url: str,
        *,
        retry_s: float = 1.0,
        on_everything: Callable[[], None] | None = None,
    ) -> None:
        self.cache, self.url, self.retry_s = cache, url, retry_s
        # Also told when everything may have changed (a model switch, a lost connection),
        # before the answers are dropped: the active model is asked for again.
        self.on_everything = on_everything
        self.connected = threading.Event()

    def _forget(self, pairs: set[Pair] | None) -> None:
        if pairs is None and self.on_everything is not None:
            self.on_everything()
        self.cache.forget(pairs)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="tps-priors-listener")
        thread.daemon = True
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    # Whatever happened while not listening is unknown: start empty.
                    self._forget(None)
                    self.cache.enabled = True
                    self.connected.set()
                    while not stop.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            self._forget(decode_pairs(notify.payload))
            except psycopg.Error as exc:
                log.warning("priors cache: change listener lost its connection (%s)", exc)
            finally:
                self.cache.enabled = False
                self.connected.clear()
                self._forget(None)
            stop.wait(self.retry_s)
