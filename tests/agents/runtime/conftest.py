"""Fixtures of the runtime's CPU tests: a real runtime on the CPU providers, fast admission."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.bans import BanList
from agents.cache import CacheEntry, ProbeCache
from agents.probe.device import Device
from agents.probe.hardware import detect_hardware
from agents.providers.base import Kernel
from agents.providers.table import create_provider
from agents.runtime import AdmissionSettings, Mode, Runtime
from tests.agents.conftest import FAST
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

# Admits any winner however slow, with no trial in the program and no step check: tests of
# routing must not depend on timing, and count the calls that reach the winner.
ANY_GAIN = AdmissionSettings(
    min_gain=-1.0, rounds=3, target_us=200.0, max_reps=5, trial_calls=0, step_pairs=0
)


class ScaledProvider:
    """A test-only backend: the product times `scale`, or an error after `fail_after` calls."""

    backend = "cpu-scaled"
    ops = frozenset({"gemm"})

    def __init__(self) -> None:
        self.calls = 0
        # Seconds each launch sleeps: a launch that costs more in the program than it did alone.
        self.delay_s = 0.0

    def available(self, device: Device) -> bool:
        return True

    def candidates(self, problem: ProblemKey, device: Device, *, limit: int, operands: Any = None):
        return []

    def prepare(self, candidate: Candidate, problem: ProblemKey, operands: Any, device: Device):
        import torch

        scale = float(candidate.params.get("scale", 1.0))
        fail_after = int(candidate.params.get("fail_after", -1))

        delay_s = float(candidate.params.get("delay_ms", 0.0)) / 1e3

        def run() -> Any:
            self.calls += 1
            if self.delay_s or delay_s:
                time.sleep(self.delay_s or delay_s)
            if 0 <= fail_after < self.calls:
                raise RuntimeError("launch failed: an illegal memory access")
            return torch.matmul(operands.a, operands.b) * scale

        return Kernel(candidate=candidate, run=run, graphable=False)


def scaled(**params: Any) -> Candidate:
    return Candidate(backend="cpu-scaled", params=params)


def entry_for(
    problem: ProblemKey, hardware: HardwareSpec, winner: Candidate, **update: Any
) -> CacheEntry:
    fields: dict[str, Any] = {
        "problem": problem,
        "hardware_fingerprint": hardware.fingerprint(),
        "software_key": hardware.software_key(),
        "winner": winner,
        "median_us": 1.0,
        "default_us": 2.0,
        "run_id": str(uuid.uuid4()),
    }
    return CacheEntry(**(fields | update))


@pytest.fixture(autouse=True)
def one_torch_thread() -> Any:
    """Run torch's CPU products on one thread: these tests time tiny products against each
    other, and a pool of two waits a whole scheduler slice for a core whenever another
    process holds one (16 ms a product, seen beside a busy process on a 2-core box)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def cpu_device() -> Device:
    return Device(kind="cpu", threads=1)


@pytest.fixture(scope="session")
def cpu_hardware(cpu_device: Device) -> HardwareSpec:
    return detect_hardware(cpu_device)


@pytest.fixture
def make_runtime(
    tmp_path: Path, cpu_device: Device, cpu_hardware: HardwareSpec
) -> Callable[..., Runtime]:
    """Build a real Runtime on the CPU providers plus the scaled test backend."""

    def make(
        *,
        entries: list[CacheEntry] = (),  # type: ignore[assignment]
        mode: Mode = Mode.DISPATCH,
        admission: AdmissionSettings = ANY_GAIN,
        probe: Any = None,
        default: Callable[[Any, Any], Any] | None = None,
    ) -> Runtime:
        cache = ProbeCache(tmp_path / "cache.json")
        cache.merge(list(entries))
        providers: dict[str, Any] = {
            name: create_provider(name, settings=FAST) for name in ("cpu-torch", "vendor-default")
        }
        providers["cpu-scaled"] = ScaledProvider()
        return Runtime(
            cache=cache,
            device=cpu_device,
            hardware=cpu_hardware,
            providers=providers,
            mode=mode,
            bans=BanList(tmp_path / "bans.json"),
            probe=probe,
            admission=admission,
            default=default,
        )

    return make
