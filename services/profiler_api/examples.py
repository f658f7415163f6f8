"""Request and response examples of the OpenAPI document (/docs), one per op where it matters.

The GEMM figures are a real probe run of the shipped H200 dataset (benchmarks/data): 4096³ bf16
with B stored [N, K], the vendor default against the best cuBLASLt algorithm. Ids and hashes
are computed from the payloads, so they are what the service itself derives.
"""

from __future__ import annotations

from typing import Any

from tps.candidate import VENDOR_DEFAULT, Candidate
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

H200: dict[str, Any] = {
    "vendor": "nvidia",
    "arch": "sm_90",
    "name": "NVIDIA H200",
    "compute_units": 132,
    "l2_bytes": 62914560,
    "mem_bandwidth_gbs": 4250.5,
    "memory_bytes": 150109880320,
    "peak_tflops": {"fp32": 66.9, "fp16": 989.4, "bf16": 989.4},
    "clock_mhz": 1980.0,
    "warp_size": 32,
    "smem_per_unit_bytes": 233472,
    "driver_version": "580.159.04",
    "blas_version": "cublasLt-130100",
    "torch_version": "2.11.0+cu130",
}

# Each op names its own dims (tps.problem.OPS); these are the shapes the agent probes.
PROBLEMS: dict[str, dict[str, Any]] = {
    "gemm": {
        "op": "gemm",
        "dtype": "bf16",
        "dims": {"m": 4096, "n": 4096, "k": 4096},
        "trans_b": True,
    },
    "conv2d": {
        "op": "conv2d",
        "dtype": "fp16",
        "dims": {
            "n": 32,
            "c": 64,
            "h": 56,
            "w": 56,
            "k": 64,
            "r": 3,
            "s": 3,
            "stride": 1,
            "pad": 1,
        },
    },
    "layernorm": {"op": "layernorm", "dtype": "bf16", "dims": {"rows": 8192, "cols": 4096}},
}
SUMMARIES = {
    "gemm": "GEMM: dims m, n, k (optional batch); trans_b means B is stored [N, K]",
    "conv2d": "conv2d: dims n, c, h, w (input), k, r, s (filters), optional stride, pad, ...",
    "layernorm": "layernorm: dims rows, cols (normalised over cols)",
}

CUBLASLT = Candidate(
    backend="cublaslt",
    params={
        "algo_id": 66,
        "tile": "128x128",
        "stages": "64xAUTO",
        "split_k": 1,
        "reduction": 0,
        "swizzle": 0,
        "custom": 1,
        "cluster": "2x1x1",
    },
)
HARDWARE_ID = HardwareSpec.model_validate(H200).fingerprint()
PROBLEM_HASH = ProblemKey.model_validate(PROBLEMS["gemm"]).key_hash()
CANONICAL = ProblemKey.model_validate(PROBLEMS["gemm"]).canonical()
RUN_ID = "096acd26-f818-4221-9285-8708be0b0209"

PROBE_RUN: dict[str, Any] = {
    "run_id": RUN_ID,
    "host_id": "be7c4a11d0e5f00d",
    "hardware": H200,
    "problem": PROBLEMS["gemm"],
    "measurements": [
        {
            "candidate": VENDOR_DEFAULT.model_dump(mode="json"),
            "median_us": 173.232,
            "p10_us": 172.608,
            "p90_us": 173.853,
            "std_us": 0.520,
            "samples": 10,
            "outliers_rejected": 2,
            "compile_ms": 0.475,
        },
        {
            "candidate": CUBLASLT.model_dump(mode="json"),
            "median_us": 171.936,
            "samples": 10,
        },
    ],
    "winner_id": VENDOR_DEFAULT.id,
    "budget_ms": 29.014,
    "compile_ms": 8.435,
    "rationale": "kept vendor-default 173.23 us: best cublaslt(algo_id=66,...) 171.94 us is "
    "within 1%; 8 measured, 0 failed or invalid",
}

PROBE_RUNS_REQUEST = {
    "gemm": {"summary": "One GEMM probe run, measured on an H200", "value": {"runs": [PROBE_RUN]}}
}
INGEST_RESPONSE = {
    "accepted": {
        "summary": "Stored; GET /v1/priors?hardware_id=&problem= reads it back",
        "value": {
            "accepted": 1,
            "duplicates": 0,
            "measurements": 2,
            "duplicate_run_ids": [],
            "runs": [{"run_id": RUN_ID, "hardware_id": HARDWARE_ID, "problem_hash": PROBLEM_HASH}],
        },
    }
}

PRIORS_REQUEST = {
    op: {
        "summary": SUMMARIES[op],
        "value": {"hardware": H200, "problem": problem, "limit": 4},
    }
    for op, problem in PROBLEMS.items()
}
PRIORS_RESPONSE = {
    "observed": {
        "summary": "Ranked from runs measured on this very hardware",
        "value": {
            "hardware_fingerprint": HARDWARE_ID,
            "problem_hash": PROBLEM_HASH,
            "canonical": CANONICAL,
            "source": "observed",
            "candidates": [
                {
                    "candidate_id": CUBLASLT.id,
                    "candidate": CUBLASLT.model_dump(mode="json"),
                    "rank": 0,
                    "median_us": 171.936,
                    "samples": 10,
                    "runs": 1,
                    "source": "observed",
                    "confidence": 0.61,
                },
                {
                    "candidate_id": VENDOR_DEFAULT.id,
                    "candidate": VENDOR_DEFAULT.model_dump(mode="json"),
                    "rank": 1,
                    "median_us": 173.232,
                    "samples": 10,
                    "runs": 1,
                    "source": "observed",
                    "confidence": 0.61,
                },
            ],
        },
    }
}


def json_examples(examples: dict[str, Any]) -> dict[str, Any]:
    """Return an OpenAPI `content` entry for JSON with these named examples."""
    return {"application/json": {"examples": examples}}
