"""Errors of the agent daemon: subclasses of the agent's one root, AgentError."""

from __future__ import annotations

from agents.errors import AgentError


class ConfigError(AgentError):
    """The agent's settings are missing something or contradict themselves."""


class SourceError(AgentError):
    """A workload file cannot be read as any known format."""


class SpoolError(AgentError):
    """The local spool cannot be opened or written."""


class SpoolCorruptError(SpoolError):
    """The spool file is damaged; what could be read was recovered."""


class PushError(AgentError):
    """A batch could not be delivered to the service."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Return whether sending the same batch again may succeed."""
        return self.status is None or self.status in RETRYABLE_STATUS or self.status >= 500


class PushRejectedError(PushError):
    """The service refused the batch for good (a 4xx other than throttling)."""

    @property
    def retryable(self) -> bool:
        return False


class PriorsError(AgentError):
    """Priors could not be fetched in time; the caller falls back to a full probe."""


RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
