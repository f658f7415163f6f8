"""Sample statistics: outliers rejected by IQR, the rest summarized."""

from agents.probe.stats import reject_outliers, summarize


def test_iqr_rejects_outliers_and_keeps_the_rest():
    values = [10.0, 10.2, 9.9, 10.1, 10.0, 55.0, 10.3, 0.5]
    kept, dropped = reject_outliers(values)
    assert dropped == 2 and 55.0 not in kept and 0.5 not in kept
    summary = summarize(values)
    assert summary.outliers_rejected == 2 and 9.9 <= summary.median_us <= 10.3
    assert summary.samples == 8 and summary.cv < 0.02
