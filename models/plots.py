"""Figures of the evaluation (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SERIES = (
    ("model", "model"),
    ("policy", "served policy (model + nearest)"),
    ("baseline_nearest", "nearest GPU by spec"),
    ("baseline_random", "random order"),
)


def plot_score_at_k(reports: list[dict[str, Any]], path: Path, *, title: str | None = None) -> Path:
    """Write a PNG of mean score@k (k = 1..20) per op for the model and the baselines.

    `reports` are written out as `HoldoutReport.as_dict()` writes them (or hold at least their
    `op`, `holdout` and each source's `score_at_k`).
    """
    import logging

    import matplotlib

    # matplotlib logs its font cache build at INFO; keep it off a JSON stdout.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({r["op"] for r in reports})
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.2), squeeze=False)
    for ax, op in zip(axes[0], ops, strict=True):
        rows = [r for r in reports if r["op"] == op]
        for key, label in SERIES:
            curves = [r[key]["score_at_k"] for r in rows if r.get(key, {}).get("score_at_k")]
            if not curves:
                continue
            mean = np.mean(curves, axis=0)
            ax.plot(range(1, len(mean) + 1), mean, marker="o", markersize=3, label=label)
        holdouts = ", ".join(str(r["holdout"]) for r in rows)
        many = f"{op} (mean of {len(rows)} holdouts)"
        ax.set_title(f"{op}: held out {holdouts}" if len(rows) == 1 else many)
        ax.set_xlabel("k (candidates probed)")
        ax.set_ylabel("score@k = best / best in top k")
        ax.set_ylim(0, 1.02)
        ax.set_xticks([1, 5, 10, 15, 20])
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
