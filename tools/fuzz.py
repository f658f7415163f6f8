"""Fuzz the API from its OpenAPI document with Schemathesis, as an agent and as an admin.

A scratch database and a live service; Schemathesis (a dev dependency, run as its own
command) sends schema-valid and schema-invalid requests with every check on: no server
error, every status and body as documented, invalid data refused, valid data accepted.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.profiler_api.auth.service import Role
from tools.local_service import issue_tokens, migrated_scratch_database, running_service
from tps.errors import TPSError

# A batch of more runs than allowed is refused with 413 (documented), not 422.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422",
                     "428", "429", "5xx"]
"""

# Rules across fields that JSON Schema cannot state: schema-valid data they refuse is a
# 422 naming the rule (Schemathesis reports it as ST202); anything else is a finding.
CROSS_FIELD_RULES = (
    "is not among the measurements",  # winner_id names a measured candidate
    "is smaller than the row length",  # a GEMM leading dimension
    "is listed twice",  # a candidate offered twice with a prior request
)
_ST202_DETAIL = re.compile(r"- ST202 .*?\[422\][^`]*`(\{.*?\})`", re.S)


def unexplained(result: dict[str, Any]) -> list[str]:
    """Return the failures of one role's run that are not a documented cross-field rule, nor
    an error of the fuzzer's own case generation (`generation_errors`)."""
    found = [
        f"{f['code']} {f['title']}: {', '.join(f['operations'])}"
        for f in result["failures"]
        if f["code"] != "ST202"
    ]
    for detail in result["st202_details"]:
        if not any(rule in detail for rule in CROSS_FIELD_RULES):
            found.append(f"ST202 Schema-valid request rejected: {detail[:300]}")
    errors = result["errors"] - len(result.get("generation_errors", []))
    if errors > 0:
        details = "; ".join(result.get("error_details", [])[:3])
        found.append(f"{errors} runtime errors: {details}")
    return found


_ERROR_BLOCK = re.compile(r"^_{3,} (.+?) _{3,}$", re.M)
# What a runtime error that reached the service, or waited on it, says in its block.
_REQUEST_SIGNS = (
    "requests.exceptions.",
    "Read timed out",
    "ConnectionError",
    "Max retries exceeded",
    "RemoteDisconnected",
)


def generation_errors(output: str) -> list[str]:
    """Return the operations whose runtime error Schemathesis raised while drawing a test
    case, before any request: the traceback runs through its case generation into
    Hypothesis, and nothing in it touched the service.

    Hypothesis has raised FlakyFailure there from its own cache of lambda sources (a KeyError
    in AST_LAMBDAS_CACHE while describing a strategy), once in a CI run: an error of the tool,
    not of the API.
    """
    start = output.find("ERRORS")
    if start < 0:
        return []
    ends = [i for i in (output.find("FAILURES", start), output.find("SUMMARY", start)) if i >= 0]
    section = output[start : min(ends, default=len(output))]
    heads = list(_ERROR_BLOCK.finditer(section))
    found = []
    for head, following in zip(heads, [*heads[1:], None], strict=True):
        block = section[head.end() : following.start() if following else len(section)]
        drawn = "schemathesis/generation/" in block and "/hypothesis/" in block
        if drawn and not any(sign in block for sign in _REQUEST_SIGNS):
            found.append(head.group(1))
    return found


REQUEST_TIMEOUT_S = 60.0

# No training worker (jobs queue and wait) and no rate limit (the fuzzer is the only client).
FUZZ_ENV = {"TPS_TRAINING_WORKER": "false", "TPS_RATE_LIMIT_PER_S": "0"}


class FuzzToolMissing(TPSError):
    """Schemathesis is not installed (it comes with the `dev` extra)."""


@dataclass(frozen=True)
class FuzzConfig:
    max_examples: int = 20
    seed: int = 1
    workers: int = 1
    max_time_s: int | None = None  # per role; None: until the examples are spent
    phases: str = "examples,coverage,fuzzing,stateful"


def _schemathesis() -> str:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if found is None:
        found = shutil.which("schemathesis")
    if found is None:
        raise FuzzToolMissing("schemathesis is not installed: pip install -e '.[dev]'")
    return found


def _run_one(base_url: str, token: str, config: FuzzConfig, report: Path) -> dict[str, Any]:
    config_file = report.with_suffix(".toml")
    config_file.write_text(CONFIG)
    command = [
        _schemathesis(), "--config-file", str(config_file), "run", f"{base_url}/openapi.json",
        "--checks", "all",
        "-H", f"Authorization: Bearer {token}",
        "--max-examples", str(config.max_examples),
        "--seed", str(config.seed),
        "--workers", str(config.workers),
        "--phases", config.phases,
        "--generation-database", "none",
        # what is fuzzed is the answers, not their speed: a loaded machine must not time out
        "--request-timeout", str(REQUEST_TIMEOUT_S),
        "--no-color",
        "--report", "json", "--report-json-path", str(report),
    ]  # fmt: skip
    if config.max_time_s is not None:
        command += ["--max-time", str(config.max_time_s)]
    # In the report's folder: Schemathesis keeps a cache of crashes where it runs.
    completed = subprocess.run(
        command, capture_output=True, text=True, check=False, cwd=report.parent
    )
    if not report.exists():
        raise TPSError(f"schemathesis wrote no report:\n{completed.stdout[-4000:]}")
    data = json.loads(report.read_text())
    return {
        "cases": data["test_cases"]["generated"],
        "unique_failures": data["test_cases"]["unique_failures"],
        "errors": len(data["errors"]),
        "error_details": [json.dumps(e, default=str)[:300] for e in data["errors"]],
        "failures": [
            {"code": f["code"], "title": f["title"], "operations": f["operations"]}
            for f in data["failures"]
        ],
        "running_time_s": round(data["running_time"], 1),
        "exit_code": data["exit_code"],
        "st202_details": _ST202_DETAIL.findall(completed.stdout),
        "generation_errors": generation_errors(completed.stdout),
        "output": failures_section(completed.stdout) if data["failures"] or data["errors"] else "",
    }


def failures_section(output: str, limit: int = 12_000) -> str:
    """Return Schemathesis' output from its first ERRORS or FAILURES section on (errors come
    first: a runtime error's own text is in its section, the report holds only its title)."""
    found = [i for i in (output.find("ERRORS"), output.find("FAILURES")) if i >= 0]
    start = min(found, default=0)
    return output[start : start + limit]


def run_api_fuzz(server_url: str, config: FuzzConfig) -> dict[str, Any]:
    """Fuzz a fresh service as an agent, then as an admin; return what each run found."""
    results: dict[str, Any] = {"seed": config.seed, "max_examples": config.max_examples}
    with migrated_scratch_database(server_url, prefix="tps_fuzz") as url:
        issued = issue_tokens(url, org="fuzz", roles=[Role.AGENT, Role.ADMIN]).tokens
        tokens = {role.value: token for role, token in issued.items()}
        with (
            running_service(url, env=FUZZ_ENV) as service,
            tempfile.TemporaryDirectory(prefix="tps-fuzz-") as folder,
        ):
            for role, token in tokens.items():
                results[role] = _run_one(
                    service.base_url, token, config, Path(folder) / f"{role}.json"
                )
            log = service.log()
            results["server_errors_logged"] = log.count("Traceback")
            if "Traceback" in log:
                results["server_log_tail"] = log[log.index("Traceback") :][:6000]
    return results
