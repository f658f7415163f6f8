"""Prometheus metrics of one replica, in a registry of its own (tests build many apps).

A replica of several uvicorn worker processes keeps its numbers in prometheus_client's
multiprocess files, in the folder PROMETHEUS_MULTIPROC_DIR names, and /metrics sums every
worker's; otherwise /metrics would show whichever worker answered.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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

    def render(self) -> bytes:
        """Return the text exposition of every metric, summed over the worker processes."""
        if MULTIPROC_ENV in os.environ:  # as prometheus_client decides
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


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
