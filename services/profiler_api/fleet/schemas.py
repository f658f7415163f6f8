"""Responses of the fleet endpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from tps.hardware import HardwareSpec


class HardwareEntry(BaseModel):
    fingerprint: str
    spec: HardwareSpec
    runs: int
    problems: int
    first_seen_at: datetime


class FleetStats(BaseModel):
    runs: int
    measurements: int
    hardware: int
    problems: int
    candidates: int
    organisations: int
    org_runs: int
