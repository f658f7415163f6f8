"""Fixtures for the probe engine's CPU tests: the real engine, fast settings, test plugins."""

from __future__ import annotations

from typing import Any

import pytest

from agents.bans import BanList
from agents.opconfig import OpConfig, TunableOpEntry
from agents.probe.device import Device
from agents.probe.engine import ProbeEngine
from agents.probe.settings import ProbeSettings
from agents.probe.timers.cpu import CpuTimer
from agents.providers.base import Kernel
from agents.providers.table import create_provider
from agents.telemetry import NullSource
from tps.candidate import Candidate
from tps.problem import ProblemKey

HOST = "0123456789abcdef"
FAST = ProbeSettings(
    samples=5, min_samples=3, max_samples=20, max_extra_ms=50, target_sample_us=50, confirm_rounds=3
)


class WrongProvider:
    """A test-only backend whose results are off by 1%: validation must ban it."""

    backend = "cpu-wrong"
    ops = frozenset({"gemm"})

    def available(self, device: Device) -> bool:
        return True

    def candidates(
        self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None
    ) -> list[Candidate]:
        return [Candidate(backend=self.backend, params={"scale": 1.01})][:limit]

    def prepare(
        self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device
    ) -> Kernel:
        import torch

        return Kernel(
            candidate=candidate,
            run=lambda: torch.matmul(operands.a, operands.b) * 1.01,
            graphable=False,
        )


class ManualClock:
    """A clock that moves only when told to sleep: tests never wait."""

    def __init__(self) -> None:
        self.ns = 0
        self.slept: list[float] = []

    def now_ns(self) -> int:
        self.ns += 1000
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.ns += int(seconds * 1e9)


def cpu_engine(
    tmp_path, *, providers=None, settings=FAST, candidates=4, telemetry=None, clock=None, timer=None
) -> ProbeEngine:
    import torch

    from tps.hardware import HardwareSpec

    chosen = (
        providers
        if providers is not None
        else [create_provider(name, settings=settings) for name in ("vendor-default", "cpu-torch")]
    )
    return ProbeEngine(
        device=Device(kind="cpu", threads=torch.get_num_threads()),
        providers=chosen,
        timer=timer or CpuTimer(),
        telemetry=telemetry or NullSource(),
        bans=BanList.load(tmp_path / "bans.json"),
        host_id=HOST,
        settings=settings,
        op_config=OpConfig(tunable_ops=[TunableOpEntry(name="gemm", candidates=candidates)]),
        clock=clock,
        hardware=HardwareSpec(
            vendor="cpu",
            arch="x86_64",
            name="test cpu",
            compute_units=2,
            l2_bytes=2**20,
            mem_bandwidth_gbs=10.0,
            torch_version="test",
        ),
    )


@pytest.fixture
def engine(tmp_path):
    return cpu_engine(tmp_path)


def gemm(m=48, n=40, k=56, dtype="fp32", **kw) -> ProblemKey:
    return ProblemKey(op="gemm", dtype=dtype, dims={"m": m, "n": n, "k": k}, **kw)
