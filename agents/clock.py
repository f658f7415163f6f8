"""Clocks are injected so that tests control time and never sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The monotonic wall clock of this process."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def elapsed_ms(clock: Clock, start_ns: int) -> float:
    """Return the milliseconds since `start_ns` on `clock`."""
    return (clock.now_ns() - start_ns) / 1e6
