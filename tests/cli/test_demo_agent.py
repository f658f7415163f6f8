"""The agent steps of `tps demo`, on a scratch database of the session's Postgres."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy.engine import make_url

from cli.demo_agent import AGENT_STEPS
from services.profiler_api.db import scratch_database
from services.profiler_api.settings import Settings
from tools.demo.service import create_tokens, run_demo, start_database, start_service


@pytest.mark.slow
def test_second_agent_is_steered_by_the_first_agents_runs(
    postgres_server_url: str, tmp_path: Path
) -> None:
    steps = [
        ("start Postgres", start_database),
        ("create tokens", create_tokens),
        ("start the service", start_service),
        *AGENT_STEPS,
    ]
    out = io.StringIO()
    with scratch_database(postgres_server_url, prefix="tps_demo_agent") as url:
        run_demo(
            Console(file=out, width=200),
            settings=Settings(database_url=postgres_server_url),
            steps=steps,
            database=make_url(url).database or "",
            output_dir=tmp_path,
        )
    text = out.getvalue()
    assert text.count("4 probe runs, 4 pushed, 0 left in the spool") == 2
    assert "priors steered 4 of 4 probes" in text
    # Each host's state stays in the demo's output folder, not in /tmp.
    for host in ("host-1", "host-2"):
        assert (tmp_path / "agents" / host / "cache.json").is_file()
