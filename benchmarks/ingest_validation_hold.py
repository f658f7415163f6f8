"""How long another thread of the API process waits while one ingest batch is validated.

Usage:
    .venv/bin/python benchmarks/ingest_validation_hold.py > benchmarks/results/F.json

Validating a batch (`parse_batch`, pydantic-core's `model_validate_json`) and planning its
rows (`IngestPlan.from_batch`) on a thread of the process whose event loop answers priors
delays those answers by whatever it holds the interpreter for: so it was done until the API
validated batches in processes of its own (`ingest_parse_processes`, 0 for a worker thread).
For the batches `tps bench priors --ingest-rate` pushes (50 runs of the fleet simulator,
seed 7) and for the largest batch the API takes, this times the parse and plan, and the
longest gap that a second thread, asking for the interpreter every 0.2 ms, sees meanwhile
(`gap`); and what the API process pays to take the plan back from a parse process
(`plan_unpickle`: a plan holds plain rows). The collector is set as the API process sets it
at startup (what exists frozen, the service's `gc_threshold`); `collector_off` is the same
parse with the collector off, to tell its share from pydantic-core's own.
"""

from __future__ import annotations

import gc
import json
import pickle
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from services.profiler_api.app import configure_collector
from services.profiler_api.ingest.parsing import parse_batch
from services.profiler_api.ingest.plan import IngestPlan
from services.profiler_api.settings import Settings
from tools.synthetic import FleetSimulator
from tps.schemas import MAX_BATCH_RUNS, ProbeRunBatch

BATCHES = {50: 30, MAX_BATCH_RUNS: 6}  # batches timed of each size, after one not counted
TICK_S = 0.0002


def _plan(body: bytes) -> IngestPlan:
    return IngestPlan.from_batch(parse_batch(body), org_id=1)


def watched(call: Callable[[], Any]) -> tuple[float, float]:
    """Run `call()`; return its milliseconds and a ticking thread's longest gap (ms)."""
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(TICK_S)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.02)
    gaps.clear()
    start = time.perf_counter()
    call()
    took = time.perf_counter() - start
    done.set()
    ticker.join()
    return took * 1e3, max(gaps) * 1e3


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values), 2), "max_ms": round(max(values), 2)}


def main() -> None:
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "tick_ms": TICK_S * 1e3,
    }
    simulator = FleetSimulator(seed=7)
    for size, count in BATCHES.items():
        runs = list(simulator.runs(size * (count + 1)))
        bodies = [
            ProbeRunBatch(runs=runs[i : i + size]).model_dump_json().encode()
            for i in range(0, len(runs), size)
        ]
        del runs
        _plan(bodies[0])  # not counted: the first call builds what later calls reuse
        configure_collector(Settings.model_fields["gc_threshold"].default)  # as a worker
        took, gaps, unpickled, off_took, off_gaps = [], [], [], [], []
        for body in bodies[1:]:
            ms, gap = watched(lambda body=body: _plan(body))
            took.append(ms)
            gaps.append(gap)
            gc.disable()
            ms, gap = watched(lambda body=body: _plan(body))
            gc.enable()
            off_took.append(ms)
            off_gaps.append(gap)
            data = pickle.dumps(_plan(body), pickle.HIGHEST_PROTOCOL)
            start = time.perf_counter()
            pickle.loads(data)
            unpickled.append((time.perf_counter() - start) * 1e3)
        out[f"runs_{size}"] = {
            "batches": count,
            "body_bytes": len(bodies[0]),
            "parse_and_plan": summary(took),
            "gap": summary(gaps),
            "plan_pickle_bytes": len(data),
            "plan_unpickle": summary(unpickled),
            "collector_off": {"parse_and_plan": summary(off_took), "gap": summary(off_gaps)},
        }
    print(json.dumps(out, indent=2))  # noqa: T201  (the script's output)


if __name__ == "__main__":
    main()
