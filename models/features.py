"""Features of a (hardware, problem, candidate) triple, as numbers a tree model can split on.

Three blocks: the problem (log dims, arithmetic intensity, alignments, transposes, dtype bytes),
the candidate's parameters (numbers as they are, strings as a stable code), the hardware spec;
then the ratios between them (blocks per compute unit, waves, lane use, bytes per L2), which
are what let one model carry over from one device to another.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from tps.candidate import Candidate
from tps.catalog import UnknownHardwareError, resolve
from tps.hardware import HardwareSpec
from tps.problem import DTYPE_BYTES, ProblemKey

VENDOR_CODE = {"nvidia": 0.0, "amd": 1.0, "intel": 2.0, "cpu": 3.0}
PARAM_PREFIX = "param_"
DIM_PREFIX = "dim_"
# Kernel Tuner names thread-block and tile sizes per axis; GEMM backends per matrix side.
_AXES = ("x", "y", "z")
_GEMM_TILE_M = ("block_m", "tile_m", "blk_m", "mt0", "tile_0")
_GEMM_TILE_N = ("block_n", "tile_n", "blk_n", "mt1", "tile_1")
_SHAPE = re.compile(r"^\d+(x(\d+|auto))+$", re.IGNORECASE)


def stable_code(value: str) -> float:
    """Encode a categorical value as a number that is the same in every process."""
    return float(int(hashlib.sha256(value.encode()).hexdigest()[:8], 16) % 1_000_003)


def _alignment_log2(value: int) -> float:
    """Return log2 of the largest power of two (capped at 256) dividing `value`."""
    return float(min((value & -value).bit_length() - 1, 8))


def problem_bytes(problem: ProblemKey) -> float:
    """Return the bytes a problem's operands occupy (GEMM: A, B and C)."""
    size = DTYPE_BYTES.get(problem.dtype, 4)
    d = problem.dims
    if problem.op == "gemm":
        return float(size * problem.batch * (d["m"] * d["k"] + d["k"] * d["n"] + d["m"] * d["n"]))
    return float(size * math.prod(d.values()))


def problem_features(problem: ProblemKey) -> dict[str, float]:
    """Return the problem's features."""
    feats: dict[str, float] = {
        "prob_dtype_bytes": float(DTYPE_BYTES.get(problem.dtype, 4)),
        "prob_trans_a": float(problem.trans_a),
        "prob_trans_b": float(problem.trans_b),
        "prob_log_elems": math.log2(math.prod(problem.dims.values())),
        "prob_log_bytes": math.log2(problem_bytes(problem)),
        "prob_min_align": min(_alignment_log2(v) for v in problem.dims.values()),
    }
    for name, value in problem.dims.items():
        feats[f"{DIM_PREFIX}{name}_log2"] = math.log2(value)
        feats[f"{DIM_PREFIX}{name}_align"] = _alignment_log2(value)
    if problem.op == "gemm":
        feats["prob_log_flops"] = math.log2(problem.flops)
        feats["prob_intensity"] = problem.flops / problem_bytes(problem)
        lda, ldb, ldc = problem.gemm_lds
        feats["prob_ld_align"] = min(_alignment_log2(x) for x in (lda, ldb, ldc))
    return feats


@lru_cache(maxsize=4096)
def _datasheet_gbs(name: str) -> float | None:
    try:
        return resolve(name).mem_bandwidth_gbs
    except UnknownHardwareError:
        return None


def model_bandwidth_gbs(hardware: HardwareSpec) -> float:
    """Return the memory bandwidth the model sees for `hardware`: the units in use's share
    (`HardwareSpec.usable_bandwidth_of`) of the catalog's datasheet figure for a GPU the
    catalog knows, as its peak FLOPs are; of the host's own figure for any other device.

    A host reports either NVML's figure (memory clock times bus width) or a copy it timed: the
    H200 GEMM data holds 4,814 GB/s for three runs of the chip and 4,250 for another. Taken as
    they are, one chip was two devices to the model, and the roofline carried a memory-bound
    latency 13% too slow from one to the other.
    """
    sheet = _datasheet_gbs(hardware.name)
    if sheet is None:
        return hardware.usable_bandwidth_gbs
    return hardware.usable_bandwidth_of(sheet)


