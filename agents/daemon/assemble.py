"""Wire a daemon from its settings: identity, engine, cache, spool, pusher, priors, sources."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

import httpx

from agents.cache import ProbeCache
from agents.daemon.daemon import AgentDaemon, LocalCache, Prober, ProblemSource
from agents.daemon.errors import ConfigError
from agents.daemon.identity import MACHINE_ID_PATHS, host_id, local_key, read_machine_id
from agents.daemon.metrics import AgentMetrics
from agents.daemon.pusher import Pusher, RetryPolicy
from agents.daemon.settings import AgentSettings
from agents.daemon.spool import Spool
from agents.daemon.warmstart import PriorsClient
from agents.daemon.workloads import WatchFolder, WorkloadSources
from tps.schemas import ProbeRun

log = logging.getLogger(__name__)


@dataclass
class AssembledAgent:
    """A daemon and the resources it holds; close() releases them."""

    daemon: AgentDaemon
    host_id: str
    resources: ExitStack

    def close(self) -> None:
        self.resources.close()


def agent_host_id(settings: AgentSettings, *, require_secret: bool = True) -> str:
    """Return this host's id under the deployment's secret.

    Without `require_secret` (a one-off probe) and without a secret, the host's own key
    is used: still keyed, stable on this host, unlinkable to the daemon's id.
    """
    machine_id = read_machine_id([settings.machine_id_path, *MACHINE_ID_PATHS])
    if require_secret or settings.deployment_secret is not None:
        secret = settings.require_secret()
    else:
        secret = local_key(settings.host_key_path)
    return host_id(machine_id=machine_id, secret=secret)


def open_cache(settings: AgentSettings) -> ProbeCache:
    """Load the local cache and the warm cache file (exported JSON or TunableOp results CSV).

    Local entries win over warm ones: they were measured on this very host.
    """
    warm = settings.warm_cache
    if warm is None:
        return ProbeCache.load(settings.cache_path)
    if not warm.is_file():
        raise ConfigError(f"warm cache file {warm} does not exist")
    if warm.suffix.lower() == ".csv":
        cache = ProbeCache.load(settings.cache_path)
        added = cache.import_tunableop_csv(warm)
    else:
        cache = ProbeCache.load(warm)
        added = len(cache)
        cache.path = settings.cache_path
        cache.merge(ProbeCache.load(settings.cache_path).entries())
    log.info("warm cache %s: %d entries", warm.name, added)
    return cache


def build_engine_for(settings: AgentSettings, *, host: str) -> Prober:
    """Open the device named in the settings and build the real probe engine on it."""
    from agents.opconfig import OpConfig
    from agents.probe.assemble import build_engine

    op_config = OpConfig.load(settings.op_config) if settings.op_config else None
    return build_engine(
        device=settings.device, op_config=op_config, host_id=host, settings=settings.probe
    )


def build_daemon(
    settings: AgentSettings,
    *,
    engine: Prober | None = None,
    cache: LocalCache | None = None,
    metrics: AgentMetrics | None = None,
    transport: httpx.BaseTransport | None = None,
    on_run: Callable[[ProbeRun], None] | None = None,
    sources: ProblemSource | None = None,
) -> AssembledAgent:
    """Assemble a daemon; `engine`, `cache`, `transport`, `sources` replace those of `settings`."""
    host = agent_host_id(settings)
    metrics = metrics or AgentMetrics()
    resources = ExitStack()
    spool = Spool(settings.spool_path, max_runs=settings.spool_max_runs).open()
    resources.callback(spool.close)
    client = resources.enter_context(
        httpx.Client(
            base_url=settings.service_url,
            timeout=settings.push_timeout_s,
            transport=transport,
        )
    )
    push_client = client
    if settings.push_url != settings.service_url:  # an ingest deployment of its own
        push_client = resources.enter_context(
            httpx.Client(
                base_url=settings.push_url, timeout=settings.push_timeout_s, transport=transport
            )
        )
    token = settings.token.get_secret_value() if settings.token else None
    pusher = Pusher(
        spool=spool,
        client=push_client,
        token=token,
        batch_runs=settings.push_batch_runs,
        policy=RetryPolicy(
            max_attempts=settings.push_max_attempts,
            initial_s=settings.push_backoff_initial_s,
            max_s=settings.push_backoff_max_s,
        ),
        metrics=metrics,
    )
    priors = None
    if settings.priors_enabled:
        priors = PriorsClient(
            client=client,
            token=token,
            timeout_s=settings.priors_timeout_ms / 1000,
            top_k=settings.priors_top_k,
        )
    src = settings.sources
    sources = sources or WorkloadSources(
        shape_csv=list(src.shape_csv),
        tunableop_untuned=list(src.tunableop_untuned),
        watch=WatchFolder(folder=src.watch_dir, dtype=src.dtype) if src.watch_dir else None,
        dtype=src.dtype,
    )
    daemon = AgentDaemon(
        engine=engine or build_engine_for(settings, host=host),
        cache=cache if cache is not None else open_cache(settings),
        spool=spool,
        pusher=pusher,
        sources=sources,
        metrics=metrics,
        priors=priors,
        push_interval_s=settings.push_interval_s,
        watch_interval_s=src.watch_interval_s,
        shutdown_flush_s=settings.shutdown_flush_s,
        on_run=on_run,
    )
    return AssembledAgent(daemon=daemon, host_id=host, resources=resources)
