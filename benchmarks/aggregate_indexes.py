"""What the aggregates' indexes cost ingest and priors: the schema before migration 0007 and at
head, side by side, on scratch databases of the same server.

For each schema, in alternating rounds: batches of 50 probe runs of the fleet simulator
(seed 7) are stored through the service's own `store`, first to fill the aggregates, then
again with runs of the same (hardware, problem) pairs, so that the batch's upsert adds to
rows that exist, as a fleet's re-probes do. Timed: each later batch's wall time and its
database backend's CPU (where the server is on this machine), per measurement, and the
share of aggregate updates that were HOT (no index entry written). Then the observed top 8
of pairs of 36, 4,354 (a Kernel Tuner convolution space) and 11,000 candidates is read
through the priors' own query, uncached, 200 times each.

    .venv/bin/python benchmarks/aggregate_indexes.py [DATABASE_URL] \
        > benchmarks/results/aggregate_indexes_1205.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

import psutil
from sqlalchemy import text
from sqlalchemy.orm import Session

from services.profiler_api import migrate
from services.profiler_api.auth.repository import upsert_organisation
from services.profiler_api.db import make_engine, make_session_factory, scratch_database
from services.profiler_api.ingest.parsing import parse_batch
from services.profiler_api.ingest.plan import IngestPlan
from services.profiler_api.ingest.repository import raw_connection
from services.profiler_api.ingest.service import store
from services.profiler_api.priors.repository import observed_candidates
from services.profiler_api.settings import Settings
from tools.synthetic import FleetSimulator
from tps.schemas import ProbeRun, ProbeRunBatch

SCHEMAS = {"before_0007": "0006", "head": "head"}
BATCH_RUNS = 50
FILL_BATCHES = 40
TIMED_BATCHES = 40
ROUNDS = 3
PAIR_SIZES = (36, 4354, 11000)
READS = 200


def _bodies(runs: list[ProbeRun]) -> list[bytes]:
    return [
        ProbeRunBatch(runs=runs[i : i + BATCH_RUNS]).model_dump_json().encode()
        for i in range(0, len(runs), BATCH_RUNS)
    ]


def _repeat(runs: list[ProbeRun], seed: int) -> list[ProbeRun]:
    """Runs of the same pairs and candidates, as new runs (fresh ids, later times)."""
    simulator = FleetSimulator(seed=seed)
    fresh = list(simulator.runs(len(runs)))
    return [
        run.model_copy(update={"run_id": other.run_id, "created_at": other.created_at})
        for run, other in zip(runs, fresh, strict=True)
    ]


def _backend_cpu_s(session: Session) -> float | None:
    pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None  # a server elsewhere
    return times.user + times.system


def _updates(session: Session) -> tuple[int, int]:
    """The backend's unreported updates of candidate_stats rows: all, and HOT ones."""
    row = session.execute(
        text(
            "SELECT pg_stat_get_xact_tuples_updated('candidate_stats'::regclass), "
            "pg_stat_get_xact_tuples_hot_updated('candidate_stats'::regclass)"
        )
    ).one()
    return int(row[0]), int(row[1])


def _store_batches(sessions: Any, bodies: list[bytes], org_id: int) -> dict[str, Any]:
    wall: list[float] = []
    cpu: list[float] = []
    updated = hot = 0
    for body in bodies:
        plan = IngestPlan.from_batch(parse_batch(body), org_id=org_id)
        count = plan.measurement_count(set(plan.runs))
        with sessions() as session:
            cpu_before = _backend_cpu_s(session)
            # a backend's counts pile up until it reports them: take this batch's difference
            before = _updates(session)
            started = time.perf_counter()
            store(session, plan)
            took = time.perf_counter() - started
            after = _updates(session)
            session.commit()
            cpu_after = _backend_cpu_s(session)
        updated, hot = updated + after[0] - before[0], hot + after[1] - before[1]
        wall.append(took / count * 1e6)
        if cpu_before is not None and cpu_after is not None:
            cpu.append((cpu_after - cpu_before) / count * 1e6)
    return {
        "store_us_per_measurement": round(statistics.median(wall), 2),
        "backend_cpu_us_per_measurement": round(statistics.median(cpu), 2) if cpu else None,
        "aggregate_updates": updated,
        "hot_share": round(hot / updated, 3) if updated else None,
    }


def _add_pair(session: Session, size: int) -> tuple[str, str]:
    hardware, problem = f"bench-hw-{size}", f"bench-pb-{size}"
    conn = raw_connection(session)
    conn.execute(
        "INSERT INTO candidates (id, backend, params) SELECT 'bench-' || g, 'bench', '{}'::jsonb "
        "FROM generate_series(1, %s) AS g ON CONFLICT DO NOTHING",
        (size,),
    )
    conn.execute(
        "INSERT INTO candidate_stats SELECT %s, %s, 'bench-' || g, 1, 1, 10, ln(1 + random()), 0, "
        "1, 1, now(), now() FROM generate_series(1, %s) AS g",
        (hardware, problem, size),
    )
    return hardware, problem


def _reads(sessions: Any) -> dict[str, float]:
    out = {}
    with sessions() as session:
        pairs = {size: _add_pair(session, size) for size in PAIR_SIZES}
        session.commit()
        session.execute(text("ANALYZE candidate_stats"))
        for size, (hardware, problem) in pairs.items():
            took = []
            for _ in range(READS):
                started = time.perf_counter()
                observed_candidates(session, hardware_id=hardware, problem_id=problem, limit=8)
                took.append(time.perf_counter() - started)
            out[f"observed_top_ms_{size}_candidates"] = round(statistics.median(took) * 1e3, 3)
    return out


def main() -> None:
    server = sys.argv[1] if len(sys.argv) > 1 else os.environ["TPS_TEST_DATABASE_URL"]
    simulator = FleetSimulator(seed=7)
    fill = list(simulator.runs(BATCH_RUNS * FILL_BATCHES))
    repeats = [_bodies(_repeat(fill[: BATCH_RUNS * TIMED_BATCHES], 100 + r)) for r in range(ROUNDS)]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
    for round_ in range(ROUNDS):
        for name, revision in SCHEMAS.items():
            with scratch_database(server, prefix="tps_bench_aggregates") as url:
                migrate.upgrade(url, revision)
                engine = make_engine(url, Settings(db_pool_size=1))
                sessions = make_session_factory(engine)
                with sessions() as session:
                    org_id = upsert_organisation(session, "bench")
                    session.commit()
                _store_batches(sessions, _bodies(fill), org_id)
                with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text("VACUUM ANALYZE candidate_stats"))
                figures = _store_batches(sessions, repeats[round_], org_id)
                figures |= _reads(sessions)
                engine.dispose()
            results[name].append(figures)
    summary = {
        name: {
            key: statistics.median(r[key] for r in runs)
            for key in runs[0]
            if runs[0][key] is not None
        }
        for name, runs in results.items()
    }
    print(  # noqa: T201  (the script's output)
        json.dumps(
            {
                "summary": summary,
                "rounds": results,
                "config": {
                    "batch_runs": BATCH_RUNS,
                    "fill_batches": FILL_BATCHES,
                    "timed_batches": TIMED_BATCHES,
                    "rounds": ROUNDS,
                    "reads": READS,
                },
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
