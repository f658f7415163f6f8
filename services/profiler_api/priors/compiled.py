"""The `compiled` source of priors: a compiled product new to this hardware, as the most
similar hardware measured it (of the same vendor; the same architecture first).

A compiler's template configurations (inductor's, recorded by the compiled runtime) are not
in any model's candidate universe: the hosts that run them are compiling, and every other
host would have no way to run them. A GPU model the fleet has not compiled a product on yet
gets, instead of nothing, the measured ranking of the most similar hardware of its vendor
that did (source `nearest`). The compiling host then times only those few configurations,
rather than the whole search space, and records what it measured for its own GPU model.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from models.reference import spec_distance
from services.profiler_api.priors import repository
from services.profiler_api.priors.observed import observed_prior
from services.profiler_api.priors.query import PriorQuery
from tps.candidate import COMPILER_BACKENDS
from tps.hardware import HardwareSpec
from tps.problem import ProblemKey
from tps.schemas import Prior

# The hardware read to choose the most similar: a product is compiled on few GPU models.
MAX_OBSERVERS = 64
RATIONALE = (
    "ordered by the medians measured on {name} ({units} units), the most similar {vendor} "
    "hardware that compiled this product (median_us is theirs); not yet measured on this "
    "hardware: time them here"
)


def is_compiled(problem: ProblemKey) -> bool:
    """Whether `problem` is a compiler's product (its variant names the compiler)."""
    return problem.variant.split(":", 1)[0] in COMPILER_BACKENDS


class CompiledPriors:
    """Rank a compiled product by the measurements of the most similar hardware that ran it."""

    name = "compiled"

    def rank(self, session: Session, query: PriorQuery) -> Prior:
        if not is_compiled(query.problem):
            return query.empty("not a compiled product")
        vendor = query.hardware.vendor
        known = repository.observers(
            session,
            problem_id=query.problem_hash,
            vendor=vendor,
            arch=query.hardware.arch,
            exclude=query.hardware_fingerprint,
            limit=MAX_OBSERVERS,
        )
        specs = [(fingerprint, HardwareSpec.model_validate(spec)) for fingerprint, spec in known]
        if not specs:
            return query.empty(f"no other {vendor} hardware compiled {query.problem.canonical()}")
        # A configuration's speed hangs on the architecture first (shared memory, the matrix
        # instructions), then on the device's size: the same architecture leads.
        arch = query.hardware.arch
        fingerprint, nearest = min(
            specs,
            key=lambda known: (
                known[1].arch != arch,
                spec_distance(query.hardware, known[1]),
                known[0],
            ),
        )
        observed = repository.observed_candidates(
            session,
            hardware_id=fingerprint,
            problem_id=query.problem_hash,
            limit=query.limit,
        )
        if not observed:  # its aggregates went between the two reads
            return query.empty(f"no other {vendor} hardware compiled {query.problem.canonical()}")
        prior = observed_prior(
            hardware_fingerprint=query.hardware_fingerprint,
            problem_hash=query.problem_hash,
            canonical=query.problem.canonical(),
            observed=observed,
        )
        return prior.model_copy(
            update={
                "source": "nearest",
                # what was measured there, not a prediction of this hardware's latency
                "candidates": [
                    c.model_copy(update={"source": "nearest", "predicted_us": None})
                    for c in prior.candidates
                ],
                "rationale": RATIONALE.format(
                    name=nearest.name, units=nearest.active_units, vendor=vendor
                ),
            }
        )
