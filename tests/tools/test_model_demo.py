"""The model's demo steps end to end, on probe runs shaped like a Kernel Tuner import."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy.engine import make_url

from services.profiler_api.db import scratch_database
from services.profiler_api.settings import Settings
from tests.factories import tuning_runs
from tools.demo.model import ModelDemo
from tools.demo.service import (
    DemoFailed,
    create_tokens,
    run_demo,
    start_database,
    start_service,
)
from tools.settings import LocalSettings

SERVICE_STEPS = [
    ("start Postgres", start_database),
    ("create tokens", create_tokens),
    ("start the service", start_service),
]


@pytest.mark.slow
def test_model_demo_runs_twice_on_the_same_server(postgres_server_url: str, tmp_path: Path) -> None:
    runs = tuning_runs(["RTX A4000", "RTX A6000", "W6600", "A100", "W7800"], variant="demo")
    dataset = tmp_path / "runs.jsonl"
    dataset.write_text("".join(run.model_dump_json() + "\n" for run in runs))
    settings = Settings(database_url=postgres_server_url)
    with scratch_database(postgres_server_url, prefix="tps_demo") as url:
        name = make_url(url).database or ""
        for attempt in (1, 2):  # the second run finds the first one's database, model and all
            out = io.StringIO()
            demo = ModelDemo(dataset=dataset)
            run_demo(
                Console(file=out, width=120),
                settings=settings,
                steps=SERVICE_STEPS + demo.steps(),
                database=name,
                output_dir=tmp_path / "out",
            )
            text = " ".join(out.getvalue().split())  # as read, without the console's line breaks
            assert f"database '{name}' made afresh" in text, attempt
            assert f"pushed {len(runs) - 1} Kernel Tuner runs" in text, attempt
            assert "kept AMD Radeon PRO W7800 aside" in text
            assert demo.job is not None and demo.job.state == "succeeded", demo.job
            assert demo.job.model_version == 1, attempt  # a lineage of its own, every run
            assert "true ranks among 48 valid configurations" in text
            assert "source: model" in text or "source: nearest" in text
            assert demo.plot_written == tmp_path / "out" / "score_at_k.png"
            assert demo.plot_written.read_bytes().startswith(b"\x89PNG")
            assert "demo done" in text


def test_a_failed_step_stops_the_demo_without_done(tmp_path: Path) -> None:
    local = LocalSettings(kernel_tuner_data=tmp_path / "absent")
    out = io.StringIO()
    with pytest.raises(DemoFailed, match=r"step 1 \(import Kernel Tuner data.*absent"):
        run_demo(
            Console(file=out, width=200),
            local=local,
            steps=ModelDemo().steps(),
            output_dir=tmp_path / "out",
        )
    assert "demo failed at step 1" in out.getvalue()
    assert "demo done" not in out.getvalue()
    assert not (tmp_path / "out").exists()
