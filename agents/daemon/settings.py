"""The agent's settings: a YAML file, overridden by `TPS_AGENT_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from agents.daemon.errors import ConfigError
from agents.probe.settings import ProbeSettings
from tps.problem import Dtype
from tps.schemas import MAX_BATCH_RUNS

_STATE_DIR = Path(platformdirs.user_data_dir("tps-agent", appauthor=False))


class SourceSettings(BaseModel):
    """Where the problems to probe come from."""

    model_config = ConfigDict(extra="forbid")

    shape_csv: list[Path] = Field(default_factory=list, description="name,m,n,k,trans_b files")
    tunableop_untuned: list[Path] = Field(
        default_factory=list, description="files written by PYTORCH_TUNABLEOP_RECORD_UNTUNED=1"
    )
    watch_dir: Path | None = Field(default=None, description="polled for new files of either kind")
    watch_interval_s: float = Field(default=10.0, gt=0)
    dtype: Dtype = Field(default="bf16", description="dtype of the problems in shape CSVs")


class AgentSettings(BaseSettings):
    """Everything one agent needs, read once at start."""

    model_config = SettingsConfigDict(
        env_prefix="TPS_AGENT_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    service_url: str = "http://127.0.0.1:8000"
    # Where probe runs are pushed when ingest has a deployment of its own (deploy/k8s/ingest.yaml);
    # priors are still asked of service_url.
    ingest_url: str | None = None
    token: SecretStr | None = None
    device: str = "auto"
    op_config: Path | None = None
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    sources: SourceSettings = Field(default_factory=SourceSettings)

    spool_path: Path = _STATE_DIR / "spool.sqlite"
    spool_max_runs: int = Field(default=100_000, ge=1)

    push_batch_runs: int = Field(default=MAX_BATCH_RUNS, ge=1, le=MAX_BATCH_RUNS)
    push_interval_s: float = Field(default=5.0, gt=0)
    push_timeout_s: float = Field(default=30.0, gt=0)
    push_max_attempts: int = Field(default=8, ge=1, description="per batch, per push cycle")
    push_backoff_initial_s: float = Field(default=0.5, gt=0)
    push_backoff_max_s: float = Field(default=60.0, gt=0)
    shutdown_flush_s: float = Field(default=5.0, ge=0)

    priors_enabled: bool = True
    priors_timeout_ms: float = Field(default=200.0, gt=0)
    priors_top_k: int = Field(default=4, ge=1, le=256)

    cache_path: Path = _STATE_DIR / "cache.json"
    warm_cache: Path | None = Field(
        default=None, description="an exported cache JSON or a TunableOp results CSV"
    )

    deployment_secret: SecretStr | None = None
    host_key_path: Path = Field(
        default=_STATE_DIR / "host.key",
        description="this host's own key of its id where no deployment secret is set",
    )
    machine_id_path: Path = Path("/etc/machine-id")
    metrics_port: int | None = Field(default=None, ge=0, le=65535)

    @field_validator("service_url", "ingest_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value is not None else None

    @property
    def push_url(self) -> str:
        """The base URL probe runs are pushed to."""
        return self.ingest_url or self.service_url

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Explicit arguments beat the environment, which beats the YAML file.
        yaml_file = settings_cls.model_config.get("yaml_file")
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
        if yaml_file is not None:
            sources += (YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file),)
        return sources

    def require_secret(self) -> bytes:
        """Return the deployment secret, or explain how to set one."""
        if self.deployment_secret is None or not self.deployment_secret.get_secret_value():
            raise ConfigError(
                "no deployment secret: set deployment_secret in the agent config or "
                "TPS_AGENT_DEPLOYMENT_SECRET; every host of a deployment shares it"
            )
        return self.deployment_secret.get_secret_value().encode()


def load_settings(config: Path | None = None, **overrides: Any) -> AgentSettings:
    """Read the settings from `config` (YAML) and the environment; `overrides` win over both."""
    if config is None:
        return AgentSettings(**overrides)
    if not config.is_file():
        raise ConfigError(f"agent config {config} does not exist")
    from_file: type[AgentSettings] = type(
        "AgentSettingsFromFile",
        (AgentSettings,),
        {"model_config": SettingsConfigDict(**{**AgentSettings.model_config, "yaml_file": config})},
    )
    try:
        settings: AgentSettings = from_file(**overrides)
    except ValueError as exc:
        raise ConfigError(f"invalid agent config {config}: {exc}") from exc
    return settings
