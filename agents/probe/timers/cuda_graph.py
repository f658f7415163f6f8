"""Device-event timing on CUDA/ROCm, from CUDA-graph replay where the kernel allows it.

A kernel of a few µs is shorter than Python's launch path, so timing launches from Python
measures Python: on (2048, 2048, 128) bf16 that made the best cuBLASLt algorithm look 1.36x
slower than the default when it was 1.09x faster. Each sample therefore replays a graph of
`reps` launches between one pair of events, and a short device-side sleep at the start of
each round lets the host queue the whole round before the device reaches the first event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agents.probe.timers.base import Armed
from agents.providers.base import Kernel

log = logging.getLogger(__name__)


def _timing_event() -> Any:
    """Return a device event that records time."""
    import torch

    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch leaves it untyped


def _spin(cycles: int) -> None:
    """Keep the device busy for `cycles` clock cycles, so the host can queue a round ahead."""
    import torch

    torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]  # torch leaves it untyped


class CudaGraphTimer:
    name = "cuda-graph"

    def __init__(
        self,
        *,
        stream: Any = None,
        warmup: int = 1,
        use_graphs: bool = True,
        lead_cycles: int = 200_000,
    ) -> None:
        self.stream = stream
        self.warmup = warmup
        self.use_graphs = use_graphs
        self.lead_cycles = lead_cycles

    def _stream(self) -> Any:
        import torch

        return self.stream if self.stream is not None else torch.cuda.current_stream()

    def estimate_us(self, kernels: Sequence[Kernel]) -> list[float]:
        import torch

        s = self._stream()
        pairs = []
        with torch.cuda.stream(s):
            for kernel in kernels:
                for _ in range(self.warmup):
                    kernel.run()
            _spin(self.lead_cycles)
            for kernel in kernels:
                start = _timing_event()
                end = _timing_event()
                start.record(s)
                kernel.run()
                kernel.run()
                end.record(s)
                pairs.append((start, end))
        s.synchronize()
        return [
            max(start.elapsed_time(end) * 1000.0 / (2 * kernel.launches), 0.5)
            for kernel, (start, end) in zip(kernels, pairs, strict=True)
        ]

    def arm(self, kernel: Kernel, reps: int, kernel_us: float = 0.0) -> Armed:
        import torch

        if self.use_graphs and kernel.graphable:
            graph = torch.cuda.CUDAGraph()
            try:
                # Capture needs a non-default stream: the green context's, or torch's own.
                with torch.cuda.graph(graph, stream=self.stream):
                    for _ in range(reps):
                        kernel.run()
                graph.replay()  # a graph that cannot launch fails here, not mid-sampling
                return Armed(
                    kernel=kernel, reps=reps, kernel_us=kernel_us, handle=graph, mode="graph"
                )
            except Exception as exc:  # uncapturable kernels fall back to a launch loop
                log.debug("graph capture failed for %s: %s", kernel.candidate.label(), exc)
                del graph
                torch.cuda.synchronize()
        return Armed(kernel=kernel, reps=reps, kernel_us=kernel_us, mode="loop")

    def sample_rounds(
        self, armed: Sequence[Armed], orders: Sequence[Sequence[int]]
    ) -> list[dict[int, float]]:
        import torch

        s = self._stream()
        rounds: list[dict[int, tuple[Any, Any]]] = []
        with torch.cuda.stream(s):
            for order in orders:
                _spin(self.lead_cycles)
                events: dict[int, tuple[Any, Any]] = {}
                for i in order:
                    a = armed[i]
                    start = _timing_event()
                    end = _timing_event()
                    start.record(s)
                    if a.mode == "graph":
                        a.handle.replay()
                    else:
                        for _ in range(a.reps):
                            a.kernel.run()
                    end.record(s)
                    events[i] = (start, end)
                rounds.append(events)
        s.synchronize()
        return [
            {
                i: start.elapsed_time(end) * 1000.0 / (armed[i].reps * armed[i].kernel.launches)
                for i, (start, end) in r.items()
            }
            for r in rounds
        ]
