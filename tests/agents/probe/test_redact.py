"""Error text leaves the host without paths, user or host names, addresses; bounded."""

from __future__ import annotations

import getpass
import socket

from agents.probe.redact import MAX_ERROR_CHARS, redact_error


def test_paths_names_and_addresses_are_stripped() -> None:
    user, host = getpass.getuser(), socket.gethostname()
    raw = (
        f'File "/home/{user}/models/llama-70b/run.py", line 3: CUDA error on {host} '
        f"(10.1.2.3:8080, 00:1a:2b:3c:4d:5e) mailto {user}@example.com "
        r"C:\Users\someone\kernel.cu; ratio 3/4"
    )
    text = redact_error(raw, extra_names=["llama-70b"])
    for secret in ("/home", "llama", "10.1.2.3", "00:1a", "example.com", "Users"):
        assert secret not in text, (secret, text)
    for name in (user, host):  # names of one or two letters are left: they are words too
        assert len(name) < 3 or name not in text
    assert "CUDA error" in text and "3/4" in text and "<path>" in text


def test_error_text_is_bounded_and_nul_free() -> None:
    text = redact_error("x\x00" * 10_000)
    assert len(text) <= MAX_ERROR_CHARS and "\x00" not in text
