"""The one typed client of the TPS service's API v1 (httpx).

`ServiceClient` pushes probe runs (gzipped, in batches within the service's limits), reads
priors one by one or in batches, queues and follows training jobs, and manages models and
tokens. Every failure is a `ClientError`: a `RetryableError` (no answer, 5xx, 408, 425, 429
with its Retry-After) or a `RejectedError` (any other 4xx), carrying the service's error body.
"""

from client.errors import (
    AuthError,
    BadAnswer,
    ClientError,
    JobTimeout,
    RejectedError,
    RetryableError,
    ServiceBusy,
    ServiceTimeout,
    ServiceUnreachable,
)
from client.service import ServiceClient

__all__ = [
    "AuthError",
    "BadAnswer",
    "ClientError",
    "JobTimeout",
    "RejectedError",
    "RetryableError",
    "ServiceBusy",
    "ServiceClient",
    "ServiceTimeout",
    "ServiceUnreachable",
]
