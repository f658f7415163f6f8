"""The confidence calibration: the two fits, and the choice between them."""

from __future__ import annotations

import numpy as np

from models.calibration import FEATURES, FIT_VARIANTS, Calibration, calibration_features


def _rows(
    rng: np.random.Generator, n: int, *, distance: float, score: np.ndarray | float
) -> np.ndarray:
    return calibration_features(
        positions=np.arange(n),
        nearest_distance=distance,
        model_score=np.broadcast_to(np.asarray(score, dtype=float), (n,)),
        nearest_log_rel=rng.uniform(0.0, 0.2, n),
        nearest_flat=float(rng.uniform(0.0, 0.2)),
    )


def test_the_transferable_fit_leaves_the_device_features_out() -> None:
    rng = np.random.default_rng(0)
    X = np.concatenate([_rows(rng, 32, distance=d, score=s) for d, s in [(1, 0.2), (2, 0.9)] * 2])
    y = (X[:, FEATURES.index("nearest_log_rel")] < 0.05).astype(int)
    calibration = Calibration.fit(X, y, variant="transferable")
    used, _ = FIT_VARIANTS["transferable"]
    unused = [i for i, name in enumerate(FEATURES) if name not in used]
    assert unused and all(calibration.coef[i] == 0.0 for i in unused)
    assert calibration.coef[FEATURES.index("nearest_log_rel")] < 0.0  # slower there: less likely
    near = _rows(rng, 8, distance=1, score=0.5)
    far = near.copy()
    far[:, FEATURES.index("nearest_distance")] = 7.5
    far[:, FEATURES.index("model_score")] = 0.01
    assert np.allclose(calibration.predict(near), calibration.predict(far))
    p = calibration.predict(X)
    assert p[y == 1].mean() > p[y == 0].mean()
    doc = calibration.to_dict()
    assert doc["variant"] == "transferable" and Calibration.from_dict(doc) == calibration


def test_the_choice_keeps_what_predicts_a_device_left_out() -> None:
    rng = np.random.default_rng(1)
    # Each device all-or-nothing, told apart by its distance and score: nothing of that
    # carries to the next device, and the transferable fit is chosen.
    alike = []
    for i, outcome in enumerate([1, 0, 1, 0, 1, 0]):
        X = _rows(rng, 32, distance=1.0 + i, score=0.1 * i)
        alike.append((X, np.full(32, outcome)))
    assert Calibration.choose(alike).variant == "transferable"
    # The model's score says, on every device, which candidates are near the best: kept.
    scored = []
    for i in range(6):
        score = rng.uniform(0.0, 1.0, 32)
        scored.append((_rows(rng, 32, distance=1.0 + i, score=score), (score > 0.5).astype(int)))
    chosen = Calibration.choose(scored)
    assert chosen.variant == "all"
    assert chosen.coef[FEATURES.index("model_score")] > 0.0
