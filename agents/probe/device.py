"""The device a probe runs on: CPU, a CUDA/ROCm GPU, or a GPU limited to N SMs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

DeviceKind = Literal["cpu", "cuda"]


@dataclass
class Device:
    """Where kernels run. `stream` is the stream all work goes to (a green context's, or None)."""

    kind: DeviceKind
    index: int = 0
    sm_limit: int | None = None
    threads: int | None = None
    stream: Any = None
    green_context: Any = None

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device("cpu") if self.kind == "cpu" else torch.device("cuda", self.index)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def is_rocm(self) -> bool:
        import torch

        return self.is_gpu and torch.version.hip is not None

    @property
    def vendor(self) -> str:
        if not self.is_gpu:
            return "cpu"
        return "amd" if self.is_rocm else "nvidia"

    def idle(self) -> bool:
        """Whether the device has done all the work queued on its stream so far (the CPU,
        which runs each call as it is made, never has any queued)."""
        if not self.is_gpu:
            return True
        import torch

        stream = self.stream if self.stream is not None else torch.cuda.current_stream(self.index)
        return bool(stream.query())

    def synchronize(self) -> None:
        if self.is_gpu:
            import torch

            if self.stream is not None:
                self.stream.synchronize()
            torch.cuda.synchronize(self.index)


def open_device(name: str = "auto", *, sm_limit: int | None = None) -> Device:
    """Open `name` ('auto', 'cpu', 'cuda', 'cuda:N'); with `sm_limit`, inside a green context.

    One green context per process: switching between them in one process failed on the
    H200 ("context is destroyed"), so a process that needs several limits spawns children.
    """
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if sm_limit is not None and sm_limit < 1:
        raise ValueError(f"sm_limit must be at least 1 SM, not {sm_limit}")
    if name == "cpu":
        if sm_limit is not None:
            raise ValueError("sm_limit is a CUDA green context's: the CPU has no SMs to limit")
        return Device(kind="cpu", threads=torch.get_num_threads() or os.cpu_count())
    if not name.startswith("cuda"):
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError("no CUDA or ROCm device is visible to torch")
    index = int(name.split(":", 1)[1]) if ":" in name else 0
    torch.cuda.set_device(index)
    device = Device(kind="cuda", index=index)
    if sm_limit is not None:
        from torch.cuda.green_contexts import GreenContext

        ctx: Any = GreenContext.create(num_sms=sm_limit, device_id=index)
        device.green_context = ctx
        device.stream = ctx.Stream()
        device.sm_limit = sm_limit
        torch.cuda.set_stream(device.stream)
    return device
