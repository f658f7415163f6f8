"""The FastAPI application factory."""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from services.profiler_api.auth.cache import RevocationListener, TokenCache
from services.profiler_api.auth.limits import RateLimiter
from services.profiler_api.auth.router import router as auth_router
from services.profiler_api.dashboard.router import router as dashboard_router
from services.profiler_api.db import (
    libpq_url,
    make_engine,
    make_session_factory,
    resolve_database_url,
    sqlalchemy_url,
)
from services.profiler_api.errors import install_error_handlers
from services.profiler_api.fleet.retention import PartitionMaintainer
from services.profiler_api.fleet.router import router as fleet_router
from services.profiler_api.guard import BodyGuardMiddleware
from services.profiler_api.ingest.parsing import ParsePool
from services.profiler_api.ingest.router import router as ingest_router
from services.profiler_api.metrics import (
    MULTIPROC_ENV,
    RequestMetricsMiddleware,
    ServiceMetrics,
    state_registry,
)
from services.profiler_api.model_registry.cache import ActiveModelCache
from services.profiler_api.model_registry.router import router as models_router
from services.profiler_api.openapi import build_openapi
from services.profiler_api.ops.router import router as ops_router
from services.profiler_api.priors.answering import AnswerPool
from services.profiler_api.priors.cache import ChangeListener, PriorAnswerCache
from services.profiler_api.priors.fastpath import CachedPriorsMiddleware
from services.profiler_api.priors.router import router as priors_router
from services.profiler_api.priors.service import PriorService
from services.profiler_api.priors.shared import SharedAnswers
from services.profiler_api.priors.table import build_prior_sources
from services.profiler_api.settings import Settings
from services.profiler_api.training.router import router as admin_router
from services.profiler_api.training.worker import TrainingWorker
from tps import __version__

log = logging.getLogger(__name__)

ROUTERS = (
    ops_router,
    ingest_router,
    priors_router,
    fleet_router,
    auth_router,
    admin_router,
    models_router,
    dashboard_router,
)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    if settings.cpu_nice > os.nice(0):
        os.nice(settings.cpu_nice - os.nice(0))
    url = await run_in_threadpool(resolve_database_url, settings)
    engine = make_engine(url, settings)
    app.state.engine = engine
    app.state.session_factory = make_session_factory(engine)
    app.state.state_metrics = state_registry(app.state.session_factory)
    # Priors read through a pool of their own, also when they read the primary: a request
    # holds its session's connection (the token lookup) while it reads priors, and sharing
    # one pool, a burst of requests would each hold one connection and wait for a second.
    read_engine = make_engine(
        sqlalchemy_url(settings.read_database_url or url), settings, reads=True
    )
    app.state.read_session_factory = make_session_factory(read_engine)
    stop = threading.Event()
    # Changes are announced on the primary, whichever database answers the reads.
    ChangeListener(
        app.state.prior_service.cache, libpq_url(url), on_everything=app.state.active_model.expire
    ).start(stop)
    PartitionMaintainer(
        app.state.session_factory,
        retention_days=settings.measurement_retention_days,
        interval_s=settings.partition_maintenance_s,
    ).start(stop)
    app.state.parse_pool.warm()
    configure_collector(settings.gc_threshold)
    if settings.token_cache_ttl_s > 0:
        RevocationListener(libpq_url(url), app.state.token_cache).start(stop)
    if settings.training_worker:
        TrainingWorker(app.state.session_factory, settings=settings).start(stop)
    log.info("TPS service ready (database %s)", engine.url.render_as_string(hide_password=True))
    try:
        yield
    finally:
        stop.set()
        await run_in_threadpool(app.state.parse_pool.close)
        await run_in_threadpool(app.state.answer_pool.close)
        engine.dispose()
        read_engine.dispose()


def configure_collector(threshold: int) -> None:
    """Set the process's collector as a worker serves: long-lived startup objects leave its
    working set, and a young collection waits for `threshold` allocations."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, 20, 20)


def _shared_answers(settings: Settings) -> SharedAnswers | None:
    """Return the folder where this replica's workers share model answers, if they do."""
    folder = settings.answers_dir
    if folder is None and MULTIPROC_ENV in os.environ:  # several workers, one shared folder
        folder = os.path.join(os.environ[MULTIPROC_ENV], "answers")
    if folder is None:
        return None
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("model answers not shared between workers: %s", exc)
        return None
    return SharedAnswers(Path(folder))


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build one service replica; the database is opened when the app starts."""
    settings = settings or Settings()
    app = FastAPI(
        title="TPS, the TunableOp Profiling Service",
        version=__version__,
        summary="Fleet-wide probe logs in, ranked kernel candidates out.",
        lifespan=_lifespan,
    )
    metrics = ServiceMetrics()
    app.state.settings = settings
    app.state.metrics = metrics
    answer_pool = AnswerPool(
        settings.answer_processes(),
        on_answer=lambda where: metrics.model_answers.labels(where).inc(),
    )
    app.state.answer_pool = answer_pool
    active = ActiveModelCache(
        check_interval_s=settings.model_check_interval_s, on_load=answer_pool.publish
    )
    app.state.active_model = active
    sources = build_prior_sources(
        settings.prior_sources, active=active, shared=_shared_answers(settings), pool=answer_pool
    )
    cache = PriorAnswerCache(size=settings.priors_cache_size, ttl_s=settings.priors_cache_ttl_s())
    app.state.prior_service = PriorService(
        sources,
        cache=cache,
        on_answer=lambda source, s: metrics.priors_answer.labels(source).observe(s),
    )
    app.state.parse_pool = ParsePool(
        settings.ingest_parse_processes, nice=settings.ingest_parse_nice
    )
    app.state.token_cache = TokenCache(ttl_s=settings.token_cache_ttl_s)
    app.state.rate_limiter = RateLimiter(
        rate_per_s=settings.rate_limit_per_s, burst=settings.rate_limit_burst
    )
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.add_middleware(CachedPriorsMiddleware)
    app.add_middleware(
        BodyGuardMiddleware, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s
    )
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    return app
