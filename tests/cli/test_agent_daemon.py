"""`tps agent run` and `tps agent status` from the command line, and the metrics endpoint."""

from __future__ import annotations

from pathlib import Path

import httpx
from typer.testing import CliRunner

from agents.daemon.metrics import AgentMetrics
from agents.daemon.spool import Spool
from cli import app
from tests.agents.daemon.conftest import gemm, make_run
from tests.agents.daemon.harness import free_port

runner = CliRunner()
SECRET_FOR_CLI = "cli-test-deployment-secret"


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


def test_run_once_ends_with_a_table_of_what_it_probed_pushed_and_chose(
    tmp_path: Path, live_service
) -> None:
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("name,m,n,k,trans_b\nsmall,8,64,64,1\nwide,16,128,64,1\n")
    machine_id = tmp_path / "machine-id"
    machine_id.write_text("0123456789abcdef0123456789abcdef\n")
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"service_url: {live_service.base_url}\n"
        "device: cpu\n"
        f"spool_path: {tmp_path / 'spool.sqlite'}\n"
        f"cache_path: {tmp_path / 'cache.json'}\n"
        f"machine_id_path: {machine_id}\n"
        "probe: {samples: 3, min_samples: 3, max_samples: 5}\n"
        f"sources: {{shape_csv: [{shapes}], dtype: fp32}}\n"
    )
    env = {
        "TPS_AGENT_TOKEN": live_service.agent_token,
        "TPS_AGENT_DEPLOYMENT_SECRET": SECRET_FOR_CLI,
        "COLUMNS": "200",
    }
    result = runner.invoke(app, ["agent", "run", "--config", str(config), "--once"], env=env)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "TPS agent: this pass" in text
    assert "probed 2, pushed 2, 0 answered from the cache, 0 left in the spool, 0 dropped" in text
    assert "GemmTunableOp_float_TN" in text and "vs default" in text

    again = runner.invoke(app, ["agent", "run", "--config", str(config), "--once"], env=env)
    assert again.exit_code == 0, again.output
    assert "probed 0, pushed 0, 2 answered from the cache" in " ".join(again.output.split())
