"""Give the H200 GEMM dataset's SM-limited runs the bandwidth their limit measured.

The dataset's runs were pushed before the agent measured `limited_bandwidth_gbs` under a
green context. This writes the figures of `benchmarks/results/unit_bandwidth_h200.json`
(`benchmarks/unit_bandwidth.py` on the same GPU model, the agent's own measurement) into the
`hardware` of every run whose `unit_limit` it measured, and leaves every other field as it
was. Running it again changes nothing.

    .venv/bin/python benchmarks/backfill_limited_bandwidth.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data" / "gemm_h200_probe_runs.jsonl.gz"
MEASURED = REPO / "benchmarks" / "results" / "unit_bandwidth_h200.json"


def main() -> None:
    measured = json.loads(MEASURED.read_text())["configurations"]
    by_limit = {
        row["limit"]: row["limited_bandwidth_gbs"] for row in measured if row["limit"] is not None
    }
    lines = gzip.decompress(DATA.read_bytes()).decode().splitlines()
    out, changed = [], 0
    for line in lines:
        run = json.loads(line)
        hardware = run["hardware"]
        figure = by_limit.get(hardware.get("unit_limit"))
        if figure is not None and hardware.get("limited_bandwidth_gbs") != figure:
            hardware["limited_bandwidth_gbs"] = figure
            changed += 1
        out.append(json.dumps(run))
    # mtime 0: the same runs give the same bytes
    DATA.write_bytes(gzip.compress(("\n".join(out) + "\n").encode(), mtime=0))
    print(f"{changed} of {len(lines)} runs given a measured limited bandwidth: {by_limit}")  # noqa: T201


if __name__ == "__main__":
    main()
