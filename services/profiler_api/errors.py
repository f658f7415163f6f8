"""One root error for the API, subclasses that carry their HTTP status, one handler."""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from tps.errors import TPSError


class APIError(TPSError):
    """An error the API reports to its client."""

    status_code = 500

    def __init__(self, message: str, *, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []

    def headers(self) -> dict[str, str]:
        return {}


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


class PayloadTooLarge(APIError):
    status_code = 413


class UnsupportedMediaType(APIError):
    status_code = 415


class Unprocessable(APIError):
    status_code = 422


class ServiceUnavailable(APIError):
    status_code = 503


def _location(loc: tuple[int | str, ...] | list[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def from_validation_errors(
    errors: list[Any], *, skip_prefix: int = 0, limit: int = 20
) -> Unprocessable:
    """Turn pydantic's errors into one 422 whose message names the first bad field."""
    rendered = [
        {"loc": _location(e["loc"][skip_prefix:]), "msg": e["msg"], "type": e["type"]}
        for e in errors[:limit]
    ]
    first = rendered[0] if rendered else {"loc": "", "msg": "invalid input"}
    where = f"{first['loc']}: " if first["loc"] else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Unprocessable(f"{where}{first['msg']}{more}", errors=rendered)


def _render(error: APIError) -> JSONResponse:
    body: dict[str, Any] = {"detail": error.message}
    if error.errors:
        body["errors"] = error.errors
    return JSONResponse(body, status_code=error.status_code, headers=error.headers())


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return _render(exc)


async def _request_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError | ValidationError)
    # Drop the leading "body"/"query" so the message names the field as the client spells it.
    return _render(from_validation_errors(list(exc.errors()), skip_prefix=1))


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    error = APIError(str(exc.detail))
    error.status_code = exc.status_code
    return _render(error)


async def _database_busy(_: Request, exc: Exception) -> JSONResponse:
    # Deadlocks, serialization failures and lost connections: the client may retry.
    return _render(ServiceUnavailable(f"database unavailable, retry: {type(exc).__name__}"))


async def _value_out_of_range(_: Request, exc: Exception) -> JSONResponse:
    # The schema bounds most fields; a few (counts) are bounded only by their column.
    return _render(Unprocessable(f"a value does not fit its column: {exc}".strip()))


def install_error_handlers(app: FastAPI) -> None:
    """Render every APIError, request validation error and HTTP error the same way."""
    app.add_exception_handler(psycopg.OperationalError, _database_busy)
    app.add_exception_handler(psycopg.DataError, _value_out_of_range)
    app.add_exception_handler(sqlalchemy.exc.OperationalError, _database_busy)
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
