"""The one small protocol every candidate provider implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tps.candidate import Candidate
from tps.problem import ProblemKey

if TYPE_CHECKING:
    from agents.probe.device import Device


@dataclass
class Kernel:
    """A prepared candidate: `run()` launches it once and returns its output."""

    candidate: Candidate
    run: Callable[[], Any]
    graphable: bool = True
    # Fills a reused output buffer with NaN, so that unwritten elements fail validation.
    poison: Callable[[], object] | None = None
    # Objects that must outlive any graph captured from `run` (library plans, buffers).
    keepalive: list[Any] = field(default_factory=list)
    # Bytes copied per launch by layout adaptation, reported in the timing breakdown.
    copy_bytes: int = 0
    # Releases library resources once every graph that captured `run` is gone.
    close: Callable[[], None] | None = None
    # Launches of the candidate per `run()`: more than one when it rotates operand copies.
    launches: int = 1


def rotating(kernels: list[Kernel]) -> Kernel:
    """Return one kernel that runs each of `kernels` (one per operand copy) in turn.

    Cold-cache timing: with copies together larger than the L2, every launch reads
    operands that the previous launches have pushed out of it. Timers divide by `launches`.
    """
    first = kernels[0]

    def run() -> Any:
        out = None
        for kernel in kernels:
            out = kernel.run()
        return out

    def close() -> None:
        for kernel in kernels:
            if kernel.close is not None:
                kernel.close()

    return Kernel(
        candidate=first.candidate,
        run=run,
        graphable=all(k.graphable for k in kernels),
        keepalive=[k.keepalive for k in kernels],
        copy_bytes=first.copy_bytes,
        close=close,
        launches=sum(k.launches for k in kernels),
    )


class Provider(Protocol):
    """A backend that proposes candidates for a problem and turns one into a Kernel."""

    backend: str

    @property
    def ops(self) -> frozenset[str]:
        """The ops it can run."""
        ...

    def available(self, device: Device) -> bool:
        """Return whether the backend can run on `device` at all."""
        ...

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        """Return up to `limit` candidates, most promising first (`operands` help planning)."""
        ...

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        """Compile or plan `candidate` for these operands; raise CandidateError if it cannot."""
        ...
