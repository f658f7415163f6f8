"""Problems already in the cache are not probed again: across restarts and from a warm file."""

from __future__ import annotations

import threading
from pathlib import Path

from agents.cache import ProbeCache
from agents.daemon.assemble import build_daemon
from agents.daemon.settings import AgentSettings, SourceSettings
from tests.agents.daemon.conftest import SECRET


def settings_for(tmp_path: Path, shapes: Path, **kw) -> AgentSettings:
    # No service here: pushes fail once and the runs stay spooled.
    return AgentSettings(
        service_url="http://127.0.0.1:9",
        device="cpu",
        sources=SourceSettings(shape_csv=[shapes], dtype="fp32"),
        spool_path=tmp_path / "spool.sqlite",
        cache_path=tmp_path / "cache.json",
        deployment_secret=SECRET,
        push_max_attempts=1,
        priors_enabled=False,
        **kw,
    )


def run_once(settings: AgentSettings, engine) -> list:
    runs: list = []
    agent = build_daemon(settings, engine=engine, on_run=runs.append)
    agent.daemon.run(threading.Event(), once=True)
    agent.close()
    return runs


def shapes_file(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.csv"
    path.write_text("name,m,n,k,trans_b\n" + "".join(f"l{m},{m},32,16,1\n" for m in (1, 2, 4, 8)))
    return path


def test_a_restarted_agent_skips_what_it_already_probed(tmp_path: Path, cpu_engine) -> None:
    settings = settings_for(tmp_path, shapes_file(tmp_path))
    assert len(run_once(settings, cpu_engine)) == 4
    assert len(ProbeCache.load(settings.cache_path)) == 4
    assert run_once(settings, cpu_engine) == []


def test_an_exported_cache_warms_a_new_host(tmp_path: Path, cpu_engine) -> None:
    shapes = shapes_file(tmp_path)
    first = settings_for(tmp_path / "first", shapes)
    run_once(first, cpu_engine)

    warmed = settings_for(tmp_path / "second", shapes, warm_cache=first.cache_path)
    assert run_once(warmed, cpu_engine) == []


def test_a_tunableop_results_csv_warms_a_new_host(tmp_path: Path, cpu_engine) -> None:
    # What a user's earlier `PYTORCH_TUNABLEOP_TUNING=1` run left behind, for two of the shapes.
    csv = tmp_path / "tunableop_results0.csv"
    csv.write_text(
        "Validator,PT_VERSION,2.13.0\n"
        "GemmTunableOp_float_TN,tn_32_1_16_ld_16_16_32,Default,0.0041\n"
        "GemmTunableOp_float_TN,tn_32_4_16_ld_16_16_32,Default,0.0043\n"
    )
    warmed = settings_for(tmp_path, shapes_file(tmp_path), warm_cache=csv)
    probed = run_once(warmed, cpu_engine)
    assert sorted(r.problem.dims["m"] for r in probed) == [2, 8]
