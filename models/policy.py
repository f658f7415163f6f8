"""Which ranking to serve: the model's, the nearest known device's, or an interleaving.

Leave-one-GPU-out showed that no single source wins everywhere: copying the nearest device's
measured ranking is hard to beat when that device is very like the new one (same vendor, close
spec), and the model does better when nothing is close. A policy leads with one source and
interleaves the others behind it, so that the first few probes cover each source's best guess
(score@5 becomes the best of their top picks), or serves one source alone.

`CANDIDATE_POLICIES` are the policies that `models.selection` chooses among, per op, by
leave-one-hardware-out on the training data only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.ranking import Ranking, SourceRankings

SOURCES = ("model", "nearest", "consensus")
LEADS = ("auto", "nearest", "model", "consensus", "auto-consensus")
# The spec distance at or under which `auto` lets the nearest device lead.
NEAR_DISTANCE = 2.0


@dataclass(frozen=True)
class BlendPolicy:
    """Lead with one source's ranking and interleave the rest round-robin (or serve it alone).

    `lead="auto"` leads with the nearest device's ranking when its spec distance is at most
    `near_distance`, else with the model's; `lead="auto-consensus"` leads with the consensus
    of the known devices (their mean time relative to each one's best, the same vendor's
    where there are some) instead of the model's. A nearest device that measured less than
    `min_coverage` of the candidates being ranked never leads: where candidate lists differ
    per device (cuBLASLt's heuristic offers other algorithms at another SM count), a copied
    ranking puts every candidate its device never ran last, and the winner is often among them.
    """

    near_distance: float = NEAR_DISTANCE
    min_coverage: float = 0.9
    interleave: bool = True
    lead: str = "auto"
    # How many of the lead source's picks come before the others get a turn.
    lead_run: int = 1
    # With a nearest device under `min_coverage`, the model leads only where its first pick
    # is a candidate that device never measured (what the coverage rule is for); where the
    # device measured it, its own measured order leads.
    unseen_lead: bool = False

    @property
    def name(self) -> str:
        """Return the policy's short name (`nearest`, `nearest*4+model`, `auto`, ...)."""
        run = f"*{self.lead_run}" if self.lead_run > 1 else ""
        if self.lead in ("auto", "auto-consensus"):
            lead = self.lead if self.near_distance == NEAR_DISTANCE else "same-spec"
            return f"{lead}{run}" if self.interleave else f"{lead}-alone"
        lead = "copy-nearest" if self.lead == "nearest" and not self.min_coverage else self.lead
        if self.unseen_lead:
            lead = f"{lead}-unseen"
        other = "model" if self.lead == "nearest" else "nearest"
        return f"{lead}{run}+{other}" if self.interleave else lead

    def source_order(self, distance: float | None, coverage: float = 1.0) -> tuple[str, ...]:
        lead = self.lead
        if lead in ("auto", "auto-consensus"):
            near = distance is not None and distance <= self.near_distance
            lead = "nearest" if near else ("model" if lead == "auto" else "consensus")
        if lead == "nearest" and coverage < self.min_coverage:
            lead = "model"
        if lead == "nearest":
            return ("nearest", "model", "consensus")
        if lead == "consensus":
            return ("consensus", "nearest", "model")
        return ("model", "nearest", "consensus")

    def rank(self, rankings: SourceRankings, *, limit: int | None = None) -> Ranking:
        """Return the policy's order of the candidates, the source of each entry, and the
        model's predicted latencies (what a prior serves next to the order)."""
        order, sources = blended_order(rankings, self, limit=limit)
        return Ranking(
            orders=(order,),
            sources=tuple(sources),
            predicted_us=rankings.frame["predicted_us"].to_numpy(),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "near_distance": self.near_distance,
            "min_coverage": self.min_coverage,
            "interleave": self.interleave,
            "lead": self.lead,
            "lead_run": self.lead_run,
            "unseen_lead": self.unseen_lead,
        }


DEFAULT_POLICY = BlendPolicy()
# What selection chooses among, in the order that wins ties.
CANDIDATE_POLICIES = (
    # The nearest device's first pick, then the model's and its own in turn: score@1 is the
    # baseline's. Preferred on a tie: where the training folds cannot tell it from a copy,
    # its second source costs nothing there and covers a copy's blind spots.
    BlendPolicy(lead="nearest", min_coverage=0.0),
    # Copying the nearest device's ranking whatever it measured: the baseline itself.
    BlendPolicy(lead="nearest", interleave=False, min_coverage=0.0),
    BlendPolicy(lead="nearest", interleave=False),
    BlendPolicy(lead="nearest"),
    # The same, but the model leads only with a candidate the nearest device never ran.
    BlendPolicy(lead="nearest", interleave=False, unseen_lead=True),
    BlendPolicy(lead="nearest", unseen_lead=True),
    BlendPolicy(lead="auto"),
    BlendPolicy(lead="model"),
    BlendPolicy(lead="model", interleave=False),
    # Where no known device is close, the known devices' consensus leads: on the Kernel
    # Tuner dedispersion it served the held-out A100 0.994 at score@1, nearest 0.981.
    BlendPolicy(lead="auto-consensus"),
    # The same device, measured in another dtype or on other problems, is copied; any other
    # device leaves the order to the model alone (`same-spec-alone`).
    BlendPolicy(lead="auto", near_distance=0.0, min_coverage=0.0, interleave=False),
)


def interleave(
    orders: list[np.ndarray], limit: int | None = None, *, lead_run: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Merge orders round-robin without repeats; return (order, index of the source of each).

    The first order gives its first `lead_run` entries before the others get a turn. With
    `limit`, stop after that many entries.
    """
    n = max((len(o) for o in orders), default=0)
    wanted = n if limit is None else min(limit, n)
    seen = np.zeros(n, dtype=bool)
    merged: list[int] = []
    source: list[int] = []
    cursors = [0] * len(orders)
    turns = [max(lead_run, 1)] + [1] * (len(orders) - 1)
    while len(merged) < wanted:
        progressed = False
        for i, order in enumerate(orders):
            for _ in range(turns[i]):
                while cursors[i] < len(order) and seen[order[cursors[i]]]:
                    cursors[i] += 1
                if cursors[i] < len(order) and len(merged) < wanted:
                    pick = int(order[cursors[i]])
                    seen[pick] = True
                    merged.append(pick)
                    source.append(i)
                    progressed = True
        turns[0] = 1
        if not progressed:
            break
    return np.array(merged, dtype=int), np.array(source, dtype=int)


def blended_order(
    rankings: SourceRankings, policy: BlendPolicy = DEFAULT_POLICY, *, limit: int | None = None
) -> tuple[np.ndarray, list[str]]:
    """Return the policy's order (its first `limit` entries) and the source of each."""
    coverage = rankings.nearest_coverage
    if policy.unseen_lead and not _model_leads_unseen(rankings):
        coverage = 1.0  # the model's first pick was measured there: the copy leads
    lead = policy.source_order(rankings.nearest_distance, coverage)
    names = [s for s in lead if s in rankings.orders]
    if not policy.interleave:
        names = names[:1]
    order, source = interleave([rankings.orders[s] for s in names], limit, lead_run=policy.lead_run)
    return order, [names[i] for i in source]


def _model_leads_unseen(rankings: SourceRankings) -> bool:
    """Whether the model's first pick is a candidate the nearest device never measured."""
    order = rankings.orders.get("model")
    if order is None or not len(order) or rankings.nearest_us is None:
        return False
    return bool(np.isnan(rankings.nearest_us[int(order[0])]))
