"""The priors benchmark's ingest pusher alone against the service: the rate it reaches.

Starts the service (2 workers) on a scratch database next to DATABASE_URL, warms it with 2 s
of pushes, then pushes at RATE measurements/s for 10 s through `IngestProcess` (the pusher
`tps bench priors --ingest-rate` runs beside its loops). Prints one JSON object.

    .venv/bin/python benchmarks/ingest_pacer_alone.py [RATE] [DATABASE_URL]
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

from services.profiler_api.auth.service import Role
from tools.bench.priors import IngestProcess
from tools.local_service import issue_tokens, migrated_scratch_database, running_service


def main() -> None:
    rate = int(sys.argv[1]) if len(sys.argv) > 1 else 40_000
    url = sys.argv[2] if len(sys.argv) > 2 else "postgresql+psycopg://postgres@127.0.0.1/test"
    with migrated_scratch_database(url, prefix="tps_pacer") as scratch:
        token = issue_tokens(scratch, org="pacer", roles=[Role.AGENT]).tokens[Role.AGENT]
        env = {"TPS_RATE_LIMIT_PER_S": "1000000"}
        with running_service(scratch, workers=2, env=env) as service:
            for per_s, duration_s in ((5_000, 2.0), (rate, 10.0)):  # warm-up, then timed
                pushing = IngestProcess(service.base_url, token, per_s=per_s, duration_s=duration_s)
                pushing.start()
                pushing.join()
    out = {
        "asked_per_s": rate,
        "reached_per_s": round(pushing.achieved_per_s()),
        "measurements": pushing.sent_measurements,
        "elapsed_s": round(pushing.elapsed_s, 2),
        "push_errors": len(pushing.errors),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(out))  # noqa: T201


if __name__ == "__main__":
    main()
