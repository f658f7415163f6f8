import numpy as np
import pytest

from models.dataset import TuningData
from models.evaluation import configurations
from models.families import ShapeFamilies, family_oracle_loss
from tps.candidate import Candidate
from tps.catalog import resolve
from tps.problem import ProblemKey
from tps.schemas import Measurement, ProbeRun

SMALL = Candidate(backend="triton", params={"BLOCK_M": 16, "BLOCK_N": 16})
LARGE = Candidate(backend="triton", params={"BLOCK_M": 128, "BLOCK_N": 256})


def gemm(m: int, n: int, k: int) -> ProblemKey:
    return ProblemKey(op="gemm", dtype="bf16", dims={"m": m, "n": n, "k": k})


def run(problem: ProblemKey, seed: int) -> ProbeRun:
    """Small shapes favour small tiles, large shapes large tiles (by 20%)."""
    small_shape = problem.dims["m"] * problem.dims["n"] < 2**20
    fast, slow = (SMALL, LARGE) if small_shape else (LARGE, SMALL)
    base = float(problem.dims["m"] * problem.dims["n"] * problem.dims["k"]) / 1e6 + 5.0
    return ProbeRun(
        run_id=f"00000000-0000-4000-8000-{seed:012d}",
        host_id="ab" * 8,
        hardware=resolve("H200"),
        problem=problem,
        measurements=[
            Measurement(candidate=fast, median_us=base),
            Measurement(candidate=slow, median_us=base * 1.2),
        ],
    )


@pytest.fixture(scope="module")
def gemm_data() -> TuningData:
    rng = np.random.default_rng(0)
    problems = [gemm(int(m), int(m), 4096) for m in rng.integers(16, 512, size=6)]
    problems += [gemm(int(m), int(m), 4096) for m in rng.integers(4096, 16384, size=6)]
    return TuningData.from_runs(run(p, i) for i, p in enumerate(problems))


def test_kmeans_families_separate_shapes_and_keep_winners(gemm_data: TuningData) -> None:
    families = ShapeFamilies(op="gemm", n_families=2, seed=0).fit(gemm_data)
    small = families.family_of(gemm(64, 64, 4096))
    large = families.family_of(gemm(8192, 8192, 4096))
    assert small != large
    assert families.winners(gemm(100, 90, 4096))[0] == SMALL.id
    assert families.winners(gemm(9000, 9000, 4096))[0] == LARGE.id
    restored = ShapeFamilies.from_dict(families.to_dict())
    assert restored.winners(gemm(100, 90, 4096)) == families.winners(gemm(100, 90, 4096))


def test_configurations_split_hardware_by_dtype(gemm_data: TuningData) -> None:
    assert configurations(gemm_data) == ["NVIDIA H200"]
    fp16 = run(gemm(64, 64, 4096).model_copy(update={"dtype": "fp16"}), 99)
    limited = run(gemm(64, 64, 4096), 98)
    limited = limited.model_copy(
        update={"hardware": limited.hardware.model_copy(update={"unit_limit": 66})}
    )
    runs = [run(p, i) for i, p in enumerate(gemm_data.problems.values())] + [fp16, limited]
    names = configurations(TuningData.from_runs(runs))
    assert names == ["NVIDIA H200/bf16", "NVIDIA H200/fp16", "NVIDIA H200@66u"]


def test_family_winners_lose_nothing_against_the_oracle_here(gemm_data: TuningData) -> None:
    report = family_oracle_loss(gemm_data, op="gemm", n_families=2)
    assert report["workloads"] == 12
    assert report["within_3pct"] == 1.0
    one_family = family_oracle_loss(gemm_data, op="gemm", n_families=1)
    # One family for 6 small and 6 large shapes: leaving a problem out tips the majority
    # to the other kind, so its winner is always the wrong tile (20% slower).
    assert one_family["within_3pct"] == 0.0
    assert one_family["median_loss"] == pytest.approx(0.2)
