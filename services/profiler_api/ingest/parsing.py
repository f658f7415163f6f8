"""Validating a batch, in processes of their own beside the API process.

Inflating, validating and planning a batch is CPU work that holds the interpreter: on a
thread of the API process it keeps the event loop that answers priors waiting (up to a
whole switch interval at a time for the bench's 50-run batches, about 30 ms at a time for a
1,000-run batch). A `ParsePool` does it in other processes, and hands back the plan's plain
rows, which unpickle in a few percent of the parse's time.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from services.profiler_api.errors import (
    PayloadTooLarge,
    ServiceUnavailable,
    from_validation_errors,
)
from services.profiler_api.ingest.body import inflate
from services.profiler_api.ingest.plan import IngestPlan
from tps.schemas import MAX_BATCH_RUNS, ProbeRunBatch

log = logging.getLogger(__name__)


def parse_batch(body: bytes) -> ProbeRunBatch:
    """Validate a JSON body as a batch; every bad input raises a 4xx naming the field."""
    try:
        return ProbeRunBatch.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        for error in errors:
            if error["type"] == "too_long" and tuple(error["loc"]) == ("runs",):
                got = (error.get("ctx") or {}).get("actual_length", "more")
                raise PayloadTooLarge(
                    f"runs: a batch holds at most {MAX_BATCH_RUNS} runs, got {got}"
                ) from exc
        raise from_validation_errors(errors) from exc


@dataclass(frozen=True)
class ParsedBatch:
    plan: IngestPlan
    inflated_bytes: int
    parse_s: float  # inflating, validating and planning, where it ran


def plan_body(chunks: list[bytes], *, encoding: str, limit: int, org_id: int) -> ParsedBatch:
    """Inflate, validate and plan one request body for organisation `org_id`."""
    started = time.perf_counter()
    body = inflate(chunks, encoding=encoding, limit=limit)
    plan = IngestPlan.from_batch(parse_batch(body), org_id=org_id)
    return ParsedBatch(plan, len(body), time.perf_counter() - started)


def _worker_start(nice: int) -> None:
    # The API process stops its workers; a terminal's Ctrl-C reaches the whole group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if nice > os.nice(0):
        os.nice(nice - os.nice(0))


def _ready() -> bool:
    return True


class ParsePool:
    """`processes` processes that plan batches, at CPU niceness `nice`; with 0 processes, a
    worker thread of the API does.

    The processes start at the first batch (or `warm`), as new interpreters, and serve
    every request of the API process. One that dies takes
    its batch with it: the client gets a 503 to retry, and the next batch gets new processes.
    """

    def __init__(self, processes: int, *, nice: int = 0) -> None:
        self.processes = processes
        self.nice = nice
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _started(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                # Spawned, not forked: the API process has threads (and a forkserver would
                # leave its socket's folder behind where a worker is stopped by a signal).
                context = multiprocessing.get_context("spawn")
                self._executor = ProcessPoolExecutor(
                    self.processes,
                    mp_context=context,
                    initializer=_worker_start,
                    initargs=(self.nice,),
                )
            return self._executor

    def warm(self) -> None:
        """Start the processes now, so that the first batch does not wait for them."""
        if self.processes:
            executor = self._started()
            for _ in range(self.processes):
                executor.submit(_ready)

    async def plan(
        self, chunks: list[bytes], *, encoding: str, limit: int, org_id: int
    ) -> ParsedBatch:
        """Plan a request body; raises the 4xx that names what is wrong with it."""
        if not self.processes:
            return await run_in_threadpool(
                plan_body, chunks, encoding=encoding, limit=limit, org_id=org_id
            )
        executor = self._started()
        try:
            future = executor.submit(
                plan_body, chunks, encoding=encoding, limit=limit, org_id=org_id
            )
            return await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            self._discard(executor)
            log.error("a process validating ingest batches ended: %s", exc)
            raise ServiceUnavailable(
                "ingest: the process validating this batch ended before it finished; "
                "nothing was stored, send the batch again"
            ) from exc

    def _discard(self, executor: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is executor:
                self._executor = None
        executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the processes (waiting for the batches they are planning)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
