"""Model answers computed in processes of their own, beside the API process.

A model answer (the features of a thousand candidates, LightGBM's boosters, the policy) is a
few milliseconds of CPU work that holds the interpreter. On a worker thread of the API process
it shares the interpreter with the event loop that answers every other request, and under
load it took 2-5 times as long as alone (in the priors benchmark, 25-30 ms against 5-12 ms).
An `AnswerPool` computes it in processes that hold a copy of the active model, and hands back
the finished `Prior`.

The API process still loads the model (it checks what a question needs before asking, and it
answers itself whenever a process cannot). Each process loads a version from the artifact
file the pool writes once per version, when the version is loaded; a process that ends takes
only its question with it, which the API process then answers on its own thread.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from models import priors as model_priors
from models.bundle import ArtifactError, ModelBundle
from models.families import shape_vector
from services.profiler_api.priors.query import PriorQuery
from tps.candidate import Candidate
from tps.problem import ProblemKey
from tps.schemas import Prior, PriorCandidate, PriorSource

log = logging.getLogger(__name__)

AnswerKind = Literal["model", "family"]
Where = Literal["process", "api"]
FAMILY_CONFIDENCE = 0.5
FAMILY_RATIONALE = (
    "ordered by the measured winners of the problem's shape family (k-means on its dims, "
    "this hardware's own measurements first); predicted_us is the {op} model's estimate"
)
OFFERED_RATIONALE = (
    "ordered by the {op} model's ranking of the {n} candidates this host offered, for a "
    "problem the fleet has not measured (its ranker finds a near-best candidate in fewer "
    "probes than sorting by predicted_us, its latency estimate)"
)
# A process that has not answered in this long is given up on; the API process answers.
ANSWER_TIMEOUT_S = 30.0
# Artifact files kept: the version served and the one before (questions may be queued on it).
KEEP_VERSIONS = 2


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


def model_answer(bundle: ModelBundle, version: int, query: PriorQuery) -> Prior:
    """Rank the op's candidates for `query` with the model and the op's blend policy."""
    model = bundle.models[query.problem.op]
    if query.problem_hash not in model.reference_.problems:
        return query.empty(
            f"model v{version} never saw {query.problem.canonical()} (family answers)"
        )
    offered = list(query.offered) if query.offered is not None else None
    ranked = model_priors.rank(bundle, query.hardware, query.problem, offered, limit=query.limit)
    return _prior(
        query,
        [(r.candidate, r.predicted_us, r.source, r.confidence) for r in ranked],
        model_priors.rationale(bundle, query.problem.op, ranked),
    )


def family_answer(bundle: ModelBundle, version: int, query: PriorQuery) -> Prior:
    """Rank a never-measured problem: the host's offered candidates by the model's ranker,
    or without an offer, its shape family's winners."""
    problem = query.problem
    if query.offered is not None:
        return offered_answer(bundle, query)
    winners = model_priors.family_winners(bundle, query.hardware, problem, k=query.limit)
    if not winners:
        return query.empty(f"model v{version}: no family winners for {problem.op!r}")
    confidence = _family_confidence(bundle, problem)
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


def _family_confidence(bundle: ModelBundle, problem: ProblemKey) -> float:
    """Far from every shape family's centre, what other shapes measured says less."""
    families = bundle.families[problem.op]
    distance = float(
        np.min(
            np.linalg.norm(families.centers_ - shape_vector(problem, families.dim_names_), axis=1)
        )
    )
    return round(FAMILY_CONFIDENCE * math.exp(-distance / 4.0), 4)


