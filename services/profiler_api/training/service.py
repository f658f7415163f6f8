"""Train a model from the stored measurements, gate it against the active one, register it.

The gate is champion against challenger on the same split: for each op, one hardware is held
out; the new recipe and the active model's recipe each train on the rest and rank every
candidate of the held-out hardware (models.evaluation.evaluate_holdout, which chooses the
served policy from the training hardware alone). Scoring the active artifact as it is would
flatter it, since it has usually trained on that very hardware. The new model passes when
its served ranking ("policy") is at least the nearest-device baseline's at score@1 and
score@5 (the comparison the leave-one-out benchmark makes), is not worse than the active
one's by more than the tolerance, and drops no op the active model serves; with or without
an active model, it must beat random order at score@5.
Only then is it refit on all the data, stored, and activated.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from models.bundle import ModelBundle, train_bundle
from models.dataset import TuningData
from models.evaluation import evaluate_holdout
from models.metrics import MeanScores
from models.reports import Champion, GateFigures, HoldoutReport
from models.selection import FoldModels
from services.profiler_api.training.schemas import RetrainParams
from tps.errors import TPSError

log = logging.getLogger(__name__)
GATE_METRICS = ("score_at_1", "score_at_5")
NEAREST_TIE = 1e-9
# Parameters that do not change what a recipe learns.
_NOT_RECIPE = {"op", "seed", "n_jobs"}


class TrainingError(TPSError):
    """A training job that cannot run on the data it was given."""


@dataclass
class TrainingOutcome:
    """What a job produced: the held-out reports, the gate's verdict, and the artifact."""

    reports: list[HoldoutReport]
    reasons: list[str] = field(default_factory=list)
    bundle: ModelBundle | None = None
    artifact: bytes = b""
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return not self.reasons

    def metrics(self) -> dict[str, Any]:
        return {
            "reports": [report.as_dict() for report in self.reports],
            "gate": {"passed": self.accepted, "reasons": self.reasons},
            "timings_s": self.timings_s,
        }


def subsample_candidates(data: TuningData, *, max_candidates: int | None, seed: int) -> TuningData:
    """Keep at most `max_candidates` candidates per op: the same random subset on all hardware."""
    if max_candidates is None:
        return data
    rng = np.random.default_rng(seed)
    keep: list[str] = []
    for op in data.ops:
        ids = np.array(sorted(data.frame.loc[data.frame["op"] == op, "candidate_id"].unique()))
        if len(ids) > max_candidates:
            ids = rng.choice(ids, size=max_candidates, replace=False)
        keep.extend(ids.tolist())
    return data.subset(data.frame["candidate_id"].isin(keep))


def holdout_for(data: TuningData, op: str, requested: str | None) -> str:
    """Return the hardware label to hold out for `op` (the one asked for, else a fixed pick)."""
    labels: list[str] = sorted(data.for_op(op).frame["hw_label"].unique())
    if len(labels) < 2:
        raise TrainingError(
            f"op {op!r} has measurements from {len(labels)} hardware; "
            "holding one out for the quality gate needs at least two"
        )
    if requested:
        return requested
    # The middle label: stable across runs, and not always the same vendor's edge case.
    return labels[len(labels) // 2]


def _recipe(model_params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model_params.items() if k not in _NOT_RECIPE}


def _figure(scores: MeanScores, metric: str) -> float | None:
    value: float | None = getattr(scores, metric)
    return value


def floor(report: HoldoutReport) -> list[str]:
    """Return why the served ranking is no better than random order (empty: pass)."""
    served, random = report.policy.score_at_5, report.baseline_random.score_at_5
    if (served or 0.0) < (random or 0.0):
        return [
            f"{report.op}: score@5 {served or 0.0:.4f} on {report.holdout} "
            f"is below random order's {random:.4f}"
        ]
    return []


def versus_nearest(report: HoldoutReport) -> list[str]:
    """Return why the served ranking is below copying the nearest device (empty: pass)."""
    nearest = report.baseline_nearest
    reasons = []
    for metric in GATE_METRICS:
        served = _figure(report.policy, metric) or 0.0
        baseline = _figure(nearest, metric) if nearest is not None else None
        if baseline is not None and served < baseline - NEAREST_TIE:
            reasons.append(
                f"{report.op}: {metric} {served:.4f} on {report.holdout} is below "
                f"copying the nearest device's ranking ({baseline:.4f})"
            )
    return reasons


def gate(
    challenger: HoldoutReport, champion: HoldoutReport, *, version: int, tolerance: float
) -> list[str]:
    """Return why the challenger's served ranking is worse than the champion's (empty: pass)."""
    reasons = []
    for metric in GATE_METRICS:
        new = _figure(challenger.policy, metric) or 0.0
        old = _figure(champion.policy, metric) or 0.0
        if new < old - tolerance:
            reasons.append(
                f"{challenger.op}: {metric} {new:.4f} on {challenger.holdout} is worse than "
                f"the active model v{version}'s {old:.4f} by more than {tolerance}"
            )
    return reasons


def train_and_gate(
    data: TuningData,
    params: RetrainParams,
    *,
    champion: tuple[int, ModelBundle] | None,
    n_jobs: int = 2,
) -> TrainingOutcome:
    """Evaluate the new recipe (and the active one) on held-out hardware; refit if it passes."""
    if data.frame.empty:
        wanted = f" of ops {params.ops}" if params.ops else ""
        raise TrainingError(f"no measurements{wanted} to train on")
    started = time.perf_counter()
    data = subsample_candidates(data, max_candidates=params.max_candidates, seed=params.seed)
    model_params = {"n_estimators": params.n_estimators, "n_jobs": n_jobs}
    outcome = TrainingOutcome(reports=[])
    if champion is not None:
        version, bundle = champion
        dropped = sorted(set(bundle.ops) - set(data.ops))
        outcome.reasons += [
            f"{op}: served by the active model v{version}, absent here" for op in dropped
        ]
    folds: dict[str, FoldModels] = {}
    for op in data.ops:
        holdout = holdout_for(data, op, params.holdout)
        folds[op] = FoldModels(data, op=op, model_params=model_params, seed=params.seed)
        report = evaluate_holdout(
            data, holdout, op=op, model_params=model_params, seed=params.seed, models=folds[op]
        )
        outcome.reasons += floor(report) + versus_nearest(report)
        if champion is not None and op in champion[1].models:
            version, bundle = champion
            old = bundle.models[op].get_params()
            same = _recipe(old) == _recipe(model_params) and old["seed"] == params.seed
            # Same recipe, same split, deterministic training: the scores would be equal.
            champ = report if same else evaluate_holdout(
                data, holdout, op=op, model_params={**_recipe(old), "n_jobs": n_jobs},
                seed=old["seed"],
            )  # fmt: skip
            report = replace(
                report,
                champion=Champion(
                    version=version,
                    policy=GateFigures.of(champ.policy),
                    model=GateFigures.of(champ.model),
                ),
            )
            outcome.reasons += gate(report, champ, version=version, tolerance=params.tolerance)
        outcome.reports.append(report)
    outcome.timings_s["evaluate"] = round(time.perf_counter() - started, 2)
    if outcome.accepted:
        started = time.perf_counter()
        outcome.bundle = train_bundle(
            data, model_params=model_params, seed=params.seed, folds=folds
        )
        outcome.bundle.metrics = {"reports": [report.as_dict() for report in outcome.reports]}
        outcome.artifact = outcome.bundle.to_bytes()
        outcome.timings_s["refit"] = round(time.perf_counter() - started, 2)
    return outcome
