"""Timers: how one sample of a kernel is taken on a device, behind one small protocol.

A timer arms a kernel (a CUDA graph of `reps` launches, or a plain loop) and then takes
rounds of samples over all armed kernels in the order it is given, reporting µs per launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agents.providers.base import Kernel


@dataclass
class Armed:
    """A kernel ready to be sampled: `reps` launches per sample."""

    kernel: Kernel
    reps: int
    kernel_us: float = 0.0
    handle: Any = None
    mode: str = "loop"


class Timer(Protocol):
    name: str

    def estimate_us(self, kernels: Sequence[Kernel]) -> list[float]:
        """Warm each kernel up and return rough per-launch times, to size the repetitions."""
        ...

    def arm(self, kernel: Kernel, reps: int, kernel_us: float = 0.0) -> Armed: ...

    def sample_rounds(
        self, armed: Sequence[Armed], orders: Sequence[Sequence[int]]
    ) -> list[dict[int, float]]:
        """Run rounds; round r samples armed[i] for i in orders[r]; return µs per launch."""
        ...
