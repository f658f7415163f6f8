"""What the priors endpoint calls: a ranked candidate list for (hardware, problem).

`rank` answers from a trained ModelBundle. Where the problem was measured on this very
hardware in training, it returns that observation; otherwise it serves the op's policy
(models.policy), chosen by leave-one-hardware-out when the bundle was trained
(models.selection): the nearest known device's measured ranking, the model's, or the two
interleaved. Each entry's confidence is the calibrated probability that it is within 3% of
the best; `rationale` says why the order is what it is when it is not that of `predicted_us`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.bundle import ModelBundle
from models.calibration import calibration_features, flat_share
from models.policy import DEFAULT_POLICY, BlendPolicy
from models.ranking import CORRECTIONS, order_by, source_rankings
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import PriorSource

# How fast confidence decays with the spec distance to the nearest known device.
CONFIDENCE_SCALE = 4.0
# The served name of each policy source: the consensus of known devices is the model's side.
SOURCE_NAMES: dict[str, PriorSource] = {
    "observed": "observed",
    "model": "model",
    "nearest": "nearest",
    "consensus": "model",
    "family": "family",
}


@dataclass(frozen=True)
class RankedCandidate:
    """One entry of a prior: a candidate, its predicted latency and where its rank came from."""

    candidate: Candidate
    predicted_us: float | None
    score: float
    source: PriorSource
    confidence: float


def served_candidates(
    bundle: ModelBundle, hardware: HardwareSpec, problem: ProblemKey
) -> list[Candidate]:
    """Return what `rank` orders when given no list: the op's candidate universe, or on a
    device that never measured this problem, the shortlist of what was fast elsewhere."""
    model = bundle.model_for(problem.op)
    own = hardware.fingerprint()
    problem_hash = problem.key_hash()
    if own in model.reference_.groups_for(problem_hash):
        return model.candidate_universe()  # measured here: its own observation answers
    shortlist = model.reference_.shortlist(problem_hash)
    if shortlist is None:
        return model.candidate_universe()
    return model.universe_among(shortlist)


def rank(
    bundle: ModelBundle,
    hardware: HardwareSpec,
    problem: ProblemKey,
    candidates: list[Candidate] | None = None,
    *,
    limit: int | None = None,
    policy: BlendPolicy | None = None,
) -> list[RankedCandidate]:
    """Return candidates best first, each with predicted µs, a score and its source.

    Without `candidates`, `served_candidates` are ranked; without
    `policy`, the op's chosen policy serves. `score` is 1.0 for the first entry and falls
    linearly to 0 for the last of all candidates.
    """
    model = bundle.model_for(problem.op)
    if candidates is None:
        candidates = served_candidates(bundle, hardware, problem)
    if not candidates:
        return []
    choice = bundle.policy_for(problem.op)
    # The anchored latency is asked for the returned candidates alone, once they are ordered.
    frame, features = model.predict_parts(hardware, problem, candidates, anchored=False)
    observed = _observed_order(bundle, hardware, problem, frame["candidate_id"].tolist())
    n = len(candidates)
    if observed is not None:
        order = observed[:limit] if limit else observed
        sources, confidence = ["observed"] * len(order), np.ones(len(order))
    else:
        if policy is None:
            policy = choice.policy if choice is not None else DEFAULT_POLICY
        rankings = source_rankings(model, hardware, problem, frame)
        served = policy.rank(rankings, limit=limit)
        order, sources = served.order, list(served.sources)
        if choice is not None and choice.calibration is not None:
            ref_near = frame["ref_near"].to_numpy() if "ref_near" in frame else None
            confidence = choice.calibration.predict(
                calibration_features(
                    positions=np.arange(len(order)),
                    nearest_distance=rankings.nearest_distance,
                    model_score=frame["score"].to_numpy()[order],
                    nearest_log_rel=None if ref_near is None else ref_near[order],
                    nearest_flat=flat_share(ref_near),
                )
            )
        else:  # a bundle without a calibration: decay with the distance to known hardware
            distance = rankings.nearest_distance
            decay = math.exp(-(distance if distance is not None else 8.0) / CONFIDENCE_SCALE)
            confidence = np.full(len(order), decay)
        if problem.key_hash() not in model.reference_.problems:
            sources = ["family"] * len(sources)  # borrowed from the closest measured shape
            confidence = confidence * 0.5
    predicted = frame["predicted_us"].to_numpy()
    latency = choice.latency if choice is not None else "anchored"
    if latency != "regressor":
        rows = np.asarray(order, dtype=int)
        anchored = model.anchored_us(
            hardware,
            problem,
            [candidates[i] for i in rows],
            features=features[rows],
            correction=CORRECTIONS.get(latency, 1.0),
        )
        if anchored is not None:
            predicted = predicted.copy()
            predicted[rows] = anchored
    confidences = np.broadcast_to(np.asarray(confidence, dtype=float), (len(order),))
    return [
        RankedCandidate(
            candidate=candidates[int(i)],
            predicted_us=float(predicted[i]) if np.isfinite(predicted[i]) else None,
            score=1.0 - pos / max(n - 1, 1),
            source=SOURCE_NAMES[src],
            confidence=round(float(confidences[pos]), 4),
        )
        for pos, (i, src) in enumerate(zip(order, sources, strict=True))
    ]


def rationale(bundle: ModelBundle, op: str, ranked: list[RankedCandidate]) -> str | None:
    """Return why `ranked` is in its order when that is not the order of `predicted_us`."""
    predicted = [r.predicted_us for r in ranked]
    if (
        all(p is not None for p in predicted)
        and all(
            a <= b  # type: ignore[operator]
            for a, b in zip(predicted, predicted[1:], strict=False)
        )
    ):
        return None
    sources = sorted({r.source for r in ranked})
    if sources == ["observed"]:
        return "ordered by the latencies measured on this hardware; predicted_us is the model's"
    choice = bundle.policy_for(op)
    policy = choice.policy.name if choice else DEFAULT_POLICY.name
    why = f"chosen by {choice.rule}" if choice else "the default policy (no leave-one-out choice)"
    return (
        f"ordered by the served policy {policy!r} ({why}); entries come from "
        f"{', '.join(sources)}. predicted_us is the latency regressor's estimate, kept for "
        "information: on held-out hardware the policy's order finds the best candidate sooner "
        "than sorting by it, so the two orders may differ"
    )


def _observed_order(
    bundle: ModelBundle, hardware: HardwareSpec, problem: ProblemKey, candidate_ids: list[str]
) -> np.ndarray | None:
    reference = bundle.model_for(problem.op).reference_
    times = reference.measured_us(hardware.fingerprint(), problem.key_hash(), candidate_ids)
    return None if times is None else order_by(times, ascending=True)


def family_winners(
    bundle: ModelBundle, hardware: HardwareSpec, problem: ProblemKey, *, k: int = 8
) -> list[Candidate]:
    """Return the shape family's best candidates for a problem (hardware's own data first)."""
    model = bundle.model_for(problem.op)
    families = bundle.families[problem.op]
    ids = families.winners(problem, hw_key=hardware.fingerprint(), k=k)
    return [model.candidates_[c] for c in ids if c in model.candidates_]
