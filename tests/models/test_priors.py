import pytest

from models.bundle import ModelBundle, train_bundle
from models.dataset import TuningData
from models.priors import RankCache, family_winners, rank
from tests.models.conftest import FAST_MODEL
from tps.catalog import resolve
from tps.problem import ProblemKey


@pytest.fixture(scope="module")
def bundle(convolution_data: TuningData) -> ModelBundle:
    return train_bundle(convolution_data, model_params=FAST_MODEL)


def test_unseen_hardware_gets_a_blended_ranking(
    bundle: ModelBundle, convolution_data: TuningData
) -> None:
    problem = next(iter(convolution_data.problems.values()))
    close = rank(bundle, resolve("RTX 3090"), problem, limit=8)  # close to the RTX A6000
    assert len(close) == 8
    assert close[0].source == "nearest" and close[1].source == "model"
    assert close[0].score == 1.0 > close[1].score
    assert all(r.predicted_us and r.predicted_us > 0 for r in close)
    far = rank(bundle, resolve("MI300X"), problem)
    assert far[0].source == "model"
    assert len(far) == len(bundle.candidate_universe("convolution"))
    assert 0 < far[0].confidence < close[0].confidence <= 1


def test_known_hardware_gets_its_observation(
    bundle: ModelBundle, convolution_data: TuningData
) -> None:
    problem = next(iter(convolution_data.problems.values()))
    a100 = resolve("A100")
    top = rank(bundle, a100, problem, limit=3)
    assert {r.source for r in top} == {"observed"}
    rows = convolution_data.frame[convolution_data.frame["hw_key"] == a100.fingerprint()]
    assert top[0].candidate.id == rows.loc[rows["median_us"].idxmin(), "candidate_id"]


def test_an_unseen_shape_borrows_from_its_family(bundle: ModelBundle) -> None:
    dims = {"x": 2048, "y": 2048}
    problem = ProblemKey(op="convolution", dims=dims, variant="convolution_kernel")
    ranked = rank(bundle, resolve("W7900"), problem, limit=4)
    assert ranked and {r.source for r in ranked} == {"family"}
    winners = family_winners(bundle, resolve("A100"), problem, k=3)
    assert len(winners) == 3


def test_rank_cache_answers_repeats_from_memory(
    bundle: ModelBundle, convolution_data: TuningData
) -> None:
    cache = RankCache(bundle, maxsize=1)
    problem = next(iter(convolution_data.problems.values()))
    first = cache.rank(resolve("L40S"), problem, limit=5)
    assert cache.rank(resolve("L40S"), problem, limit=5) is first
    assert first == rank(bundle, resolve("L40S"), problem, limit=5)
    cache.rank(resolve("T4"), problem, limit=5)  # evicts the L40S answer
    assert cache.rank(resolve("L40S"), problem, limit=5) is not first
