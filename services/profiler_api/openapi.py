"""The OpenAPI document, with one error model documented for every error status."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from tps.schemas import ErrorBody

ERROR_STATUSES: dict[str, str] = {
    "400": "a malformed request (bad gzip, a body cut short)",
    "401": "no bearer token, or an unknown or revoked one",
    "403": "the token's role may not do this",
    "404": "nothing by that id visible to the caller's organisation",
    "405": "the path does not take this method (see the Allow header)",
    "408": "the body did not arrive in time",
    "409": "the resource is in a state that forbids this",
    "413": "the body or batch is larger than the limit",
    "415": "an unsupported Content-Encoding",
    "422": "a field is invalid; `errors` lists each bad field",
    "429": "too many requests or queued jobs; retry after the Retry-After seconds",
    "431": "the request line or headers are too large",
    "503": "the database is busy or unreachable; retry after the Retry-After seconds",
}
_REF = {"$ref": "#/components/schemas/ErrorBody"}
_HEADERS = {
    "405": {"Allow": "the methods the path takes"},
    "429": {"Retry-After": "seconds to wait before retrying"},
    "503": {"Retry-After": "seconds to wait before retrying"},
}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """Return the app's OpenAPI document with every error status answering an ErrorBody."""
    if app.openapi_schema:
        return app.openapi_schema
    document = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        routes=app.routes,
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas.update(
        ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")["$defs"]
    )
    body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    body.pop("$defs", None)
    schemas["ErrorBody"] = body
    for path in document["paths"].values():
        for operation in path.values():
            responses = operation.setdefault("responses", {})
            for status, description in ERROR_STATUSES.items():
                response: dict[str, Any] = {
                    "description": description,
                    "content": {"application/json": {"schema": _REF}},
                }
                if status in _HEADERS:
                    response["headers"] = {
                        name: {"description": text, "schema": {"type": "string"}}
                        for name, text in _HEADERS[status].items()
                    }
                responses[status] = response
    app.openapi_schema = document
    return document
