"""`tps agent run` and `tps agent status` from the command line, and the metrics endpoint."""

from __future__ import annotations

from pathlib import Path

import httpx
from typer.testing import CliRunner

from agents.daemon.metrics import AgentMetrics
from agents.daemon.spool import Spool
from tests.agents.daemon.conftest import gemm, make_run
from tests.agents.daemon.harness import free_port
from tps.cli import app

runner = CliRunner()


def test_run_without_a_deployment_secret_explains_itself(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("TPS_AGENT_DEPLOYMENT_SECRET", raising=False)
    config = tmp_path / "agent.yaml"
    config.write_text(f"spool_path: {tmp_path / 'spool.sqlite'}\n")
    result = runner.invoke(app, ["agent", "run", "--config", str(config)])
    assert result.exit_code == 2
    assert "TPS_AGENT_DEPLOYMENT_SECRET" in result.output


def test_status_shows_the_spool(tmp_path: Path) -> None:
    spool_path = tmp_path / "spool.sqlite"
    with Spool(spool_path, max_runs=2) as spool:
        spool.put([make_run(gemm(m)) for m in (1, 2, 3)])
        spool.record_error("push attempt 1 failed: service answered 503")
    config = tmp_path / "agent.yaml"
    config.write_text(f"spool_path: {spool_path}\n")

    result = runner.invoke(app, ["agent", "status", "--config", str(config)])

    assert result.exit_code == 0, result.output
    lines = {line.strip("│ ").split("│")[0].strip(): line for line in result.output.splitlines()}
    assert "2" in lines["spool depth"] and "1" in lines["dropped"]
    assert "503" in result.output


def test_status_of_an_agent_that_never_ran(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(f"spool_path: {tmp_path / 'none.sqlite'}\n")
    result = runner.invoke(app, ["agent", "status", "--config", str(config)])
    assert result.exit_code == 0 and "never started" in result.output


def test_metrics_are_served_for_prometheus() -> None:
    metrics = AgentMetrics()
    metrics.spool_depth.set(7)
    port = free_port()
    metrics.serve(port)
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert "tps_agent_spool_depth 7.0" in text
    assert "tps_agent_runs_dropped_total" in text
