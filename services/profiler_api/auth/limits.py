"""Per-token request rates: a token bucket per token, in each replica."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from services.profiler_api.errors import TooManyRequests


class RateLimiter:
    """Allow `rate_per_s` requests a second per key, in bursts of up to `burst`.

    A rate of 0 turns the limit off. Keys idle long enough to have refilled are dropped
    when the table grows, so its size follows the tokens in use.
    """

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def check(self, key: str) -> None:
        """Take one request from `key`'s bucket, or raise TooManyRequests with Retry-After."""
        if self.rate_per_s <= 0:
            return
        now = self.clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            wait = math.ceil((1.0 - tokens) / self.rate_per_s)
            raise TooManyRequests(
                f"rate limit: at most {self.rate_per_s:g} requests a second per token "
                f"(bursts of {self.burst}); retry after {wait} s",
                retry_after_s=wait,
            )
        if len(self._buckets) >= self.max_keys and key not in self._buckets:
            self._forget_idle(now)
        self._buckets[key] = (tokens - 1.0, now)

    def _forget_idle(self, now: float) -> None:
        full_after = self.burst / self.rate_per_s
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}
