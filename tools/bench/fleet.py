"""A generated benchmark fleet, written straight into the database by SQL.

Generated load, labelled as such: every run's `source` is `bench-generated-fleet`. The
hardware is the catalog's datasheet specs, each also restricted to fewer compute units (as
green contexts really restrict a GPU, giving distinct configurations); the problems are the
suite's transformer GEMMs and more hidden sizes; the candidates are the suite's cuBLASLt
algorithms and Triton configurations. Each (hardware, problem) pair is probed by a few runs of
8 to 64 candidates, with latencies from the roofline of the pair times a per-candidate
efficiency, as `synthetic.FleetSimulator` models them.

Python writes the few thousand key rows (their ids are the product's own hashes); Postgres
generates the runs, the measurements and their aggregates with INSERT ... SELECT from
generate_series, so that 50 million measurements take minutes, not hours.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from services.profiler_api.ingest import repository
from tools.synthetic import gemm_candidates, gemm_problems, transformer_gemms
from tps.candidate import Candidate
from tps.catalog import CATALOG
from tps.hardware import SOFTWARE_FIELDS, HardwareSpec
from tps.problem import DTYPE_BYTES, ProblemKey

FLEET_SOURCE = "bench-generated-fleet"
RUNS_PER_PAIR = 4
MIN_CANDIDATES, MAX_CANDIDATES = 8, 64
# Fractions of the compute units a configuration keeps (1 = the whole device).
UNIT_FRACTIONS = (1.0, 0.75, 0.5, 0.25, 0.125)
_MORE_HIDDEN = (1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384)
_MORE_TOKENS = (
    1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
    1000, 1024, 1536, 2048, 3000, 3072, 4096, 6144, 8192, 16384,
)  # fmt: skip


def fleet_hardware() -> list[HardwareSpec]:
    """Return every catalog device, whole and restricted to fewer compute units."""
    specs = []
    for spec in CATALOG.specs():
        for fraction in UNIT_FRACTIONS:
            units = max(1, round(spec.compute_units * fraction))
            scale = units / spec.compute_units
            specs.append(
                spec.model_copy(
                    update={
                        "compute_units": units,
                        "peak_tflops": {k: v * scale for k, v in spec.peak_tflops.items()},
                    }
                )
            )
    return list({s.fingerprint(): s for s in specs}.values())


def fleet_problems() -> list[ProblemKey]:
    """Return the suite's transformer GEMMs, then more hidden sizes and token counts."""
    problems = gemm_problems() + transformer_gemms(
        _MORE_HIDDEN, _MORE_TOKENS, ("bf16", "fp16", "fp32")
    )
    return list({p.key_hash(): p for p in problems}.values())


def fleet_candidates() -> list[Candidate]:
    """Return the suite's candidates and Triton variants, more than MAX_CANDIDATES of them."""
    candidates = list(gemm_candidates())
    for candidate in list(candidates):
        if candidate.backend == "triton":
            for group_m in (4, 16):
                candidates.append(
                    Candidate(backend="triton", params={**candidate.params, "GROUP_M": group_m})
                )
    return candidates


@dataclass(frozen=True)
class FleetShape:
    """How many pairs the fleet needs for about `measurements` measurements."""

    pairs: int
    hardware: int
    problems: int

    @classmethod
    def for_measurements(cls, measurements: int, *, hardware: int, problems: int) -> FleetShape:
        mean_candidates = (MIN_CANDIDATES + MAX_CANDIDATES) / 2
        pairs = max(1, round(measurements / (RUNS_PER_PAIR * mean_candidates)))
        if pairs > hardware * problems:
            raise ValueError(
                f"measurements: {measurements} needs {pairs} (hardware, problem) pairs; "
                f"the fleet has {hardware * problems}"
            )
        return cls(pairs=pairs, hardware=hardware, problems=problems)


