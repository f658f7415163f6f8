"""Choose the served policy, and calibrate its confidence, from training data alone.

For each configuration of the training data in turn, a model trained on the others ranks
its candidates; every candidate policy (models.policy.CANDIDATE_POLICIES) is scored on those
rankings against the nearest-device baseline. The policy served is the one with the best mean
score@1 + score@5 among those at least as good as nearest at both on every fold; the most
conservative (copying nearest) always qualifies, so the choice never needs the held-out data.
The confidence calibration is fit on the same out-of-fold rankings.

Evaluation nests this inside its own leave-one-out (models.evaluation), and the bundle runs it
over all the data it trains on (models.bundle), so that what is served is chosen the way it
was measured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from models.calibration import Calibration
from models.dataset import TuningData, hardware_label
from models.estimator import LatencyModel
from models.metrics import RankingScores, mean_scores
from models.policy import CANDIDATE_POLICIES, DEFAULT_POLICY, BlendPolicy
from models.ranking import LATENCY_SOURCES
from models.reports import ChoiceSummary, Fold, FoldFigures, GateFigures
from models.scoring import GroupResult, evaluate_group
from tps.catalog import UnknownHardwareError, normalise_name, resolve
from tps.errors import TPSError

log = logging.getLogger(__name__)
TIE = 1e-9
# The policy's leave-one-out on a large fleet: each fold model trains on about this many rows
# (whole (hardware, problem) pairs, drawn at random), and at most this many configurations
# are held out in turn. The shipped Kernel Tuner data (under 60k rows a kernel, five GPUs)
# is below both, and each of its folds scores fewer pairs than FOLD_GROUPS. Training 1M
# measurements within two minutes on two cores asks for them.
FOLD_ROWS = 50_000
MAX_FOLDS = 5
# (hardware, problem) pairs scored per fold, drawn at random: the choice compares means.
FOLD_GROUPS = 150


class EvaluationError(TPSError):
    """An evaluation that cannot be run as asked."""


def match_hardware(data: TuningData, name: str) -> list[str]:
    """Return the hw_keys whose label or product name matches `name` (catalog aliases too)."""
    wanted = {normalise_name(name)}
    try:
        wanted.add(normalise_name(resolve(name).name))
    except UnknownHardwareError:
        pass
    keys = [
        key
        for key, spec in data.hardware.items()
        if normalise_name(hardware_label(spec)) in wanted
        or (spec.unit_limit is None and normalise_name(spec.name) in wanted)
    ]
    if not keys:
        known = ", ".join(sorted(set(data.hardware_labels().values())))
        raise EvaluationError(f"no hardware matches {name!r}; known: {known}")
    return sorted(keys)


def configurations(data: TuningData) -> list[str]:
    """Return the holdout names of `data`: labels, or `label/dtype` where dtypes vary."""
    dtype_of = {k: p.dtype for k, p in data.problems.items()}
    pairs = data.frame[["hw_label", "problem_hash"]].drop_duplicates()
    pairs = pairs.assign(dtype=pairs["problem_hash"].map(dtype_of))
    names = []
    for label, rows in pairs.groupby("hw_label", sort=True):
        dtypes = sorted(rows["dtype"].unique())
        names.extend([f"{label}/{d}" for d in dtypes] if len(dtypes) > 1 else [label])
    return names


def holdout_mask(data: TuningData, holdout: str) -> tuple[pd.Series, list[str]]:
    """Return the rows of configuration `holdout` (`name` or `name/dtype`) and its hw_keys."""
    name, _, dtype = holdout.partition("/")
    held = match_hardware(data, name)
    mask = data.frame["hw_key"].isin(held)
    if dtype:
        dtypes = data.frame["problem_hash"].map({k: p.dtype for k, p in data.problems.items()})
        mask &= dtypes == dtype
    return mask, held


class FoldModels:
    """Models of one op trained without some configurations, each trained once.

    The nested folds of a leave-one-out repeat themselves: holding out A then B trains on
    the same rows as holding out B then A. Keyed by the set of rows left out.
    """

    def __init__(
        self,
        data: TuningData,
        *,
        op: str,
        model_params: dict[str, Any] | None = None,
        seed: int = 0,
        fold_rows: int = FOLD_ROWS,
    ) -> None:
        self.data = data.for_op(op)
        self.op = op
        self.model_params = model_params or {}
        self.seed = seed
        self.fold_rows = fold_rows
        self._models: dict[frozenset[int], LatencyModel] = {}

    def mask(self, names: tuple[str, ...]) -> pd.Series:
        """Return the rows of every configuration in `names`."""
        out = pd.Series(False, index=self.data.frame.index)
        for name in names:
            out |= holdout_mask(self.data, name)[0]
        return out

    def without(self, names: tuple[str, ...]) -> LatencyModel:
        """Return the model trained on every row outside the configurations `names`."""
        left_out = self.mask(names)
        key = frozenset(np.flatnonzero(left_out.to_numpy()).tolist())
        if key not in self._models:
            train = self.data.subset(~left_out)
            if train.frame.empty:
                raise EvaluationError(f"nothing left to train on without {list(names)}")
            if names and len(train.frame) > self.fold_rows:
                train = train.subset(_whole_groups(train.frame, self.fold_rows, self.seed))
            log.debug("training %s without %s", self.op, names)
            self._models[key] = LatencyModel(op=self.op, seed=self.seed, **self.model_params).fit(
                train
            )
        return self._models[key]


@dataclass
class PolicyChoice:
    """The served policy, why it was chosen, and the calibration of its confidence."""

    policy: BlendPolicy
    rule: str
    calibration: Calibration | None = None
    folds: list[Fold] = field(default_factory=list)
    # The latency served (models.ranking.LATENCY_SOURCES): the one with the lowest median
    # APE over the same inner folds.
    latency: str = "anchored"

    def describe(self) -> ChoiceSummary:
        """Return the choice as a report shows it."""
        return ChoiceSummary(
            name=self.policy.name,
            rule=self.rule,
            folds=self.folds,
            calibrated=self.calibration is not None,
            latency=self.latency,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.to_dict(),
            "rule": self.rule,
            "folds": [fold.as_dict() for fold in self.folds],
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "latency": self.latency,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> PolicyChoice:
        calibration = doc.get("calibration")
        return cls(
            policy=BlendPolicy(**doc["policy"]),
            rule=str(doc.get("rule", "")),
            calibration=Calibration.from_dict(calibration) if calibration else None,
            folds=[Fold.from_dict(fold) for fold in doc.get("folds", [])],
            latency=str(doc.get("latency", "anchored")),
        )


def _whole_groups(frame: pd.DataFrame, rows: int, seed: int) -> pd.Series:
    """Rows of (hardware, problem) pairs drawn at random until about `rows` rows are in."""
    groups = frame.groupby(["hw_key", "problem_hash"], sort=True).ngroup().to_numpy()
    sizes = np.bincount(groups)
    order = np.random.default_rng(seed).permutation(len(sizes))
    taken = np.zeros(len(sizes), dtype=bool)
    taken[order[: max(1, int(np.searchsorted(np.cumsum(sizes[order]), rows)))]] = True
    return pd.Series(taken[groups], index=frame.index)


def _spread(names: list[str], count: int) -> list[str]:
    """At most `count` of `names`, evenly spread over their order."""
    if len(names) <= count:
        return names
    return [names[i * len(names) // count] for i in range(count)]


def _fold(model: LatencyModel, data: TuningData, mask: pd.Series, seed: int) -> list[GroupResult]:
    """Score the held-out rows' (hardware, problem) pairs, at most FOLD_GROUPS of them."""
    groups = [group for _, group in data.frame[mask].groupby(["hw_key", "problem_hash"], sort=True)]
    if len(groups) > FOLD_GROUPS:
        picked = np.random.default_rng(seed).choice(len(groups), FOLD_GROUPS, replace=False)
        groups = [groups[i] for i in sorted(picked)]
    return [
        evaluate_group(model, data, group, policy=DEFAULT_POLICY, seed=seed) for group in groups
    ]


