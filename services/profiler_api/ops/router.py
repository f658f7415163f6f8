"""Liveness, readiness and Prometheus metrics; no token needed."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from sqlalchemy import text

from services.profiler_api.deps import MetricsDep
from services.profiler_api.errors import ServiceUnavailable

router = APIRouter(tags=["ops"])


# Answered on the event loop: liveness is the process serving requests, not a worker thread
# being free (a sync handler would wait for one, and a busy pool would look like a dead process).
@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Report that the process serves requests."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> dict[str, str]:
    """Report whether the database answers and its schema is migrated."""
    try:
        with request.app.state.session_factory() as session:
            revision = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception as exc:  # any failure means not ready; the reason goes to the caller
        raise ServiceUnavailable(f"database not ready: {type(exc).__name__}: {exc}") from exc
    return {"status": "ready", "schema": str(revision)}


@router.get("/metrics", response_class=Response)
def metrics(request: Request, metrics: MetricsDep) -> Response:
    """Expose the replica's metrics, and the training queue's and active model's, to Prometheus."""
    body = metrics.render(getattr(request.app.state, "state_metrics", None))
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
