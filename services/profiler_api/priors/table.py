"""The sources of priors, by name, in one table; the settings choose which and in what order.

`model` and `family` share one cache of the active model, so that the artifact is loaded
once per replica.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from services.profiler_api.model_registry.cache import ActiveModelCache
from services.profiler_api.priors.answering import AnswerPool
from services.profiler_api.priors.compiled import CompiledPriors
from services.profiler_api.priors.model import FamilyPriors, ModelPriors
from services.profiler_api.priors.observed import ObservedPriors
from services.profiler_api.priors.query import PriorBackend
from services.profiler_api.priors.shared import SharedAnswers

PriorBackendFactory = Callable[
    [ActiveModelCache, SharedAnswers | None, AnswerPool | None], PriorBackend
]

PRIOR_SOURCES: tuple[tuple[str, PriorBackendFactory], ...] = (
    ("observed", lambda _active, _shared, _pool: ObservedPriors()),
    ("compiled", lambda _active, _shared, _pool: CompiledPriors()),
    ("model", ModelPriors),
    ("family", FamilyPriors),
)


def build_prior_sources(
    names: Sequence[str],
    *,
    active: ActiveModelCache,
    shared: SharedAnswers | None = None,
    pool: AnswerPool | None = None,
) -> list[PriorBackend]:
    """Return the backends of the sources `names`, in that order of preference.

    The model's sources keep their answers in `shared` too, when the replica's workers share
    a folder, and compute them in `pool`'s processes.
    """
    factories = dict(PRIOR_SOURCES)
    unknown = [name for name in names if name not in factories]
    if unknown:
        raise ValueError(f"unknown prior sources {unknown}; known: {sorted(factories)}")
    return [factories[name](active, shared, pool) for name in names]
