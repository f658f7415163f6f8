"""Every ranker answers through one method, from the same source rankings."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from models.policy import BlendPolicy
from models.ranking import (
    ModelRanker,
    NearestRanker,
    RandomRanker,
    Ranker,
    SourceRankings,
    order_by,
)


def _rankings(*, nearest: bool) -> SourceRankings:
    predicted = np.array([30.0, 10.0, 20.0, 40.0])
    frame = pd.DataFrame({"candidate_id": list("abcd"), "predicted_us": predicted})
    orders = {"model": order_by(predicted, ascending=True)}
    nearest_us = np.array([5.0, 7.0, np.nan, 6.0]) if nearest else None
    if nearest_us is not None:
        orders["nearest"] = order_by(nearest_us, ascending=True)
    return SourceRankings(
        frame=frame,
        orders=orders,
        nearest_key="gpu" if nearest else None,
        nearest_distance=1.0 if nearest else None,
        nearest_coverage=0.75 if nearest else 0.0,
        nearest_us=nearest_us,
    )


def test_model_and_nearest_rank_by_their_own_source() -> None:
    rankings = _rankings(nearest=True)
    model = ModelRanker().rank(rankings, limit=2)
    assert model.order.tolist() == [1, 2] and model.sources == ("model", "model")
    assert model.predicted_us is not None and model.predicted_us[1] == 10.0
    nearest = NearestRanker().rank(rankings)
    assert nearest is not None and nearest.order.tolist() == [0, 3, 1, 2]
    assert nearest.predicted_us is rankings.nearest_us
    assert NearestRanker().rank(_rankings(nearest=False)) is None


def test_random_orders_are_permutations_fixed_by_the_seed() -> None:
    rankings = _rankings(nearest=False)
    first = RandomRanker(seed=3, draws=4).rank(rankings)
    again = RandomRanker(seed=3, draws=4).rank(rankings)
    assert len(first.orders) == 4 and first.predicted_us is None
    for a, b in zip(first.orders, again.orders, strict=True):
        assert sorted(a.tolist()) == [0, 1, 2, 3] and a.tolist() == b.tolist()


def test_a_policy_is_a_ranker_that_interleaves_its_sources() -> None:
    rankers: list[Ranker] = [ModelRanker(), NearestRanker(), RandomRanker(), BlendPolicy()]
    rankings = _rankings(nearest=True)
    assert all(r.rank(rankings) is not None for r in rankers)
    served = BlendPolicy(lead="nearest", min_coverage=0.0).rank(rankings)
    assert served.order.tolist() == [0, 1, 3, 2]
    assert served.sources == ("nearest", "model", "nearest", "model")
    alone = BlendPolicy(lead="model", interleave=False).rank(rankings, limit=3)
    assert alone.order.tolist() == [1, 2, 0] and set(alone.sources) == {"model"}


def test_the_same_spec_policy_copies_only_the_same_device() -> None:
    policy = BlendPolicy(lead="auto", near_distance=0.0, min_coverage=0.0, interleave=False)
    assert policy.name == "same-spec-alone"
    other_device = _rankings(nearest=True)  # the nearest device is 1.0 away
    served = policy.rank(other_device)
    assert served.order.tolist() == [1, 2, 0, 3] and set(served.sources) == {"model"}
    same_device = replace(other_device, nearest_distance=0.0)
    copied = policy.rank(same_device)
    # copied however little of the candidates it measured (coverage 0.75 here)
    assert copied.order.tolist() == [0, 3, 1, 2] and set(copied.sources) == {"nearest"}
    assert BlendPolicy(lead="auto", interleave=False).name == "auto-alone"


def test_the_unseen_lead_lets_the_model_lead_only_with_a_candidate_never_measured() -> None:
    policy = BlendPolicy(lead="nearest", interleave=False, unseen_lead=True)
    assert policy.name == "nearest-unseen"
    rankings = _rankings(nearest=True)  # the nearest device measured 3 of the 4 (0.75)
    # the model's first pick (b) was measured there: the nearest device's order leads
    measured = policy.rank(rankings)
    assert measured.order.tolist() == [0, 3, 1, 2] and set(measured.sources) == {"nearest"}
    # without the unseen rule, the coverage under 0.9 hands the lead to the model
    plain = BlendPolicy(lead="nearest", interleave=False).rank(rankings)
    assert plain.order.tolist() == [1, 2, 0, 3]
    # the model's first pick (c) is one the nearest device never ran: the model leads
    unseen = replace(rankings, orders={**rankings.orders, "model": np.array([2, 1, 0, 3])})
    led = policy.rank(unseen)
    assert led.order.tolist() == [2, 1, 0, 3] and set(led.sources) == {"model"}
    assert BlendPolicy(**policy.to_dict()) == policy