def hardware_features(hardware: HardwareSpec) -> dict[str, float]:
    """Return the hardware's features (datasheet or measured spec)."""
    peak32 = hardware.peak_tflops.get("fp32", float("nan"))
    peak16 = hardware.peak_tflops.get("bf16", hardware.peak_tflops.get("fp16", float("nan")))
    units = hardware.active_units
    share = units / hardware.compute_units
    bandwidth = model_bandwidth_gbs(hardware)
    arch_digits = "".join(ch for ch in hardware.arch if ch.isdigit())
    return {
        "hw_vendor": VENDOR_CODE.get(hardware.vendor, 9.0),
        "hw_arch": float(int(arch_digits[:4])) if arch_digits else float("nan"),
        "hw_units": float(units),
        "hw_log_l2": math.log2(max(hardware.l2_bytes, 1)),
        "hw_log_bw": math.log2(bandwidth),
        "hw_peak_fp32": peak32 * share,
        "hw_peak_fp16": peak16 * share,
        "hw_clock": float(hardware.clock_mhz or float("nan")),
        "hw_warp": float(hardware.warp_size or 32),
        "hw_smem_kb": (hardware.smem_per_unit_bytes or 0) / 1024.0,
        "hw_flop_per_byte": peak32 * 1000.0 * share / bandwidth,
        "hw_bw_per_unit": bandwidth / units,
        "hw_l2_per_unit_kb": hardware.l2_bytes / 1024.0 / units,
    }


def candidate_features(candidate: Candidate) -> dict[str, float]:
    """Return the candidate's parameters as numbers (strings get a stable code)."""
    feats: dict[str, float] = {"cand_backend": stable_code(candidate.backend)}
    for name, value in candidate.params.items():
        key = f"{PARAM_PREFIX}{name}"
        if value is None:
            feats[key] = float("nan")
        elif isinstance(value, bool | int | float):
            feats[key] = float(value)
        else:
            feats[key] = stable_code(str(value))
            # Shapes written as "128x256" (cuBLASLt tiles, clusters) also give their sides.
            if _SHAPE.match(str(value)):
                for i, side in enumerate(str(value).split("x")):
                    if side.isdigit():
                        feats[f"{key}_{i}"] = float(side)
    return feats


# Feature columns by name: a DataFrame, or a dict of equally long arrays.
Columns: TypeAlias = Mapping[str, np.ndarray] | pd.DataFrame


def _param(columns: Columns, names: tuple[str, ...], n: int, default: float = 1.0) -> np.ndarray:
    lowered = {c.lower(): c for c in columns if c.startswith(PARAM_PREFIX)}
    for name in names:
        column = lowered.get(f"{PARAM_PREFIX}{name}")
        if column is not None:
            values = np.asarray(columns[column], dtype=np.float64)
            return np.maximum(np.where(np.isnan(values), default, values), 1.0)
    return np.full(n, default)


def _dim(columns: Columns, name: str, n: int) -> np.ndarray:
    column = f"{DIM_PREFIX}{name}_log2"
    if column in columns:
        return np.exp2(np.nan_to_num(np.asarray(columns[column], dtype=np.float64), nan=0.0))
    return np.ones(n)


def ratio_features(columns: Columns, *, op: str) -> dict[str, np.ndarray]:
    """Return the features that relate a candidate's work decomposition to the hardware."""
    units = np.asarray(columns["hw_units"], dtype=np.float64)
    warp = np.asarray(columns["hw_warp"], dtype=np.float64)
    n = len(units)
    ratios: dict[str, np.ndarray] = {}
    threads: np.ndarray | None = None
    if op == "gemm":
        tile_m = _param(columns, _GEMM_TILE_M, n, default=128.0)
        tile_n = _param(columns, _GEMM_TILE_N, n, default=128.0)
        split = _param(columns, ("split_k", "splitk"), n, default=1.0)
        blocks = np.ceil(_dim(columns, "m", n) / tile_m) * np.ceil(_dim(columns, "n", n) / tile_n)
        blocks = blocks * split * _dim(columns, "batch", n)
    else:
        threads = np.ones(n)
        blocks = np.ones(n)
        for axis in _AXES:
            block = _param(columns, (f"block_size_{axis}",), n)
            tile = _param(columns, (f"tile_size_{axis}",), n)
            threads = threads * block
            blocks = blocks * np.ceil(_dim(columns, axis, n) / (block * tile))
        warps = np.ceil(threads / warp)
        ratios["ratio_threads"] = threads
        ratios["ratio_warps_per_block"] = warps
        ratios["ratio_lane_use"] = threads / (warps * warp)
        ratios["ratio_x_per_warp"] = _param(columns, ("block_size_x",), n) / warp
        ratios["ratio_work_per_thread"] = _param(columns, ("tile_size_x",), n) * _param(
            columns, ("tile_size_y",), n
        )
    waves = blocks / units
    ratios["ratio_log_blocks"] = np.log2(blocks)
    ratios["ratio_log_waves"] = np.log2(waves)
    ratios["ratio_wave_efficiency"] = waves / np.ceil(waves)
    log_elems = np.asarray(columns["prob_log_elems"], dtype=np.float64)
    ratios["ratio_log_elems_per_unit"] = log_elems - np.log2(units)
    log_bytes = np.asarray(columns["prob_log_bytes"], dtype=np.float64)
    ratios["ratio_log_bytes_per_l2"] = log_bytes - np.asarray(
        columns["hw_log_l2"], dtype=np.float64
    )
    if threads is not None:
        ratios["ratio_log_threads_per_unit"] = np.log2(blocks * threads / units)
    return ratios


