"""Errors of the client: one root, split by whether the same call may succeed later.

```
ClientError
├── RetryableError          the same call may succeed later
│   ├── ServiceUnreachable  no answer (connection refused, reset, ...)
│   │   └── ServiceTimeout  no answer in time
│   ├── ServiceBusy         5xx, 408, 425, 429 (with the Retry-After the service sent)
│   └── BadAnswer           a 2xx whose body is not what the API documents
├── RejectedError           a 4xx: the same call will fail again
│   └── AuthError           401, 403: the token is missing, wrong or not allowed
└── JobTimeout              a training job did not end within the wait
```
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime

import httpx
from pydantic import ValidationError

from tps.errors import TPSError
from tps.schemas import ErrorBody

# Statuses under 500 that say "not now" rather than "never".
RETRYABLE_STATUS = frozenset({408, 425, 429})
AUTH_STATUS = frozenset({401, 403})
BODY_PREVIEW_CHARS = 500


class ClientError(TPSError):
    """A call to the service failed; `status` and `body` are set when it answered."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: ErrorBody | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after = retry_after


class RetryableError(ClientError):
    """The same call may succeed later."""

    retryable = True


class ServiceUnreachable(RetryableError):
    """The service did not answer: the connection failed or broke."""


class ServiceTimeout(ServiceUnreachable):
    """The service did not answer within the call's timeout."""


class ServiceBusy(RetryableError):
    """The service answered 5xx, 408, 425 or 429; `retry_after` is what it asked to wait."""


class BadAnswer(RetryableError):
    """The service answered 2xx with a body that does not parse as the API documents."""


class RejectedError(ClientError):
    """The service refused the call for good (a 4xx other than throttling)."""


class AuthError(RejectedError):
    """The token is missing, unknown, revoked, or lacks the role the call needs."""


class JobTimeout(ClientError):
    """A training job did not end within the time the caller waited for it."""


def retry_after_seconds(response: httpx.Response, *, now: float) -> float | None:
    """Parse a Retry-After header (seconds or an HTTP date) into seconds from now."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def error_body(response: httpx.Response) -> ErrorBody | None:
    """Return the service's error body, or None when the answer is not one (a proxy's page)."""
    try:
        return ErrorBody.model_validate_json(response.content)
    except ValidationError:
        return None


def error_for(response: httpx.Response, *, now: float) -> ClientError:
    """Return the error that a non-2xx `response` stands for."""
    status = response.status_code
    body = error_body(response)
    detail = body.detail if body is not None else response.text[:BODY_PREVIEW_CHARS]
    message = f"{response.request.method} {response.request.url.path} answered {status}: {detail}"
    kind: type[ClientError]
    if status >= 500 or status in RETRYABLE_STATUS:
        kind = ServiceBusy
    elif status in AUTH_STATUS:
        kind = AuthError
    else:
        kind = RejectedError
    return kind(
        message, status=status, body=body, retry_after=retry_after_seconds(response, now=now)
    )


def transport_error(exc: httpx.TransportError, *, timeout: float | None) -> ServiceUnreachable:
    """Return the error that a failed connection stands for."""
    if isinstance(exc, httpx.TimeoutException):
        within = f" within {timeout * 1000:.0f} ms" if timeout is not None else " in time"
        return ServiceTimeout(f"no answer{within}: {exc!r}")
    return ServiceUnreachable(f"cannot reach the service: {exc!r}")
