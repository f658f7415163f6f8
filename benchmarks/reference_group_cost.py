"""What a (device, problem) group's reference columns cost in training, per group.

Builds the generated fleet of `tps bench train` (1M rows by default), its reference, and times
`Reference.feature_columns` (with `closest_problem`) and `Reference.anchor_columns` over the
first 3000 groups, each group left out of its own reference, as a fit does. Prints one JSON
object (µs per group).

    .venv/bin/python benchmarks/reference_group_cost.py [--rows N] [--groups N]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import UTC, datetime

from models.dataset import GROUP_COLUMNS
from models.reference import Reference
from tools.bench.train import fleet_tuning_data


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--groups", type=int, default=3000)
    args = p.parse_args()
    data = fleet_tuning_data(args.rows, seed=0).for_op("gemm")
    reference = Reference.from_data(data)
    reference.warm_up()
    ids = data.frame["candidate_id"].to_numpy()
    groups = list(data.frame.groupby(GROUP_COLUMNS, sort=False).indices.items())[: args.groups]
    start = time.perf_counter()
    for (hw_key, problem_hash), rows in groups:
        closest = reference.closest_problem(data.problems[problem_hash], exclude=hw_key)
        assert closest is not None
        reference.feature_columns(data.hardware[hw_key], closest, ids[rows], exclude=hw_key)
    features = time.perf_counter() - start
    start = time.perf_counter()
    for (hw_key, problem_hash), rows in groups:
        reference.anchor_columns(
            data.hardware[hw_key], data.problems[problem_hash], ids[rows], exclude=hw_key
        )
    anchors = time.perf_counter() - start
    result = {
        "rows": args.rows,
        "groups": len(groups),
        "feature_columns_us_per_group": round(features / len(groups) * 1e6, 1),
        "anchor_columns_us_per_group": round(anchors / len(groups) * 1e6, 1),
        "machine": platform.machine(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(result, indent=1))  # noqa: T201  (the script's output)


if __name__ == "__main__":
    main()
