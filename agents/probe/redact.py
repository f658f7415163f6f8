"""Strip what identifies a host or a person from error text before it leaves the host.

Exception messages carry file paths (and with them user names), host names, addresses
and e-mail addresses. What is left is the error's kind and its words, bounded.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Iterable
from functools import cache

MAX_ERROR_CHARS = 500

_PATTERNS = (
    (re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+"), "<email>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"), "<address>"),
    (re.compile(r"\b([0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}\b"), "<address>"),
    (re.compile(r"\b([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}\b"), "<address>"),
    # A path: a Windows drive or a run of /segments, possibly after ~ or ./ .
    (re.compile(r"[A-Za-z]:\\[^\s'\"]*"), "<path>"),
    (re.compile(r"(?<!\w)(~|\.{1,2})?(/[^\s/'\":,()\[\]]+)+/?"), "<path>"),
)


@cache
def _local_names() -> tuple[str, ...]:
    names: set[str] = set()
    for read in (getpass.getuser, socket.gethostname, socket.getfqdn):
        try:
            names.add(read())
        except Exception:  # noqa: BLE001 - no user or host name: nothing to strip
            continue
    names.update(os.environ.get(var, "") for var in ("USER", "LOGNAME", "USERNAME", "HOSTNAME"))
    home = os.path.expanduser("~")
    names.add(os.path.basename(home.rstrip("/")))
    return tuple(sorted((n for n in names if len(n) >= 3), key=len, reverse=True))


def redact_error(
    text: str, *, extra_names: Iterable[str] = (), limit: int = MAX_ERROR_CHARS
) -> str:
    """Return `text` without paths, user and host names, addresses; at most `limit` chars."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    for name in (*extra_names, *_local_names()):
        if name:
            text = re.sub(re.escape(name), "<name>", text, flags=re.IGNORECASE)
    text = text.replace("\x00", "")
    return text if len(text) <= limit else text[: limit - 3] + "..."
