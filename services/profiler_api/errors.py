"""One root error for the API, subclasses that carry their HTTP status, one handler."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from tps.bounds import NO_NUL, PREVIEW_CHARS
from tps.errors import TPSError

MAX_MESSAGE_CHARS = 300
MAX_LOC_PART_CHARS = PREVIEW_CHARS


class APIError(TPSError):
    """An error the API reports to its client."""

    status_code = 500

    def __init__(self, message: str, *, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []

    def headers(self) -> dict[str, str]:
        return {}


class _RetryLater(APIError):
    """An error that a retry after `retry_after_s` seconds may not meet again."""

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class BadRequest(APIError):
    status_code = 400


class Unauthorized(APIError):
    status_code = 401

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(APIError):
    status_code = 403


class NotFound(APIError):
    status_code = 404


class Conflict(APIError):
    status_code = 409


class Gone(APIError):
    status_code = 410


class RequestTimeout(APIError):
    status_code = 408

    def headers(self) -> dict[str, str]:
        return {"Connection": "close"}


class PayloadTooLarge(APIError):
    status_code = 413


class UnsupportedMediaType(APIError):
    status_code = 415


class Unprocessable(APIError):
    status_code = 422


class TooManyRequests(_RetryLater):
    status_code = 429


class ServiceUnavailable(_RetryLater):
    status_code = 503


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _location(loc: tuple[int | str, ...] | list[int | str]) -> str:
    # A dict key is part of the location; a client may have sent a megabyte as a key.
    return ".".join(_short(str(part), MAX_LOC_PART_CHARS) for part in loc)


def _message(error: Any) -> str:
    if (
        error["type"] == "string_pattern_mismatch"
        and (error.get("ctx") or {}).get("pattern") == NO_NUL
    ):
        return "must not contain a NUL byte"
    return _short(str(error["msg"]), MAX_MESSAGE_CHARS)


def from_validation_errors(
    errors: list[Any], *, skip_prefix: int = 0, limit: int = 20
) -> Unprocessable:
    """Turn pydantic's errors into one 422 whose message names the first bad field."""
    rendered = [
        {"loc": _location(e["loc"][skip_prefix:]), "msg": _message(e), "type": e["type"]}
        for e in errors[:limit]
    ]
    first = rendered[0] if rendered else {"loc": "", "msg": "invalid input"}
    where = f"{first['loc']}: " if first["loc"] else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Unprocessable(f"{where}{first['msg']}{more}", errors=rendered)


def _render(error: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"detail": _short(error.message, MAX_MESSAGE_CHARS)}
    if error.errors:
        body["errors"] = error.errors
    return JSONResponse(
        body, status_code=error.status_code, headers={**error.headers(), **(headers or {})}
    )


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return _render(exc)


async def _request_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError | ValidationError)
    # Drop the leading "body"/"query" so the message names the field as the client spells it.
    return _render(from_validation_errors(list(exc.errors()), skip_prefix=1))


def _allowed_methods(request: Request) -> str:
    # Starlette's 405 names the methods of the first route of the path; a path served by
    # two routes (GET and POST /v1/priors) takes them all, as the OpenAPI document lists.
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods.update(method.upper() for method in operations)
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    error = APIError(str(exc.detail))
    error.status_code = exc.status_code
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return _render(error, headers=headers)


def database_error(exc: BaseException) -> APIError:
    """Classify a database error: what a retry can fix is a 503, a bad value is a 422."""
    orig = exc.orig if isinstance(exc, sqlalchemy.exc.DBAPIError) else exc
    if isinstance(exc, sqlalchemy.exc.TimeoutError):
        return ServiceUnavailable(
            "database busy: no connection free in time, retry", retry_after_s=2
        )
    # The schema bounds every field, so these mean a bound was missed: never retry them.
    if isinstance(orig, psycopg.errors.ProgramLimitExceeded | psycopg.DataError):
        return Unprocessable(f"a value does not fit the database ({type(orig).__name__})")
    # Deadlocks, serialization failures and lost connections: the client may retry.
    return ServiceUnavailable(f"database unavailable, retry: {type(orig).__name__}")


async def _database_error(_: Request, exc: Exception) -> JSONResponse:
    return _render(database_error(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Render every APIError, request validation error and HTTP error the same way."""
    for error_type in (
        psycopg.OperationalError,
        psycopg.DataError,
        sqlalchemy.exc.OperationalError,
        sqlalchemy.exc.DataError,
        sqlalchemy.exc.TimeoutError,
    ):
        app.add_exception_handler(error_type, _database_error)
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
