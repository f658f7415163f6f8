"""Fixtures of the daemon tests: a tiny in-test engine that produces valid probe runs."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from agents.daemon.identity import host_id
from agents.daemon.metrics import AgentMetrics
from agents.daemon.spool import Spool
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Measurement, ProbeRun

HOST_ID = host_id(machine_id="test-machine", secret=b"test-secret")
SECRET = "test-deployment-secret"

CPU = HardwareSpec(
    vendor="cpu",
    arch="x86_64-test",
    name="Test CPU",
    compute_units=2,
    l2_bytes=1 << 20,
    mem_bandwidth_gbs=20.0,
    torch_version="test",
)

TILES = [Candidate(backend="cpu-test", params={"tile": t}) for t in (16, 32, 64, 128)]


def gemm(m: int, n: int = 64, k: int = 64) -> ProblemKey:
    return ProblemKey(op="gemm", dtype="fp32", dims={"m": m, "n": n, "k": k}, trans_b=True)


def make_run(problem: ProblemKey, candidates: Sequence[Candidate] = (VENDOR_DEFAULT,)) -> ProbeRun:
    """Build a valid run whose winner is the last candidate (latencies fall along the list)."""
    measurements = [
        Measurement(candidate=c, median_us=100.0 - i, p10_us=99.0 - i, p90_us=101.0 - i, samples=10)
        for i, c in enumerate(candidates)
    ]
    return ProbeRun(
        run_id=uuid.uuid4(),
        host_id=HOST_ID,
        hardware=CPU,
        problem=problem,
        measurements=measurements,
        winner_id=measurements[-1].candidate.id,
    )


class ListEngine:
    """An engine for unit tests: 'measures' vendor-default and four tiles, tile 64 fastest."""

    def __init__(self) -> None:
        self.probed: list[tuple[ProblemKey, list[str] | None]] = []
        self.offered: list[list[str]] = []  # what each steered probe showed its steer

    def hardware(self) -> HardwareSpec:
        return CPU

    def probe(
        self,
        problem: ProblemKey,
        *,
        only: Sequence[Candidate] | None = None,
        steer: Callable[[list[Candidate]], Sequence[Candidate] | None] | None = None,
    ) -> ProbeRun:
        if only is None and steer is not None:
            self.offered.append([c.id for c in TILES])
            only = steer(list(TILES))  # the tiles are the whole shortlist here
        self.probed.append((problem, None if only is None else [c.id for c in only]))
        pool = [VENDOR_DEFAULT, *TILES]
        if only is not None:
            wanted = {c.id for c in only} | {VENDOR_DEFAULT.id}
            pool = [c for c in pool if c.id in wanted]
        latency = {
            VENDOR_DEFAULT.id: 100.0,
            **{c.id: 80.0 + abs(c.params["tile"] - 64) for c in TILES},
        }
        measurements = [Measurement(candidate=c, median_us=latency[c.id], samples=10) for c in pool]
        winner = min(measurements, key=lambda m: m.median_us or 0.0)
        return ProbeRun(
            run_id=uuid.uuid4(),
            host_id=HOST_ID,
            hardware=CPU,
            problem=problem,
            measurements=measurements,
            winner_id=winner.candidate.id,
        )


class DictCache:
    """A cache for unit tests keyed like the real one: (problem, hardware fingerprint, versions)."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str, str], ProbeRun] = {}
        self.saved = 0

    def _key(self, problem: ProblemKey, hardware: HardwareSpec) -> tuple[str, str, str]:
        return problem.key_hash(), hardware.fingerprint(), hardware.software_key()

    def get(self, problem: ProblemKey, hardware: HardwareSpec) -> ProbeRun | None:
        return self.runs.get(self._key(problem, hardware))

    def put(self, run: ProbeRun) -> None:
        self.runs[self._key(run.problem, run.hardware)] = run

    def save(self) -> None:
        self.saved += 1

    def __len__(self) -> int:
        return len(self.runs)


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    with Spool(tmp_path / "spool.sqlite", max_runs=10_000) as s:
        yield s


@pytest.fixture
def metrics() -> AgentMetrics:
    return AgentMetrics()


@pytest.fixture(scope="session")
def cpu_engine(tmp_path_factory: pytest.TempPathFactory):
    """The real probe engine on the CPU, with a small sampling budget to keep tests short."""
    import torch

    from agents.daemon.identity import host_id, read_machine_id
    from agents.opconfig import OpConfig, TunableOpEntry
    from agents.probe.assemble import build_engine
    from agents.probe.settings import ProbeSettings

    settings = ProbeSettings(
        samples=3, min_samples=3, max_samples=3, max_extra_ms=0, target_sample_us=5, max_reps=1
    )
    # On a shared 2-core machine, multi-threaded tiny GEMMs spin against other processes:
    # one thread keeps a probe at ~10 ms instead of ~150 ms.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_engine(
        device="cpu",
        host_id=host_id(machine_id=read_machine_id(), secret=SECRET.encode()),
        settings=settings,
        op_config=OpConfig(tunable_ops=[TunableOpEntry(name="gemm", candidates=1)]),
        bans_path=tmp_path_factory.mktemp("bans") / "bans.json",
    )
    torch.set_num_threads(threads)
