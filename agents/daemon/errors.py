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
    """A batch could not be delivered to the service; `retryable` if sending it again may help."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.retryable = retryable


class PushRejectedError(PushError):
    """The service refused the batch for good (a 4xx other than throttling or auth)."""


class PriorsError(AgentError):
    """Priors could not be fetched in time; the caller falls back to a full probe."""
