"""How long another thread of the API process waits while one ingest batch is written.

Usage:
    .venv/bin/python benchmarks/ingest_store_hold.py DATABASE_URL > benchmarks/results/F.json

After a batch is validated and planned in a parse process, the API process writes it
(`store_parsed`, on a worker thread): the rows are encoded for the COPY and the arrays of
the INSERTs, sent, the aggregates added, and the transaction committed. Whatever of that
holds the interpreter delays the event loop that answers priors on the same process. On a
scratch database, for the batches `tps bench priors --ingest-rate` pushes (50 runs of the
fleet simulator, seed 7, planned as a parse process plans them), this times the write and
the longest gap that a second thread, asking for the interpreter every 0.2 ms, sees
meanwhile; and the same for the process's other share of a batch, taking the plan back
(`unpickle`).
"""

from __future__ import annotations

import json
import pickle
import sys
from datetime import UTC, datetime
from typing import Any

from ingest_validation_hold import TICK_S, summary, watched  # this folder, as the script runs
from sqlalchemy.orm import Session

from services.profiler_api.app import configure_collector
from services.profiler_api.db import make_engine
from services.profiler_api.ingest import service
from services.profiler_api.ingest.parsing import plan_body
from services.profiler_api.metrics import ServiceMetrics
from services.profiler_api.settings import Settings
from tools.local_service import issue_tokens, migrated_scratch_database
from tools.synthetic import FleetSimulator
from tps.schemas import ProbeRunBatch

BATCHES = 40
SIZE = 50


def main(server_url: str) -> None:
    runs = list(FleetSimulator(seed=7).runs(SIZE * (BATCHES + 1)))
    bodies = [
        ProbeRunBatch(runs=runs[i : i + SIZE]).model_dump_json().encode()
        for i in range(0, len(runs), SIZE)
    ]
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "tick_ms": TICK_S * 1e3,
        "batch_runs": SIZE,
        "batches": BATCHES,
    }
    with migrated_scratch_database(server_url, prefix="tps_hold") as url:
        org_id = issue_tokens(url, org="hold").org_id
        settings = Settings(database_url=url)
        engine = make_engine(url, settings)
        metrics = ServiceMetrics()
        pickled = [
            pickle.dumps(
                plan_body([body], encoding="identity", limit=2**25, org_id=org_id),
                pickle.HIGHEST_PROTOCOL,
            )
            for body in bodies
        ]
        configure_collector(settings.gc_threshold)  # as a worker
        took, gaps, unpickle_ms, unpickle_gaps = [], [], [], []
        for i, data in enumerate(pickled):
            ms, gap = watched(lambda data=data: pickle.loads(data))
            parsed = pickle.loads(data)

            def write(parsed: Any = parsed) -> None:
                with Session(engine) as session:
                    service.store_parsed(session, parsed, metrics=metrics)

            if i == 0:  # not counted: the first batch creates the hardware and problems
                write()
                continue
            unpickle_ms.append(ms)
            unpickle_gaps.append(gap)
            ms, gap = watched(write)
            took.append(ms)
            gaps.append(gap)
        measurements = sum(len(r.measurements) for r in runs[SIZE:])
        out.update(
            measurements_per_batch=round(measurements / BATCHES),
            store=summary(took),
            store_gap=summary(gaps),
            unpickle=summary(unpickle_ms),
            unpickle_gap=summary(unpickle_gaps),
        )
        engine.dispose()
    print(json.dumps(out, indent=2))  # noqa: T201  (the script's output)


if __name__ == "__main__":
    main(sys.argv[1])
