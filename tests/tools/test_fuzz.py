"""Schemathesis over the OpenAPI document, as an agent and as an admin, every check on.

A fixed seed and a short budget here; `tps bench fuzz` runs the long version.
"""

from __future__ import annotations

import pytest

from tools.fuzz import FuzzConfig, run_api_fuzz, unexplained

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