def add_ratio_features(frame: pd.DataFrame, *, op: str) -> pd.DataFrame:
    """Return `frame` with the ratio features (`ratio_features`) as more columns."""
    ratios = ratio_features(frame, op=op)
    return pd.concat([frame, pd.DataFrame(ratios, index=frame.index)], axis=1)


def candidate_table(candidates: dict[str, Candidate]) -> pd.DataFrame:
    """Return candidate features indexed by candidate id (cacheable: they never change)."""
    return pd.DataFrame.from_dict(
        {k: candidate_features(c) for k, c in candidates.items()}, orient="index"
    )


@dataclass(frozen=True)
class CandidateBlock:
    """The candidate columns of the feature matrix for a fixed set of candidates.

    They do not depend on the hardware or the problem, so a fitted model builds them once
    and `feature_columns` only adds the hardware, problem and ratio columns per question.
    """

    index: pd.Index  # candidate ids, row order of `columns`
    columns: dict[str, np.ndarray]

    @classmethod
    def of(cls, table: pd.DataFrame) -> CandidateBlock:
        """Return the block of a `candidate_table`."""
        return cls(
            index=table.index,
            columns={str(c): table[c].to_numpy(dtype=float) for c in table.columns},
        )

    @cached_property
    def _row_of(self) -> dict[str, int]:
        """Each candidate's row: a dict answers a served question's few hundred ids several
        times faster than the Index's indexer, which builds an Index of them each time."""
        return {str(c): i for i, c in enumerate(self.index)}

    def positions(self, candidate_ids: list[str]) -> np.ndarray | None:
        """Return the rows of `candidate_ids`, or None when one of them is not in the block."""
        row_of = self._row_of
        rows = np.fromiter(
            (row_of.get(c, -1) for c in candidate_ids), dtype=np.int64, count=len(candidate_ids)
        )
        return None if (rows < 0).any() else rows


def feature_columns(
    *,
    hardware: HardwareSpec,
    problem: ProblemKey,
    block: CandidateBlock,
    rows: np.ndarray,
    op: str,
) -> dict[str, np.ndarray]:
    """Return, column by column, what `feature_rows` returns for one (hardware, problem)
    and the block's candidates at `rows`."""
    n = len(rows)
    columns = {k: np.full(n, v) for k, v in hardware_features(hardware).items()}
    columns.update({k: np.full(n, v) for k, v in problem_features(problem).items()})
    columns.update({k: v[rows] for k, v in block.columns.items()})
    columns.update(ratio_features(columns, op=op))
    return columns


def _spread(values: dict[str, Any], keys: pd.Series) -> pd.DataFrame:
    """Return the feature rows of `values` (one per distinct key) for every row of `keys`."""
    per_key = pd.DataFrame.from_dict(values, orient="index")
    return per_key.reindex(keys.to_numpy()).reset_index(drop=True)


def feature_rows(
    *,
    hardware: dict[str, HardwareSpec],
    problems: dict[str, ProblemKey],
    candidates: dict[str, Candidate],
    keys: pd.DataFrame,
    op: str,
    known_candidates: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Return one feature row per row of `keys` (columns hw_key, problem_hash, candidate_id).

    `known_candidates` (from `candidate_table`) saves recomputing candidates seen before.
    """
    hw_keys, problem_hashes = keys["hw_key"], keys["problem_hash"]
    per_hardware = {k: hardware_features(hardware[k]) for k in hw_keys.unique()}
    per_problem = {k: problem_features(problems[k]) for k in problem_hashes.unique()}
    blocks = [_spread(per_hardware, hw_keys), _spread(per_problem, problem_hashes)]
    ids = keys["candidate_id"]
    per_candidate = known_candidates
    if per_candidate is None:
        missing = ids.unique()
    else:
        missing = ids[~ids.isin(per_candidate.index)].unique()
    if len(missing):
        fresh = candidate_table({k: candidates[k] for k in missing})
        per_candidate = fresh if per_candidate is None else pd.concat([per_candidate, fresh])
    assert per_candidate is not None
    blocks.append(per_candidate.reindex(ids.to_numpy()).reset_index(drop=True))
    frame = pd.concat(blocks, axis=1)
    frame.index = keys.index
    return add_ratio_features(frame, op=op)
