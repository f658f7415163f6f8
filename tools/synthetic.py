"""Generate realistic probe runs for the demo and the ingest benchmark.

Latencies follow a roofline (compute time against memory time on the catalog's datasheet
figures) times a per-(candidate, problem) efficiency, with run-to-run noise: the same
candidate wins the same problem on the same hardware across runs, as on a real fleet.
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.catalog import CATALOG
from tps.hardware import HardwareSpec
from tps.problem import DTYPE_BYTES, ProblemKey
from tps.schemas import Measurement, ProbeRun, Telemetry

# (M, N, K) of linear layers in common transformer sizes, plus unaligned stragglers.
_HIDDEN = (1024, 2048, 4096, 5120, 8192)
_TOKENS = (1, 8, 16, 64, 128, 512, 1024, 2048, 4096, 4095, 8192)


def gemm_problems() -> list[ProblemKey]:
    """Return the GEMM problems of a transformer fleet (QKV, MLP up/down, logits)."""
    return transformer_gemms(_HIDDEN, _TOKENS, ("bf16", "fp16"))


def transformer_gemms(
    hidden_sizes: Iterable[int], token_counts: Iterable[int], dtypes: Iterable[str]
) -> list[ProblemKey]:
    """Return the linear layers' GEMMs (QKV, MLP up, MLP down) of each size, token count, dtype."""
    return [
        ProblemKey(op="gemm", dtype=dtype, dims={"m": tokens, "n": n, "k": k}, trans_b=True)
        for hidden in hidden_sizes
        for tokens in token_counts
        for n, k in ((3 * hidden, hidden), (4 * hidden, hidden), (hidden, 4 * hidden))
        for dtype in dtypes
    ]


def gemm_candidates() -> list[Candidate]:
    """Return the vendor default, cuBLASLt algorithms and Triton configs."""
    candidates = [VENDOR_DEFAULT]
    for algo in range(24):
        tile = ("64x64", "128x64", "128x128", "128x256", "256x128")[algo % 5]
        candidates.append(
            Candidate(
                backend="cublaslt",
                params={
                    "algo_id": 6 + algo // 6,
                    "tile": tile,
                    "stages": (3, 4, 5, 6)[algo % 4],
                    "split_k": (1, 1, 2, 4)[(algo // 4) % 4],
                    "swizzle": algo % 3,
                    "cluster": "1x1" if algo % 2 else "2x1",
                },
            )
        )
    for block_m in (32, 64, 128):
        for block_n in (64, 128, 256):
            for block_k, warps in ((32, 4), (64, 8)):
                candidates.append(
                    Candidate(
                        backend="triton",
                        params={
                            "BLOCK_M": block_m,
                            "BLOCK_N": block_n,
                            "BLOCK_K": block_k,
                            "num_warps": warps,
                            "num_stages": 3 if block_k == 64 else 4,
                            "GROUP_M": 8,
                        },
                    )
                )
    return candidates


def _unit_hash(*parts: str) -> float:
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def roofline_us(hardware: HardwareSpec, problem: ProblemKey) -> float:
    """Return the lower bound on a GEMM's time from peak compute and memory bandwidth."""
    m, n, k = problem.dims["m"], problem.dims["n"], problem.dims["k"]
    peak = hardware.peak_tflops.get(problem.dtype) or hardware.peak_tflops.get("fp16") or 50.0
    bytes_moved = DTYPE_BYTES[problem.dtype] * (m * k + k * n + m * n) * problem.batch
    compute_us = problem.flops / (peak * 1e12) * 1e6
    memory_us = bytes_moved / (hardware.mem_bandwidth_gbs * 1e9) * 1e6
    return max(compute_us, memory_us) + 4.0  # a few µs of launch and tail


@dataclass
class FleetSimulator:
    """Probe runs of a simulated fleet: hosts of catalog hardware running transformer GEMMs."""

    seed: int = 0
    hosts_per_hardware: int = 4
    hardware: list[HardwareSpec] = field(default_factory=lambda: CATALOG.specs()[:8])
    problems: list[ProblemKey] = field(default_factory=gemm_problems)
    candidates: list[Candidate] = field(default_factory=gemm_candidates)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def runs(
        self, count: int, *, min_measurements: int = 8, max_measurements: int = 64
    ) -> Iterator[ProbeRun]:
        """Yield `count` probe runs with min..max measurements each."""
        rng = self._rng
        start = datetime(2026, 11, 1, tzinfo=UTC)
        for index in range(count):
            hardware = rng.choice(self.hardware)
            host = rng.randrange(self.hosts_per_hardware)
            problem = rng.choice(self.problems)
            size = rng.randint(min_measurements, min(max_measurements, len(self.candidates)))
            chosen = [VENDOR_DEFAULT, *rng.sample(self.candidates[1:], size - 1)]
            context = (hardware.fingerprint(), problem.key_hash())
            base_us = roofline_us(hardware, problem)
            measurements = [self._measure(context, base_us, c) for c in chosen]
            valid = [m for m in measurements if m.valid and m.median_us is not None]
            winner = min(valid, key=lambda m: m.median_us or math.inf) if valid else None
            yield ProbeRun(
                run_id=uuid.UUID(int=rng.getrandbits(128), version=4),
                host_id=hashlib.sha256(f"{self.seed}:{hardware.name}:{host}".encode()).hexdigest()[
                    :32
                ],
                hardware=hardware,
                problem=problem,
                measurements=measurements,
                winner_id=winner.candidate.id if winner else None,
                budget_ms=round(sum(m.median_us or 0 for m in measurements) * 30 / 1000, 3),
                compile_ms=round(rng.uniform(0, 400), 1),
                telemetry=Telemetry(
                    source="nvml" if hardware.vendor == "nvidia" else "amdsmi",
                    temperature_c=round(rng.uniform(35, 80), 1),
                    utilization_pct=round(rng.uniform(0, 60), 1),
                    sm_clock_mhz=hardware.clock_mhz,
                    power_w=round(rng.uniform(80, 650), 1),
                ),
                rationale="median of interleaved samples, IQR outliers rejected",
                agent_version="0.1.0",
                created_at=start + timedelta(seconds=index * 7),
            )

    def _measure(
        self, context: tuple[str, str], base_us: float, candidate: Candidate
    ) -> Measurement:
        rng = self._rng
        key = (*context, candidate.id)
        if candidate.backend != "vendor-default" and _unit_hash(*key, "fails") < 0.01:
            return Measurement(
                candidate=candidate, valid=False, error="output mismatch vs fp64 reference"
            )
        # Efficiency is fixed per (hardware, problem, candidate): 35% to 95% of the roofline.
        efficiency = 0.35 + 0.6 * _unit_hash(*key)
        if candidate.backend == "vendor-default":
            efficiency = max(efficiency, 0.7)
        median = base_us / efficiency * rng.lognormvariate(0, 0.02)
        spread = median * rng.uniform(0.005, 0.04)
        samples = rng.choice((10, 10, 10, 20, 50, 100))
        return Measurement(
            candidate=candidate,
            median_us=round(median, 3),
            p10_us=round(median - spread, 3),
            p90_us=round(median + 1.5 * spread, 3),
            std_us=round(spread * 0.8, 3),
            samples=samples,
            outliers_rejected=rng.randint(0, samples // 10),
        )
