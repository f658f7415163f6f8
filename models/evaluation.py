"""Honest evaluation: train without a piece of hardware, then rank every candidate for it.

Nothing measured on the held-out hardware reaches training, the reference features or the
baselines. The model is compared with two baselines: a random order, and copying the ranking
measured on the known device that is most similar by spec ("nearest"); and the blend policy
that the priors endpoint serves is scored the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from models.dataset import TuningData, hardware_label
from models.estimator import LatencyModel
from models.metrics import RankingScores, mean_scores, ranking_scores, scores_at_ks
from models.policy import DEFAULT_POLICY, BlendPolicy, blended_order, source_rankings
from tps.catalog import UnknownHardwareError, normalise_name, resolve
from tps.errors import TPSError

log = logging.getLogger(__name__)
N_RANDOM_ORDERS = 32
SCORE_KS = range(1, 21)
Holdout = Callable[[TuningData], pd.Series]


class EvaluationError(TPSError):
    """An evaluation that cannot be run as asked."""

    status_code = 422


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


@dataclass
class GroupResult:
    """Figures of every ranking for one held-out (hardware, problem)."""

    scores: dict[str, RankingScores]
    curves: dict[str, list[float]]
    n_candidates: int
    policy_sources: list[str] = field(default_factory=list)


def _random_scores(true_us: np.ndarray, seed: int) -> tuple[RankingScores, list[float]]:
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(len(true_us)) for _ in range(N_RANDOM_ORDERS)]
    runs = [ranking_scores(true_us, o) for o in orders]
    mean = mean_scores(runs)
    curve = np.mean([scores_at_ks(true_us, o, SCORE_KS) for o in orders], axis=0)
    probes = mean["probes_to_3pct"]
    return (
        RankingScores(
            score_at_1=mean["score_at_1"] or 0.0,
            score_at_5=mean["score_at_5"] or 0.0,
            regret_at_1=mean["regret_at_1"],
            probes_to_3pct=round(probes) if probes is not None else None,
            spearman=mean["spearman"],
            median_ape=None,
        ),
        [float(x) for x in curve],
    )


def evaluate_group(
    model: LatencyModel,
    data: TuningData,
    group: pd.DataFrame,
    *,
    policy: BlendPolicy = DEFAULT_POLICY,
    seed: int = 0,
) -> GroupResult:
    """Rank every candidate measured in `group` (one held-out hardware and problem)."""
    hw_key = group["hw_key"].iloc[0]
    problem = data.problems[group["problem_hash"].iloc[0]]
    hardware = data.hardware[hw_key]
    candidates = [data.candidates[c] for c in group["candidate_id"]]
    true_us = group["median_us"].to_numpy(dtype=float)
    frame = model.predict_frame(hardware, problem, candidates)
    rankings = source_rankings(model, hardware, problem, frame)
    predicted = frame["predicted_us"].to_numpy()
    policy_order, sources = blended_order(rankings, policy)
    scores = {
        "model": ranking_scores(true_us, rankings.orders["model"], predicted),
        "policy": ranking_scores(true_us, policy_order, predicted),
    }
    curves = {
        "model": scores_at_ks(true_us, rankings.orders["model"], SCORE_KS),
        "policy": scores_at_ks(true_us, policy_order, SCORE_KS),
    }
    if "nearest" in rankings.orders and rankings.nearest_key is not None:
        ref = model.reference_
        copied = ref.median_us.loc[(rankings.nearest_key, ref.closest_problem(problem))]
        copied_us = copied.reindex(group["candidate_id"]).to_numpy()
        scores["baseline_nearest"] = ranking_scores(true_us, rankings.orders["nearest"], copied_us)
        curves["baseline_nearest"] = scores_at_ks(true_us, rankings.orders["nearest"], SCORE_KS)
    scores["baseline_random"], curves["baseline_random"] = _random_scores(true_us, seed)
    return GroupResult(
        scores=scores, curves=curves, n_candidates=len(group), policy_sources=sources[:5]
    )


def _summary(results: list[GroupResult], name: str) -> dict[str, Any]:
    present = [r.scores[name] for r in results if name in r.scores]
    if not present:
        return {}
    out: dict[str, Any] = mean_scores(present)
    out["score_at_k"] = [
        float(x) for x in np.mean([r.curves[name] for r in results if name in r.curves], axis=0)
    ]
    return out


def evaluate_holdout(
    data: TuningData,
    holdout: str,
    *,
    op: str,
    model_params: dict[str, Any] | None = None,
    policy: BlendPolicy = DEFAULT_POLICY,
    seed: int = 0,
) -> dict[str, Any]:
    """Train on every device but `holdout` and score the rankings of every candidate for it.

    Returns `{"holdout", "op", "n_candidates", "model", "baseline_nearest", "baseline_random",
    "policy", ...}`; figures are means over the held-out hardware's problems.
    """
    data = data.for_op(op)
    holdout, _, dtype = holdout.partition("/")
    held = match_hardware(data, holdout)
    in_holdout = data.frame["hw_key"].isin(held)
    if dtype:
        dtypes = data.frame["problem_hash"].map({k: p.dtype for k, p in data.problems.items()})
        in_holdout &= dtypes == dtype
        if not in_holdout.any():
            raise EvaluationError(f"no {dtype} measurements of op {op!r} on {holdout!r}")
    train = data.subset(~in_holdout)
    if train.frame.empty:
        raise EvaluationError(f"nothing left to train on without {holdout!r} for op {op!r}")
    model = LatencyModel(op=op, seed=seed, **(model_params or {})).fit(train)
    test = data.frame[in_holdout]
    results = [
        evaluate_group(model, data, group, policy=policy, seed=seed)
        for _, group in test.groupby(["hw_key", "problem_hash"], sort=True)
    ]
    labels = sorted({hardware_label(data.hardware[k]) for k in held})
    name = labels[0] if len(labels) == 1 else ",".join(labels)
    return {
        "holdout": f"{name}/{dtype}" if dtype else name,
        "op": op,
        "n_candidates": int(np.mean([r.n_candidates for r in results])),
        "n_problems": len(results),
        "n_train_rows": int(len(train.frame)),
        "model": _summary(results, "model"),
        "baseline_nearest": _summary(results, "baseline_nearest"),
        "baseline_random": _summary(results, "baseline_random"),
        "policy": {
            **_summary(results, "policy"),
            "near_distance": policy.near_distance,
            "lead_sources": sorted({r.policy_sources[0] for r in results if r.policy_sources}),
        },
    }


def leave_one_out(
    data: TuningData,
    *,
    ops: list[str] | None = None,
    model_params: dict[str, Any] | None = None,
    policy: BlendPolicy = DEFAULT_POLICY,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Run `evaluate_holdout` for every configuration of every op.

    A configuration is a hardware label (an SM limit makes its own); where one hardware ran
    the op in several dtypes, each (hardware, dtype) is held out on its own.
    """
    reports = []
    for op in ops or data.ops:
        op_data = data.for_op(op)
        for name in configurations(op_data):
            log.debug("leave-one-out: op %s, holding out %s", op, name)
            reports.append(
                evaluate_holdout(
                    op_data, name, op=op, model_params=model_params, policy=policy, seed=seed
                )
            )
    return reports


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


def summarise(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Average the leave-one-out reports per op, and count the holdouts each source wins."""
    table = []
    for op in sorted({r["op"] for r in reports}):
        rows = [r for r in reports if r["op"] == op]
        entry: dict[str, Any] = {"op": op, "holdouts": len(rows)}
        for name in ("model", "policy", "baseline_nearest", "baseline_random"):
            for metric in ("score_at_1", "score_at_5", "probes_to_3pct", "spearman"):
                values = [r[name].get(metric) for r in rows if r[name].get(metric) is not None]
                entry[f"{name}.{metric}"] = float(np.mean(values)) if values else None
        for name in ("model", "policy"):
            entry[f"{name}.holdouts_at_least_nearest_s1"] = sum(
                r[name]["score_at_1"] >= r["baseline_nearest"].get("score_at_1", 0.0) - 1e-9
                for r in rows
            )
        table.append(entry)
    return table
