from __future__ import annotations

from typing import Any

from services.profiler_api.app import create_app
from services.profiler_api.examples import PROBE_RUNS_REQUEST
from services.profiler_api.settings import Settings
from tps.problem import ProblemKey
from tps.schemas import IngestResult, Prior, PriorRequest, ProbeRun, ProbeRunBatch


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


def _examples(operation: dict[str, Any], where: str) -> dict[str, Any]:
    if where == "request":
        content = operation["requestBody"]["content"]["application/json"]
    else:
        content = operation["responses"]["200"]["content"]["application/json"]
    return {name: example["value"] for name, example in content["examples"].items()}


def test_every_example_is_valid_for_its_schema() -> None:
    spec = create_app(Settings()).openapi()
    ingest = spec["paths"]["/v1/probe-runs"]["post"]
    post_priors = spec["paths"]["/v1/priors"]["post"]
    checks = [
        (ingest, "request", ProbeRunBatch),
        (ingest, "response", IngestResult),
        (post_priors, "request", PriorRequest),
        (post_priors, "response", Prior),
        (spec["paths"]["/v1/priors"]["get"], "response", Prior),
    ]
    for operation, where, model in checks:
        examples = _examples(operation, where)
        assert examples, (operation["summary"], where)
        for value in examples.values():
            model.model_validate(value)
    # One request example per op, each naming the op's dims in its summary.
    requests = post_priors["requestBody"]["content"]["application/json"]["examples"]
    assert set(requests) == {"gemm", "conv2d", "layernorm"}
    for op, example in requests.items():
        problem = ProblemKey.model_validate(example["value"]["problem"])
        assert problem.op == op
        for dim in problem.dims:
            assert dim in example["summary"], (op, dim)
    dims = spec["components"]["schemas"]["ProblemKey"]["properties"]["dims"]["description"]
    assert "gemm: m, n, k" in dims and "conv2d: n, c, h, w, k, r, s" in dims
    assert "layernorm: rows, cols" in dims


def test_the_ingest_answer_names_the_ids_priors_are_asked_by(live_service) -> None:
    body = PROBE_RUNS_REQUEST["gemm"]["value"]
    with live_service.client() as client:
        answer = client.post("/v1/probe-runs", json=body)
        assert answer.status_code == 200, answer.text
        (stored,) = answer.json()["runs"]
        run = ProbeRun.model_validate(body["runs"][0])
        assert stored["run_id"] == str(run.run_id)
        assert stored["hardware_id"] == run.hardware.fingerprint()
        assert stored["problem_hash"] == run.problem.key_hash()
        prior = client.get(
            "/v1/priors",
            params={"hardware_id": stored["hardware_id"], "problem": stored["problem_hash"]},
        )
        assert prior.status_code == 200, prior.text
        assert prior.json()["source"] == "observed"
        assert {c["candidate_id"] for c in prior.json()["candidates"]} == {
            m.candidate.id for m in run.measurements
        }
        again = client.post("/v1/probe-runs", json=body).json()  # a duplicate is named too
        assert again["duplicates"] == 1 and again["runs"] == [stored]