def offered_answer(bundle: ModelBundle, query: PriorQuery) -> Prior:
    """Rank the candidates a host offered for a problem never measured, by the model's ranker.

    Other shapes' winners are often not in the host's list at all (cuBLASLt's heuristic offers
    other algorithms for each shape); the model's order of the host's own list is within 3%
    of the best in fewer probes (BENCHMARKS.md, shape families).
    """
    problem, offered = query.problem, list(query.offered or ())
    frame = bundle.models[problem.op].predict_frame(query.hardware, problem, offered)
    order = np.argsort(-frame["ranker_score"].to_numpy(), kind="stable")[: query.limit]
    predicted = frame["predicted_us"].to_numpy()
    confidence = _family_confidence(bundle, problem)
    entries: list[tuple[Candidate, float | None, PriorSource, float]] = [
        (
            offered[i],
            float(predicted[i]) if np.isfinite(predicted[i]) else None,
            "family",
            confidence,
        )
        for i in order
    ]
    served = [predicted[i] for i in order]
    ordered = all(a <= b for a, b in zip(served, served[1:], strict=False))
    why = None if ordered else OFFERED_RATIONALE.format(op=problem.op, n=len(offered))
    return _prior(query, entries, why)


ANSWERS = {"model": model_answer, "family": family_answer}


@dataclass(frozen=True)
class Artifact:
    """Where a model version's artifact lies for the answering processes to load."""

    version: int
    path: str
    digest: str


# What an answering process holds: one model version at a time.
_held: tuple[int, ModelBundle] | None = None


def _process_start() -> None:
    # The API process stops its answering processes; a terminal's Ctrl-C reaches the group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _bundle(artifact: Artifact) -> ModelBundle:
    global _held
    if _held is None or _held[0] != artifact.version:
        from services.profiler_api.model_registry.cache import settle_heap

        _held = None
        bundle = ModelBundle.from_bytes(
            Path(artifact.path).read_bytes(), expected_checksum=artifact.digest
        )
        bundle.warm_up()
        _held = (artifact.version, bundle)
        settle_heap()
    return _held[1]


def load_in_process(artifact: Artifact) -> int:
    """Load `artifact` in this answering process (the warm-up after a version loads)."""
    _bundle(artifact)
    return artifact.version


def answer_in_process(kind: AnswerKind, artifact: Artifact, query: PriorQuery) -> Prior:
    """Answer `query` in an answering process, with the version of `artifact`."""
    return ANSWERS[kind](_bundle(artifact), artifact.version, query)


class _Process:
    """One answering process: the version it holds, the one it is loading, its questions."""

    def __init__(self) -> None:
        self.executor: ProcessPoolExecutor | None = None
        self.ready: int | None = None
        self.loading: int | None = None
        self.failed: int | None = None  # a version it could not load: not tried again
        self.in_flight = 0


