"""The runtime's native routing of calls the default keeps (`fastpath.cpp`), built on demand.

torch builds it once per torch version and source (`torch.utils.cpp_extension.load`, into
`TORCH_EXTENSIONS_DIR`, by default `~/.cache/torch_extensions`), with the host's C++
compiler and ninja (the agent's extra installs ninja). Where it cannot be built, or with
`TPS_RUNTIME_NATIVE=0`, torch's functions route through Python alone: the same answers,
at about a microsecond more a call that keeps the default. It is said once, with the reason.
"""

from __future__ import annotations

import logging
import os
import threading
import types
from pathlib import Path

log = logging.getLogger("agents.runtime")

SOURCE = Path(__file__).with_name("fastpath.cpp")
NAME = "tps_runtime_fastpath"
ENV = "TPS_RUNTIME_NATIVE"

_lock = threading.Lock()
_loaded: list[types.ModuleType | None] = []
# Why the module could not be had, once `load` has tried.
failure: list[str] = []


def enabled() -> bool:
    """Whether the native path may be used (`TPS_RUNTIME_NATIVE`, default on)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def load() -> types.ModuleType | None:
    """Return the native module, building it the first time; None where it cannot be had."""
    with _lock:
        if _loaded:
            return _loaded[0]
        if enabled():
            module = _build()
        else:
            module = None
            failure.append(f"{ENV} turns it off")
        _loaded.append(module)
        return module


def _build() -> types.ModuleType | None:
    try:
        from torch.utils.cpp_extension import load as build

        module = build(
            name=NAME,
            sources=[str(SOURCE)],
            extra_cflags=["-O2"],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, no headers: Python routes instead
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        failure.append(reason)
        log.warning(
            "the runtime's native routing could not be built (%s); torch's functions route "
            "through Python, about 1 µs more a call that keeps the default (set %s=0 to "
            "skip the build)",
            reason,
            ENV,
        )
        return None
    assert isinstance(module, types.ModuleType)
    return module
