"""Bodies of the model registry endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel


class ModelVersionOut(BaseModel):
    """A registered model, without its artifact."""

    version: int
    ops: list[str]
    status: str
    active: bool
    data_counts: dict[str, Any]
    params: dict[str, Any]
    metrics: dict[str, Any]
    artifact_sha256: str
    artifact_bytes: int
    job_id: uuid.UUID | None
    created_at: datetime
    activated_at: datetime | None
