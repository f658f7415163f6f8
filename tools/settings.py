"""Settings of local use only: the embedded Postgres and the Kernel Tuner data (TPS_*)."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Return where the embedded Postgres keeps its data between runs."""
    return platformdirs.user_data_path("tps") / "postgres"


class LocalSettings(BaseSettings):
    """What a developer's machine adds to the service's settings; env prefix `TPS_`."""

    model_config = SettingsConfigDict(env_prefix="TPS_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="where the embedded Postgres keeps its data (TPS_DATABASE_URL unset)",
    )
    kernel_tuner_data: Path | None = Field(
        default=None,
        description="Kernel Tuner caches that `tps demo` and `tps bench priors` import; "
        "unset: the five GPUs shipped in benchmarks/data/kernel_tuner",
    )
