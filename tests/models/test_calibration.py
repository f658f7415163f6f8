"""The confidence calibration: what it learns from, and what it leaves out."""

from __future__ import annotations

import numpy as np

from models.calibration import FEATURES, FIT_FEATURES, Calibration, calibration_features


def _rows(rng: np.random.Generator, n: int, *, distance: float, score: float) -> np.ndarray:
    return calibration_features(
        positions=np.arange(n),
        nearest_distance=distance,
        model_score=np.full(n, score),
        nearest_log_rel=rng.uniform(0.0, 0.2, n),
        nearest_flat=float(rng.uniform(0.0, 0.2)),
    )


def test_the_fit_learns_from_what_carries_to_a_new_device() -> None:
    rng = np.random.default_rng(0)
    # Four "devices" told apart by spec distance and model score; on each, a candidate is near
    # the best when it was near the best on the nearest device.
    X = np.concatenate([_rows(rng, 32, distance=d, score=s) for d, s in [(1, 0.2), (2, 0.9)] * 2])
    y = (X[:, FEATURES.index("nearest_log_rel")] < 0.05).astype(int)
    calibration = Calibration.fit(X, y)
    unused = [i for i, name in enumerate(FEATURES) if name not in FIT_FEATURES]
    assert unused and all(calibration.coef[i] == 0.0 for i in unused)
    assert calibration.coef[FEATURES.index("nearest_log_rel")] < 0.0  # slower there: less likely
    # A device at a distance no fold had gets the same confidence as a near one.
    near = _rows(rng, 8, distance=1, score=0.5)
    far = near.copy()
    far[:, FEATURES.index("nearest_distance")] = 7.5
    far[:, FEATURES.index("model_score")] = 0.01
    assert np.allclose(calibration.predict(near), calibration.predict(far))
    p = calibration.predict(X)
    assert p[y == 1].mean() > p[y == 0].mean()
