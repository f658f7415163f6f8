"""What the priors endpoint calls: a ranked candidate list for (hardware, problem).

`rank` answers from a trained ModelBundle. Where the problem was measured on this very
hardware in training, it returns that observation; otherwise it serves the blend policy
(models.policy): the nearest known device's measured ranking and the model's, interleaved,
led by whichever leave-one-GPU-out showed should win at this spec distance.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from models.bundle import ModelBundle
from models.policy import DEFAULT_POLICY, BlendPolicy, blended_order, order_by, source_rankings
from tps.candidate import Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

# How fast confidence decays with the spec distance to the nearest known device.
CONFIDENCE_SCALE = 4.0
SOURCE_NAMES = {"model": "model", "nearest": "nearest", "consensus": "model", "family": "family"}


@dataclass(frozen=True)
class RankedCandidate:
    """One entry of a prior: a candidate, its predicted latency and where its rank came from."""

    candidate: Candidate
    predicted_us: float | None
    score: float
    source: str  # observed | model | nearest | family (tps.schemas.PriorSource)
    confidence: float


def rank(
    bundle: ModelBundle,
    hardware: HardwareSpec,
    problem: ProblemKey,
    candidates: list[Candidate] | None = None,
    *,
    limit: int | None = None,
    policy: BlendPolicy = DEFAULT_POLICY,
) -> list[RankedCandidate]:
    """Return candidates best first, each with predicted µs, a score and its source.

    Without `candidates`, the op's candidate universe from training is ranked. `score` is
    1.0 for the first entry and falls linearly to 0 for the last of all candidates.
    """
    model = bundle.model_for(problem.op)
    if candidates is None:
        candidates = model.candidate_universe()
    if not candidates:
        return []
    frame = model.predict_frame(hardware, problem, candidates)
    observed = _observed_order(bundle, hardware, problem, frame["candidate_id"].tolist())
    n = len(candidates)
    if observed is not None:
        order = observed[:limit] if limit else observed
        sources, confidence = ["observed"] * len(order), 1.0
    else:
        rankings = source_rankings(model, hardware, problem, frame)
        order, sources = blended_order(rankings, policy, limit=limit)
        distance = rankings.nearest_distance
        confidence = math.exp(-(distance if distance is not None else 8.0) / CONFIDENCE_SCALE)
        if problem.key_hash() not in model.reference_.problems:
            sources = ["family"] * len(sources)  # borrowed from the closest measured shape
            confidence *= 0.5
    predicted = frame["predicted_us"].to_numpy()
    return [
        RankedCandidate(
            candidate=candidates[int(i)],
            predicted_us=float(predicted[i]) if np.isfinite(predicted[i]) else None,
            score=1.0 - pos / max(n - 1, 1),
            source=SOURCE_NAMES.get(src, src),
            confidence=round(confidence, 4),
        )
        for pos, (i, src) in enumerate(zip(order, sources, strict=True))
    ]


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


class RankCache:
    """Remember `rank` answers per (hardware, problem, candidates, limit) for one bundle.

    A model's answer for a given question never changes, so the service can keep one cache per
    loaded model and drop it when another model becomes active. Bounded, least recently used
    entry evicted first.
    """

    def __init__(self, bundle: ModelBundle, *, maxsize: int = 4096) -> None:
        self.bundle = bundle
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple, list[RankedCandidate]] = OrderedDict()

    def rank(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidates: list[Candidate] | None = None,
        *,
        limit: int | None = None,
    ) -> list[RankedCandidate]:
        """Return `rank(bundle, ...)`, from the cache when the same question was asked."""
        ids = None if candidates is None else tuple(c.id for c in candidates)
        key = (hardware.fingerprint(), problem.key_hash(), ids, limit)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        answer = rank(self.bundle, hardware, problem, candidates, limit=limit)
        self._entries[key] = answer
        if len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return answer
