"""What the training data measured, kept with a model: per (hardware, problem) the relative
latency of every candidate. It feeds the reference features, the nearest baseline and the
fallback policy.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from models.dataset import GROUP_COLUMNS, TuningData, add_relative_time
from models.features import problem_bytes
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey

# A candidate that failed on a reference device counts as this much slower than its best
# (log scale, about 20x): failures are informative, but not certain to repeat elsewhere.
FAILED_LOG_REL = 3.0
VENDOR_PENALTY = 2.0
WARP_PENALTY = 1.0
SIMILARITY_SCALE = 2.0
# A device never measured on a problem is ranked among the candidates that were fast on some
# known device: each one's fastest SHORTLIST_SHARE of the space, and at least SHORTLIST_MIN.
# On the Kernel Tuner data, leaving each GPU out, the shortlist always held the best.
SHORTLIST_SHARE = 0.10
SHORTLIST_MIN = 32
REFERENCE_FEATURES = ("ref_mean", "ref_vendor", "ref_near", "ref_wmean", "ref_min", "ref_max")
# The latency a candidate measured on the closest known (device, problem), and what carries it
# to the device and problem asked about (see `Reference.anchor_columns`).
ANCHOR_FEATURES = (
    "anc_log_us",
    "anc_log_scale",
    "anc_log_peak_ratio",
    "anc_log_bw_ratio",
    "anc_distance",
    "anc_log_bound",
    "anc_log_pred",
)
# An anchor is looked for among the groups of this many closest measured problems ...
ANCHOR_PROBLEMS = 4
# ... and, of those, this many closest (device, problem) groups.
ANCHOR_GROUPS = 8
# The closest measured problems kept (CLOSEST_KEPT of them, closest first) for each of the
# MAX_PROBLEM_ORDERS problems asked about lately.
CLOSEST_KEPT = 64
MAX_PROBLEM_ORDERS = 1024
# Each group's weight in the pooled anchor is exp(-distance / ANCHOR_SCALE).
ANCHOR_SCALE = 1.0
# Datasheets that give no figure for a dtype: its rate relative to fp16 on the matrix units
# (TF32 runs at half the FP16 rate on NVIDIA's and AMD's matrix cores, FP8 and INT8 at twice).
PEAK_FROM_FP16 = {"tf32": 0.5, "fp8_e4m3": 2.0, "fp8_e5m2": 2.0, "int8": 2.0}


def dtype_peak_tflops(hardware: HardwareSpec, dtype: str) -> float:
    """Return the peak TFLOP/s of `dtype` on the units in use (datasheet, else a rule)."""
    peaks = hardware.peak_tflops
    share = hardware.active_units / hardware.compute_units
    fp16 = peaks.get("fp16", peaks.get("bf16"))
    if dtype in peaks:
        peak = peaks[dtype]
    elif dtype in PEAK_FROM_FP16 and fp16 is not None:
        peak = fp16 * PEAK_FROM_FP16[dtype]
    else:
        peak = peaks.get("fp32", fp16 or 1.0)
    return float(peak) * share


def bound_us(hardware: HardwareSpec, problem: ProblemKey) -> float:
    """Return the roofline bound of `problem` on `hardware` in µs: the larger of its FLOPs at
    the dtype's peak and its operands' bytes at the memory bandwidth (ops other than GEMM,
    whose FLOPs are not known, count one operation per element at the fp32 peak)."""
    share = hardware.active_units / hardware.compute_units
    flops = problem.flops or float(math.prod(problem.dims.values()))
    peak = dtype_peak_tflops(hardware, problem.dtype if problem.flops else "fp32")
    compute = flops / (peak * 1e6)
    memory = problem_bytes(problem) / (hardware.mem_bandwidth_gbs * share * 1e3)
    return max(compute, memory, 1e-3)


def spec_vector(hardware: HardwareSpec) -> np.ndarray:
    """Return the log2 datasheet figures that spec distance compares."""
    units = hardware.active_units
    share = units / hardware.compute_units
    return np.array(
        [
            math.log2(units),
            math.log2(max(hardware.l2_bytes, 1)),
            math.log2(hardware.mem_bandwidth_gbs * share),
            math.log2(hardware.peak_tflops.get("fp32", 1.0) * share),
            math.log2(hardware.clock_mhz or 1000.0),
        ]
    )


# spec_vector of specs seen lately, by identity (specs are frozen): spec distance runs once per
# reference device for every (hardware, problem) group of every training fold.
_VECTORS: dict[int, tuple[HardwareSpec, tuple[float, ...]]] = {}
_MAX_VECTORS = 4096


def _vector(hardware: HardwareSpec) -> tuple[float, ...]:
    known = _VECTORS.get(id(hardware))
    if known is not None and known[0] is hardware:
        return known[1]
    if len(_VECTORS) >= _MAX_VECTORS:
        _VECTORS.clear()
    vector = tuple(float(x) for x in spec_vector(hardware))
    _VECTORS[id(hardware)] = (hardware, vector)
    return vector


def spec_distance(a: HardwareSpec, b: HardwareSpec) -> float:
    """Return how different two devices are by spec (0 for the same spec)."""
    d = math.dist(_vector(a), _vector(b))
    if a.vendor != b.vendor:
        d += VENDOR_PENALTY
    if (a.warp_size or 32) != (b.warp_size or 32):
        d += WARP_PENALTY
    return d


def problem_distance(a: ProblemKey, b: ProblemKey) -> float:
    """Return how different two problems of one op are (log2 dims, dtype, layout)."""
    names = sorted(set(a.dims) | set(b.dims))
    va = np.array([math.log2(a.dims.get(n, 1)) for n in names])
    vb = np.array([math.log2(b.dims.get(n, 1)) for n in names])
    d = float(np.linalg.norm(va - vb))
    d += 4.0 * (a.dtype != b.dtype) + 1.0 * (a.trans_a != b.trans_a) + (a.trans_b != b.trans_b)
    return d + 8.0 * (a.variant != b.variant)


@dataclass(frozen=True)
class _ProblemTable:
    """The problems of one op as arrays, so that `problem_distance` to all runs at once."""

    hashes: np.ndarray  # sorted
    names: tuple[str, ...]
    log_dims: np.ndarray  # problems x names, log2 (0 where a problem lacks the dim)
    dtypes: np.ndarray
    trans_a: np.ndarray
    trans_b: np.ndarray
    variants: np.ndarray

    @classmethod
    def of(cls, problems: list[tuple[str, ProblemKey]]) -> _ProblemTable:
        names = tuple(sorted({n for _, p in problems for n in p.dims}))
        return cls(
            hashes=np.array([h for h, _ in problems]),
            names=names,
            log_dims=np.array(
                [[math.log2(p.dims.get(n, 1)) for n in names] for _, p in problems], dtype=float
            ).reshape(len(problems), len(names)),
            dtypes=np.array([p.dtype for _, p in problems]),
            trans_a=np.array([p.trans_a for _, p in problems]),
            trans_b=np.array([p.trans_b for _, p in problems]),
            variants=np.array([p.variant for _, p in problems]),
        )

    def closest(self, problem: ProblemKey, k: int) -> list[tuple[float, str]]:
        """Return the k problems closest to `problem`, as (distance, hash), closest first."""
        extra = sorted(set(problem.dims) - set(self.names))
        v = np.array([math.log2(problem.dims.get(n, 1)) for n in self.names])
        d2 = ((self.log_dims - v) ** 2).sum(axis=1)
        d2 += sum(math.log2(problem.dims[n]) ** 2 for n in extra)
        d = np.sqrt(d2)
        d += 4.0 * (self.dtypes != problem.dtype) + 1.0 * (self.trans_a != problem.trans_a)
        d += 1.0 * (self.trans_b != problem.trans_b) + 8.0 * (self.variants != problem.variant)
        order = np.lexsort((self.hashes, d))[:k]  # by distance, then hash
        return [(float(d[i]), str(self.hashes[i])) for i in order]


@dataclass
class Reference:
    """Relative latencies measured on known hardware, as a (group x candidate) matrix."""

    log_rel: pd.DataFrame  # index (hw_key, problem_hash), columns candidate_id; NaN = failed
    median_us: pd.DataFrame  # same shape, absolute latencies
    hardware: dict[str, HardwareSpec]
    problems: dict[str, ProblemKey]

    @classmethod
    def from_data(cls, data: TuningData) -> Reference:
        frame = add_relative_time(data.frame.copy())
        log_rel = frame.pivot_table(
            index=GROUP_COLUMNS, columns="candidate_id", values="log_rel", dropna=False
        )
        median = frame.pivot_table(
            index=GROUP_COLUMNS, columns="candidate_id", values="median_us", dropna=False
        )
        measured = frame.pivot_table(
            index=GROUP_COLUMNS, columns="candidate_id", values="valid", aggfunc="size"
        )
        # Measured but failed: a large penalty; never measured there: stays NaN.
        failed = measured.notna() & log_rel.isna()
        log_rel = log_rel.mask(failed, FAILED_LOG_REL)
        return cls(
            log_rel=log_rel.sort_index(axis=1),
            median_us=median.reindex(columns=log_rel.columns).sort_index(axis=1),
            hardware=dict(data.hardware),
            problems=dict(data.problems),
        )

    def closest_problem(self, problem: ProblemKey) -> str | None:
        """Return the hash of the measured problem most like `problem` (itself when measured)."""
        own = problem.key_hash()
        if own in self.problems:
            return own
        closest = self._closest_problems(problem)
        return closest[0][1] if closest else None

    @cached_property
    def _rows(self) -> dict[tuple[str, str], int]:
        """Return the row of each (hw_key, problem_hash) in log_rel and median_us (one index)."""
        return {key: i for i, key in enumerate(self.log_rel.index)}

    @cached_property
    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for hw_key, problem_hash in self.log_rel.index:
            groups.setdefault(problem_hash, []).append(hw_key)
        return {problem_hash: sorted(keys) for problem_hash, keys in groups.items()}

    def warm_up(self) -> None:
        """Build the positional lookups now, not in the first query that needs them."""
        _ = self._rows, self._groups

    def shortlist(self, problem_hash: str, *, exclude: str | None = None) -> frozenset[str] | None:
        """Return the candidates a new device is ranked among for `problem_hash`: every known
        device's fastest SHORTLIST_SHARE (at least SHORTLIST_MIN), together.

        None when no device but `exclude` measured the problem (then all are ranked).
        """
        if (problem_hash, exclude) in self._shortlists:
            return self._shortlists[(problem_hash, exclude)]
        keys = [(k, problem_hash) for k in self.groups_for(problem_hash, exclude=exclude)]
        if not keys:
            return None
        table = self.median_us.to_numpy()[[self._rows[k] for k in keys]]
        chosen: set[str] = set()
        for row in table:
            valid = np.flatnonzero(np.isfinite(row))
            k = max(SHORTLIST_MIN, math.ceil(SHORTLIST_SHARE * len(valid)))
            fastest = valid[np.argsort(row[valid], kind="stable")[:k]]
            chosen.update(self.median_us.columns[fastest])
        shortlist = frozenset(chosen)
        self._shortlists[(problem_hash, exclude)] = shortlist
        return shortlist

    @cached_property
    def _shortlists(self) -> dict[tuple[str, str | None], frozenset[str] | None]:
        return {}

    def groups_for(self, problem_hash: str, *, exclude: str | None = None) -> list[str]:
        """Return the hw_keys that measured `problem_hash`, except `exclude`."""
        return [k for k in self._groups.get(problem_hash, []) if k != exclude]

    def _table(
        self, frame: pd.DataFrame, keys: list[tuple[str, str]], candidate_ids: pd.Index
    ) -> np.ndarray:
        """Return the rows `keys` of `frame` (log_rel or median_us) for `candidate_ids` (NaN
        where a candidate is not a column)."""
        columns = frame.columns.get_indexer(candidate_ids)
        table: np.ndarray = frame.to_numpy()[[self._rows[k] for k in keys]][:, columns]
        table[:, columns < 0] = np.nan
        return table

    def measured_us(
        self, hw_key: str, problem_hash: str, candidate_ids: list[str]
    ) -> np.ndarray | None:
        """Return the median latencies measured on (hw_key, problem_hash), or None if never."""
        if (hw_key, problem_hash) not in self._rows:
            return None
        row: np.ndarray = self._table(
            self.median_us, [(hw_key, problem_hash)], pd.Index(candidate_ids)
        )[0]
        return row

    def coverage(self, hw_key: str, problem_hash: str, candidate_ids: list[str]) -> float:
        """Return the share of `candidate_ids` run on (hw_key, problem_hash), failed ones too."""
        if (hw_key, problem_hash) not in self._rows or not candidate_ids:
            return 0.0
        rel = self._table(self.log_rel, [(hw_key, problem_hash)], pd.Index(candidate_ids))[0]
        return float(np.isfinite(rel).mean())

    def nearest_hardware(
        self, hardware: HardwareSpec, problem_hash: str, *, exclude: str | None = None
    ) -> tuple[str, float] | None:
        """Return (hw_key, spec distance) of the most similar device that measured the problem."""
        keys = self.groups_for(problem_hash, exclude=exclude)
        if not keys:
            return None
        scored = [(spec_distance(hardware, self.hardware[k]), k) for k in keys]
        distance, key = min(scored)
        return key, distance

    @cached_property
    def _problem_order(self) -> dict[str, list[tuple[float, str]]]:
        return {}

    @cached_property
    def _problem_table(self) -> dict[str, _ProblemTable]:
        by_op: dict[str, list[str]] = {}
        for problem_hash, problem in sorted(self.problems.items()):
            by_op.setdefault(problem.op, []).append(problem_hash)
        return {
            op: _ProblemTable.of([(h, self.problems[h]) for h in hashes])
            for op, hashes in by_op.items()
        }

    def _closest_problems(self, problem: ProblemKey) -> list[tuple[float, str]]:
        """Return (distance, hash) of the closest measured problems of `problem`'s op, closest
        first (at most CLOSEST_KEPT); distances are `problem_distance`'s."""
        own = problem.key_hash()
        known = self._problem_order.get(own)
        if known is None:
            table = self._problem_table.get(problem.op)
            known = table.closest(problem, CLOSEST_KEPT) if table is not None else []
            if len(self._problem_order) >= MAX_PROBLEM_ORDERS:
                self._problem_order.clear()
            self._problem_order[own] = known
        return known

    def _anchor_groups(
        self, hardware: HardwareSpec, problem: ProblemKey, exclude: str | None
    ) -> list[tuple[float, str, str]]:
        """Return the (distance, hw_key, problem_hash) groups an anchor is read from."""
        groups: list[tuple[float, str, str]] = []
        problems = 0
        for distance, problem_hash in self._closest_problems(problem):
            keys = self.groups_for(problem_hash, exclude=exclude)
            if not keys:
                continue
            groups += [
                (distance + spec_distance(hardware, self.hardware[k]), k, problem_hash)
                for k in keys
            ]
            problems += 1
            if problems >= ANCHOR_PROBLEMS:
                break
        return sorted(groups)[:ANCHOR_GROUPS]

    def anchor_columns(
        self,
        hardware: HardwareSpec,
        problem: ProblemKey,
        candidate_ids: pd.Index,
        *,
        exclude: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Return, per candidate, the latency it measured on the closest known (device,
        problem) that ran it validly, and the ratios that carry it to (hardware, problem).

        anc_log_us: log µs measured there (NaN: no such group); anc_log_scale: log of the
        roofline bound here over there; anc_log_peak_ratio, anc_log_bw_ratio: the log ratios
        of the dtype's peak and of the bandwidth; anc_distance: spec plus problem distance;
        anc_log_bound: log of the roofline bound here, which stands in where nothing is known.
        """
        n = len(candidate_ids)
        target = bound_us(hardware, problem)
        out = {name: np.full(n, np.nan) for name in ANCHOR_FEATURES}
        out["anc_log_bound"] = np.full(n, math.log(target))
        groups = self._anchor_groups(hardware, problem, exclude)
        if not groups or not n:
            return out
        table = self._table(self.median_us, [(k, p) for _, k, p in groups], candidate_ids)
        usable = np.isfinite(table) & (table > 0)
        first = np.argmax(usable, axis=0)
        found = usable.any(axis=0)
        share = hardware.active_units / hardware.compute_units
        scale, peak, bandwidth = [], [], []
        for _, k, p in groups:
            ref_hw, ref_problem = self.hardware[k], self.problems[p]
            ref_share = ref_hw.active_units / ref_hw.compute_units
            scale.append(math.log(target / bound_us(ref_hw, ref_problem)))
            peak.append(
                math.log(
                    dtype_peak_tflops(hardware, problem.dtype)
                    / dtype_peak_tflops(ref_hw, ref_problem.dtype)
                )
            )
            bandwidth.append(
                math.log(
                    hardware.mem_bandwidth_gbs * share / (ref_hw.mem_bandwidth_gbs * ref_share)
                )
            )
        columns = np.arange(n)
        with np.errstate(all="ignore"):
            logs = np.log(np.where(usable, table, 1.0))
            chosen = logs[first, columns]
            # every group's latency carried here, weighted by how alike its device and problem are
            carried = logs + np.asarray(scale)[:, None]
            weights = np.exp(-np.array([d for d, _, _ in groups]) / ANCHOR_SCALE)[:, None]
            weights = weights * usable
            pooled = (carried * weights).sum(axis=0) / weights.sum(axis=0)
        out["anc_log_us"] = np.where(found, chosen, np.nan)
        out["anc_log_pred"] = np.where(found, pooled, np.nan)
        for name, values in (
            ("anc_log_scale", scale),
            ("anc_log_peak_ratio", peak),
            ("anc_log_bw_ratio", bandwidth),
            ("anc_distance", [d for d, _, _ in groups]),
        ):
            out[name] = np.where(found, np.asarray(values)[first], np.nan)
        return out

    def features(
        self,
        hardware: HardwareSpec,
        problem_hash: str,
        candidate_ids: pd.Index | list[str],
        *,
        exclude: str | None = None,
    ) -> pd.DataFrame:
        """Return reference features for candidates on `hardware` (excluding `exclude`).

        ref_mean: mean relative latency over the other devices; ref_vendor: over devices
        of the same vendor; ref_near: on the nearest device by spec; ref_wmean: weighted
        by spec similarity; ref_min/ref_max: the spread over devices.
        """
        index = pd.Index(candidate_ids)
        columns = self.feature_columns(hardware, problem_hash, index, exclude=exclude)
        return pd.DataFrame(columns, index=index)

    def feature_columns(
        self,
        hardware: HardwareSpec,
        problem_hash: str,
        candidate_ids: pd.Index,
        *,
        exclude: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Return `features` as one array per feature name."""
        keys = self.groups_for(problem_hash, exclude=exclude)
        out = {name: np.full(len(candidate_ids), np.nan) for name in REFERENCE_FEATURES}
        if not keys:
            return out
        table = self._table(self.log_rel, [(k, problem_hash) for k in keys], candidate_ids)
        distances = np.array([spec_distance(hardware, self.hardware[k]) for k in keys])
        weights = np.exp(-distances / SIMILARITY_SCALE)
        same_vendor = np.array([self.hardware[k].vendor == hardware.vendor for k in keys])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            # An all-NaN column is a candidate no reference device measured: expected.
            warnings.simplefilter("ignore", category=RuntimeWarning)
            present = np.isfinite(table)
            filled = np.where(present, table, 0.0)
            out["ref_mean"] = np.nanmean(table, axis=0)
            out["ref_min"] = np.nanmin(table, axis=0)
            out["ref_max"] = np.nanmax(table, axis=0)
            if same_vendor.any():
                out["ref_vendor"] = np.nanmean(table[same_vendor], axis=0)
            out["ref_near"] = table[int(np.argmin(distances))]
            w = weights[:, None] * present
            out["ref_wmean"] = (filled * w).sum(axis=0) / w.sum(axis=0)
        return out
