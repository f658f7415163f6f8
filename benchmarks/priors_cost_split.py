"""Where a priors request's time goes: the same service, one URL each, `hey -z 5s -c 50`.

- `healthz`: the floor of a request through uvicorn and FastAPI.
- `priors_no_token_401`: GET /v1/priors without a token: the request's dependencies (session,
  bearer parsing, the thread-pool hops) up to the token check, which fails before any query.
- `priors`: the same URL with a token, answered from the replica's cache: the rest is the
  token lookup in the database.
- `stats`: GET /v1/stats (token lookup and one query of the fleet counters).
- `priors_uncached`: a service with TPS_PRIORS_CACHE_S=0: every request reads the database.

Run (needs `hey` on PATH):
    PYTHONPATH=. .venv/bin/python benchmarks/priors_cost_split.py [DATABASE_URL] \
        > benchmarks/results/priors_cost_split.json
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from client import ServiceClient
from services.profiler_api import migrate
from services.profiler_api.auth.service import Role, create_token
from services.profiler_api.db import make_engine, scratch_database
from services.profiler_api.settings import Settings
from tests.factories import probe_run
from tools.bench.loadgen import hey_closed_loop
from tools.local_service import running_service

SERVER = sys.argv[1] if len(sys.argv) > 1 else "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def main() -> None:
    out: dict[str, object] = {}
    load_before = os.getloadavg()[0]
    with scratch_database(SERVER, prefix="tps_split") as url:
        migrate.upgrade(url)
        engine = make_engine(url, Settings())
        with Session(engine) as session, session.begin():
            token = create_token(session, org="split", role=Role.AGENT)
        engine.dispose()
        run = probe_run()
        auth = {"Authorization": f"Bearer {token}"}
        path = (
            f"/v1/priors?hardware_id={run.hardware.fingerprint()}&problem={run.problem.key_hash()}"
        )
        for cache_s in ("5", "0"):
            env = {"TPS_PRIORS_CACHE_S": cache_s, "TPS_TRAINING_WORKER": "false"}
            with running_service(url, workers=2, env=env) as service:
                with ServiceClient.connect(service.base_url, token=token) as tps:
                    tps.push([run])
                cases = (
                    ("healthz", "/healthz", {}),
                    ("priors_no_token_401", path, {}),
                    ("priors", path, auth),
                    ("stats", "/v1/stats", auth),
                )
                for name, target, headers in cases:
                    if cache_s == "0" and name != "priors":
                        continue
                    result = hey_closed_loop(
                        service.base_url + target, headers=headers, clients=50, duration_s=5.0
                    )
                    out[name if cache_s == "5" else f"{name}_uncached"] = result.summary()
    out["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    out["cpus"] = os.cpu_count()
    out["date"] = datetime.now(UTC).isoformat(timespec="seconds")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
