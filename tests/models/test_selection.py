"""The policy's leave-one-out at fleet scale: bounded folds, fold rows and rows per tree."""

import numpy as np
import pandas as pd

from models.dataset import TuningData
from models.estimator import LatencyModel
from models.selection import FoldModels, _spread, _whole_groups, choose_policy, configurations
from tests.models.conftest import FAST_MODEL


def test_whole_groups_keep_pairs_whole_and_about_the_rows_asked():
    frame = pd.DataFrame(
        {
            "hw_key": np.repeat(["a", "b", "c", "d"], 25),
            "problem_hash": np.tile(np.repeat(["p", "q", "r", "s", "t"], 5), 4),
        }
    )
    keep = _whole_groups(frame, 30, seed=1)
    kept = frame[keep]
    assert 25 <= len(kept) <= 35  # whole pairs of 5 rows: the first pair past 30 is left out
    sizes = kept.groupby(["hw_key", "problem_hash"]).size()
    assert (sizes == 5).all()
    assert keep.equals(_whole_groups(frame, 30, seed=1))
    assert not keep.equals(_whole_groups(frame, 30, seed=2))


def test_spread_holds_out_an_even_share_of_many_configurations():
    names = [f"gpu{i:02d}" for i in range(20)]
    assert _spread(names, 4) == ["gpu00", "gpu05", "gpu10", "gpu15"]
    assert _spread(names[:3], 4) == names[:3]


def test_trees_sample_rows_only_past_rows_per_tree():
    model = LatencyModel(op="convolution", rows_per_tree=1000)
    assert "bagging_fraction" not in model._lgb_params("lambdarank", 1000)
    ranker = model._lgb_params("lambdarank", 4000)
    assert ranker["bagging_fraction"] == 0.25 and ranker["bagging_freq"] == 1
    assert ranker["bagging_by_query"] is True
    assert "bagging_by_query" not in model._lgb_params("regression", 4000)


def test_a_model_trained_on_sampled_trees_still_ranks(convolution_data: TuningData):
    model = LatencyModel(op="convolution", rows_per_tree=2000, **FAST_MODEL).fit(convolution_data)
    assert model.get_params()["rows_per_tree"] == 2000
    first = convolution_data.frame.iloc[0]
    pred = model.predict_frame(
        convolution_data.hardware[first["hw_key"]], convolution_data.problems[first["problem_hash"]]
    )
    assert len(pred) > 10 and np.isfinite(pred["predicted_us"]).all()
    assert (pred["predicted_us"] > 0).all()


def test_choose_policy_bounds_its_folds_and_their_rows(convolution_data: TuningData):
    names = configurations(convolution_data)
    folds = FoldModels(convolution_data, op="convolution", model_params=FAST_MODEL, fold_rows=3000)
    choice = choose_policy(folds, max_folds=2)
    assert [f.holdout for f in choice.folds] == _spread(names, 2) and len(names) > 2
    assert f"over 2 of {len(names)} training configurations" in choice.rule
    trained = [m for m in folds._models.values()]
    assert trained and all(m.n_rows_ <= 3000 + 2048 for m in trained)
