"""The root error of the agent and its meaningful subclasses."""

from tps.errors import TPSError


class AgentError(TPSError):
    """Base class of every error the agent raises on purpose."""


class OpConfigError(AgentError):
    """The op config file cannot be read or says something impossible."""


class UnsupportedProblemError(AgentError):
    """No candidate on this device can run the problem."""


class CandidateError(AgentError):
    """A candidate could not be prepared or run."""


class CacheError(AgentError):
    """The cache file or a TunableOp CSV cannot be read."""