def choose_policy(
    models: FoldModels, *, outer: tuple[str, ...] = (), seed: int = 0, max_folds: int = MAX_FOLDS
) -> PolicyChoice:
    """Choose among CANDIDATE_POLICIES by leave-one-out over the configurations left after
    `outer` (never looking at `outer`'s rows), and calibrate the chosen one's confidence.

    A fleet of many configurations holds out `max_folds` of them, spread over their order;
    every configuration is still in each fold's training rows."""
    data = models.data
    remaining = data.subset(~models.mask(outer)) if outer else data
    known = configurations(remaining)
    inner = _spread(known, max_folds)
    if len(inner) < 2:
        return PolicyChoice(
            policy=DEFAULT_POLICY,
            rule=f"default: {len(inner)} known configuration(s), too few for leave-one-out",
        )
    folds: list[Fold] = []
    per_fold: list[list[GroupResult]] = []
    for name in inner:
        model = models.without((*outer, name))
        results = _fold(model, data, models.mask((name,)) & ~models.mask(outer), seed)
        per_fold.append(results)
        nearest = mean_scores(
            [r.scores["baseline_nearest"] for r in results if "baseline_nearest" in r.scores]
        )
        policies = {}
        for candidate in CANDIDATE_POLICIES:
            scores = mean_scores([r.candidates[candidate.name] for r in results])
            policies[candidate.name] = FoldFigures(
                score_at_1=scores.score_at_1,
                score_at_5=scores.score_at_5,
                probes_share=float(
                    np.mean([_probe_share(r, r.candidates[candidate.name]) for r in results])
                ),
            )
        folds.append(
            Fold(holdout=name, baseline_nearest=GateFigures.of(nearest), policies=policies)
        )
    chosen = _best(folds)
    fold_rows = []
    for results in per_fold:
        rows = [r.calibration_rows[chosen.name] for r in results]
        if rows:
            fold_rows.append(
                (np.concatenate([X for X, _ in rows]), np.concatenate([y for _, y in rows]))
            )
    calibration = Calibration.choose(fold_rows, seed=seed)
    latency = choose_latency(per_fold)
    rule = (
        f"leave-one-out over {len(inner)} of {len(known)} training configurations: of the "
        "policies at least "
        "as good as copying the nearest device at score@1 and score@5 on every fold, the best "
        "mean score@1 + score@5, the first listed on a tie; predicted_us from the "
        f"{latency} latency, the lowest mean median APE over the same folds"
    )
    return PolicyChoice(
        policy=chosen, rule=rule, calibration=calibration, folds=folds, latency=latency
    )


