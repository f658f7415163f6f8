"""Sample statistics: IQR outlier rejection and the summary a Measurement carries."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SampleSummary:
    median_us: float
    p10_us: float
    p90_us: float
    std_us: float
    cv: float
    samples: int
    outliers_rejected: int


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Return the linear-interpolated quantile of already sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def reject_outliers(values: Sequence[float], *, k: float = 1.5) -> tuple[list[float], int]:
    """Drop values outside [Q1 - k*IQR, Q3 + k*IQR]; return the kept ones and the count."""
    if len(values) < 4:
        return list(values), 0
    ordered = sorted(values)
    q1, q3 = quantile(ordered, 0.25), quantile(ordered, 0.75)
    iqr = q3 - q1
    lo, hi = q1 - k * iqr, q3 + k * iqr
    kept = [v for v in values if lo <= v <= hi]
    return kept, len(values) - len(kept)


def summarize(values: Sequence[float]) -> SampleSummary:
    """Summarize raw samples (µs) after IQR outlier rejection."""
    kept, rejected = reject_outliers(values)
    ordered = sorted(kept)
    median = statistics.median(ordered)
    std = statistics.pstdev(ordered) if len(ordered) > 1 else 0.0
    mean = statistics.fmean(ordered)
    return SampleSummary(
        median_us=median,
        p10_us=quantile(ordered, 0.10),
        p90_us=quantile(ordered, 0.90),
        std_us=std,
        cv=std / mean if mean > 0 else 0.0,
        samples=len(values),
        outliers_rejected=rejected,
    )
