"""conv2d, layernorm and fp8 GEMM on a GPU: what the engine picks and what it gains.

    python benchmarks/ops_h200.py --out DIR

Each problem is probed once by the engine with its default settings; when the winner is
not the default, an independent probe of just the two re-times them, and that ratio is the
reported speedup (as in gemm_h200.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gemm_h200 import probe_and_retime  # noqa: E402  (this folder)

from agents.opconfig import OpConfig, TunableOpEntry  # noqa: E402
from agents.probe.assemble import build_engine  # noqa: E402
from tps.problem import ProblemKey  # noqa: E402

HOST_ID = "be7c4a11d0e5f00d"


def conv(n, c, h, w, k, r, stride=1, pad=None, dtype="bf16") -> ProblemKey:
    dims = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": r, "stride": stride}
    pad = r // 2 if pad is None else pad
    if pad:  # dims are positive; no pad is the default
        dims["pad"] = pad
    return ProblemKey(op="conv2d", dtype=dtype, dims=dims)


PROBLEMS = [
    # ResNet-50 layers at batch 32 (stem, bottleneck 3x3s, 1x1 projections).
    conv(32, 3, 224, 224, 64, 7, stride=2),
    conv(32, 64, 56, 56, 64, 3),
    conv(32, 128, 28, 28, 128, 3),
    conv(32, 256, 14, 14, 256, 3),
    conv(32, 512, 7, 7, 512, 3),
    conv(32, 256, 56, 56, 64, 1),
    conv(32, 1024, 14, 14, 256, 1),
    conv(32, 64, 56, 56, 64, 3, dtype="fp32"),
    # LayerNorm over LLM hidden sizes: decode-like and prefill-like row counts.
    *[
        ProblemKey(op="layernorm", dtype="bf16", dims={"rows": rows, "cols": cols})
        for rows in (16, 4096)
        for cols in (4096, 8192, 5120)
    ],
    # fp8 (e4m3) GEMM on linear-layer shapes, B stored [N, K]; the last two are off the
    # 16-grid that fp8 kernels need, where the default has no kernel at all.
    *[
        ProblemKey(op="gemm", dtype="fp8_e4m3", dims={"m": m, "n": n, "k": k}, trans_b=True)
        for m, n, k in (
            (16, 4096, 4096),
            (128, 14336, 4096),
            (2048, 4096, 4096),
            (4096, 28672, 4096),
            (8192, 8192, 8192),
            (4000, 4000, 4000),
            (4095, 4095, 4095),
            (1000, 1000, 1000),
        )
    ],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = OpConfig(
        tunable_ops=[
            TunableOpEntry(name="gemm", candidates=7),
            TunableOpEntry(name="conv2d", candidates=12),
            TunableOpEntry(name="layernorm", candidates=7),
        ]
    )
    engine = build_engine(
        device="cuda", host_id=HOST_ID, op_config=config, bans_path="/tmp/ops_bans.json"
    )
    rows = []
    with (out / "ops_h200_runs.jsonl").open("w") as runs_out:
        for problem in PROBLEMS:
            row = {
                "problem": problem.canonical(),
                "op": problem.op,
                "dtype": problem.dtype,
                **probe_and_retime(engine, problem, runs_out),
            }
            rows.append(row)
            print(
                f"{row['problem']}: {row.get('speedup', 0):.3f}x {row['winner']} "
                f"probe {row['probe_ms']:.1f} ms, {row['candidates']} candidates, "
                f"invalid {row['invalid']}",
                flush=True,
            )
    summary = {}
    for op in sorted({r["op"] + "/" + r["dtype"] for r in rows}):
        group = [r for r in rows if r["op"] + "/" + r["dtype"] == op]
        mine = [r for r in group if r.get("speedup")]
        if not mine:
            continue
        summary[op] = {
            "problems": len(mine),
            "no_default_kernel": sum(1 for r in group if not r["default_us"]),
            "geomean_speedup": math.exp(statistics.fmean(math.log(r["speedup"]) for r in mine)),
            "min_speedup": min(r["speedup"] for r in mine),
            "median_probe_ms": statistics.median(r["probe_ms"] for r in mine),
        }
    report = {
        "command": " ".join(sys.argv),
        "machine": engine.hardware().name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "summary": summary,
        "problems": rows,
    }
    (out / "ops_h200.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
