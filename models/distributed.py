"""Train the boosters across a Dask cluster through LightGBM's Dask integration."""

from __future__ import annotations

import logging
from typing import Any

import lightgbm as lgb
import numpy as np

log = logging.getLogger(__name__)

# Parameters that the Dask estimators set themselves or that only the local API takes.
_LOCAL_ONLY = {"num_threads", "deterministic", "force_row_wise", "eval_at", "verbose", "seed"}


def _estimator_params(params: dict[str, Any], n_estimators: int) -> dict[str, Any]:
    kept = {k: v for k, v in params.items() if k not in _LOCAL_ONLY and k != "objective"}
    return {
        **kept,
        "n_estimators": n_estimators,
        "random_state": params.get("seed", 0),
        "deterministic": True,
        "force_row_wise": True,
        "verbose": -1,
    }


def _row_chunks(sizes: np.ndarray, n_parts: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Split query groups into about `n_parts` partitions; return (row chunks, group chunks)."""
    parts = np.array_split(np.arange(len(sizes)), max(1, min(n_parts, len(sizes))))
    rows = tuple(int(sizes[p].sum()) for p in parts if len(p))
    groups = tuple(len(p) for p in parts if len(p))
    return rows, groups


def _dask_array(values: np.ndarray, chunks: tuple[Any, ...]) -> Any:
    import dask.array as da

    # dask.array has no type annotations.
    return da.from_array(values, chunks=chunks)  # type: ignore[no-untyped-call]


def fit_boosters_dask(
    client: Any,
    *,
    rank: tuple[np.ndarray, np.ndarray, np.ndarray],
    regressions: dict[str, tuple[np.ndarray, np.ndarray]],
    params: dict[str, dict[str, Any]],
    n_estimators: int,
) -> tuple[lgb.Booster, dict[str, lgb.Booster]]:
    """Fit the ranker and each regression (by name, all with `params["regressor"]`) on the
    cluster; return their local boosters.

    Partitions hold whole query groups, as LightGBM's Dask ranker requires.
    """
    # LightGBM's Dask module prints its progress: through logging, it stays off stdout.
    lgb.register_logger(log)
    n_workers = max(1, len(client.scheduler_info().get("workers", {})))
    X_rank, y_rank, sizes = rank
    row_chunks, group_chunks = _row_chunks(sizes, n_workers)
    ranker = lgb.DaskLGBMRanker(
        client=client,
        objective="lambdarank",
        **_estimator_params(params["ranker"], n_estimators),
    )
    ranker.fit(
        _dask_array(X_rank, chunks=(row_chunks, X_rank.shape[1])),
        _dask_array(y_rank, chunks=(row_chunks,)),
        group=_dask_array(sizes, chunks=(group_chunks,)),
    )
    boosters = {}
    for name, (X_reg, y_reg) in regressions.items():
        chunk = max(1, -(-len(y_reg) // n_workers))
        regressor = lgb.DaskLGBMRegressor(
            client=client,
            objective="regression",
            **_estimator_params(params["regressor"], n_estimators),
        )
        regressor.fit(
            _dask_array(X_reg, chunks=(chunk, X_reg.shape[1])),
            _dask_array(y_reg, chunks=(chunk,)),
        )
        boosters[name] = regressor.booster_
    return ranker.booster_, boosters
