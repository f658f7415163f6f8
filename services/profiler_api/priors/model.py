"""The sources of priors backed by the active model: `model` (and `nearest`) and `family`.

`model` answers for a problem the model was trained on, on hardware with no observations of
it: the blend policy (models.policy) leads with the model's ranking, or with the nearest
known hardware's measured one when that is very like the asking hardware (source `nearest`).
`family` answers for a problem never measured: the winners of its k-means shape family.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future

import numpy as np
from sqlalchemy.orm import Session

from models import priors as model_priors
from models.families import shape_vector
from services.profiler_api.model_registry.cache import ActiveModelCache, LoadedModel
from services.profiler_api.priors.compiled import is_compiled
from services.profiler_api.priors.query import PriorQuery
from services.profiler_api.priors.shared import SharedAnswers
from tps.candidate import Candidate
from tps.schemas import Prior, PriorCandidate, PriorSource

MEMO_SIZE = 4096
FAMILY_CONFIDENCE = 0.5
FAMILY_RATIONALE = (
    "ordered by the measured winners of the problem's shape family (k-means on its dims, "
    "this hardware's own measurements first); predicted_us is the {op} model's estimate"
)


class AnswerMemo:
    """An LRU of the model's answers: a model version's answer to a query never changes.

    The hosts of a job ask about a new GPU all at once: the first request computes the
    answer and the others wait for it, instead of each running the model.
    """

    def __init__(self, size: int = MEMO_SIZE, *, shared: SharedAnswers | None = None) -> None:
        self.size = size
        # The replica's other worker processes' answers, when they share a folder.
        self.shared = shared
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, Prior] = OrderedDict()
        self._pending: dict[Hashable, Future[Prior]] = {}

    def get(self, key: Hashable, compute: Callable[[], Prior]) -> Prior:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            pending = self._pending.get(key)
            if pending is None:
                future: Future[Prior] = Future()
                self._pending[key] = future
        if pending is not None:
            return pending.result()
        try:
            prior = self.shared.get(key, compute) if self.shared is not None else compute()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            future.set_exception(exc)
            raise
        with self._lock:
            self._items[key] = prior
            del self._pending[key]
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        future.set_result(prior)
        return prior


def _prior(
    query: PriorQuery,
    entries: list[tuple[Candidate, float | None, PriorSource, float]],
    rationale: str | None = None,
) -> Prior:
    candidates = [
        PriorCandidate(
            candidate_id=candidate.id,
            candidate=candidate,
            rank=rank,
            predicted_us=round(predicted, 4) if predicted is not None else None,
            source=source,
            confidence=confidence,
        )
        for rank, (candidate, predicted, source, confidence) in enumerate(entries)
    ]
    return query.empty("").model_copy(
        update={
            "source": candidates[0].source,
            "candidates": candidates,
            "reason": None,
            "rationale": rationale,
        }
    )


class _ActiveModelBackend:
    """Answer from the active model, each answer computed once per model version."""

    name = "model"

    def __init__(self, active: ActiveModelCache, shared: SharedAnswers | None = None) -> None:
        self.active = active
        self.memo = AnswerMemo(shared=shared)

    def _loaded(self, session: Session, query: PriorQuery) -> LoadedModel | Prior:
        if is_compiled(query.problem):
            # a compiler's configurations are in no model's universe (the `compiled` source)
            return query.empty(f"{query.problem.canonical()} is a compiled product: not modelled")
        loaded = self.active.get(session)
        if loaded is None:
            return query.empty("no active model (POST /v1/admin/retrain)")
        if query.problem.op not in loaded.bundle.models:
            return query.empty(
                f"the active model v{loaded.version} has no {query.problem.op!r} model"
            )
        return loaded

    def rank(self, session: Session, query: PriorQuery) -> Prior:
        loaded = self._loaded(session, query)
        if isinstance(loaded, Prior):
            return loaded
        key = (loaded.version, query.hardware_fingerprint, query.problem_hash, query.limit)
        return self.memo.get(key, lambda: self._answer(loaded, query))

    def _answer(self, loaded: LoadedModel, query: PriorQuery) -> Prior:
        model = loaded.bundle.models[query.problem.op]
        if query.problem_hash not in model.reference_.problems:
            return query.empty(
                f"model v{loaded.version} never saw {query.problem.canonical()} (family answers)"
            )
        ranked = model_priors.rank(loaded.bundle, query.hardware, query.problem, limit=query.limit)
        return _prior(
            query,
            [(r.candidate, r.predicted_us, r.source, r.confidence) for r in ranked],
            model_priors.rationale(loaded.bundle, query.problem.op, ranked),
        )


class ModelPriors(_ActiveModelBackend):
    """Rank the op's candidate universe with the active model and the blend policy."""


class FamilyPriors(_ActiveModelBackend):
    """Rank a never-seen problem by its shape family's winners."""

    name = "family"

    def _answer(self, loaded: LoadedModel, query: PriorQuery) -> Prior:
        bundle, problem = loaded.bundle, query.problem
        winners = model_priors.family_winners(bundle, query.hardware, problem, k=query.limit)
        if not winners:
            return query.empty(f"model v{loaded.version}: no family winners for {problem.op!r}")
        families = bundle.families[problem.op]
        distance = float(
            np.min(
                np.linalg.norm(
                    families.centers_ - shape_vector(problem, families.dim_names_), axis=1
                )
            )
        )
        # Far from every family centre, the family says less about this shape.
        confidence = round(FAMILY_CONFIDENCE * math.exp(-distance / 4.0), 4)
        predicted = bundle.models[problem.op].predict_frame(query.hardware, problem, winners)
        entries: list[tuple[Candidate, float | None, PriorSource, float]] = [
            (c, float(us) if np.isfinite(us) else None, "family", confidence)
            for c, us in zip(winners, predicted["predicted_us"], strict=True)
        ]
        ordered = all(
            a[1] is not None and b[1] is not None and a[1] <= b[1]
            for a, b in zip(entries, entries[1:], strict=False)
        )
        why = None if ordered else FAMILY_RATIONALE.format(op=problem.op)
        return _prior(query, entries, why)
