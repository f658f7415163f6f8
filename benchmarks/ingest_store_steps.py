# ruff: noqa: B023  (each step's lambda runs at once, inside its loop pass)
"""Where one ingest batch's write goes, statement by statement, and a tried alternative.

Usage:
    .venv/bin/python benchmarks/ingest_store_steps.py DATABASE_URL > benchmarks/results/F.json

On a scratch database, 60 batches of 50 fleet-simulator runs (seed 7, what `tps bench priors
--ingest-rate` pushes) are written as `services.profiler_api.ingest.service.store` writes them,
each statement timed (wall time; the service and Postgres share this machine, and the client
waits on each statement). Every other batch instead adds its aggregates from deltas summed in
Python from the plan, sent as arrays (`INSERT ... SELECT FROM unnest(...) ON CONFLICT`), against
the service's `add_stats`, which reads the batch's stored measurements back in Postgres.
Medians over the batches after the first five.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from services.profiler_api.db import make_engine
from services.profiler_api.fleet.repository import count_ingested
from services.profiler_api.ingest import repository
from services.profiler_api.ingest.parsing import plan_body
from services.profiler_api.ingest.plan import IngestPlan
from services.profiler_api.priors.repository import announce_pairs
from services.profiler_api.settings import Settings
from tools.local_service import issue_tokens, migrated_scratch_database
from tools.synthetic import FleetSimulator
from tps.schemas import ProbeRunBatch

SIZE, BATCHES, SKIP = 50, 60, 5
_TYPES = "text text text int8 int8 int8 float8 float8 float8 float8 timestamptz timestamptz"
_ADD_DELTAS = f"""
INSERT INTO candidate_stats AS s ({repository.STATS_COLUMNS})
SELECT * FROM unnest({", ".join(f"%b::{t}[]" for t in _TYPES.split())}) ORDER BY 1, 2, 3
{repository.STATS_ON_CONFLICT}"""


def _least(a: float | None, b: float | None, pick: Callable[[float, float], float]) -> Any:
    return b if a is None else a if b is None else pick(a, b)


def deltas(plan: IngestPlan, accepted: set[Any]) -> list[tuple[Any, ...]]:
    """The aggregate rows `add_stats` would add for `accepted`, summed in Python."""
    out: dict[tuple[str, str, str], list[Any]] = {}
    for run_id in accepted:
        planned = plan.runs[run_id]
        created_at = planned.row[14]
        per: dict[str, list[Any]] = {}
        for _, candidate_id, median, *_, samples, _, valid, _, _ in planned.measurements:
            entry = per.setdefault(candidate_id, [0, 0, 0.0, 0.0, None, None])
            entry[1] += samples
            if valid and median is not None:
                log = math.log(median)
                entry[0] += 1
                entry[2] += log
                entry[3] += log * log
                entry[4], entry[5] = _least(entry[4], median, min), _least(entry[5], median, max)
        for candidate_id, e in per.items():
            key = (planned.row[3], planned.row[4], candidate_id)
            total = out.get(key)
            if total is None:
                out[key] = [1, *e, created_at, created_at]
                continue
            total[0] += 1
            for i in range(4):
                total[1 + i] += e[i]
            total[5], total[6] = _least(total[5], e[4], min), _least(total[6], e[5], max)
            total[7], total[8] = min(total[7], created_at), max(total[8], created_at)
    return [(*key, *values) for key, values in sorted(out.items())]


def main(server_url: str) -> None:
    runs = list(FleetSimulator(seed=7).runs(SIZE * BATCHES))
    bodies = [
        ProbeRunBatch(runs=runs[i : i + SIZE]).model_dump_json().encode()
        for i in range(0, len(runs), SIZE)
    ]
    times: dict[str, list[float]] = defaultdict(list)
    keys: list[int] = []
    with migrated_scratch_database(server_url, prefix="tps_steps") as url:
        org_id = issue_tokens(url, org="steps").org_id
        engine = make_engine(url, Settings(database_url=url))
        for index, body in enumerate(bodies):
            plan = plan_body([body], encoding="identity", limit=2**25, org_id=org_id).plan
            with Session(engine) as session:
                conn = repository.raw_connection(session)

                def step(name: str, call: Callable[[], Any], index: int = index) -> Any:
                    started = time.perf_counter()
                    result = call()
                    if index >= SKIP:
                        times[name].append(time.perf_counter() - started)
                    return result

                step(
                    "hardware",
                    lambda: repository.upsert_hardware(conn, sorted(plan.hardware.values())),
                )
                step(
                    "problems",
                    lambda: repository.upsert_problems(conn, sorted(plan.problems.values())),
                )
                step(
                    "candidates",
                    lambda: repository.upsert_candidates(conn, sorted(plan.candidates.values())),
                )
                accepted = step("runs", lambda: repository.insert_runs(conn, plan.run_rows()))
                step(
                    "measurements",
                    lambda: repository.copy_measurements(conn, plan.measurement_rows(accepted)),
                )
                if index % 2 == 0:
                    step("aggregates (add_stats)", lambda: repository.add_stats(conn, accepted))
                else:
                    rows = step("aggregates: deltas in Python", lambda: deltas(plan, accepted))
                    keys.append(len(rows))
                    columns = [list(c) for c in zip(*rows, strict=True)]
                    conn.execute("SET LOCAL jit = off")
                    step(
                        "aggregates: deltas sent as arrays",
                        lambda: conn.execute(_ADD_DELTAS, columns),
                    )
                step(
                    "announce",
                    lambda: announce_pairs(conn, (plan.runs[r].row[3:5] for r in accepted)),
                )
                step(
                    "count",
                    lambda: count_ingested(
                        conn, org_id=org_id, runs=len(accepted),
                        measurements=plan.measurement_count(accepted),
                    ),
                )  # fmt: skip
                step("commit", session.commit)
        engine.dispose()
    per_batch = sum(len(r.measurements) for r in runs) / len(bodies)
    print(  # noqa: T201  (the script's output)
        json.dumps(
            {
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "batch_runs": SIZE,
                "measurements_per_batch": round(per_batch),
                "aggregate_keys_per_batch": round(statistics.median(keys)),
                "median_ms": {k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
