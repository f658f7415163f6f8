import math

import pytest

from models.bundle import ModelBundle, train_bundle
from models.dataset import TuningData
from models.policy import BlendPolicy
from models.priors import family_winners, rank, rationale
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
    blend = BlendPolicy()  # nearest leads when close, the model otherwise; interleaved
    close = rank(bundle, resolve("RTX 3090"), problem, limit=8, policy=blend)  # near the A6000
    assert len(close) == 8
    assert close[0].source == "nearest" and close[1].source == "model"
    assert close[0].score == 1.0 > close[1].score
    assert all(r.predicted_us and r.predicted_us > 0 for r in close)
    far = rank(bundle, resolve("MI300X"), problem, policy=blend)
    assert far[0].source == "model"
    shortlist = bundle.model_for("convolution").reference_.shortlist(problem.key_hash())
    assert shortlist is not None and {r.candidate.id for r in far} == shortlist


def test_a_new_device_is_ranked_among_what_was_fast_elsewhere(
    bundle: ModelBundle, convolution_data: TuningData
) -> None:
    from models.priors import served_candidates
    from models.reference import SHORTLIST_MIN, SHORTLIST_SHARE

    problem = next(iter(convolution_data.problems.values()))
    reference = bundle.model_for("convolution").reference_
    frame = convolution_data.frame.dropna(subset=["median_us"])
    expected: set[str] = set()
    for _, measured in frame.groupby("hw_key"):
        k = max(SHORTLIST_MIN, math.ceil(SHORTLIST_SHARE * len(measured)))
        expected |= set(measured.nsmallest(k, "median_us")["candidate_id"])
    universe = bundle.candidate_universe("convolution")
    assert reference.shortlist(problem.key_hash()) == expected
    assert SHORTLIST_MIN <= len(expected) < len(universe)
    served = served_candidates(bundle, resolve("MI300X"), problem)
    assert {c.id for c in served} == expected
    # A device that measured the problem is answered from all it measured.
    assert served_candidates(bundle, resolve("A100"), problem) == universe
    # Without the A100, its own fastest are in the shortlist only where others had them.
    a100 = resolve("A100").fingerprint()
    without = reference.shortlist(problem.key_hash(), exclude=a100)
    assert without is not None and without < expected
    unmeasured = ProblemKey(op="convolution", dims={"x": 64, "y": 64}, variant="other")
    assert reference.shortlist(unmeasured.key_hash()) is None


def test_the_bundle_serves_its_chosen_policy_with_calibrated_confidence(
    bundle: ModelBundle, convolution_data: TuningData
) -> None:
    choice = bundle.policy_for("convolution")
    assert choice is not None and choice.calibration is not None
    # Chosen by leave-one-out over the four training GPUs, and it survives the artifact.
    assert [f.holdout for f in choice.folds] == sorted(convolution_data.hardware_labels().values())
    loaded = ModelBundle.from_bytes(bundle.to_bytes()).policy_for("convolution")
    assert loaded is not None and loaded.to_dict() == choice.to_dict()
    problem = next(iter(convolution_data.problems.values()))
    served = rank(bundle, resolve("MI300X"), problem, limit=16)
    explicit = rank(bundle, resolve("MI300X"), problem, limit=16, policy=choice.policy)
    assert served == explicit
    confidence = [r.confidence for r in served]
    assert all(0.0 < c < 1.0 for c in confidence)
    assert len(set(confidence)) > 1  # a probability per candidate, not one number for all
    why = rationale(bundle, "convolution", served)
    predicted = [r.predicted_us for r in served]
    assert (why is None) == (predicted == sorted(predicted))
    if why is not None:
        assert choice.policy.name in why and "predicted_us" in why


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
