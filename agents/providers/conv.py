"""conv2d candidates: memory formats and cuDNN's own benchmark mode, and an im2col GEMM."""

from __future__ import annotations

from typing import Any

from agents.errors import CandidateError
from agents.probe.device import Device
from agents.providers.base import Kernel
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.problem import ProblemKey


def _conv(operands: Any, x: Any, weight: Any) -> Any:
    import torch.nn.functional as F

    return F.conv2d(
        x,
        weight,
        stride=operands.stride,
        padding=operands.pad,
        dilation=operands.dilation,
        groups=operands.groups,
    )


def _with_flags(fn: Any, *, benchmark: bool, tf32: bool) -> Any:
    """Run `fn` with cuDNN's benchmark mode and TF32 set for this problem, then restore them.

    cuDNN uses TF32 for float32 convolutions unless told not to (seen on the H200: relative
    error 2.6e-4 on an fp32 problem); an fp32 problem means IEEE float32, a tf32 one TF32.
    """
    import torch

    backend = torch.backends.cudnn
    saved = backend.benchmark, backend.allow_tf32
    backend.benchmark, backend.allow_tf32 = benchmark, tf32
    try:
        return fn()
    finally:
        backend.benchmark, backend.allow_tf32 = saved


def conv2d_default(problem: ProblemKey, operands: Any, device: Device) -> Kernel:
    """F.conv2d on NCHW tensors with cuDNN's benchmark mode off, as torch starts."""

    tf32 = problem.dtype == "tf32"

    def run() -> Any:
        return _with_flags(
            lambda: _conv(operands, operands.x, operands.weight), benchmark=False, tf32=tf32
        )

    return Kernel(candidate=VENDOR_DEFAULT, run=run)


class TorchConvProvider:
    """F.conv2d with a memory format and, on GPUs, cuDNN/MIOpen benchmark mode.

    channels_last converts the input on every launch (counted) and the weight once, as a
    model converted to channels_last would hold it. Benchmark mode's own search runs in the
    first launch, so it lands in compile time.
    """

    backend = "torch-conv"
    ops = frozenset({"conv2d"})

    def available(self, device: Device) -> bool:
        return True

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        combos = (
            [("channels_last", True), ("channels_last", False), ("contiguous", True)]
            if device.is_gpu
            else [("channels_last", False)]
        )
        return [
            Candidate(backend=self.backend, params={"memory_format": fmt, "benchmark": bench})
            for fmt, bench in combos
        ][:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        channels_last = candidate.params.get("memory_format") == "channels_last"
        bench = bool(candidate.params.get("benchmark")) and device.is_gpu
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        weight = operands.weight.contiguous(memory_format=fmt)
        x = operands.x
        tf32 = problem.dtype == "tf32"

        def run() -> Any:
            return _with_flags(
                lambda: _conv(operands, x.contiguous(memory_format=fmt), weight),
                benchmark=bench,
                tf32=tf32,
            )

        copy = x.numel() * x.element_size() if channels_last else 0
        return Kernel(candidate=candidate, run=run, copy_bytes=copy)


class Im2colProvider:
    """Convolution as unfold + one GEMM: the explicit form of the implicit-GEMM method."""

    backend = "im2col"
    ops = frozenset({"conv2d"})

    def available(self, device: Device) -> bool:
        return True

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        if problem.dims.get("groups", 1) != 1:
            return []
        return [Candidate(backend=self.backend, params={"gemm": "vendor-default"})][:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch.nn.functional as F

        if operands.groups != 1:
            raise CandidateError("im2col takes groups=1 only")
        n, _, h, w = operands.x.shape
        k, _, r, s = operands.weight.shape
        d, p, st = operands.dilation, operands.pad, operands.stride
        oh = (h + 2 * p - d * (r - 1) - 1) // st + 1
        ow = (w + 2 * p - d * (s - 1) - 1) // st + 1
        weight = operands.weight.reshape(k, -1)
        x = operands.x

        def run() -> Any:
            cols = F.unfold(x, (r, s), dilation=d, padding=p, stride=st)
            return (weight @ cols).view(n, k, oh, ow)

        return Kernel(candidate=candidate, run=run)
