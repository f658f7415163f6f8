"""Schemathesis over the OpenAPI document, as an agent and as an admin, every check on.

A fixed seed and a short budget here; `tps bench fuzz` runs the long version.
"""

from __future__ import annotations

import pytest

from tools.fuzz import FuzzConfig, failures_section, run_api_fuzz, unexplained

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
