"""How the schema spreads over a Citus cluster once one Postgres is outgrown (deploy/CITUS.md).

Distributed tables are sharded by one column; every unique constraint of such a table must
include it, and its foreign keys may only point at reference tables (copied to every node).
`tests/service/test_distribution.py` holds the schema to these rules, so it stays ready.
"""

from __future__ import annotations

# table -> distribution column
DISTRIBUTED = {
    # Raw, append-only, the bulk: a run and its measurements on the same shard (colocated),
    # so ingest's fold of a run's measurements into aggregates reads one shard per run.
    "probe_runs": "run_id",
    "measurements": "run_id",
    # What priors read: a question names its (hardware, problem), so each is answered by
    # one shard; problems outnumber hardware by far, which spreads the rows more evenly.
    "candidate_stats": "problem_id",
    # A few rows per organisation, added to at each ingest batch.
    "fleet_counters": "org_id",
}

# Small, read by every query, written rarely: a copy on every node.
REFERENCE = frozenset(
    {
        "organisations",
        "tokens",
        "hardware",
        "problems",
        "candidates",
        "model_versions",
        "training_jobs",
    }
)
