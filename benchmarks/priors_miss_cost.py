"""What a GET /v1/priors miss costs in process, read through the primary's kind of engine
(a transaction and a ping around each read) and through the read engine, side by side.

A generated fleet of 1M measurements on a scratch database next to DATABASE_URL; each
engine answers 100 uncached (hardware, problem) pairs in turn, 10 rounds, through the
service's own `PriorService.answer` (the lookup, the prior, its JSON). Prints one JSON object.

    PYTHONPATH=. .venv/bin/python benchmarks/priors_miss_cost.py [DATABASE_URL] \
        > benchmarks/results/priors_miss_cost.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime

import psycopg

from services.profiler_api.app import create_app
from services.profiler_api.auth.service import Role
from services.profiler_api.db import libpq_url, make_engine, make_session_factory
from services.profiler_api.priors.query import ids_key
from services.profiler_api.settings import Settings
from tools.bench.fleet import generate_fleet, sample_pairs
from tools.local_service import issue_tokens, migrated_scratch_database

ROUNDS = 10
PER_ROUND = 100


def main() -> None:
    server = (
        sys.argv[1] if len(sys.argv) > 1 else "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )
    with migrated_scratch_database(server, prefix="tps_miss") as url:
        org = issue_tokens(url, org="bench", roles=[Role.AGENT])
        with psycopg.connect(libpq_url(url)) as conn:
            fleet = generate_fleet(conn, measurements=1_000_000, org_id=org.org_id)
            conn.commit()
            conn.autocommit = True
            conn.execute("VACUUM (ANALYZE)")
            pairs = sample_pairs(conn, count=2 * ROUNDS * PER_ROUND + 100)
        settings = Settings(database_url=url)
        service = create_app(settings).state.prior_service
        engines = {
            "transaction_and_ping": make_engine(url, settings),
            "read_engine": make_engine(url, settings, reads=True),
        }
        sessions = {name: make_session_factory(engine) for name, engine in engines.items()}

        def ask(name: str, hardware_id: str, problem: str) -> None:
            service.answer(
                sessions[name],
                ids_key(hardware_id, problem, 8),
                lambda s: service.prior_by_ids(
                    s, hardware_id=hardware_id, problem=problem, limit=8
                ),
            )

        warm, rest = pairs[:100], iter(pairs[100:])
        for name in engines:
            for hardware_id, problem in warm[:50]:
                ask(name, hardware_id, problem)
        per_round: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(ROUNDS):
            for name in engines:
                chunk = [next(rest) for _ in range(PER_ROUND)]
                started = time.perf_counter()
                for hardware_id, problem in chunk:
                    ask(name, hardware_id, problem)
                per_round[name].append((time.perf_counter() - started) / PER_ROUND * 1e3)
        for engine in engines.values():
            engine.dispose()
    medians = {name: statistics.median(ms) for name, ms in per_round.items()}
    out = {
        "miss_ms": medians,
        "miss_ms_rounds": per_round,
        "read_engine_vs_transaction_and_ping": medians["read_engine"]
        / medians["transaction_and_ping"],
        "pairs_per_round": PER_ROUND,
        "rounds": ROUNDS,
        "measurements": fleet.get("measurements"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
