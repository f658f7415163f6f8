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
