"""Responses of the dashboard's JSON endpoints: what a fleet operator watches."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class HardwareLabel(BaseModel):
    """A device as the dashboard names it."""

    fingerprint: str
    name: str
    arch: str
    compute_units: int | None = None


class CoverageCell(BaseModel):
    hardware: HardwareLabel
    op: str
    problems: int = Field(description="distinct problems of this op probed on this hardware")
    runs: int


class Coverage(BaseModel):
    """Which problems each device has probed, against every problem the fleet has seen."""

    problems_per_op: dict[str, int]
    cells: list[CoverageCell]


class SpeedupRow(BaseModel):
    """Best observed candidate over vendor-default, per hardware and op (geometric means)."""

    hardware: HardwareLabel
    op: str
    problems: int = Field(description="problems where vendor-default and others were measured")
    geomean_speedup: float
    max_speedup: float
    improved: int = Field(description="problems where the best beats vendor-default by >= 5%")


class PriorSavingsRow(BaseModel):
    """Probe time of runs steered by priors against full probes of the same problems."""

    hardware: HardwareLabel
    op: str
    steered_runs: int
    full_runs: int
    steered_mean_ms: float | None
    full_mean_ms: float | None
    saved_ms: float | None = Field(
        description="sum over steered runs of (full probe's mean - this run's budget), on "
        "problems that also have a full probe on this hardware; null when none has"
    )
    top1_hits: float | None = Field(description="share of steered runs won by the prior's first")


class RateBucket(BaseModel):
    start: datetime
    runs: int
    steered_runs: int
    measurements: int


class Rates(BaseModel):
    """Runs received, and runs steered by priors, per time bucket."""

    window_h: float
    bucket_s: int
    buckets: list[RateBucket]


class ActiveModel(BaseModel):
    """The active model and its held-out evaluation, as the registry stored it."""

    version: int
    ops: list[str]
    activated_at: datetime | None
    data_counts: dict[str, Any]
    reports: list[dict[str, Any]]
