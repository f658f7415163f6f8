"""The in-process answer cache of /v1/priors: time limit, drops by pair, generations."""

from __future__ import annotations

from services.profiler_api.priors.cache import (
    EVERYTHING,
    MAX_NOTIFIED_PAIRS,
    PriorAnswerCache,
    decode_pairs,
    encode_pairs,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cache(clock: Clock, *, size: int = 10, ttl_s: float = 5.0) -> PriorAnswerCache:
    cache = PriorAnswerCache(size=size, ttl_s=ttl_s, clock=clock)
    cache.enabled = True
    return cache


def test_an_answer_is_served_until_its_time_limit() -> None:
    clock = Clock()
    cache = _cache(clock)
    cache.put("q", ("hw", "p"), (b"{}", "observed"), since=cache.generation)
    hit = cache.get("q")
    assert hit is not None and (hit.body, hit.source) == (b"{}", "observed")
    clock.now += 5.0
    assert cache.get("q") is None
    assert len(cache) == 0


def test_a_change_drops_the_answers_of_its_pairs_and_of_unknown_pairs_only() -> None:
    cache = _cache(Clock())
    cache.put("a", ("hw", "p1"), (b"a", "observed"), since=cache.generation)
    cache.put("b", ("hw", "p2"), (b"b", "observed"), since=cache.generation)
    cache.put("none", None, (b"n", "none"), since=cache.generation)
    cache.forget({("hw", "p1")})
    assert cache.get("a") is None and cache.get("none") is None
    assert cache.get("b") is not None
    cache.forget(None)
    assert cache.get("b") is None


def test_an_answer_read_before_a_change_is_not_stored() -> None:
    cache = _cache(Clock())
    since = cache.generation
    cache.forget({("hw", "other")})  # a change lands while the answer is being read
    cache.put("q", ("hw", "p"), (b"old", "observed"), since=since)
    assert cache.get("q") is None


def test_nothing_is_served_or_stored_while_changes_cannot_be_heard() -> None:
    cache = _cache(Clock())
    cache.put("q", ("hw", "p"), (b"x", "observed"), since=cache.generation)
    cache.enabled = False
    assert cache.get("q") is None
    cache.put("r", ("hw", "p"), (b"x", "observed"), since=cache.generation)
    cache.enabled = True
    assert cache.get("r") is None


def test_the_least_recently_used_answer_goes_first() -> None:
    cache = _cache(Clock(), size=2)
    for key in ("a", "b"):
        cache.put(key, (key, key), (b"x", "observed"), since=cache.generation)
    assert cache.get("a") is not None  # "b" is now the oldest
    cache.put("c", ("c", "c"), (b"x", "observed"), since=cache.generation)
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None


def test_pairs_travel_in_the_payload_until_there_are_too_many() -> None:
    pairs = {("0123456789abcdef", "fedcba9876543210"), ("aa", "bb")}
    assert decode_pairs(encode_pairs(pairs)) == pairs
    many = {(f"h{i}", "p") for i in range(MAX_NOTIFIED_PAIRS + 1)}
    assert encode_pairs(many) == EVERYTHING
    assert decode_pairs(EVERYTHING) is None
    # The largest payload named pair by pair fits in NOTIFY's 8000 bytes.
    widest = {(f"{i:016x}", f"{i:016x}") for i in range(MAX_NOTIFIED_PAIRS)}
    assert len(encode_pairs(widest).encode()) < 8000


def test_a_model_switch_makes_the_listener_expire_the_active_model_first(
    database_url: str,
) -> None:
    """`*` (an activation) and a reconnect call `on_everything`; a pair's change does not."""
    import threading
    import time

    import psycopg

    from services.profiler_api.db import libpq_url
    from services.profiler_api.priors.cache import CHANNEL, ChangeListener

    calls: list[int] = []
    cache = PriorAnswerCache(size=10, ttl_s=60.0)
    listener = ChangeListener(
        cache, libpq_url(database_url), on_everything=lambda: calls.append(cache.generation)
    )
    stop = threading.Event()
    thread = listener.start(stop)
    try:
        assert listener.connected.wait(10)
        assert len(calls) == 1  # connecting: whatever happened before is unknown
        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, encode_pairs([("hw", "p")])))
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, EVERYTHING))
        deadline = time.monotonic() + 10
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        # Once for `*` only, and before that drop: the answers go after the model is expired.
        assert len(calls) == 2 and calls[1] == cache.generation - 1
    finally:
        stop.set()
        thread.join(5)
