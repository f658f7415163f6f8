"""GET /v1/models and POST /v1/models/{version}/activate (roll forward or back)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from services.profiler_api.bounds import Offset
from services.profiler_api.deps import AdminDep, OperatorDep, SessionDep
from services.profiler_api.errors import NotFound
from services.profiler_api.model_registry import repository
from services.profiler_api.model_registry.schemas import ModelVersionOut

router = APIRouter(prefix="/v1/models", tags=["models"])
Version = Annotated[int, Path(ge=1, le=2**31 - 1, description="model version")]


@router.get("", response_model=list[ModelVersionOut], summary="Model versions with metrics")
def list_models(
    session: SessionDep,
    _: AdminDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> list[ModelVersionOut]:
    """List registered models, newest first, with their held-out metrics (no artifacts)."""
    rows = repository.list_versions(session, limit=limit, offset=offset)
    return [ModelVersionOut.model_validate(row) for row in rows]


@router.get("/{version}", response_model=ModelVersionOut, summary="One model version")
def get_model(session: SessionDep, _: AdminDep, version: Version) -> ModelVersionOut:
    row = repository.get_version(session, version)
    if row is None:
        raise NotFound(f"version: no model version {version}")
    return ModelVersionOut.model_validate(row)


@router.post("/{version}/activate", response_model=ModelVersionOut, summary="Serve this model")
def activate(session: SessionDep, _: OperatorDep, version: Version) -> ModelVersionOut:
    """Make `version` the active model for the whole fleet (operator only); replicas switch
    within a second."""
    if not repository.activate(session, version):
        raise NotFound(f"version: no model version {version}")
    row = repository.get_version(session, version)
    assert row is not None
    return ModelVersionOut.model_validate(row)
