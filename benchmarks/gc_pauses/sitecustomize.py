"""Log every process's garbage collections of more than 2 ms, and every full one.

Put this folder first on PYTHONPATH and every Python process started with it (the benchmark,
its load generator, the service's workers) appends `unix_time generation ms collected` lines
to `$TPS_GC_LOG_DIR/gc.PID` (default /tmp):

    PYTHONPATH=benchmarks/gc_pauses:. tps bench priors --json --measurements 1000000
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

_FOLDER = os.environ.get("TPS_GC_LOG_DIR", "/tmp")
_started = [0.0]


def _log(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _started[0]) * 1000.0
    if ms > 2.0 or info["generation"] == 2:
        with open(os.path.join(_FOLDER, f"gc.{os.getpid()}"), "a") as log:
            log.write(f"{time.time():.3f} {info['generation']} {ms:.2f} {info['collected']}\n")


gc.callbacks.append(_log)
