"""The model's demo steps end to end, on probe runs shaped like a Kernel Tuner import."""

from __future__ import annotations

import io
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.demo import DemoContext
from services.profiler_api.runner import running_service
from services.profiler_api.settings import Settings
from services.profiler_api.training.demo import ModelDemo
from tests.factories import tuning_runs


def test_model_demo_steps_train_ask_and_plot(postgres_server_url: str, tmp_path: Path) -> None:
    runs = tuning_runs(["RTX A4000", "RTX A6000", "W6600", "A100", "W7800"], variant="demo")
    dataset = tmp_path / "runs.jsonl"
    dataset.write_text("".join(run.model_dump_json() + "\n" for run in runs))
    out = io.StringIO()
    demo = ModelDemo(dataset=dataset, plot_path=tmp_path / "score_at_k.png")
    with scratch_database(postgres_server_url, prefix="tps_demo") as url, ExitStack() as stack:
        migrate.upgrade(url)
        engine = make_engine(url, Settings())
        with Session(engine) as session, session.begin():
            tokens = {role: create_token(session, org="demo", role=role) for role in Role}
        engine.dispose()
        service = stack.enter_context(running_service(url))
        ctx = DemoContext(
            console=Console(file=out, width=120),
            stack=stack,
            settings=Settings(database_url=url),
            database_url=url,
            base_url=service.base_url,
            tokens=tokens,
        )
        for _, step in demo.steps():
            step(ctx)
    text = " ".join(out.getvalue().split())  # as read, without the console's line breaks
    assert "kept AMD Radeon PRO W7800 aside" in text
    assert demo.job["state"] == "succeeded", demo.job
    assert "true ranks among 48 valid configurations" in text
    assert "source: model" in text or "source: nearest" in text
    assert demo.plot_written == tmp_path / "score_at_k.png"
    assert demo.plot_written.read_bytes().startswith(b"\x89PNG")
