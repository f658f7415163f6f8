"""The generated benchmark fleet: labelled, within its bounds, and consistent with itself."""

from __future__ import annotations

import psycopg

from services.profiler_api import migrate
from services.profiler_api.db import libpq_url, scratch_database
from tools.bench.fleet import (
    FLEET_SOURCE,
    MAX_CANDIDATES,
    MIN_CANDIDATES,
    generate_fleet,
    sample_pairs,
)
from tools.bench.train import fleet_tuning_data


def test_the_generated_fleet_is_labelled_bounded_and_aggregated(postgres_server_url: str) -> None:
    with scratch_database(postgres_server_url, prefix="tps_fleet") as url:
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as conn:
            org_id = conn.execute(
                "INSERT INTO organisations (name) VALUES ('bench') RETURNING id"
            ).fetchone()[0]
            fleet = generate_fleet(conn, measurements=20_000, org_id=org_id)
            conn.commit()
            assert 18_000 < fleet["measurements"] < 22_000
            sizes = conn.execute(
                "SELECT min(n), max(n) FROM (SELECT count(*) AS n FROM measurements "
                "GROUP BY run_id) AS runs"
            ).fetchone()
            assert MIN_CANDIDATES <= sizes[0] and sizes[1] <= MAX_CANDIDATES
            assert conn.execute(
                "SELECT count(*) FILTER (WHERE source <> %s) FROM probe_runs", (FLEET_SOURCE,)
            ).fetchone() == (0,)
            # The aggregates are those of the measurements; the counters count them.
            folded = conn.execute(
                "SELECT sum(valid_measurements), count(*) FROM candidate_stats"
            ).fetchone()
            assert folded == (fleet["measurements"], fleet["candidate_stats"])
            counted = conn.execute(
                "SELECT sum(runs), sum(measurements) FROM fleet_counters"
            ).fetchone()
            assert counted == (fleet["runs"], fleet["measurements"])
            pairs = sample_pairs(conn, count=10)
            assert len(pairs) == len(set(pairs)) == 10


def test_the_training_rows_of_the_fleet() -> None:
    data = fleet_tuning_data(5_000)
    frame = data.frame
    assert 4_500 < len(frame) < 5_500
    sizes = frame.groupby(["hw_key", "problem_hash"]).size()
    assert sizes.min() >= MIN_CANDIDATES and sizes.max() <= MAX_CANDIDATES
    assert not frame.duplicated(["hw_key", "problem_hash", "candidate_id"]).any()
    assert (frame["median_us"] > 0).all() and frame["valid"].all()
    assert set(frame["hw_key"]) <= set(data.hardware)
