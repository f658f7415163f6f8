"""ROCm's native path: PyTorch TunableOp runs the cache's winners from a results file.

On ROCm, TunableOp names hipBLASLt and rocBLAS solutions itself, so TPS exports the
winners it can name and points PyTorch at the file with tuning off: PyTorch then
dispatches them in its own GEMM calls, eager, compiled and captured alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from agents.cache import ProbeCache


def tunableop_environment(results: str | Path) -> dict[str, str]:
    """Return the PYTORCH_TUNABLEOP_* settings that make PyTorch read `results` and never tune."""
    return {
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "0",
        "PYTORCH_TUNABLEOP_FILENAME": str(results),
    }


def export_for_tunableop(
    cache: ProbeCache, results: str | Path, *, validators: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Write the cache's nameable winners to `results`; return the settings that load it.

    `validators` should be what `torch.cuda.tunable.get_validators()` says on the host
    that will read the file (PyTorch refuses a file whose validators differ).
    """
    cache.export_tunableop_csv(results, validators=dict(validators or {}))
    return tunableop_environment(results)


def apply_tunableop(cache: ProbeCache, results: str | Path) -> int:
    """Export the winners and switch this process's TunableOp to them; return rows written."""
    import torch

    tunable = torch.cuda.tunable
    validators: dict[str, str] = {}
    if tunable.is_enabled():
        # PyTorch documents a tuple of (key, value) pairs.
        validators = {str(k): str(v) for k, v in tunable.get_validators()}  # type: ignore[str-unpack]
    rows = cache.export_tunableop_csv(results, validators=validators)
    os.environ.update(tunableop_environment(results))
    tunable.enable(True)
    tunable.tuning_enable(False)
    tunable.set_filename(str(results))
    tunable.read_file(str(results))
    return rows
