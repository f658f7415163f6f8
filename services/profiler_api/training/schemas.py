"""Bodies of the admin training endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tps import schemas
from tps.bounds import NO_NUL, NotText
from tps.problem import OP_NAME, op_spec


def _known_ops_schema(schema: dict[str, Any]) -> None:
    # Built-in ops and user-defined ones share one name rule.
    schema["pattern"] = OP_NAME.pattern


class RetrainParams(BaseModel):
    """What to train on and how; every field has a default sized for a small box."""

    model_config = ConfigDict(extra="forbid")

    ops: list[Annotated[str, Field(max_length=64, json_schema_extra=_known_ops_schema)]] | None = (
        Field(
            default=None,
            min_length=1,
            max_length=16,
            description="ops to train (default: every one)",
        )
    )
    holdout: str | None = Field(
        default=None,
        max_length=128,
        pattern=NO_NUL,
        description="hardware held out for evaluation and the quality gate (name or alias); "
        "default: one chosen per op, the same on every run",
    )
    max_candidates: Annotated[int, NotText] | None = Field(
        default=1000, ge=10, le=1_000_000, description="per op; a random subset, same on all hw"
    )
    n_estimators: Annotated[int, NotText] = Field(default=100, ge=1, le=5000)
    seed: Annotated[int, NotText] = Field(default=0, ge=0, le=2**31 - 1)
    tolerance: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        strict=True,
        description="how much worse than the active model passes",
    )

    @field_validator("ops")
    @classmethod
    def _valid_op_names(cls, ops: list[str] | None) -> list[str] | None:
        for op in ops or []:
            op_spec(op)  # built in, or a valid name of a user-defined op
        return sorted(set(ops)) if ops else None


class JobOut(schemas.Job):
    """A training job as the service answers it, read from its row."""

    model_config = ConfigDict(from_attributes=True)
