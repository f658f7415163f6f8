"""The prediction path's feature matrix is the training path's, number for number."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from models import estimator
from models.bundle import ModelBundle
from models.data_files import read_probe_runs_jsonl
from models.dataset import TuningData
from models.estimator import LatencyModel
from tests.models.conftest import FAST_MODEL, REPO_ROOT
from tps.candidate import Candidate
from tps.catalog import resolve
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

GEMM_RUNS = REPO_ROOT / "benchmarks" / "data" / "gemm_h200_probe_runs.jsonl.gz"


@pytest.fixture(scope="module")
def convolution_model(convolution_data: TuningData) -> LatencyModel:
    return LatencyModel(op="convolution", **FAST_MODEL).fit(convolution_data)


@pytest.fixture(scope="module")
def gemm_model() -> LatencyModel:
    runs = list(itertools.islice(read_probe_runs_jsonl(Path(GEMM_RUNS)), 120))
    return LatencyModel(op="gemm", **FAST_MODEL).fit(TuningData.from_runs(runs))


def assert_same_features(
    model: LatencyModel, hardware: HardwareSpec, problem: ProblemKey, candidates: list[Candidate]
) -> None:
    fast, references = model._prediction_features(hardware, problem, candidates)
    slow = model._training_path_features(hardware, problem, candidates)
    np.testing.assert_array_equal(fast, model._matrix(slow))
    assert sorted(references) == sorted(slow.filter(like="ref_").columns)
    for name, values in references.items():
        np.testing.assert_array_equal(values, slow[name].to_numpy())


@pytest.mark.parametrize("gpu", ["W7900", "A100", "RTX 3090", "MI250X"])
def test_convolution_features_match_the_training_path(
    convolution_model: LatencyModel, convolution_data: TuningData, gpu: str
) -> None:
    problem = next(iter(convolution_data.problems.values()))
    universe = convolution_model.candidate_universe()
    assert_same_features(convolution_model, resolve(gpu), problem, universe)
    # A subset in another order, and a shape the model never measured.
    subset = universe[::-3]
    assert_same_features(convolution_model, resolve(gpu), problem, subset)
    unseen = problem.model_copy(update={"dims": {"x": 1000, "y": 3000}})
    assert_same_features(convolution_model, resolve(gpu), unseen, subset)


def test_gemm_features_match_the_training_path(gemm_model: LatencyModel) -> None:
    universe = gemm_model.candidate_universe()
    problems = list(gemm_model.reference_.problems.values())[:3]
    for gpu, problem in itertools.product(["H100", "MI300X"], problems):
        assert_same_features(gemm_model, resolve(gpu), problem, universe)


def test_a_candidate_outside_training_is_scored_the_same_way(
    convolution_model: LatencyModel, convolution_data: TuningData
) -> None:
    problem = next(iter(convolution_data.problems.values()))
    known = convolution_model.candidate_universe()[:5]
    new = Candidate(backend="kernel_tuner", params={"block_size_x": 48, "block_size_y": 3})
    frame = convolution_model.predict_frame(resolve("W7900"), problem, [*known, new])
    alone = convolution_model.predict_frame(resolve("W7900"), problem, known)
    assert frame["candidate_id"].tolist() == [c.id for c in known] + [new.id]
    np.testing.assert_array_equal(
        frame["predicted_us"].to_numpy()[:5], alone["predicted_us"].to_numpy()
    )


def test_a_warmed_up_model_builds_nothing_per_query(
    convolution_data: TuningData, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = LatencyModel(op="convolution", **FAST_MODEL).fit(convolution_data)
    loaded = ModelBundle.from_bytes(
        ModelBundle(models={"convolution": model}, families={}).to_bytes()
    )
    loaded.warm_up()

    def rebuilt(*_: object) -> None:
        raise AssertionError("candidate features rebuilt at query time")

    monkeypatch.setattr(estimator, "candidate_table", rebuilt)
    problem = next(iter(convolution_data.problems.values()))
    frame = loaded.model_for("convolution").predict_frame(resolve("W7900"), problem)
    assert len(frame) == len(model.candidate_universe())
