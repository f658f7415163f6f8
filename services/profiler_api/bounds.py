"""Bounds of query and path parameters shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

MAX_OFFSET = 1_000_000
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="rows to skip")]
