"""Schemathesis over the OpenAPI document, as an agent and as an admin, every check on.

A fixed seed and a short budget here; `tps bench fuzz` runs the long version.
"""

from __future__ import annotations

import pytest

from tools.fuzz import (
    FuzzConfig,
    failures_section,
    generation_errors,
    run_api_fuzz,
    unexplained,
)

pytestmark = [pytest.mark.slow, pytest.mark.fuzz]


def test_the_api_meets_its_schema_under_fuzzing(postgres_server_url: str) -> None:
    result = run_api_fuzz(
        postgres_server_url,
        FuzzConfig(max_examples=15, seed=1, workers=2, phases="coverage,fuzzing,stateful"),
    )
    assert result["server_errors_logged"] == 0, result.get("server_log_tail")
    for role in ("agent", "admin"):
        assert result[role]["cases"] > 500
        found = unexplained(result[role])
        assert found == [], f"{found}\n{result[role]['output']}"


def test_a_failed_run_shows_its_errors_as_well_as_its_failures() -> None:
    # Schemathesis prints its ERRORS section before FAILURES; the report names a runtime
    # error by its title alone, so its text must come from the output.
    output = (
        "progress...\n===== ERRORS =====\nRuntime Error: read timed out on POST /v1/x\n"
        "===== FAILURES =====\nST202 Schema-valid request rejected\n===== SUMMARY ====="
    )
    shown = failures_section(output)
    assert shown.startswith("ERRORS")
    assert "read timed out" in shown and "ST202" in shown
    assert failures_section("FAILURES only\nST202").startswith("FAILURES")
    assert failures_section("neither") == "neither"


# Schemathesis' ERRORS section, as a CI run printed it (traceback shortened), and a request
# that timed out.
_ERRORS = """
===== ERRORS =====
_______________________________ POST /v1/priors ________________________________
Runtime Error

Inconsistent results: A test case failed on the first run but now succeeds
    + Exception Group Traceback (most recent call last):
    |   File ".venv/lib/python3.11/site-packages/schemathesis/generation/drivers.py", line 179
    |   File ".venv/lib/python3.11/site-packages/schemathesis/generation/hypothesis/examples.py"
    |   File ".venv/lib/python3.11/site-packages/hypothesis/core.py", line 2334, in wrapped_test
    | hypothesis.errors.FlakyFailure: Inconsistent results (1 sub-exception)
    |   File ".venv/lib/python3.11/site-packages/hypothesis/internal/lambda_sources.py", line 353
    | KeyError: ('from __future__ import annotations',)
_______________________________ GET /v1/stats ________________________________
Runtime Error

    |   File ".venv/lib/python3.11/site-packages/schemathesis/generation/drivers.py", line 179
    |   File ".venv/lib/python3.11/site-packages/hypothesis/core.py", line 2334, in wrapped_test
    | requests.exceptions.ReadTimeout: HTTPConnectionPool: Read timed out. (read timeout=60.0)
===== SUMMARY =====
"""


def test_an_error_of_the_fuzzers_own_case_generation_is_not_the_apis() -> None:
    assert generation_errors(_ERRORS) == ["POST /v1/priors"]
    assert generation_errors("no errors at all") == []
    run = {"failures": [], "st202_details": [], "error_details": ["Runtime Error"]}
    drawn = {**run, "errors": 1, "generation_errors": ["POST /v1/priors"]}
    assert unexplained(drawn) == []
    both = {**run, "errors": 2, "generation_errors": ["POST /v1/priors"]}
    assert unexplained(both) == ["1 runtime errors: Runtime Error"]  # the timeout counts
