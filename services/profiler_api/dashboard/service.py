"""The dashboard's figures, assembled from the repository's queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from services.profiler_api.dashboard import repository
from services.profiler_api.dashboard.schemas import (
    ActiveModel,
    Coverage,
    PriorSavingsRow,
    Rates,
    SpeedupRow,
)

# Bucket widths a rate chart may use, in seconds; the smallest that gives <= MAX_BUCKETS.
BUCKET_WIDTHS_S = (60, 300, 900, 3600, 6 * 3600, 86400)
MAX_BUCKETS = 96
# What a held-out report keeps for the page: the sources it compares, and their scores.
REPORT_SOURCES = ("policy", "model", "baseline_nearest", "baseline_random")
REPORT_SCORES = ("score_at_1", "score_at_5", "score_at_k", "probes_to_3pct")


def coverage(session: Session) -> Coverage:
    labels = repository.hardware_labels(session)
    return Coverage(
        problems_per_op=repository.problems_per_op(session),
        cells=repository.coverage(session, labels),
    )


def speedups(session: Session) -> list[SpeedupRow]:
    return repository.speedups(session, repository.hardware_labels(session))


def prior_savings(session: Session) -> list[PriorSavingsRow]:
    return repository.prior_savings(session, repository.hardware_labels(session))


def bucket_width_s(window_h: float) -> int:
    """Return the bucket width for a window: the finest that keeps the chart readable."""
    window_s = window_h * 3600
    return next((w for w in BUCKET_WIDTHS_S if window_s / w <= MAX_BUCKETS), BUCKET_WIDTHS_S[-1])


def rates(session: Session, *, window_h: float, now: datetime | None = None) -> Rates:
    """Return runs and steered runs per bucket over the last `window_h` hours."""
    now = now or datetime.now(UTC)
    width = bucket_width_s(window_h)
    since = now - timedelta(hours=window_h)
    since = datetime.fromtimestamp(since.timestamp() // width * width, UTC)
    buckets = repository.rates(session, since=since, bucket=timedelta(seconds=width))
    return Rates(window_h=window_h, bucket_s=width, buckets=buckets)


def active_model(session: Session) -> ActiveModel | None:
    model = repository.active_model(session)
    if model is None:
        return None
    return model.model_copy(update={"reports": [_slim(r) for r in model.reports]})


def _slim(report: dict[str, Any]) -> dict[str, Any]:
    """Keep what the page plots of a held-out report: its scores, without the policy's knobs."""
    out = {k: report.get(k) for k in ("op", "holdout", "n_problems", "n_candidates")}
    for source in REPORT_SOURCES:
        figures = report.get(source) or {}
        out[source] = {k: figures.get(k) for k in REPORT_SCORES}
    return out
