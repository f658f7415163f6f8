from __future__ import annotations

from typing import Any

from services.profiler_api.app import create_app
from services.profiler_api.settings import Settings


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(value) for value in node))
    return set()


def test_openapi_documents_every_route_and_resolves_every_ref() -> None:
    spec = create_app(Settings()).openapi()
    assert {"/v1/probe-runs", "/v1/priors", "/v1/hardware", "/v1/stats", "/v1/tokens"} <= set(
        spec["paths"]
    )
    schemas = spec["components"]["schemas"]
    for ref in _refs(spec):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in schemas, ref
    body = spec["paths"]["/v1/probe-runs"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["properties"]["runs"]["maxItems"] == 1000
