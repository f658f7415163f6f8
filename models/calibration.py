"""Confidence that means something: P(a served candidate is within 3% of the best).

A logistic model (Platt scaling, scikit-learn) over what is known when priors are served: the
candidate's position in the served order, the spec distance to the nearest known device, the
model's score, how the candidate did on that nearest device and how many were near the best
there (or the part of these that carries between devices, FIT_VARIANTS). It is fit on out-of-fold
rankings only (hardware held out of the model that ranked them), so its probabilities are
those of hardware the model never saw. `reliability` says how well they hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss

from models.reports import Reliability, ReliabilityBin

# Candidates past this position of the served order are not what priors serve.
CALIBRATION_TOP = 32
FEATURES = (
    "log_position",
    "nearest_distance",
    "model_score",
    "nearest_log_rel",
    "nearest_flat",
)
# The two fits `Calibration.choose` picks between, by the Brier score of each training
# device's rows under the fit on the other devices' rows: every feature, or only those that
# carry from one device to another, with a stronger penalty. With few devices, each with one
# problem (the Kernel Tuner kernels), the spec distance and the model's score tell the folds
# apart and the full fit learns each fold's outcome (dedispersion's Brier score: 0.757 with all
# five, 0.432 with three); with many problems per device (the H200 GEMMs) the full fit is better.
FIT_VARIANTS: dict[str, tuple[tuple[str, ...], float]] = {
    "all": (FEATURES, 1.0),
    "transferable": (("log_position", "nearest_log_rel", "nearest_flat"), 0.1),
}
NEAR_LOG_REL = float(np.log1p(0.03))
MAX_DISTANCE = 8.0
MISSING_LOG_REL = 3.0  # a candidate the nearest device never ran: as if it failed there


def calibration_features(
    *,
    positions: np.ndarray,
    nearest_distance: float | None,
    model_score: np.ndarray,
    nearest_log_rel: np.ndarray | None,
    nearest_flat: float = 0.0,
) -> np.ndarray:
    """Return one row of FEATURES per served candidate.

    `nearest_flat` is the share of all the candidates within 3% of the best on the nearest
    device: where many are, whatever is served first is likely near the best too.
    """
    n = len(positions)
    distance = MAX_DISTANCE if nearest_distance is None else min(nearest_distance, MAX_DISTANCE)
    rel = np.full(n, MISSING_LOG_REL) if nearest_log_rel is None else np.asarray(nearest_log_rel)
    rel = np.where(np.isfinite(rel), np.minimum(rel, MISSING_LOG_REL), MISSING_LOG_REL)
    return np.column_stack(
        [
            np.log2(1.0 + np.asarray(positions, dtype=float)),
            np.full(n, distance),
            np.asarray(model_score, dtype=float),
            rel,
            np.full(n, nearest_flat),
        ]
    )


def flat_share(nearest_log_rel: np.ndarray | None) -> float:
    """Return the share of candidates within 3% of the best on the nearest device."""
    if nearest_log_rel is None or not len(nearest_log_rel):
        return 0.0
    return float(np.mean(np.nan_to_num(nearest_log_rel, nan=MISSING_LOG_REL) <= NEAR_LOG_REL))


@dataclass
class Calibration:
    """A fitted logistic map from FEATURES to P(within 3% of the best); plain JSON data."""

    coef: list[float] = field(default_factory=lambda: [0.0] * len(FEATURES))
    intercept: float = 0.0
    n_rows: int = 0
    base_rate: float = 0.0
    variant: str = "all"  # which of FIT_VARIANTS was fit

    @classmethod
    def fit(
        cls, X: np.ndarray, y: np.ndarray, *, seed: int = 0, variant: str = "all"
    ) -> Calibration:
        """Fit on out-of-fold rows; with one class only, answer its rate for every row.

        `variant` names the features used and the penalty (FIT_VARIANTS); the coefficients
        of the other features are 0.
        """
        y = np.asarray(y, dtype=int)
        rate = float(y.mean()) if len(y) else 0.0
        if len(np.unique(y)) < 2:
            clipped = min(max(rate, 1e-4), 1 - 1e-4)
            return cls(
                intercept=float(np.log(clipped / (1 - clipped))),
                n_rows=len(y),
                base_rate=rate,
                variant=variant,
            )
        names, c = FIT_VARIANTS[variant]
        used = [FEATURES.index(name) for name in names]
        fitted = LogisticRegression(C=c, max_iter=1000, random_state=seed).fit(X[:, used], y)
        coef = np.zeros(len(FEATURES))
        coef[used] = fitted.coef_[0]
        return cls(
            coef=[float(x) for x in coef],
            intercept=float(fitted.intercept_[0]),
            n_rows=int(len(y)),
            base_rate=rate,
            variant=variant,
        )

    @classmethod
    def choose(cls, folds: list[tuple[np.ndarray, np.ndarray]], *, seed: int = 0) -> Calibration:
        """Fit the FIT_VARIANTS variant whose fits on all folds but one best predict that one
        (mean Brier score over the folds), on every fold's rows; `folds` are (X, y) per
        training device."""
        X = np.concatenate([x for x, _ in folds])
        y = np.concatenate([o for _, o in folds])
        if len(folds) < 2:
            return cls.fit(X, y, seed=seed)
        scores: dict[str, float] = {}
        for variant in FIT_VARIANTS:
            briers = []
            for i, (x_out, y_out) in enumerate(folds):
                rest = [f for j, f in enumerate(folds) if j != i]
                fitted = cls.fit(
                    np.concatenate([x for x, _ in rest]),
                    np.concatenate([o for _, o in rest]),
                    seed=seed,
                    variant=variant,
                )
                if len(y_out):
                    briers.append(brier_score_loss(y_out, fitted.predict(x_out), pos_label=1))
            scores[variant] = float(np.mean(briers)) if briers else 0.0
        best = min(FIT_VARIANTS, key=lambda v: (scores[v], list(FIT_VARIANTS).index(v)))
        return cls.fit(X, y, seed=seed, variant=best)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Return P(within 3% of the best) per row."""
        z = np.asarray(X, dtype=float) @ np.asarray(self.coef) + self.intercept
        probability: np.ndarray = 1.0 / (1.0 + np.exp(-z))
        return probability

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(FEATURES),
            "coef": self.coef,
            "intercept": self.intercept,
            "n_rows": self.n_rows,
            "base_rate": self.base_rate,
            "variant": self.variant,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Calibration:
        return cls(
            coef=[float(c) for c in doc["coef"]],
            intercept=float(doc["intercept"]),
            n_rows=int(doc.get("n_rows", 0)),
            base_rate=float(doc.get("base_rate", 0.0)),
            variant=str(doc.get("variant", "all")),
        )


def reliability(probability: np.ndarray, outcome: np.ndarray, *, bins: int = 10) -> Reliability:
    """Return the Brier score and the reliability table (per probability bin: rows, mean
    predicted, observed rate) of predictions against what happened."""
    p = np.asarray(probability, dtype=float)
    y = np.asarray(outcome, dtype=int)
    if not len(p):
        return Reliability(brier=None, rows=0, table=[])
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    table: list[ReliabilityBin] = []
    for b in range(bins):
        inside = which == b
        if inside.any():
            table.append(
                ReliabilityBin(
                    bin=[round(float(edges[b]), 2), round(float(edges[b + 1]), 2)],
                    rows=int(inside.sum()),
                    predicted=float(p[inside].mean()),
                    observed=float(y[inside].mean()),
                )
            )
    return Reliability(
        brier=float(brier_score_loss(y, p)),
        brier_base_rate=float(brier_score_loss(y, np.full(len(y), y.mean()))),
        rows=int(len(p)),
        table=table,
    )
