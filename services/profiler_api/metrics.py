"""Prometheus metrics of one replica, in a registry of its own (tests build many apps).

A replica of several uvicorn worker processes keeps its numbers in prometheus_client's
multiprocess files, in the folder PROMETHEUS_MULTIPROC_DIR names, and /metrics sums every
worker's; otherwise /metrics would show whichever worker answered.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.profiler_api.dashboard import repository as state

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_env(workers: int) -> dict[str, str]:
    """Return the environment that worker processes need to share their metrics.

    One worker needs nothing. For more, a fresh folder each time, so that no earlier run's
    files are summed in; a folder the operator named in the environment is used as it is.
    The workers must get it before they import prometheus_client.
    """
    if workers <= 1:
        return {}
    folder = os.environ.get(MULTIPROC_ENV) or tempfile.mkdtemp(prefix="tps-metrics-")
    return {MULTIPROC_ENV: folder}


_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ServiceMetrics:
    """The counters and histograms the service exports at /metrics."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Histogram(
            "tps_http_request_duration_seconds",
            "HTTP request latency by route, method and status",
            ["route", "method", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ingest_runs = Counter(
            "tps_ingest_runs",
            "Probe runs received, by outcome (accepted, duplicate)",
            ["outcome"],
            registry=self.registry,
        )
        self.ingest_measurements = Counter(
            "tps_ingest_measurements", "Measurements stored", registry=self.registry
        )
        self.ingest_bytes = Counter(
            "tps_ingest_body_bytes",
            "Ingest body bytes, as received and after decompression",
            ["stage"],
            registry=self.registry,
        )
        self.ingest_rejected = Counter(
            "tps_ingest_rejected_batches",
            "Batches rejected, by HTTP status",
            ["status"],
            registry=self.registry,
        )
        self.ingest_phase = Histogram(
            "tps_ingest_phase_seconds",
            "Time per ingest phase (parse, write)",
            ["phase"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.priors = Counter(
            "tps_priors_served",
            "Priors served, by source (none when no source had candidates)",
            ["source"],
            registry=self.registry,
        )
        self.priors_answer = Histogram(
            "tps_priors_answer_seconds",
            "Time to answer a priors question that was not cached, by the source that answered",
            ["source"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.model_answers = Counter(
            "tps_model_answers",
            "Model answers computed, by where: an answering process, or the API process",
            ["where"],
            registry=self.registry,
        )

    def render(self, state: CollectorRegistry | None = None) -> bytes:
        """Return the text exposition of every metric, summed over the worker processes.

        `state` adds metrics that are the same whichever process answers (read from the
        database at scrape time), so they are not summed.
        """
        if MULTIPROC_ENV in os.environ:  # as prometheus_client decides
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            own = generate_latest(registry)
        else:
            own = generate_latest(self.registry)
        return own + (generate_latest(state) if state is not None else b"")


# The held-out scores of the active model that /metrics exports, per op and source.
_SCORE_KS = (("score_at_1", "1"), ("score_at_5", "5"))
_SCORE_SOURCES = ("policy", "model", "baseline_nearest", "baseline_random")


class StateCollector(Collector):
    """The training queue and the active model, read from Postgres at each scrape.

    Every replica and every worker process reports the same figures: they describe the
    deployment, not the process. A database that does not answer gives tps_state_up 0.
    """

    def __init__(self, session_factory: Callable[[], Session]) -> None:
        self.session_factory = session_factory

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("tps_state_up", "1 when the state metrics could be read")
        try:
            with self.session_factory() as session:
                metrics = list(self._read(session))
        except SQLAlchemyError as exc:
            log.warning("state metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics

    def _read(self, session: Session) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "tps_training_jobs",
            "Training jobs by state (queued: the queue's depth)",
            labels=["state"],
        )
        by_state = state.jobs_by_state(session)
        for job_state in ("queued", "running", "succeeded", "failed", "rejected", "cancelled"):
            jobs.add_metric([job_state], by_state.get(job_state, 0))
        yield jobs
        waiting = state.oldest_queued_seconds(session)
        yield GaugeMetricFamily(
            "tps_training_queue_oldest_seconds",
            "How long the oldest queued training job has waited (0: none waits)",
            value=waiting or 0.0,
        )
        last = GaugeMetricFamily(
            "tps_training_last_duration_seconds",
            "How long the latest finished training job of each final state ran",
            labels=["state"],
        )
        for job_state, seconds in sorted(state.last_job_seconds(session).items()):
            last.add_metric([job_state], seconds)
        yield last
        model = state.active_model(session)
        yield GaugeMetricFamily(
            "tps_model_active_version",
            "Version of the active model (0: none is active)",
            value=model.version if model else 0,
        )
        age = GaugeMetricFamily(
            "tps_model_active_age_seconds", "Time since the active model was activated"
        )
        if model and model.activated_at:
            age.add_metric([], (datetime.now(UTC) - model.activated_at).total_seconds())
        yield age
        scores = GaugeMetricFamily(
            "tps_model_heldout_score",
            "The active model's score@k on its held-out hardware, by op and ranking source",
            labels=["op", "holdout", "source", "k"],
        )
        for report in model.reports if model else []:
            for source in _SCORE_SOURCES:
                for key, k in _SCORE_KS:
                    value = (report.get(source) or {}).get(key)
                    if value is not None:
                        scores.add_metric([report["op"], report["holdout"], source, k], value)
        yield scores


def state_registry(session_factory: Callable[[], Session]) -> CollectorRegistry:
    """Return a registry of the state metrics (read when scraped, not when registered)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(session_factory))
    return registry


class RequestMetricsMiddleware:
    """Time every HTTP request and label it by its route template, not its raw path."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_and_record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(template, scope["method"], str(status["code"])).observe(
                time.perf_counter() - started
            )
