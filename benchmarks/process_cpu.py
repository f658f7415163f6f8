"""Where this machine's CPU goes while a benchmark runs: every process's CPU, by role, each second.

Run it beside `tps bench priors` (it stops by itself after SECONDS):

    .venv/bin/python benchmarks/process_cpu.py 130 > cpu.jsonl &
    tps bench priors --json --measurements 1000000 --ingest-rate 20000 > priors.json

Prints one JSON object a second: `t` (seconds since start) and the cores each role used in
that second. The roles: `postgres` (the server's processes), `bench` (the benchmark's own
process: the load generator), `bench_child` (its children: the ingest pusher), `niced`
(processes at niceness 10 or more: the service's ingest parse processes), `service` (the
service's workers and their other children), and `other`.
"""

from __future__ import annotations

import json
import os
import sys
import time

import psutil


def role(process: psutil.Process) -> str:
    """Return what `process` is in a `tps bench` run."""
    name = process.name()
    if name.startswith("postgres") or name == "postmaster":
        return "postgres"
    if process.nice() >= 10:
        return "niced"
    command = " ".join(process.cmdline())
    if " bench " in f" {command} ":
        return "bench"
    try:
        parent = " ".join(psutil.Process(process.ppid()).cmdline())
    except psutil.Error:
        parent = ""
    if "spawn_main" in command or "multiprocessing" in command:
        return "bench_child" if " bench " in f" {parent} " else "service"
    if "uvicorn" in command or "serve" in command:
        return "service"
    return "other"


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    me = os.getpid()
    seen: dict[int, float] = {}
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        cores: dict[str, float] = {}
        for process in psutil.process_iter():
            if process.pid == me:
                continue
            try:
                times = process.cpu_times()
                used = times.user + times.system
                spent = used - seen.get(process.pid, used)
                seen[process.pid] = used
                if spent > 0:
                    key = role(process)
                    cores[key] = cores.get(key, 0.0) + spent
            except psutil.Error:
                continue
        line = {"t": round(now - start, 1), **{k: round(v, 3) for k, v in sorted(cores.items())}}
        print(json.dumps(line), flush=True)  # noqa: T201  (the script's output)
        time.sleep(1.0)


if __name__ == "__main__":
    main()
