"""The service's commands, end to end on the session's Postgres."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from cli import app
from models.data_files import read_probe_runs_jsonl
from services.profiler_api.db import scratch_database
from services.profiler_api.settings import Settings
from tools.bench.ingest import IngestBenchConfig, run_ingest_bench
from tools.demo.service import H200_DATASET, run_demo


def test_db_current_reports_the_head(migrated_database_url: str) -> None:
    result = CliRunner().invoke(app, ["db", "current", "--database-url", migrated_database_url])
    assert result.exit_code == 0, result.output
    assert "(head)" in result.output


def test_worker_once_with_an_empty_queue(migrated_database_url: str) -> None:
    result = CliRunner().invoke(app, ["worker", "--once", "--database-url", migrated_database_url])
    assert result.exit_code == 0, result.output
    assert "no queued job" in result.output or "ran job" in result.output


def test_demo_pushes_runs_and_reads_priors(postgres_server_url: str, tmp_path: Path) -> None:
    out = io.StringIO()
    with scratch_database(postgres_server_url, prefix="tps_demo") as url:
        ctx = run_demo(
            Console(file=out, width=120),
            settings=Settings(database_url=postgres_server_url),
            database=make_url(url).database or "",
            output_dir=tmp_path,
        )
    text = out.getvalue()
    shipped = sum(1 for _ in read_probe_runs_jsonl(H200_DATASET))
    assert shipped > 0 and len(ctx.runs) == shipped
    assert f"{shipped} accepted" in text
    assert text.count("source: observed") == 3


def test_demo_exits_nonzero_naming_the_failed_step(migrated_database_url: str) -> None:
    own = make_url(migrated_database_url).database or ""
    result = CliRunner().invoke(
        app, ["demo", "--database", own], env={"TPS_DATABASE_URL": migrated_database_url}
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "demo failed: step 1 (start Postgres)" in text
    assert f"refusing to drop '{own}': it is the configured database itself" in text
    assert "demo done" not in text


def test_bench_ingest_reports_both_rates(postgres_server_url: str) -> None:
    config = IngestBenchConfig(runs=60, clients=2, batch_runs=20)
    result = run_ingest_bench(postgres_server_url, config)
    json.dumps(result)
    assert result["ingest_per_s"] > 0 and result["copy_per_s"] > 0
    # the ratio of the unrounded rates, rounded: within a rounding step of the printed rates'
    assert result["ratio"] == pytest.approx(result["ingest_per_s"] / result["copy_per_s"], abs=1e-3)
    assert 60 * 8 <= result["measurements"] <= 60 * 64
    for key in ("postgres_cpu_us_per_measurement", "copy_postgres_cpu_us_per_measurement"):
        # None: no readable local Postgres; 0.0 is possible, CPU times tick every 10 ms
        assert result[key] is None or result[key] >= 0, key
    budget = result["cpu_us_per_measurement_at_half_copy_rate"]
    assert budget == pytest.approx(2e6 * result["cpus"] / result["copy_per_s"], rel=0.01)
