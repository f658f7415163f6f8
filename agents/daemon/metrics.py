"""Prometheus metrics of one agent, in a registry of its own (no global state)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


@dataclass
class AgentMetrics:
    """The agent's counters and gauges; pass one to every component that reports."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.runs_probed = Counter("tps_agent_runs_probed", "Problems probed", registry=r)
        self.runs_pushed = Counter(
            "tps_agent_runs_pushed", "Runs acknowledged by the service", registry=r
        )
        self.runs_resent = Counter(
            "tps_agent_runs_resent",
            "Runs the service already had (a resend after a lost answer)",
            registry=r,
        )
        self.runs_dropped = Counter(
            "tps_agent_runs_dropped", "Runs dropped because the spool was full", registry=r
        )
        self.push_errors = Counter("tps_agent_push_errors", "Push attempts that failed", registry=r)
        self.push_retries = Counter("tps_agent_push_retries", "Push attempts retried", registry=r)
        self.push_seconds = Histogram(
            "tps_agent_push_seconds", "Duration of one push request", registry=r
        )
        self.spool_depth = Gauge("tps_agent_spool_depth", "Runs waiting in the spool", registry=r)
        self.cache_size = Gauge("tps_agent_cache_size", "Problems in the local cache", registry=r)
        self.priors = Counter(
            "tps_agent_priors", "Priors requests by outcome", ["outcome"], registry=r
        )
        self.problems_skipped = Counter(
            "tps_agent_problems_skipped", "Problems served from the cache", registry=r
        )

    def serve(self, port: int) -> None:
        """Expose the metrics over HTTP on `port` (loopback only)."""
        start_http_server(port, addr="127.0.0.1", registry=self.registry)
