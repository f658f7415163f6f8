"""Ranking quality: how good is an order of candidates, judged by their true latencies.

`true_us` holds one latency per candidate, `inf` (or NaN) for a candidate that fails on the
hardware; `order` lists candidate indices, best guess first. A failed candidate in the top k
costs a probe and contributes nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

NEAR_OPTIMUM = 0.03


@dataclass(frozen=True)
class RankingScores:
    """The figures of one ranking against the truth."""

    score_at_1: float
    score_at_5: float
    regret_at_1: float | None
    probes_to_3pct: int | None
    spearman: float | None
    median_ape: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def _clean(true_us: np.ndarray) -> np.ndarray:
    t = np.asarray(true_us, dtype=float).copy()
    t[~np.isfinite(t)] = np.inf
    return t


def score_at_k(true_us: np.ndarray, order: np.ndarray, k: int) -> float:
    """Return best overall over best within the first k (0 when all k failed)."""
    t = _clean(true_us)
    best = t.min()
    top = t[np.asarray(order)[:k]].min()
    return float(best / top) if np.isfinite(top) else 0.0


def scores_at_ks(true_us: np.ndarray, order: np.ndarray, ks: range) -> list[float]:
    """Return score@k for each k in `ks` (one pass; k past the end means every candidate)."""
    t = _clean(true_us)
    running = np.minimum.accumulate(t[np.asarray(order)[: max(ks)]])
    best = t.min()
    picks = [running[min(k, len(running)) - 1] for k in ks]
    return [float(best / p) if np.isfinite(p) else 0.0 for p in picks]


def regret_at_1(true_us: np.ndarray, order: np.ndarray) -> float | None:
    """Return how much slower than the optimum the first candidate that runs is."""
    t = _clean(true_us)
    ranked = t[np.asarray(order)]
    finite = ranked[np.isfinite(ranked)]
    return float(finite[0] / t.min() - 1.0) if finite.size else None


def probes_to_within(true_us: np.ndarray, order: np.ndarray, tolerance: float) -> int | None:
    """Return how many candidates are probed in order until one is within `tolerance`."""
    t = _clean(true_us)
    hits = np.flatnonzero(t[np.asarray(order)] <= t.min() * (1.0 + tolerance))
    return int(hits[0]) + 1 if hits.size else None


def spearman(true_us: np.ndarray, order: np.ndarray) -> float | None:
    """Return the rank correlation between the order and the truth, over valid candidates."""
    t = _clean(true_us)
    order = np.asarray(order)
    predicted_rank = np.empty(len(order))
    predicted_rank[order] = np.arange(len(order))
    valid = np.isfinite(t)
    if valid.sum() < 3:
        return None
    a = _ranks(predicted_rank[valid])
    b = _ranks(t[valid])
    if a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    # Average ranks for ties, as scipy.stats.rankdata does.
    sorter = np.argsort(values, kind="mergesort")
    inv = np.empty_like(sorter)
    inv[sorter] = np.arange(len(values))
    sorted_values = values[sorter]
    boundaries = np.r_[True, sorted_values[1:] != sorted_values[:-1], True]
    idx = np.flatnonzero(boundaries)
    dense = np.cumsum(boundaries[:-1]) - 1
    avg = (idx[:-1] + idx[1:] - 1) / 2.0
    ranks: np.ndarray = avg[dense][inv]
    return ranks


def median_ape(true_us: np.ndarray, predicted_us: np.ndarray | None) -> float | None:
    """Return the median absolute percentage error of predicted latencies (valid ones)."""
    if predicted_us is None:
        return None
    t = _clean(true_us)
    p = np.asarray(predicted_us, dtype=float)
    valid = np.isfinite(t) & np.isfinite(p)
    if not valid.any():
        return None
    return float(np.median(np.abs(p[valid] - t[valid]) / t[valid]))


def ranking_scores(
    true_us: np.ndarray, order: np.ndarray, predicted_us: np.ndarray | None = None
) -> RankingScores:
    """Return every figure of one ranking."""
    return RankingScores(
        score_at_1=score_at_k(true_us, order, 1),
        score_at_5=score_at_k(true_us, order, 5),
        regret_at_1=regret_at_1(true_us, order),
        probes_to_3pct=probes_to_within(true_us, order, NEAR_OPTIMUM),
        spearman=spearman(true_us, order),
        median_ape=median_ape(true_us, predicted_us),
    )


@dataclass(frozen=True)
class MeanScores:
    """The figures of several rankings averaged, each over the rankings that have it."""

    score_at_1: float | None
    score_at_5: float | None
    regret_at_1: float | None
    probes_to_3pct: float | None
    spearman: float | None
    median_ape: float | None

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)


def mean_scores(scores: list[RankingScores]) -> MeanScores:
    """Average figures over several rankings (Nones are skipped; no value at all is None)."""
    out: dict[str, float | None] = {}
    for name in RankingScores.__dataclass_fields__:
        values = [getattr(s, name) for s in scores if getattr(s, name) is not None]
        mean = float(np.mean(values)) if values else None
        out[name] = None if mean is None or math.isnan(mean) else mean
    return MeanScores(**out)
