"""The dashboard: one page, and the JSON endpoints its plots are drawn from.

The page carries no data and needs no token to load; it asks for a token (agent or admin),
keeps it in the tab's sessionStorage, and sends it as a bearer header to the endpoints below.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response

from services.profiler_api.dashboard import service
from services.profiler_api.dashboard.schemas import (
    ActiveModel,
    Coverage,
    PriorSavingsRow,
    Rates,
    SpeedupRow,
)
from services.profiler_api.deps import AgentDep, SessionDep
from services.profiler_api.errors import NotFound

router = APIRouter(tags=["dashboard"])

_STATIC = files("services.profiler_api.dashboard") / "static"
_ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "plots.js": "text/javascript; charset=utf-8",
}
# The page loads only its own files: no CDN, nothing from another origin.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
def page() -> HTMLResponse:
    """Serve the dashboard page."""
    return HTMLResponse(
        (_STATIC / "index.html").read_text(), headers={"Content-Security-Policy": _CSP}
    )


@router.get("/dashboard/assets/{name}", include_in_schema=False)
def asset(name: str) -> Response:
    """Serve one of the page's scripts or stylesheets."""
    if name not in _ASSETS:
        raise NotFound(f"no dashboard asset {name!r}")
    return Response(
        (_STATIC / name).read_bytes(),
        media_type=_ASSETS[name],
        headers={"Cache-Control": "no-cache"},
    )


@router.get("/v1/dashboard/coverage", response_model=Coverage)
def coverage(session: SessionDep, _: AgentDep) -> Coverage:
    """Distinct problems probed per hardware and op, against the problems the fleet has seen."""
    return service.coverage(session)


@router.get("/v1/dashboard/speedups", response_model=list[SpeedupRow])
def speedups(session: SessionDep, _: AgentDep) -> list[SpeedupRow]:
    """The best measured candidate's speedup over vendor-default, per hardware and op."""
    return service.speedups(session)


@router.get("/v1/dashboard/priors", response_model=list[PriorSavingsRow])
def prior_savings(session: SessionDep, _: AgentDep) -> list[PriorSavingsRow]:
    """Probe time of runs steered by priors against full probes of the same problems."""
    return service.prior_savings(session)


@router.get("/v1/dashboard/rates", response_model=Rates)
def rates(
    session: SessionDep,
    _: AgentDep,
    window_h: Annotated[float, Query(gt=0, le=24 * 90, description="hours back from now")] = 24,
) -> Rates:
    """Runs received, runs steered by priors, and measurements, per time bucket."""
    return service.rates(session, window_h=window_h)


@router.get("/v1/dashboard/model", response_model=ActiveModel | None)
def active_model(session: SessionDep, _: AgentDep) -> ActiveModel | None:
    """The active model and its held-out scores with the baselines (null when none is active)."""
    return service.active_model(session)
