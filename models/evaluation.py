"""Honest evaluation: train without a piece of hardware, then rank every candidate for it.

Nothing measured on the held-out hardware reaches training, the reference features, the
baselines, or the choice of the served policy: that choice (models.selection) is made by
leave-one-out over the training hardware alone (nested), and so is the calibration of the
served confidence. The model is compared with two baselines: a random order, and copying the
ranking measured on the known device that is most similar by spec ("nearest"); the served
policy is scored the same way.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any

import numpy as np

from models.calibration import CALIBRATION_TOP, reliability
from models.dataset import TuningData, hardware_label
from models.metrics import MeanScores, mean_scores
from models.policy import CANDIDATE_POLICIES, BlendPolicy
from models.reports import HoldoutReport, PolicySummary, Reliability, SourceSummary
from models.scoring import GroupResult, evaluate_group
from models.selection import (
    EvaluationError,
    FoldModels,
    PolicyChoice,
    choose_policy,
    configurations,
    holdout_mask,
    match_hardware,
)

log = logging.getLogger(__name__)
# The probing goal: within 3% of the best after probing at most this share of the space.
PROBE_SHARE = 0.05


__all__ = [
    "EvaluationError",
    "GroupResult",
    "HoldoutReport",
    "configurations",
    "evaluate_group",
    "evaluate_holdout",
    "leave_one_out",
    "match_hardware",
    "summarise",
]


def _summary(results: list[GroupResult], name: str) -> SourceSummary | None:
    present = [r.scores[name] for r in results if name in r.scores]
    if not present:
        return None
    shares = [
        (r.scores[name].probes_to_3pct or r.n_candidates) / r.n_candidates
        for r in results
        if name in r.scores
    ]
    within = [
        (r.scores[name].probes_to_3pct or math.inf)
        <= max(1, math.ceil(PROBE_SHARE * r.n_candidates))
        for r in results
        if name in r.scores
    ]
    curve = np.mean([r.curves[name] for r in results if name in r.curves], axis=0)
    return SourceSummary(
        **mean_scores(present).as_dict(),
        score_at_k=[float(x) for x in curve],
        probes_to_3pct_share=float(np.mean(shares)),
        within_3pct_in_5pct_of_space=float(np.mean(within)),
    )


def _present(summary: SourceSummary | None, name: str) -> SourceSummary:
    if summary is None:
        raise EvaluationError(f"no {name} figures: nothing of the holdout was ranked")
    return summary


def evaluate_holdout(
    data: TuningData,
    holdout: str,
    *,
    op: str,
    model_params: dict[str, Any] | None = None,
    policy: BlendPolicy | None = None,
    seed: int = 0,
    models: FoldModels | None = None,
) -> HoldoutReport:
    """Train on every device but `holdout` and score the rankings of every candidate for it.

    Without `policy`, the served policy and its calibration are chosen by leave-one-out over
    the training hardware only (`models.selection.choose_policy`). `models` shares trained
    folds between calls on the same data (leave_one_out passes one).

    Figures of the report are means over the held-out hardware's problems.
    """
    data = data.for_op(op)
    if models is None:
        models = FoldModels(data, op=op, model_params=model_params, seed=seed)
    in_holdout, held = holdout_mask(data, holdout)
    name_part, _, dtype = holdout.partition("/")
    if dtype and not in_holdout.any():
        raise EvaluationError(f"no {dtype} measurements of op {op!r} on {name_part!r}")
    if (~in_holdout).sum() == 0:
        raise EvaluationError(f"nothing left to train on without {holdout!r} for op {op!r}")
    model = models.without((holdout,))
    choice = (
        PolicyChoice(policy=policy, rule="given")
        if policy is not None
        else choose_policy(models, outer=(holdout,), seed=seed)
    )
    test = data.frame[in_holdout]
    results = [
        evaluate_group(model, data, group, policy=choice.policy, choice=choice, seed=seed)
        for _, group in test.groupby(["hw_key", "problem_hash"], sort=True)
    ]
    labels = sorted({hardware_label(data.hardware[k]) for k in held})
    name = labels[0] if len(labels) == 1 else ",".join(labels)
    served = [r.confidence for r in results if r.confidence is not None]
    calibration = (
        reliability(np.concatenate([c for c, _ in served]), np.concatenate([y for _, y in served]))
        if served
        else Reliability(brier=None, rows=0, table=[])
    )
    policy_figures = _present(_summary(results, "policy"), "policy")
    return HoldoutReport(
        holdout=f"{name}/{dtype}" if dtype else name,
        op=op,
        n_candidates=int(np.mean([r.n_candidates for r in results])),
        n_problems=len(results),
        n_train_rows=int((~in_holdout).sum()),
        model=_present(_summary(results, "model"), "model"),
        baseline_nearest=_summary(results, "baseline_nearest"),
        baseline_random=_present(_summary(results, "baseline_random"), "baseline_random"),
        policy=PolicySummary(
            **vars(policy_figures),
            name=choice.policy.name,
            near_distance=choice.policy.near_distance,
            lead_sources=sorted({r.policy_sources[0] for r in results if r.policy_sources}),
        ),
        candidate_policies={
            c.name: mean_scores([r.candidates[c.name] for r in results]) for c in CANDIDATE_POLICIES
        },
        policy_choice=choice.describe(),
        calibration=replace(calibration, positions=CALIBRATION_TOP),
    )


def leave_one_out(
    data: TuningData,
    *,
    ops: list[str] | None = None,
    model_params: dict[str, Any] | None = None,
    policy: BlendPolicy | None = None,
    seed: int = 0,
) -> list[HoldoutReport]:
    """Run `evaluate_holdout` for every configuration of every op.

    A configuration is a hardware label (an SM limit makes its own); where one hardware ran
    the op in several dtypes, each (hardware, dtype) is held out on its own. The folds trained
    for the nested choices are shared between holdouts.
    """
    reports = []
    for op in ops or data.ops:
        op_data = data.for_op(op)
        models = FoldModels(op_data, op=op, model_params=model_params, seed=seed)
        for name in configurations(op_data):
            log.debug("leave-one-out: op %s, holding out %s", op, name)
            reports.append(
                evaluate_holdout(
                    op_data,
                    name,
                    op=op,
                    model_params=model_params,
                    policy=policy,
                    seed=seed,
                    models=models,
                )
            )
    return reports


SUMMARY_SOURCES = ("model", "policy", "baseline_nearest", "baseline_random")
SUMMARY_METRICS = (
    "score_at_1",
    "score_at_5",
    "probes_to_3pct",
    "probes_to_3pct_share",
    "median_ape",
    "spearman",
)


def _sources(report: HoldoutReport) -> dict[str, SourceSummary | None]:
    return {
        "model": report.model,
        "policy": report.policy,
        "baseline_nearest": report.baseline_nearest,
        "baseline_random": report.baseline_random,
    }


def _at_least_nearest(report: HoldoutReport, summary: MeanScores, metric: str) -> bool:
    nearest = getattr(report.baseline_nearest, metric, None) if report.baseline_nearest else None
    return bool(getattr(summary, metric) >= (nearest or 0.0) - 1e-9)


def summarise(reports: list[HoldoutReport]) -> list[dict[str, Any]]:
    """Average the leave-one-out reports per op, and count the holdouts each source wins."""
    table = []
    for op in sorted({r.op for r in reports}):
        rows = [r for r in reports if r.op == op]
        entry: dict[str, Any] = {"op": op, "holdouts": len(rows)}
        for name in SUMMARY_SOURCES:
            summaries = [_sources(r)[name] for r in rows]
            for metric in SUMMARY_METRICS:
                values = [
                    value
                    for summary in summaries
                    if (value := getattr(summary, metric, None)) is not None
                ]
                entry[f"{name}.{metric}"] = float(np.mean(values)) if values else None
        for name in ("model", "policy"):
            for metric, short in (("score_at_1", "s1"), ("score_at_5", "s5")):
                entry[f"{name}.holdouts_at_least_nearest_{short}"] = sum(
                    _at_least_nearest(r, _present(_sources(r)[name], name), metric) for r in rows
                )
        entry["policy.holdouts_within_3pct_in_5pct_of_space"] = sum(
            r.policy.within_3pct_in_5pct_of_space >= 1.0 - 1e-9 for r in rows
        )
        briers = [r.calibration.brier for r in rows if r.calibration.brier]
        entry["policy.brier"] = float(np.mean(briers)) if briers else None
        table.append(entry)
    return table