def _key_rows(
    hardware: list[HardwareSpec], problems: list[ProblemKey], candidates: list[Candidate]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    software = set(SOFTWARE_FIELDS)
    hw_rows = [
        (h.fingerprint(), h.vendor, h.arch, h.name, h.model_dump_json(exclude=software))
        for h in hardware
    ]
    problem_rows = [
        (
            p.key_hash(),
            p.canonical(),
            p.op,
            p.dtype,
            json.dumps(p.dims, sort_keys=True),
            p.model_dump_json(),
        )
        for p in problems
    ]
    candidate_rows = [(c.id, c.backend, json.dumps(c.params, sort_keys=True)) for c in candidates]
    return hw_rows, problem_rows, candidate_rows


# Pair q is hardware q % H and problem (q / H) % P; its candidates are the vendor default
# and n(q) - 1 others, n(q) in 8..64. Latency: the pair's roofline over an efficiency fixed
# per (pair, candidate) in 0.35..0.95, with 2% run-to-run noise.
_PAIRS = """
CREATE TEMP TABLE fleet_pairs AS
SELECT q, h.fingerprint AS hardware_id, p.hash AS problem_id,
    %(min_c)s + (q * 2654435761 %% (%(max_c)s - %(min_c)s + 1)) AS n_candidates,
    greatest(p.flops / (h.tflops * 1e12), p.bytes / (h.bw_gbs * 1e9)) * 1e6 + 4.0 AS base_us
FROM generate_series(0, %(pairs)s - 1) AS q
JOIN fleet_hw AS h ON h.idx = q %% %(n_hw)s
JOIN fleet_problem AS p ON p.idx = (q / %(n_hw)s) %% %(n_problems)s
"""

_RUNS = """
INSERT INTO probe_runs (run_id, org_id, host_id, hardware_id, problem_id, winner_id,
    budget_ms, compile_ms, telemetry, priors, software, rationale, agent_version, source,
    created_at)
SELECT md5('fleet:' || q || ':' || r)::uuid, %(org_id)s,
    'fleet-host-' || (q %% 997) || '-' || r, hardware_id, problem_id, NULL,
    n_candidates * base_us * 30 / 1000, 0, NULL,
    '{"used": false, "source": null, "candidate_ids": [], "winner_rank": null}',
    '{}', 'generated benchmark load', NULL, %(source)s,
    now() - (q * %(runs_per_pair)s + r) * interval '1 second'
FROM fleet_pairs CROSS JOIN generate_series(0, %(runs_per_pair)s - 1) AS r
"""

_MEASUREMENTS = """
INSERT INTO measurements (run_id, ordinal, candidate_id, median_us, p10_us, p90_us, std_us,
    samples, outliers_rejected, valid, error, compile_ms)
SELECT md5('fleet:' || q || ':' || r)::uuid, j, c.id, x.median,
    x.median * 0.98, x.median * 1.03, x.median * 0.02, 10, 0, true, NULL, NULL
FROM fleet_pairs
CROSS JOIN generate_series(0, %(runs_per_pair)s - 1) AS r
CROSS JOIN LATERAL generate_series(0, n_candidates - 1) AS j
JOIN fleet_candidate AS c
    ON c.idx = CASE WHEN j = 0 THEN 0 ELSE 1 + (q * 7 + j) %% (%(n_candidates)s - 1) END
CROSS JOIN LATERAL (
    SELECT base_us / (0.35 + 0.6 * ((q * 2654435761 + c.idx * 40503) %% 1000003) / 1000003.0)
        * (1 + 0.02 * (random() - 0.5)) AS median
) AS x
"""

_STATS = """
INSERT INTO candidate_stats (hardware_id, problem_id, candidate_id, runs, valid_measurements,
    samples, sum_log_median, sum_sq_log_median, min_median_us, max_median_us, first_seen_at,
    last_seen_at)
SELECT r.hardware_id, r.problem_id, m.candidate_id, count(*), count(*), sum(m.samples),
    sum(ln(m.median_us)), sum(ln(m.median_us) ^ 2), min(m.median_us), max(m.median_us),
    min(r.created_at), max(r.created_at)
FROM probe_runs AS r JOIN measurements AS m USING (run_id)
WHERE r.source = %(source)s
GROUP BY r.hardware_id, r.problem_id, m.candidate_id
"""


def generate_fleet(
    conn: psycopg.Connection[Any], *, measurements: int, org_id: int
) -> dict[str, Any]:
    """Write a generated fleet of about `measurements` measurements; return what was written.

    The caller commits. The key rows go through ingest's own upserts.
    """
    started = time.perf_counter()
    hardware, problems, candidates = fleet_hardware(), fleet_problems(), fleet_candidates()
    shape = FleetShape.for_measurements(
        measurements, hardware=len(hardware), problems=len(problems)
    )
    hw_rows, problem_rows, candidate_rows = _key_rows(hardware, problems, candidates)
    repository.upsert_hardware(conn, sorted(hw_rows))
    repository.upsert_problems(conn, sorted(problem_rows))
    repository.upsert_candidates(conn, sorted(candidate_rows))
    conn.execute(
        "CREATE TEMP TABLE fleet_hw (idx int, fingerprint text, tflops float8, bw_gbs float8)"
    )
    conn.execute("CREATE TEMP TABLE fleet_problem (idx int, hash text, flops float8, bytes float8)")
    conn.execute("CREATE TEMP TABLE fleet_candidate (idx int, id text)")
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO fleet_hw VALUES (%s, %s, %s, %s)",
            [
                (
                    i,
                    h.fingerprint(),
                    h.peak_tflops.get("bf16") or h.peak_tflops.get("fp16") or 50.0,
                    h.mem_bandwidth_gbs,
                )
                for i, h in enumerate(hardware)
            ],  # fmt: skip
        )
        cursor.executemany(
            "INSERT INTO fleet_problem VALUES (%s, %s, %s, %s)",
            [
                (
                    i,
                    p.key_hash(),
                    p.flops,
                    DTYPE_BYTES[p.dtype]
                    * (
                        p.dims["m"] * p.dims["k"]
                        + p.dims["k"] * p.dims["n"]
                        + p.dims["m"] * p.dims["n"]
                    ),
                )
                for i, p in enumerate(problems)
            ],  # fmt: skip
        )
        cursor.executemany(
            "INSERT INTO fleet_candidate VALUES (%s, %s)",
            [(i, c.id) for i, c in enumerate(candidates)],
        )
    params = {
        "pairs": shape.pairs,
        "n_hw": shape.hardware,
        "n_problems": shape.problems,
        "n_candidates": len(candidates),
        "min_c": MIN_CANDIDATES,
        "max_c": MAX_CANDIDATES,
        "runs_per_pair": RUNS_PER_PAIR,
        "org_id": org_id,
        "source": FLEET_SOURCE,
    }
    conn.execute("SET LOCAL work_mem = '256MB'")
    conn.execute("SET LOCAL jit = off")
    conn.execute(_PAIRS, params)
    runs = conn.execute(_RUNS, params).rowcount
    written = conn.execute(_MEASUREMENTS, params).rowcount
    stats = conn.execute(_STATS, params).rowcount
    if conn.execute("SELECT to_regclass('fleet_counters')").fetchone() != (None,):
        conn.execute(
            "INSERT INTO fleet_counters AS f (org_id, slot, runs, measurements) "
            "VALUES (%s, 0, %s, %s) ON CONFLICT (org_id, slot) DO UPDATE "
            "SET runs = f.runs + excluded.runs, "
            "measurements = f.measurements + excluded.measurements",
            (org_id, runs, written),
        )
    for table in ("fleet_pairs", "fleet_hw", "fleet_problem", "fleet_candidate"):
        conn.execute(f"DROP TABLE {table}")
    return {
        "source": FLEET_SOURCE,
        "hardware": len(hardware),
        "problems": len(problems),
        "candidates": len(candidates),
        "pairs": shape.pairs,
        "runs": runs,
        "measurements": written,
        "candidate_stats": stats,
        "generate_s": round(time.perf_counter() - started, 1),
    }


def sample_pairs(conn: psycopg.Connection[Any], *, count: int) -> list[tuple[str, str]]:
    """Return `count` (hardware_id, problem_id) pairs of the generated fleet, spread evenly."""
    rows = conn.execute(
        "SELECT hardware_id, problem_id FROM (SELECT DISTINCT hardware_id, problem_id "
        "FROM probe_runs TABLESAMPLE SYSTEM (5) WHERE source = %s) AS sampled "
        "ORDER BY md5(hardware_id || problem_id) LIMIT %s",
        (FLEET_SOURCE, count),
    ).fetchall()
    if len(rows) < count:
        rows = conn.execute(
            "SELECT hardware_id, problem_id FROM probe_runs WHERE source = %s "
            "GROUP BY 1, 2 ORDER BY md5(hardware_id || problem_id) LIMIT %s",
            (FLEET_SOURCE, count),
        ).fetchall()
    return [(str(h), str(p)) for h, p in rows]