def choose_latency(per_fold: list[list[GroupResult]]) -> str:
    """Return the latency (LATENCY_SOURCES) with the lowest median APE, as the mean over
    folds of each fold's mean; the anchored booster's on a tie or without figures."""
    means: dict[str, float] = {}
    for name in LATENCY_SOURCES:
        per = [
            float(np.mean(values))
            for results in per_fold
            if (values := [v for r in results if (v := r.latency_ape.get(name)) is not None])
        ]
        if len(per) == len(per_fold) and per:
            means[name] = float(np.mean(per))
    best = "anchored"
    for name in LATENCY_SOURCES:
        if name in means and means[name] < means.get(best, np.inf) - TIE:
            best = name
    return best


def _probe_share(result: GroupResult, scores: RankingScores) -> float:
    """Return the share of the candidates probed before one is within 3% of the best."""
    return (scores.probes_to_3pct or result.n_candidates) / result.n_candidates


def _gate_pairs(fold: Fold, name: str) -> list[tuple[float | None, float | None]]:
    """Return (nearest, policy `name`) at score@1 and at score@5 in one fold."""
    nearest, policy = fold.baseline_nearest, fold.policies[name]
    return [
        (nearest.score_at_1, policy.score_at_1),
        (nearest.score_at_5, policy.score_at_5),
    ]


def _margin(fold: Fold, name: str) -> float:
    """Return how far policy `name` is above nearest on its worse metric in one fold."""
    margins = [
        (policy or 0.0) - base for base, policy in _gate_pairs(fold, name) if base is not None
    ]
    return min(margins) if margins else 0.0


def _best(folds: list[Fold]) -> BlendPolicy:
    def key(indexed: tuple[int, BlendPolicy]) -> tuple[bool, float, int]:
        index, candidate = indexed
        safe = all(_margin(f, candidate.name) >= -TIE for f in folds)
        mean = float(
            np.mean([sum(p or 0.0 for _, p in _gate_pairs(f, candidate.name)) for f in folds])
        )
        # Never below nearest on a fold first; then the best mean score@1 + score@5; at an
        # equal mean, the first in CANDIDATE_POLICIES.
        return safe, round(mean, 6), -index

    return max(enumerate(CANDIDATE_POLICIES), key=key)[1]
