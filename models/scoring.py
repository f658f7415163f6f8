"""Score the rankings of one held-out (hardware, problem): the model's, the served policy's,
the baselines' and every candidate policy's, with the calibration rows of each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from models.calibration import CALIBRATION_TOP, Calibration, calibration_features, flat_share
from models.dataset import TuningData
from models.estimator import LatencyModel
from models.metrics import (
    NEAR_OPTIMUM,
    RankingScores,
    mean_scores,
    median_ape,
    ranking_scores,
    scores_at_ks,
)
from models.policy import CANDIDATE_POLICIES, BlendPolicy
from models.ranking import (
    LATENCY_SOURCES,
    ModelRanker,
    NearestRanker,
    RandomRanker,
    Ranker,
    Ranking,
    SourceRankings,
    order_by,
    served_latency,
    source_rankings,
    with_latency,
)
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

SCORE_KS = range(1, 21)


class Calibrated(Protocol):
    """What evaluate_group needs of a policy choice: its calibration, if it has one, and the
    booster whose latency it serves."""

    @property
    def calibration(self) -> Calibration | None: ...

    @property
    def latency(self) -> str: ...


@dataclass
class GroupResult:
    """Figures of every ranking for one held-out (hardware, problem)."""

    scores: dict[str, RankingScores]
    curves: dict[str, list[float]]
    n_candidates: int
    policy_sources: list[str] = field(default_factory=list)
    # Every candidate policy's figures, by name (what selection compares).
    candidates: dict[str, RankingScores] = field(default_factory=dict)
    # Per candidate policy: calibration features and outcomes of its first positions.
    calibration_rows: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # The served policy's calibrated confidences and outcomes, when a calibration was given.
    confidence: tuple[np.ndarray, np.ndarray] | None = None
    # The median APE of each latency a policy may serve (LATENCY_SOURCES), what selection
    # compares.
    latency_ape: dict[str, float | None] = field(default_factory=dict)


def score(true_us: np.ndarray, ranking: Ranking) -> tuple[RankingScores, list[float]]:
    """Return a ranking's figures and its score@k curve against the true latencies.

    Several draws (a random order) give their mean figures, without a latency error.
    """
    if len(ranking.orders) == 1:
        return (
            ranking_scores(true_us, ranking.order, ranking.predicted_us),
            scores_at_ks(true_us, ranking.order, SCORE_KS),
        )
    mean = mean_scores([ranking_scores(true_us, o) for o in ranking.orders])
    curve = np.mean([scores_at_ks(true_us, o, SCORE_KS) for o in ranking.orders], axis=0)
    probes = mean.probes_to_3pct
    return (
        RankingScores(
            score_at_1=mean.score_at_1 or 0.0,
            score_at_5=mean.score_at_5 or 0.0,
            regret_at_1=mean.regret_at_1,
            probes_to_3pct=round(probes) if probes is not None else None,
            spearman=mean.spearman,
            median_ape=None,
        ),
        [float(x) for x in curve],
    )


def _near_best(true_us: np.ndarray) -> np.ndarray:
    t = np.where(np.isfinite(true_us), true_us, np.inf)
    near: np.ndarray = t <= t.min() * (1.0 + NEAR_OPTIMUM)
    return near


def evaluate_group(
    model: LatencyModel,
    data: TuningData,
    group: pd.DataFrame,
    *,
    policy: BlendPolicy,
    choice: Calibrated | None = None,
    seed: int = 0,
) -> GroupResult:
    """Rank every candidate measured in `group` (one held-out hardware and problem).

    Scores the model, the served `policy`, the baselines, and every candidate policy (on
    their order alone); with a `choice` that carries a calibration, also the served
    confidences against the truth.
    """
    hw_key = group["hw_key"].iloc[0]
    problem = data.problems[group["problem_hash"].iloc[0]]
    hardware = data.hardware[hw_key]
    candidates = [data.candidates[c] for c in group["candidate_id"]]
    true_us = group["median_us"].to_numpy(dtype=float)
    predicted = model.predict_frame(hardware, problem, candidates)
    latency_ape = {
        name: median_ape(true_us, served_latency(predicted, name)) for name in LATENCY_SOURCES
    }
    latency = choice.latency if choice is not None else "anchored"
    frame = with_latency(predicted, latency)
    rankings = source_rankings(model, hardware, problem, frame)
    shortlist = model.reference_.shortlist(problem.key_hash(), exclude=hw_key)
    served_part = _Shortlisted.of(model, hardware, problem, candidates, rankings, shortlist)
    baselines: dict[str, Ranker] = {
        "baseline_nearest": NearestRanker(),
        "baseline_random": RandomRanker(seed=seed),
    }
    # The model and the policies rank as served: the shortlist alone, then the rest.
    served = served_part.rank(policy)
    ranked = {
        "model": served_part.rank(ModelRanker()),
        "policy": served,
        **{name: ranker.rank(rankings) for name, ranker in baselines.items()},
    }
    result = GroupResult(
        scores={},
        curves={},
        n_candidates=len(group),
        policy_sources=list(served.sources[:5]),
        latency_ape=latency_ape,
    )
    for name, ranking in ranked.items():
        if ranking is not None:
            result.scores[name], result.curves[name] = score(true_us, ranking)
    near_best = _near_best(true_us)
    for candidate in CANDIDATE_POLICIES:
        ranking = served_part.rank(candidate)
        result.candidates[candidate.name] = ranking_scores(true_us, ranking.order)
        features, top = served_part.calibration(ranking)
        result.calibration_rows[candidate.name] = (features, near_best[top].astype(int))
    if choice is not None and choice.calibration is not None:
        features, top = served_part.calibration(served)
        confidence = choice.calibration.predict(features)
        result.confidence = (confidence, near_best[top].astype(int))
    return result


@dataclass
class _Shortlisted:
    """A group's candidates split as serving splits them: those of the shortlist, ranked
    among themselves (models.priors.served_candidates), then the rest, by the model."""

    head: np.ndarray  # positions in the group
    head_rankings: SourceRankings
    tail: np.ndarray
    tail_order: np.ndarray  # positions in `tail`, the model's order
    predicted_us: np.ndarray  # of the whole group, by position

    @classmethod
    def of(
        cls,
        model: LatencyModel,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate],
        rankings: SourceRankings,
        shortlist: frozenset[str] | None,
    ) -> _Shortlisted:
        """Split the group whose `rankings` (of every candidate) are given."""
        frame = rankings.frame
        everything = np.arange(len(candidates))
        listed = np.array([shortlist is None or c.id in shortlist for c in candidates])
        head, tail = everything[listed], everything[~listed]
        if len(head) == 0 or len(tail) == 0:
            return cls(everything, rankings, everything[:0], everything[:0], _predicted(frame))
        # Its latencies are the whole group's (`predicted_us` below): the head's own orders
        # need no anchored booster.
        head_frame = model.predict_frame(
            hardware, problem, [candidates[i] for i in head], anchored=False
        )
        return cls(
            head=head,
            head_rankings=source_rankings(model, hardware, problem, head_frame),
            tail=tail,
            tail_order=order_by(frame["score"].to_numpy()[tail], ascending=False),
            predicted_us=_predicted(frame),
        )

    def rank(self, ranker: Ranker) -> Ranking:
        """Return the ranker's order of the shortlist, then the rest by the model."""
        ranking = ranker.rank(self.head_rankings)
        assert ranking is not None  # the model and every policy order every candidate
        order = np.concatenate([self.head[ranking.order], self.tail[self.tail_order]])
        sources = (*ranking.sources, *("model",) * len(self.tail))
        return Ranking(orders=(order,), sources=sources, predicted_us=self.predicted_us)

    def calibration(self, ranking: Ranking) -> tuple[np.ndarray, np.ndarray]:
        """Return the calibration features of the first positions `rank` served, as serving
        computes them (on the shortlist), and those positions in the group."""
        local = np.empty(len(self.head) + len(self.tail), dtype=int)
        local[self.head] = np.arange(len(self.head))
        top = ranking.order[: min(CALIBRATION_TOP, len(self.head))]
        features = _features(self.head_rankings, local[top], self.head_rankings.frame)
        return features, top


def _predicted(frame: pd.DataFrame) -> np.ndarray:
    predicted: np.ndarray = frame["predicted_us"].to_numpy()
    return predicted


def _features(rankings: SourceRankings, order: np.ndarray, frame: pd.DataFrame) -> np.ndarray:
    ref_near = frame["ref_near"].to_numpy() if "ref_near" in frame else None
    return calibration_features(
        positions=np.arange(len(order)),
        nearest_distance=rankings.nearest_distance,
        model_score=frame["score"].to_numpy()[order],
        nearest_log_rel=None if ref_near is None else ref_near[order],
        nearest_flat=flat_share(ref_near),
    )
