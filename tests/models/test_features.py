import math

import pandas as pd
import pytest

from models.features import candidate_features, feature_rows, problem_features, stable_code
from tps.candidate import Candidate
from tps.catalog import resolve
from tps.problem import ProblemKey


def conv_rows(candidate: Candidate, gpu: str = "W7800") -> pd.DataFrame:
    hardware = resolve(gpu)
    problem = ProblemKey(op="convolution", dims={"x": 4096, "y": 4096})
    keys = pd.DataFrame({"hw_key": ["h"], "problem_hash": ["p"], "candidate_id": [candidate.id]})
    return feature_rows(
        hardware={"h": hardware},
        problems={"p": problem},
        candidates={candidate.id: candidate},
        keys=keys,
        op="convolution",
    )


def test_ratio_features_follow_the_work_decomposition() -> None:
    params = {"block_size_x": 32, "block_size_y": 2, "tile_size_x": 1, "tile_size_y": 4}
    row = conv_rows(Candidate(backend="kernel_tuner", params=params)).iloc[0]
    blocks = (4096 / 32) * math.ceil(4096 / 8)
    assert row["ratio_threads"] == 64
    assert row["ratio_log_blocks"] == pytest.approx(math.log2(blocks))
    assert row["ratio_log_waves"] == pytest.approx(math.log2(blocks / 70))  # 70 CUs
    assert row["ratio_lane_use"] == 1.0
    assert row["hw_vendor"] == 1.0 and row["hw_warp"] == 32
    odd = conv_rows(Candidate(backend="kernel_tuner", params={"block_size_x": 48}), "MI250X")
    assert odd.iloc[0]["ratio_lane_use"] == pytest.approx(48 / 64)  # wave64 on CDNA


def test_gemm_problem_features() -> None:
    dims = {"m": 4095, "n": 4096, "k": 64}
    problem = ProblemKey(op="gemm", dtype="bf16", dims=dims, trans_b=True)
    f = problem_features(problem)
    assert f["dim_m_log2"] == pytest.approx(math.log2(4095))
    assert f["dim_m_align"] == 0 and f["dim_n_align"] == 8 and f["dim_k_align"] == 6
    assert f["prob_trans_b"] == 1.0 and f["prob_dtype_bytes"] == 2
    flops = 2 * 4095 * 4096 * 64
    moved = 2 * (4095 * 64 + 64 * 4096 + 4095 * 4096)
    assert f["prob_intensity"] == pytest.approx(flops / moved)


def test_categorical_params_get_a_stable_code() -> None:
    f = candidate_features(Candidate(backend="cublaslt", params={"tile": "128x256", "stages": 4}))
    assert f["param_tile"] == stable_code("128x256")
    assert (
        f["param_tile"]
        == candidate_features(Candidate(backend="cublaslt", params={"tile": "128x256"}))[
            "param_tile"
        ]
    )
    assert f["param_stages"] == 4.0
