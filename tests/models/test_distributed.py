import numpy as np
import pytest

from models.dataset import TuningData
from models.estimator import LatencyModel
from tps.catalog import resolve

distributed = pytest.importorskip("distributed")


@pytest.mark.slow
def test_training_scales_out_through_dask(convolution_data: TuningData) -> None:
    small = convolution_data.subset(
        convolution_data.frame["candidate_id"].isin(
            sorted(convolution_data.frame["candidate_id"].unique())[:150]
        )
    )
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        model = LatencyModel(op="convolution", n_estimators=20, num_leaves=7).fit(
            small, client=client
        )
    assert model.ranker_.num_trees() == 20
    assert model.regressor_.num_trees() == 20
    _, scores, predicted = model.predict(resolve("W7900"), next(iter(small.problems.values())))
    assert len(scores) == 150 and np.all(np.isfinite(scores))
    assert np.all(predicted > 0) and np.ptp(scores) > 0