class AnswerPool:
    """`processes` processes that compute model answers; with 0, the caller's thread does.

    The processes start when the first model version loads (`publish`), as new interpreters.
    A question goes to the process with the fewest questions in hand among those that hold
    its version; while none does (a version just loaded, a process started again), the
    caller's thread answers it.
    """

    def __init__(self, processes: int, *, on_answer: Callable[[Where], None] | None = None) -> None:
        self.processes = processes
        # Told where each answer was computed (the metrics' counter).
        self.on_answer = on_answer
        self._lock = threading.Lock()
        self._slots = [_Process() for _ in range(processes)]
        self._folder: Path | None = None
        self._artifacts: dict[int, Artifact] = {}
        self._warned = False

    def publish(self, version: int, artifact: bytes, digest: str) -> None:
        """Write version `version`'s artifact for the processes, and load it in each of them."""
        if not self.processes:
            return
        try:
            with self._lock:
                if self._folder is None:
                    self._folder = Path(tempfile.mkdtemp(prefix="tps-model-answers-"))
                path = self._folder / f"v{version}-{digest[:16]}.tpsm"
                partial = path.with_suffix(".part")
                partial.write_bytes(artifact)
                partial.replace(path)
                self._artifacts[version] = Artifact(version, str(path), digest)
                for old in sorted(self._artifacts)[:-KEEP_VERSIONS]:
                    Path(self._artifacts.pop(old).path).unlink(missing_ok=True)
                published = self._artifacts[version]
        except OSError as exc:  # answered on the API process's threads instead
            log.warning("model answers stay in the API process: %s", exc)
            return
        for slot in self._slots:
            self._warm(slot, published)

    def ready(self) -> int:
        """Return how many processes hold the newest version published."""
        with self._lock:
            newest = max(self._artifacts, default=None)
            return sum(1 for s in self._slots if newest is not None and s.ready == newest)

    def _executor(self, slot: _Process) -> ProcessPoolExecutor:
        with self._lock:
            if slot.executor is None:
                # Spawned, not forked: the API process has threads.
                slot.executor = ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"), initializer=_process_start
                )
            return slot.executor

    def _warm(self, slot: _Process, artifact: Artifact) -> None:
        """Have `slot`'s process load `artifact` unless it holds or is loading it."""
        with self._lock:
            if artifact.version in (slot.ready, slot.loading, slot.failed):
                return
            slot.loading = artifact.version
        executor = self._executor(slot)
        try:
            future = executor.submit(load_in_process, artifact)
        except (BrokenProcessPool, RuntimeError) as exc:
            self._discard(slot, executor, exc)
            return

        def loaded(done: Future[int]) -> None:
            failed = done.cancelled() or done.exception() is not None
            with self._lock:
                if slot.executor is not executor:
                    return
                if slot.loading == artifact.version:
                    slot.loading = None
                if failed:
                    slot.failed = artifact.version
                else:
                    slot.ready = artifact.version
            if failed and not done.cancelled():
                self._warn(done.exception())

        future.add_done_callback(loaded)

    def _discard(self, slot: _Process, executor: ProcessPoolExecutor, exc: BaseException) -> None:
        with self._lock:
            if slot.executor is not executor:
                return
            slot.executor, slot.ready, slot.loading = None, None, None
        executor.shutdown(wait=False, cancel_futures=True)
        log.error("a process answering from the model ended (%s); a new one starts", exc)

    def answer(
        self, kind: AnswerKind, version: int, bundle: ModelBundle, query: PriorQuery
    ) -> Prior:
        """Return the `kind` answer to `query` of model `version` (loaded here as `bundle`).

        Computed in an answering process holding that version; on this thread where none
        does yet, or where the process fails (it ends, or does not answer in time).
        """
        artifact = self._artifacts.get(version)
        if artifact is None:
            return self._here(kind, version, bundle, query)
        executor: ProcessPoolExecutor | None = None
        with self._lock:
            ready = [s for s in self._slots if s.ready == version and s.executor is not None]
            slot = min(ready, key=lambda s: s.in_flight) if ready else None
            if slot is not None:
                slot.in_flight += 1
                executor = slot.executor
        if slot is None or executor is None:
            for each in self._slots:
                self._warm(each, artifact)
            return self._here(kind, version, bundle, query)
        try:
            future = executor.submit(answer_in_process, kind, artifact, query)
        except (BrokenProcessPool, RuntimeError) as exc:  # ended, or being stopped
            self._discard(slot, executor, exc)
            future = None
        try:
            if future is not None:
                prior = future.result(timeout=ANSWER_TIMEOUT_S)
                self._counted("process")
                return prior
        except BrokenProcessPool as exc:
            self._discard(slot, executor, exc)
        except (ArtifactError, OSError, TimeoutError) as exc:
            self._warn(exc)
        finally:
            with self._lock:
                slot.in_flight -= 1
        return self._here(kind, version, bundle, query)

    def _here(
        self, kind: AnswerKind, version: int, bundle: ModelBundle, query: PriorQuery
    ) -> Prior:
        prior = ANSWERS[kind](bundle, version, query)
        self._counted("api")
        return prior

    def _counted(self, where: Where) -> None:
        if self.on_answer is not None:
            self.on_answer(where)

    def _warn(self, exc: BaseException | None) -> None:
        if not self._warned:
            self._warned = True
            log.warning("an answering process failed, answered in the API process: %s", exc)

    def close(self) -> None:
        """Stop the processes and remove the artifacts written for them."""
        with self._lock:
            executors = [s.executor for s in self._slots if s.executor is not None]
            for slot in self._slots:
                slot.executor, slot.ready, slot.loading = None, None, None
            folder, self._folder = self._folder, None
            self._artifacts.clear()
        for executor in executors:
            executor.shutdown(wait=True, cancel_futures=True)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
