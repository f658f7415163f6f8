"""The daemon loop: read workload problems, probe the new ones, spool the runs, push them."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from agents.daemon.errors import PriorsError
from agents.daemon.metrics import AgentMetrics
from agents.daemon.pusher import Pusher
from agents.daemon.spool import Spool
from agents.daemon.warmstart import PriorsClient, prior_use, shortlist
from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import MAX_OFFERED, Prior, ProbeRun

log = logging.getLogger(__name__)


class Prober(Protocol):
    """What the daemon needs of the probe engine (agents.probe.engine.ProbeEngine)."""

    def hardware(self) -> HardwareSpec: ...

    def probe(
        self,
        problem: ProblemKey,
        *,
        only: Sequence[Candidate] | None = None,
        steer: Callable[[list[Candidate]], Sequence[Candidate] | None] | None = None,
    ) -> ProbeRun: ...


class LocalCache(Protocol):
    """What the daemon needs of the local cache (agents.cache.ProbeCache)."""

    def get(self, problem: ProblemKey, hardware: HardwareSpec) -> object | None: ...

    def put(self, run: ProbeRun) -> object: ...

    def save(self) -> object: ...

    def __len__(self) -> int: ...


class ProblemSource(Protocol):
    """Where problems come from: each poll returns what is new (see agents.daemon.workloads)."""

    def poll(self) -> list[ProblemKey]: ...


class AgentDaemon:
    """Probe every new problem once, keep every run until the service has it."""

    def __init__(
        self,
        *,
        engine: Prober,
        cache: LocalCache,
        spool: Spool,
        pusher: Pusher,
        sources: ProblemSource,
        metrics: AgentMetrics,
        priors: PriorsClient | None = None,
        push_interval_s: float = 5.0,
        watch_interval_s: float = 10.0,
        shutdown_flush_s: float = 5.0,
        on_run: Callable[[ProbeRun], None] | None = None,
    ) -> None:
        self.engine = engine
        self.cache = cache
        self.spool = spool
        self.pusher = pusher
        self.sources = sources
        self.metrics = metrics
        self.priors = priors
        self.push_interval_s = push_interval_s
        self.watch_interval_s = watch_interval_s
        self.shutdown_flush_s = shutdown_flush_s
        self.on_run = on_run
        self._push_now = threading.Event()
        self._published_at = float("-inf")

    # -- one problem -------------------------------------------------------------------------

    def probe_problem(self, problem: ProblemKey, hardware: HardwareSpec) -> ProbeRun:
        """Probe one problem: the prior's shortlist plus vendor-default, or everything.

        The prior is asked once the engine has planned the problem's shortlist, and ranks
        that shortlist: what this host's providers can run for it.
        """
        if self.priors is None:
            return self.engine.probe(problem)
        top_k = self.priors.top_k
        steered: list[tuple[Prior, list[Candidate]]] = []

        def steer(offered: list[Candidate]) -> list[Candidate] | None:
            prior = self._fetch_prior(hardware, problem, offered)
            if prior is None or not prior.candidates:
                return None
            ids = {c.id for c in offered} | {VENDOR_DEFAULT.id}  # the default: always timed
            ranked = [c for c in shortlist(prior, top_k=len(prior.candidates)) if c.id in ids]
            tried = ranked[:top_k]
            if not tried:
                return None
            steered.append((prior, tried))
            return tried

        run = self.engine.probe(problem, steer=steer)
        if not steered:
            return run
        prior, tried = steered[0]
        return run.model_copy(update={"priors": prior_use(prior, tried, run)})

    def _fetch_prior(
        self, hardware: HardwareSpec, problem: ProblemKey, offered: list[Candidate]
    ) -> Prior | None:
        if self.priors is None:
            return None
        if not offered:  # nothing planned beside the default: no prior to ask
            return None
        try:
            prior = self.priors.fetch(hardware, problem, offered=offered[:MAX_OFFERED])
        except PriorsError as exc:
            self.metrics.priors.labels(outcome="unavailable").inc()
            log.debug("full probe of %s: %s", problem.canonical(), exc)
            return None
        self.metrics.priors.labels(outcome="used" if prior.candidates else "empty").inc()
        return prior

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, once: bool = False) -> None:
        """Run until `stop` is set; with `once`, until the sources are exhausted and pushed."""
        hardware = self.engine.hardware()
        self.spool.set_state(
            pid=os.getpid(), state="running", started_at=time.time(), hardware=hardware.name
        )
        self._publish_sizes()
        pusher_thread = threading.Thread(
            target=self._push_loop, args=(stop,), name="tps-pusher", daemon=True
        )
        pusher_thread.start()
        seen: set[str] = set()
        try:
            while not stop.is_set():
                self.probe_pending(self.sources.poll(), hardware, seen=seen, stop=stop)
                if once:
                    break
                stop.wait(self.watch_interval_s)
        finally:
            interrupted = stop.is_set()
            self._save_cache()
            stop.set()
            self._push_now.set()
            pusher_thread.join()
            # A finished `once` run ships everything; a stopped daemon gets a bounded flush.
            self._final_flush(None if once and not interrupted else self.shutdown_flush_s)
            self._publish_sizes()
            self.spool.set_state(state="stopped", stopped_at=time.time(), pid=None)

    def probe_pending(
        self,
        problems: Sequence[ProblemKey],
        hardware: HardwareSpec,
        *,
        seen: set[str],
        stop: threading.Event,
    ) -> int:
        """Probe the problems neither seen nor cached; return how many runs were spooled."""
        spooled = 0
        for problem in problems:
            if stop.is_set():
                break
            key = problem.key_hash()
            if key in seen:
                continue
            seen.add(key)
            if self.cache.get(problem, hardware) is not None:
                self.metrics.problems_skipped.inc()
                continue
            try:
                run = self.probe_problem(problem, hardware)
            except Exception as exc:  # one failing problem must not stop the daemon
                log.exception("probe of %s failed", problem.canonical())
                self.spool.record_error(f"probe of {problem.canonical()} failed: {exc}")
                continue
            # The run is durable before anything else looks at it.
            dropped = self.spool.put([run])
            self.metrics.runs_probed.inc()
            self.metrics.runs_dropped.inc(dropped)
            self.cache.put(run)
            self._publish_sizes(every_s=1.0)
            spooled += 1
            if self.on_run is not None:
                self.on_run(run)
            if self.spool.depth() >= self.pusher.batch_runs:
                self._push_now.set()
        return spooled

    def _push_loop(self, stop: threading.Event) -> None:
        while True:
            try:
                self.pusher.drain(stop)
            except Exception:  # the pusher thread must outlive any surprise
                log.exception("pusher failed")
            if stop.is_set():
                return
            self._push_now.wait(self.push_interval_s)
            self._push_now.clear()

    def _final_flush(self, deadline_s: float | None) -> None:
        stopping = threading.Event()
        if deadline_s is not None and deadline_s <= 0:
            return
        timer = threading.Timer(deadline_s, stopping.set) if deadline_s is not None else None
        if timer is not None:
            timer.start()
        try:
            self.pusher.drain(stopping)
        finally:
            if timer is not None:
                timer.cancel()

    def _save_cache(self) -> None:
        try:
            self.cache.save()
        except Exception:
            log.exception("cannot save the cache")

    def _publish_sizes(self, *, every_s: float = 0.0) -> None:
        # Each state write is an fsynced transaction: once a second is plenty for status.
        now = time.monotonic()
        if now - self._published_at < every_s:
            return
        self._published_at = now
        size = len(self.cache)
        depth = self.spool.depth()
        self.metrics.cache_size.set(size)
        self.metrics.spool_depth.set(depth)
        self.spool.set_state(cache_size=size, heartbeat_at=time.time())
