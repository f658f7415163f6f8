"""How long a new GPU's first question takes through the whole service, in process.

Sets up what `tps bench priors` asks the model loop about (the Kernel Tuner data without the
W7800, the model that bench keeps in ~/.cache/tps/bench: run it first), builds the app in this
process and asks 40 new fingerprints' questions one after another. Optionally a thread keeps
the interpreter busy part of the time (`--busy 0.5`), as a worker's event loop does under
load, and the interpreter's switch interval is set (`--switch-interval`). Prints one JSON
object: ms per request and per computed answer (PriorService.answer), median and p90.

    .venv/bin/python benchmarks/priors_first_answer.py --busy 0.5 > result.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from starlette.testclient import TestClient

from client import ServiceClient
from services.profiler_api.app import create_app
from services.profiler_api.auth.service import Role
from services.profiler_api.settings import Settings
from tools.bench.priors import PriorsBenchConfig, _model_calls, _model_file, _restore_model
from tools.kernel_tuner import find_dataset, load_split, push_runs
from tools.local_service import issue_tokens, migrated_scratch_database, running_service
from tools.settings import LocalSettings

QUESTIONS = 40


def _busy(share: float, stop: threading.Event) -> None:
    """Hold the interpreter `share` of the time, in slices of pure Python work."""
    while share > 0 and not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < 0.0005 * share / (1 - share):
            sum(range(50))
        time.sleep(0.0005)


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[int(0.9 * len(ordered))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1/test")
    parser.add_argument("--busy", type=float, default=0.0, help="share of the time, 0 to 0.9")
    parser.add_argument("--switch-interval", type=float, default=None, help="seconds")
    parser.add_argument(
        "--answer-processes", type=int, default=0, help="TPS_MODEL_ANSWER_PROCESSES (0: threads)"
    )
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    split = load_split(find_dataset(LocalSettings().kernel_tuner_data), holdout="W7800")
    config = PriorsBenchConfig(hosts_per_job=1, rate=QUESTIONS + 1, open_s=1.0)
    with migrated_scratch_database(args.database_url, prefix="tps_first") as url:
        token = issue_tokens(url, org="bench", roles=[Role.AGENT]).tokens[Role.AGENT]
        with running_service(url) as service:
            with ServiceClient.connect(service.base_url, token=token, timeout_s=120.0) as agent:
                push_runs(agent, split.train)
        _restore_model(url, _model_file(PriorsBenchConfig()))
        settings = Settings(
            database_url=url,
            training_worker=False,
            rate_limit_per_s=1e6,
            model_answer_processes=args.answer_processes,
        )
        app = create_app(settings)
        answers: list[float] = []
        requests: list[float] = []
        with TestClient(app) as client:
            while not app.state.token_cache.live:
                time.sleep(0.02)
            priors = app.state.prior_service
            report = priors.on_answer

            def timed(source: str, seconds: float) -> None:
                answers.append(1000 * seconds)
                if report is not None:
                    report(source, seconds)

            priors.on_answer = timed
            headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
            calls = _model_calls(split, config)
            client.post("/v1/priors", content=calls[0].body, headers=headers)  # loads the model
            pool = app.state.answer_pool
            deadline = time.monotonic() + 120.0
            while pool.ready() < pool.processes and time.monotonic() < deadline:
                time.sleep(0.05)  # the answering processes load their copy of the model
            answers.clear()
            stop = threading.Event()
            threading.Thread(target=_busy, args=(args.busy, stop), daemon=True).start()
            for call in calls[1 : QUESTIONS + 1]:
                started = time.perf_counter()
                response = client.post("/v1/priors", content=call.body, headers=headers)
                requests.append(1000 * (time.perf_counter() - started))
                response.raise_for_status()
            stop.set()
    out: dict[str, Any] = {
        "questions": len(requests),
        "busy_share": args.busy,
        "switch_interval_s": sys.getswitchinterval(),
        "answer_processes": args.answer_processes,
        "request": _summary(requests),
        "answer": _summary(answers),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(out, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
