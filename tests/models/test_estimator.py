import threading
import time

import lightgbm as lgb
import numpy as np
import pytest

from models.bundle import ArtifactError, ModelBundle, checksum, train_bundle
from models.dataset import TuningData
from models.estimator import LatencyModel, ModelError
from tests.models.conftest import FAST_MODEL
from tps.catalog import resolve


def test_fit_is_deterministic_given_a_seed(convolution_data: TuningData) -> None:
    hardware = resolve("W7900")  # not in the training data
    problem = next(iter(convolution_data.problems.values()))
    a = LatencyModel(op="convolution", seed=3, **FAST_MODEL).fit(convolution_data)
    b = LatencyModel(op="convolution", seed=3, **FAST_MODEL).fit(convolution_data)
    c = LatencyModel(op="convolution", seed=4, colsample=0.5, **FAST_MODEL).fit(convolution_data)
    _, score_a, us_a = a.predict(hardware, problem)
    _, score_b, us_b = b.predict(hardware, problem)
    _, score_c, _ = c.predict(hardware, problem)
    assert np.array_equal(score_a, score_b) and np.array_equal(us_a, us_b)
    assert not np.array_equal(score_a, score_c)
    assert len(score_a) == convolution_data.frame["candidate_id"].nunique()
    assert np.all(np.isfinite(us_a)) and np.all(us_a > 0)


def test_boosters_train_side_by_side_one_thread_each(
    convolution_data: TuningData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two threads the three boosters train two at a time, one OpenMP thread each (no
    team to wake at every round), and the model is the one a single thread trains."""
    spans: list[tuple[float, float, int, str]] = []
    train = lgb.train

    def timed(params: dict, *args: object, **kwargs: object) -> lgb.Booster:
        started = time.perf_counter()
        booster = train(params, *args, **kwargs)
        thread = threading.current_thread().name
        spans.append((started, time.perf_counter(), params["num_threads"], thread))
        return booster

    monkeypatch.setattr(lgb, "train", timed)
    params = {**FAST_MODEL, "n_estimators": 60}
    two = LatencyModel(op="convolution", seed=3, **{**params, "n_jobs": 2}).fit(convolution_data)
    assert len(spans) == 3 and {s[2] for s in spans} == {1}
    assert len({s[3] for s in spans}) == 2  # two threads of the pool
    first, second = sorted(spans)[:2]
    assert second[0] < first[1]  # the first two overlap
    spans.clear()
    six = LatencyModel(op="convolution", seed=3, **{**params, "n_jobs": 6}).fit(convolution_data)
    assert [s[2] for s in spans] == [2, 2, 2]  # three at once, two threads each
    spans.clear()
    one = LatencyModel(op="convolution", seed=3, **{**params, "n_jobs": 1}).fit(convolution_data)
    assert [s[2] for s in spans] == [1, 1, 1]
    assert len({s[3] for s in spans}) == 1  # in the caller's thread, in turn
    hardware, problem = resolve("W7900"), next(iter(convolution_data.problems.values()))
    _, score_two, us_two = two.predict(hardware, problem)
    _, score_one, us_one = one.predict(hardware, problem)
    assert np.array_equal(score_two, score_one) and np.array_equal(us_two, us_one)
    assert six.ranker_.num_trees() == 60


def test_estimator_follows_sklearn_conventions(convolution_data: TuningData) -> None:
    model = LatencyModel(op="convolution", **FAST_MODEL)
    assert not [name for name in vars(model) if name.endswith("_")]  # __init__ fits nothing
    with pytest.raises(ModelError, match="not fitted"):
        model.predict(resolve("A100"), next(iter(convolution_data.problems.values())))
    assert model.fit(convolution_data) is model
    assert model.get_params()["op"] == "convolution"


@pytest.mark.slow
def test_regressor_learns_latency_on_training_hardware(convolution_data: TuningData) -> None:
    model = LatencyModel(op="convolution", n_estimators=80).fit(convolution_data)
    hw_key = next(k for k, h in convolution_data.hardware.items() if h.name.endswith("A6000"))
    rows = convolution_data.frame[
        (convolution_data.frame["hw_key"] == hw_key) & convolution_data.frame["valid"]
    ]
    problem = convolution_data.problems[rows["problem_hash"].iloc[0]]
    candidates = [convolution_data.candidates[c] for c in rows["candidate_id"]]
    _, _, predicted = model.predict(convolution_data.hardware[hw_key], problem, candidates)
    ape = np.abs(predicted - rows["median_us"].to_numpy()) / rows["median_us"].to_numpy()
    assert np.median(ape) < 0.2


def test_artifact_round_trip(convolution_data: TuningData) -> None:
    bundle = train_bundle(convolution_data, model_params=FAST_MODEL, seed=1)
    artifact = bundle.to_bytes()
    assert artifact == bundle.to_bytes()
    loaded = ModelBundle.from_bytes(artifact, expected_checksum=checksum(artifact))
    assert loaded.ops == ["convolution"]
    assert loaded.data_counts == bundle.data_counts
    hardware, problem = resolve("MI210"), next(iter(convolution_data.problems.values()))
    _, s1, us1 = bundle.model_for("convolution").predict(hardware, problem)
    _, s2, us2 = loaded.model_for("convolution").predict(hardware, problem)
    assert np.allclose(s1, s2) and np.allclose(us1, us2)
    assert [c.id for c in loaded.candidate_universe("convolution")] == [
        c.id for c in bundle.candidate_universe("convolution")
    ]
    with pytest.raises(ArtifactError, match="checksum"):
        ModelBundle.from_bytes(artifact, expected_checksum="0" * 64)
    with pytest.raises(ArtifactError):
        ModelBundle.from_bytes(b"not an artifact")
    with pytest.raises(ModelError, match="no model for op 'gemm'"):
        loaded.model_for("gemm")


def test_ranking_queries_are_each_groups_rows_shuffled_in_the_groups_order() -> None:
    """The ranker's queries: every (hardware, problem) group in sorted order, its rows (by
    index label) in a seeded permutation, cut into chunks of at most max_group_rows."""
    import math

    import pandas as pd

    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame(
        {
            "hw_key": rng.choice(["hw-b", "hw-a", "hw-c"], n),
            "problem_hash": rng.choice(["p2", "p10", "p1"], n),
        },
        index=rng.permutation(np.arange(1000, 1000 + 3 * n, 3)),  # labels, not positions
    )
    model = LatencyModel(op="gemm", seed=7, max_group_rows=20)
    order, sizes = model._ranking_order(frame)
    expected, expected_sizes = [], []
    seeded = np.random.default_rng(7)
    for _, rows in frame.groupby(["hw_key", "problem_hash"], sort=True):
        idx = seeded.permutation(rows.index.to_numpy())
        for chunk in np.array_split(idx, max(1, math.ceil(len(idx) / 20))):
            expected.append(chunk)
            expected_sizes.append(len(chunk))
    assert np.array_equal(order, np.concatenate(expected))
    assert np.array_equal(sizes, expected_sizes) and max(sizes) <= 20 and sizes.sum() == n
    assert set(order) == set(frame.index)
