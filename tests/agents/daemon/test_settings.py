"""Settings come from YAML, environment variables override them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.daemon.errors import ConfigError
from agents.daemon.settings import AgentSettings, load_settings

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "agent.yaml"


def test_yaml_then_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(
        "service_url: http://a:1/\npriors_top_k: 3\nsources:\n  dtype: fp16\n  shape_csv: [x.csv]\n"
    )
    monkeypatch.setenv("TPS_AGENT_PRIORS_TOP_K", "6")
    monkeypatch.setenv("TPS_AGENT_SOURCES__WATCH_DIR", "/incoming")
    settings = load_settings(config)
    assert isinstance(settings, AgentSettings)
    assert settings.service_url == "http://a:1"
    assert settings.priors_top_k == 6
    assert settings.sources.dtype == "fp16"
    assert settings.sources.watch_dir == Path("/incoming")


def test_the_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPS_AGENT_DEPLOYMENT_SECRET", "s3cret")
    settings = load_settings(EXAMPLE)
    assert settings.priors_timeout_ms == 200
    assert settings.require_secret() == b"s3cret"


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("push_batch_runs: 5000\n")
    with pytest.raises(ConfigError, match="push_batch_runs"):
        load_settings(config)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.yaml")


def test_a_secret_is_required_for_the_host_id() -> None:
    with pytest.raises(ConfigError, match="TPS_AGENT_DEPLOYMENT_SECRET"):
        AgentSettings().require_secret()
