"""Answer a prior query from the first source that has candidates."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.profiler_api.db import read_with_retry
from services.profiler_api.errors import NotFound, Unprocessable
from services.profiler_api.priors import repository
from services.profiler_api.priors.cache import PriorAnswerCache
from services.profiler_api.priors.observed import observed_prior
from services.profiler_api.priors.query import PriorBackend, PriorQuery
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior

_HASH = re.compile(r"^[0-9a-f]{16}$")


SessionFactory = Callable[[], Session]


@dataclass(frozen=True)
class Answer:
    """A prior encoded as the JSON body of the response, and the source that gave it."""

    body: bytes
    source: str

    @classmethod
    def of(cls, prior: Prior) -> Answer:
        return cls(body=prior.model_dump_json().encode(), source=prior.source or "none")


class PriorService:
    """Ask each source in turn; the first non-empty answer wins. Answers are cached."""

    def __init__(
        self,
        sources: Sequence[PriorBackend],
        *,
        cache: PriorAnswerCache | None = None,
        on_answer: Callable[[str, float], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.sources = list(sources)
        self.cache = cache if cache is not None else PriorAnswerCache(size=0, ttl_s=0.0)
        # Told each computed answer's source and seconds (the metrics' histogram).
        self.on_answer = on_answer
        self.clock = clock
        # Questions being answered now, by event loop and question: the hosts of a job ask
        # about a new GPU all at once, and one worker thread and one database session
        # answer each question while the others wait on the event loop, holding neither.
        self._answering: dict[tuple[int, Hashable], asyncio.Task[Answer]] = {}

    def cached(self, key: Hashable) -> Answer | None:
        """Return the cached answer to the question `key`, if there is a good one."""
        hit = self.cache.get(key)
        return Answer(body=hit.body, source=hit.source) if hit else None

    async def answer_once(
        self, sessions: SessionFactory, key: Hashable, ask: Callable[[Session], Prior]
    ) -> Answer:
        """Answer the question `key` as `answer` does, once for every request asking it now.

        The answer is computed in a task of its own: a caller that goes away (a client that
        hangs up) leaves it running for the others.
        """
        slot = (id(asyncio.get_running_loop()), key)
        task = self._answering.get(slot)
        if task is None:
            task = asyncio.ensure_future(run_in_threadpool(self.answer, sessions, key, ask))
            self._answering[slot] = task
            task.add_done_callback(lambda done: self._answered(slot, done))
        return await asyncio.shield(task)

    def _answered(self, slot: tuple[int, Hashable], task: asyncio.Task[Answer]) -> None:
        if self._answering.get(slot) is task:
            del self._answering[slot]
        if not task.cancelled():
            task.exception()  # retrieved: each waiter has raised it already, or none is left

    def answer(
        self, sessions: SessionFactory, key: Hashable, ask: Callable[[Session], Prior]
    ) -> Answer:
        """Answer the question `key` with `ask` on a session of its own, and cache the answer."""
        since = self.cache.generation
        started = self.clock()
        prior = read_with_retry(sessions, ask)
        answer = Answer.of(prior)
        if self.on_answer is not None:
            self.on_answer(answer.source, self.clock() - started)
        pair = (prior.hardware_fingerprint, prior.problem_hash) if prior.problem_hash else None
        self.cache.put(key, pair, (answer.body, answer.source), since=since)
        return answer

    def prior(
        self, session: Session, query: PriorQuery, *, only: frozenset[str] | None = None
    ) -> Prior:
        """Return ranked candidates for `query`, or an empty prior with every source's reason.

        With `only`, ask just the sources of those names (a warm start wants measurements).
        With candidates offered, a source's answer keeps only those.
        """
        reasons = []
        for source in self.sources:
            if only is not None and source.name not in only:
                continue
            prior = query.among_offered(source.rank(session, query))
            if prior.candidates:
                return prior
            reasons.append(f"{source.name}: {prior.reason}")
        return query.empty("; ".join(reasons) or "no prior sources configured")

    def prior_by_ids(
        self, session: Session, *, hardware_id: str, problem: str, limit: int
    ) -> Prior:
        """Return the prior for a known hardware fingerprint and a problem hash or canonical key.

        One round trip finds the hardware, the problem and its observed top; the other
        sources are asked only when observations do not answer first.
        """
        found = repository.lookup_pair(
            session, hardware_id=hardware_id, problem=problem, limit=limit
        )
        if found.spec is None:
            raise NotFound(
                f"hardware_id: no hardware with fingerprint {hardware_id!r}; "
                "POST /v1/priors with the full spec instead"
            )
        if len(found.problems) > 1:
            raise Unprocessable(f"problem: {problem!r} names several problems; pass its hash")
        if not found.problems:
            return Prior(
                hardware_fingerprint=hardware_id,
                problem_hash=problem if _HASH.match(problem) else "",
                canonical="" if _HASH.match(problem) else problem,
                reason=f"problem: no observations of {problem!r} on any hardware",
            )
        problem_hash, canonical, key = found.problems[0]
        if found.observed and self.sources and self.sources[0].name == "observed":
            return observed_prior(
                hardware_fingerprint=hardware_id,
                problem_hash=problem_hash,
                canonical=canonical,
                observed=found.observed,
            )
        query = PriorQuery(
            hardware=HardwareSpec.model_validate(found.spec),
            hardware_fingerprint=hardware_id,
            problem=ProblemKey.model_validate(key),
            problem_hash=problem_hash,
            limit=limit,
        )
        return self.prior(session, query)
