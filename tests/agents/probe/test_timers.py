"""The CPU timer: interleaved samples measure each kernel, not the switch to it."""

from __future__ import annotations

import time

from agents.probe.timers.cpu import CpuTimer
from agents.probe.timers.table import TIMERS
from agents.providers.base import Kernel
from tps.candidate import Candidate

SWITCH_S = 0.002


def switching_kernels(count: int) -> list[Kernel]:
    """Kernels that stall once whenever another one ran last, as BLAS thread pools do."""
    last: list[int] = [-1]

    def make(index: int) -> Kernel:
        def run() -> None:
            if last[0] != index:
                time.sleep(SWITCH_S)
                last[0] = index

        return Kernel(candidate=Candidate(backend="cpu-test", params={"i": index}), run=run)

    return [make(i) for i in range(count)]


def test_a_switch_between_kernels_is_not_charged_to_the_sample() -> None:
    timer = CpuTimer()
    kernels = switching_kernels(3)
    armed = [timer.arm(kernel, reps=1) for kernel in kernels]
    rows = timer.sample_rounds(armed, [[0, 1, 2], [2, 0, 1], [1, 2, 0]])
    samples = [us for row in rows for us in row.values()]
    assert len(samples) == 9
    assert max(samples) < SWITCH_S * 1e6 / 2, samples


def test_the_timer_table_holds_the_host_and_the_device_event_timer() -> None:
    assert {name: TIMERS.create(name).name for name in TIMERS} == {
        "cpu": "cpu",
        "cuda-graph": "cuda-graph",
    }
