"""The auth matrix: who may call what."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from cli import app
from tests.conftest import LiveService
from tests.factories import batch_body, hardware_spec, probe_run, unique_problem

AGENT_ENDPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/probe-runs", {"content": batch_body([probe_run()])}),
    (
        "POST",
        "/v1/priors",
        {
            "json": {
                "hardware": hardware_spec().model_dump(mode="json"),
                "problem": unique_problem().model_dump(mode="json"),
            }
        },
    ),
    ("GET", "/v1/hardware", {}),
    ("GET", "/v1/stats", {}),
]
ADMIN_ENDPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/tokens", {"json": {"org": "acme", "role": "agent"}}),
]
ALL = AGENT_ENDPOINTS + ADMIN_ENDPOINTS


def _token(service: LiveService, who: str) -> str:
    return {
        "nobody": "",
        "forged": "tps_" + "x" * 43,
        "agent": service.agent_token,
        "admin": service.admin_token,
    }[who]


EXPECTED = {"nobody": 401, "forged": 401}


@pytest.mark.parametrize("method, path, kwargs", ALL, ids=[f"{m} {p}" for m, p, _ in ALL])
@pytest.mark.parametrize("who", ["nobody", "forged", "agent", "admin"])
def test_auth_matrix(
    live_service: LiveService, who: str, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    admin_only = (method, path, kwargs) in ADMIN_ENDPOINTS
    expected = EXPECTED.get(who) or (403 if admin_only and who == "agent" else None)
    with live_service.client(_token(live_service, who)) as client:
        response = client.request(method, path, **kwargs)
    if expected is None:
        assert response.status_code in (200, 201), response.text
    else:
        assert response.status_code == expected, response.text
        assert response.json()["detail"]
    if expected == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def test_ops_endpoints_need_no_token(live_service: LiveService) -> None:
    with live_service.client(token="") as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json()["status"] == "ready"
        assert client.get("/metrics").status_code == 200
        assert client.get("/docs").status_code == 200


def test_an_issued_token_works(live_service: LiveService) -> None:
    with live_service.client(live_service.admin_token) as client:
        issued = client.post("/v1/tokens", json={"role": "agent"}).json()
    assert issued["org"] == "acme"
    with live_service.client(issued["token"]) as client:
        assert client.get("/v1/stats").status_code == 200


def test_cli_token_create_prints_a_working_token(live_service: LiveService) -> None:
    result = CliRunner().invoke(
        app,
        ["token", "create", "--org", "umbrella", "--role", "agent"]
        + ["--database-url", live_service.database_url],
    )
    assert result.exit_code == 0, result.output
    token = result.output.strip().splitlines()[-1]
    assert token.startswith("tps_")
    with live_service.client(token) as client:
        assert client.get("/v1/stats").status_code == 200
