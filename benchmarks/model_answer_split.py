"""Where a model answer's time goes: `models.priors.rank` for a new GPU, in process.

Takes the model `tps bench priors` keeps (~/.cache/tps/bench/priors-model-*.json: the Kernel
Tuner model trained without the W7800, so run that bench first) and asks it about the W7800's
two problems on 40 new fingerprints, as the bench's model loop does. Prints one JSON object:
ms per answer of `rank`, and of the parts it calls (each part's time includes what it calls).

    .venv/bin/python benchmarks/model_answer_split.py > benchmarks/results/model_answer_split.json
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightgbm

from models import estimator, priors, ranking
from models.bundle import ModelBundle
from tools.kernel_tuner import find_dataset, load_split
from tools.settings import LocalSettings

FINGERPRINTS = 40
spent: collections.Counter[str] = collections.Counter()


def timed(owner: Any, name: str) -> None:
    """Count the time of every call of `owner.name` under its name."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - started

    setattr(owner, name, wrapper)


def main() -> None:
    kept = sorted((Path.home() / ".cache" / "tps" / "bench").glob("priors-model-*.json"))
    if not kept:
        raise SystemExit("no kept model: run `tps bench priors` first")
    doc = json.loads(kept[-1].read_text())
    bundle = ModelBundle.from_bytes(base64.b64decode(doc["artifact"])).warm_up()
    split = load_split(find_dataset(LocalSettings().kernel_tuner_data), holdout="W7800")
    hardware = split.heldout[0].hardware
    problems = [run.problem for run in split.heldout]
    for owner, name in (
        (estimator.LatencyModel, "predict_frame"),
        (estimator.LatencyModel, "_prediction_features"),
        (estimator.LatencyModel, "anchored_us"),
        (priors, "served_candidates"),
        (priors, "source_rankings"),
        (ranking, "source_rankings"),
        (lightgbm.Booster, "predict"),  # every booster's C code and its Python wrapper
    ):
        if hasattr(owner, name):
            timed(owner, name)

    def new_gpu(job: int) -> None:
        clock = (hardware.clock_mhz or 1000.0) + (job + 1) * 1e-3  # a new fingerprint
        spec = hardware.model_copy(update={"clock_mhz": clock})
        for problem in problems:
            priors.rank(bundle, spec, problem, limit=8)

    for job in range(5):  # warm-up
        new_gpu(job)
    spent.clear()
    started = time.perf_counter()
    for job in range(10, 10 + FINGERPRINTS):
        new_gpu(job)
    answers = FINGERPRINTS * len(problems)
    out = {
        "rank_ms_per_answer": round((time.perf_counter() - started) / answers * 1e3, 3),
        "parts_ms_per_answer": {k: round(v / answers * 1e3, 3) for k, v in spent.most_common()},
        "answers": answers,
        "model_file": kept[-1].name,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(out, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
