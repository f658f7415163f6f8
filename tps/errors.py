"""The root error of the TPS core."""


class TPSError(Exception):
    """Base class of every error raised on purpose by TPS."""
