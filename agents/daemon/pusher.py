"""The pusher: ship spooled runs to the service in gzipped batches, retrying with backoff."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
    wait_random_exponential,
)

from agents.daemon.errors import PushError, PushRejectedError
from agents.daemon.metrics import AgentMetrics
from agents.daemon.spool import Spool, SpooledRun
from client import AuthError, ClientError, RejectedError, ServiceClient
from tps.schemas import IngestResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one push cycle tries before leaving the runs for the next cycle."""

    max_attempts: int = 8
    initial_s: float = 0.5
    max_s: float = 60.0


class WaitRetryAfter:
    """Wait what the service asked for (capped), else exponential backoff with full jitter."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.backoff = wait_random_exponential(multiplier=policy.initial_s, max=policy.max_s)

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, PushError) and exc.retry_after is not None:
            return min(exc.retry_after, self.policy.max_s)
        return self.backoff(retry_state)


def _interruptible(stop: threading.Event) -> Callable[[float], None]:
    """Return a sleep that wakes up at once when the daemon is asked to stop."""

    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return sleep


class Pusher:
    """Move runs from the spool to the service; delete them only after a 2xx."""

    def __init__(
        self,
        *,
        spool: Spool,
        client: httpx.Client,
        token: str | None,
        batch_runs: int,
        policy: RetryPolicy,
        metrics: AgentMetrics,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spool = spool
        self.service = ServiceClient(client, token=token, clock=clock)
        self.batch_runs = batch_runs
        self.policy = policy
        self.metrics = metrics
        self.sleep = sleep
        self.clock = clock

    def drain(self, stop: threading.Event | None = None) -> int:
        """Push until the spool is empty, a batch cannot be delivered, or `stop` is set.

        Return how many runs the service acknowledged.
        """
        stop = stop or threading.Event()
        pushed = 0
        while not stop.is_set():
            batch = self.spool.peek(self.batch_runs)
            if not batch:
                break
            try:
                pushed += self.push_batch(batch, stop=stop)
            except PushError as exc:
                self.spool.incr("push_errors")
                self.spool.record_error(str(exc))
                self.metrics.push_errors.inc()
                log.warning("push failed, %d runs stay spooled: %s", self.spool.depth(), exc)
                break
            finally:
                self.metrics.spool_depth.set(self.spool.depth())
        return pushed

    def push_batch(self, batch: Sequence[SpooledRun], *, stop: threading.Event) -> int:
        """Deliver one batch (retrying transient failures); split it to isolate a rejected run."""
        try:
            result = self._retrying(stop)(self._post, batch)
        except PushRejectedError as exc:
            if len(batch) == 1:
                self.spool.quarantine(batch[0], str(exc))
                return 0
            # A batch is all or nothing: halve it until the run the service refuses is alone.
            mid = len(batch) // 2
            return self.push_batch(batch[:mid], stop=stop) + self.push_batch(batch[mid:], stop=stop)
        self.spool.ack([run.seq for run in batch], pushed_at=self.clock())
        self.metrics.runs_pushed.inc(len(batch))
        self.metrics.runs_resent.inc(result.duplicates)
        log.info(
            "pushed %d runs (%d new, %d already stored)",
            len(batch),
            result.accepted,
            result.duplicates,
        )
        return len(batch)

    def _retrying(self, stop: threading.Event) -> Retrying:
        return Retrying(
            retry=retry_if_exception(lambda exc: isinstance(exc, PushError) and exc.retryable),
            stop=stop_after_attempt(self.policy.max_attempts) | stop_when_event_set(stop),
            wait=WaitRetryAfter(self.policy),
            sleep=self.sleep or _interruptible(stop),
            reraise=True,
            before_sleep=self._log_retry,
        )

    def _log_retry(self, retry_state: RetryCallState) -> None:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        wait = retry_state.next_action.sleep if retry_state.next_action else 0.0
        self.metrics.push_retries.inc()
        self.metrics.push_errors.inc()
        # Status shows a failing service at once, not only when a cycle gives up.
        self.spool.incr("push_errors")
        self.spool.record_error(f"push attempt {retry_state.attempt_number} failed: {exc}")
        log.info(
            "push attempt %d failed (%s); retrying in %.2fs", retry_state.attempt_number, exc, wait
        )

    def _post(self, batch: Sequence[SpooledRun]) -> IngestResult:
        started = time.perf_counter()
        try:
            return self.service.push_encoded([run.body for run in batch])
        except ClientError as exc:
            # A bad token will not get better by itself, but the runs must not be quarantined
            # for it: only a refusal of the runs themselves isolates and quarantines them.
            rejected = isinstance(exc, RejectedError) and not isinstance(exc, AuthError)
            error = PushRejectedError if rejected else PushError
            raise error(
                str(exc), status=exc.status, retry_after=exc.retry_after, retryable=exc.retryable
            ) from exc
        finally:
            self.metrics.push_seconds.observe(time.perf_counter() - started)
