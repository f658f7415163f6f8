"""/metrics on a service of two worker processes sums both workers' numbers."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from services.profiler_api import migrate
from services.profiler_api.db import scratch_database
from tools.local_service import running_service

REQUESTS = 60


def _healthz_count(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "tps_http_request_duration_seconds_count"
                and sample.labels.get("route") == "/healthz"
            ):
                return sample.value
    return 0.0


def test_metrics_of_two_workers_are_summed(postgres_server_url: str) -> None:
    with scratch_database(postgres_server_url, prefix="tps_metrics") as url:
        migrate.upgrade(url)
        with running_service(url, workers=2, env={"TPS_TRAINING_WORKER": "false"}) as service:
            # A new connection per request, so that both workers take some of them.
            close = {"Connection": "close"}
            for _ in range(REQUESTS):
                assert httpx.get(f"{service.base_url}/healthz", headers=close).status_code == 200
            counts = {
                _healthz_count(httpx.get(f"{service.base_url}/metrics", headers=close).text)
                for _ in range(6)
            }
    assert counts == {REQUESTS}
