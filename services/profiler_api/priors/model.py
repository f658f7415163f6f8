"""The sources of priors backed by the active model: `model` (and `nearest`) and `family`.

`model` answers for a problem the model was trained on, on hardware with no observations of
it: the blend policy (models.policy) leads with the model's ranking, or with the nearest
known hardware's measured one when that is very like the asking hardware (source `nearest`).
`family` answers for a problem never measured: the winners of its k-means shape family.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future

from sqlalchemy.orm import Session

from services.profiler_api.model_registry.cache import ActiveModelCache, LoadedModel
from services.profiler_api.priors.answering import AnswerKind, AnswerPool
from services.profiler_api.priors.compiled import is_compiled
from services.profiler_api.priors.query import PriorQuery
from services.profiler_api.priors.shared import SharedAnswers
from tps.schemas import Prior

MEMO_SIZE = 4096


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


class _ActiveModelBackend:
    """Answer from the active model, each answer computed once per model version."""

    name = "model"
    kind: AnswerKind = "model"

    def __init__(
        self,
        active: ActiveModelCache,
        shared: SharedAnswers | None = None,
        pool: AnswerPool | None = None,
    ) -> None:
        self.active = active
        self.memo = AnswerMemo(shared=shared)
        # Where the answers are computed: processes of their own, or this thread (0).
        self.pool = pool if pool is not None else AnswerPool(0)

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
        key = (
            loaded.version,
            query.hardware_fingerprint,
            query.problem_hash,
            query.limit,
            query.offered_key,
        )
        return self.memo.get(key, lambda: self._answer(loaded, query))

    def _answer(self, loaded: LoadedModel, query: PriorQuery) -> Prior:
        return self.pool.answer(self.kind, loaded.version, loaded.bundle, query)


class ModelPriors(_ActiveModelBackend):
    """Rank the op's candidate universe with the active model and the blend policy."""


class FamilyPriors(_ActiveModelBackend):
    """Rank a never-seen problem by its shape family's winners."""

    name = "family"
    kind: AnswerKind = "family"
