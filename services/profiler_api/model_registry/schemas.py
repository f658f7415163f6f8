"""Bodies of the model registry endpoints."""

from __future__ import annotations

from tps import schemas


class ModelVersionOut(schemas.ModelVersion):
    """A registered model, without its artifact."""
