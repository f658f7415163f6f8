"""The dashboard's JSON endpoints against figures computed here from the runs pushed.

One service on a database of its own: a simulated fleet's GEMM runs, later runs of some of
the same problems steered by priors, and a model trained through the admin endpoint.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.factories import batch_body, steered_copy, tuning_runs
from tps.catalog import CATALOG
from tps.schemas import ProbeRun

TRAINED_ON = ["RTX A4000", "RTX A6000", "W6600", "W7800"]
FAST = {"ops": ["convolution"], "holdout": "W6600", "n_estimators": 20, "max_candidates": None}


@dataclass(frozen=True)
class Fleet:
    base_url: str
    agent_token: str
    admin_token: str
    runs: list[ProbeRun]
    model_version: int

    def client(self, token: str | None = None) -> httpx.Client:
        token = self.agent_token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0)


def _push(client: httpx.Client, runs: list[ProbeRun]) -> None:
    for start in range(0, len(runs), 500):
        response = client.post("/v1/probe-runs", content=batch_body(runs[start : start + 500]))
        assert response.status_code == 200, response.text


def _train(admin: httpx.Client, deadline_s: float = 120.0) -> int:
    response = admin.post("/v1/admin/retrain", json=FAST)
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        job = admin.get(f"/v1/admin/jobs/{job_id}").json()
        if job["state"] not in ("queued", "running"):
            assert job["state"] == "succeeded", job
            return int(job["model_version"])
        time.sleep(0.2)
    raise AssertionError(f"training job {job_id} still running after {deadline_s} s")


def fleet_runs() -> list[ProbeRun]:
    """Return the runs of a small simulated fleet, plus runs steered by priors."""
    from tools.synthetic import FleetSimulator

    full = list(FleetSimulator(seed=7, hardware=CATALOG.specs()[:4]).runs(240))
    seen: set[tuple[str, str]] = set()
    steered = []
    for run in full:
        key = (run.hardware.fingerprint(), run.problem.key_hash())
        if key not in seen and len(run.measurements) > 12:
            seen.add(key)
            steered.append(steered_copy(run))
    return full + steered[:60] + tuning_runs(TRAINED_ON)


@pytest.fixture(scope="module")
def fleet(postgres_server_url: str) -> Iterator[Fleet]:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from services.profiler_api import migrate
    from services.profiler_api.auth.service import Role, create_token
    from services.profiler_api.db import scratch_database
    from tools.local_service import running_service

    with scratch_database(postgres_server_url, prefix="tps_dashboard") as url:
        migrate.upgrade(url)
        engine = create_engine(url)
        with Session(engine) as session, session.begin():
            agent = create_token(session, org="acme", role=Role.AGENT)
            admin = create_token(session, org="acme", role=Role.ADMIN)
        engine.dispose()
        runs = fleet_runs()
        with running_service(url) as service:
            fleet = Fleet(service.base_url, agent, admin, runs, model_version=0)
            with fleet.client() as client:
                _push(client, runs)
            with fleet.client(admin) as client:
                version = _train(client)
            yield Fleet(service.base_url, agent, admin, runs, model_version=version)


def _get(fleet: Fleet, path: str, token: str | None = None) -> Any:
    with fleet.client(token) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def _by_device_and_op(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["hardware"]["fingerprint"], r["op"]): r for r in rows}


@pytest.mark.parametrize("path", ["coverage", "speedups", "priors", "model", "rates?window_h=1"])
def test_dashboard_data_needs_a_token(fleet: Fleet, path: str) -> None:
    with fleet.client("") as anonymous:
        assert anonymous.get(f"/v1/dashboard/{path}").status_code == 401
    with fleet.client("tps_not-a-token") as stranger:
        assert stranger.get(f"/v1/dashboard/{path}").status_code == 401


def test_coverage_counts_the_problems_each_device_probed(fleet: Fleet) -> None:
    problems: dict[tuple[str, str], set[str]] = defaultdict(set)
    runs: dict[tuple[str, str], int] = defaultdict(int)
    per_op: dict[str, set[str]] = defaultdict(set)
    for run in fleet.runs:
        key = (run.hardware.fingerprint(), run.problem.op)
        problems[key].add(run.problem.key_hash())
        runs[key] += 1
        per_op[run.problem.op].add(run.problem.key_hash())
    coverage = _get(fleet, "/v1/dashboard/coverage")
    assert coverage["problems_per_op"] == {op: len(p) for op, p in per_op.items()}
    cells = _by_device_and_op(coverage["cells"])
    assert set(cells) == set(problems)
    for key, cell in cells.items():
        assert (cell["problems"], cell["runs"]) == (len(problems[key]), runs[key])


def test_speedups_are_the_best_candidate_over_vendor_default(fleet: Fleet) -> None:
    logs: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    default_of: dict[tuple[str, str], str] = {}
    op_of = {}
    for run in fleet.runs:
        hw, problem = run.hardware.fingerprint(), run.problem.key_hash()
        op_of[problem] = run.problem.op
        for m in run.measurements:
            if m.valid and m.median_us is not None:
                logs[(hw, problem, m.candidate.id)].append(math.log(m.median_us))
                if m.candidate.backend == "vendor-default":
                    default_of[(hw, problem)] = m.candidate.id
    best: dict[tuple[str, str], float] = {}
    for (hw, problem, _), values in logs.items():
        mean = sum(values) / len(values)
        best[(hw, problem)] = min(best.get((hw, problem), math.inf), mean)
    gains: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (hw, problem), default in default_of.items():
        values = logs[(hw, problem, default)]
        gains[(hw, op_of[problem])].append(sum(values) / len(values) - best[(hw, problem)])

    rows = _by_device_and_op(_get(fleet, "/v1/dashboard/speedups"))
    assert set(rows) == set(gains)  # the Kernel Tuner runs have no vendor-default: absent
    for key, row in rows.items():
        assert row["problems"] == len(gains[key])
        assert row["geomean_speedup"] == pytest.approx(math.exp(sum(gains[key]) / len(gains[key])))
        assert row["max_speedup"] == pytest.approx(math.exp(max(gains[key])))
        assert row["improved"] == sum(g >= math.log(1.05) for g in gains[key])
        assert row["geomean_speedup"] >= 1.0  # vendor-default is a candidate: never worse


def test_priors_savings_compare_steered_and_full_probes(fleet: Fleet) -> None:
    budgets: dict[tuple[str, str], dict[bool, list[float]]] = defaultdict(
        lambda: {True: [], False: []}
    )
    op_of = {}
    for run in fleet.runs:
        key = (run.hardware.fingerprint(), run.problem.key_hash())
        budgets[key][run.priors.used].append(run.budget_ms)
        op_of[key] = run.problem.op
    saved: dict[tuple[str, str], float] = defaultdict(float)
    steered: dict[tuple[str, str], int] = defaultdict(int)
    for key, by in budgets.items():
        group = (key[0], op_of[key])
        steered[group] += len(by[True])
        if by[True] and by[False]:
            full_mean = sum(by[False]) / len(by[False])
            saved[group] += sum(full_mean - b for b in by[True])

    rows = _by_device_and_op(_get(fleet, "/v1/dashboard/priors"))
    assert set(rows) == {k for k, n in steered.items() if n}
    for key, row in rows.items():
        assert row["steered_runs"] == steered[key]
        assert row["saved_ms"] == pytest.approx(saved[key])
        assert row["saved_ms"] > 0  # a shortlist costs less than every candidate
        assert row["top1_hits"] == 1.0
        assert row["steered_mean_ms"] < row["full_mean_ms"]


def test_model_quality_is_the_active_models_held_out_report(fleet: Fleet) -> None:
    model = _get(fleet, "/v1/dashboard/model")
    assert model["version"] == fleet.model_version and model["ops"] == ["convolution"]
    [report] = model["reports"]
    assert report["op"] == "convolution" and "W6600" in report["holdout"]
    for source in ("policy", "model", "baseline_nearest", "baseline_random"):
        scores = report[source]
        assert 0.0 < scores["score_at_1"] <= scores["score_at_5"] <= 1.0 + 1e-9
        assert len(scores["score_at_k"]) >= 5
    # The registry's own record of the same version says the same.
    [stored] = [m for m in _get(fleet, "/v1/models", fleet.admin_token) if m["active"]]
    assert stored["metrics"]["reports"][0]["policy"]["score_at_1"] == report["policy"]["score_at_1"]


def test_rates_count_every_run_received_in_the_window(fleet: Fleet) -> None:
    rates = _get(fleet, "/v1/dashboard/rates?window_h=1")
    assert rates["bucket_s"] == 60
    assert sum(b["runs"] for b in rates["buckets"]) == len(fleet.runs)
    assert sum(b["steered_runs"] for b in rates["buckets"]) == sum(
        r.priors.used for r in fleet.runs
    )
    assert sum(b["measurements"] for b in rates["buckets"]) == sum(
        len(r.measurements) for r in fleet.runs
    )


@pytest.mark.parametrize("window_h", ["0", "-1", "10000", "soon"])
def test_rates_window_out_of_range_is_a_4xx_naming_it(fleet: Fleet, window_h: str) -> None:
    with fleet.client() as client:
        response = client.get(f"/v1/dashboard/rates?window_h={window_h}")
    assert response.status_code == 422
    assert "window_h" in response.text


def test_page_and_assets_are_served_from_the_service_itself(fleet: Fleet) -> None:
    with httpx.Client(base_url=fleet.base_url) as client:
        page = client.get("/dashboard")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert "http://" not in page.text and "https://" not in page.text  # no CDN
        for asset in ("plots.js", "dashboard.js", "dashboard.css"):
            response = client.get(f"/dashboard/assets/{asset}")
            assert response.status_code == 200 and response.content
            assert "http://" not in response.text.replace("http://www.w3.org/2000/svg", "")
        assert client.get("/dashboard/assets/..%2Fapp.py").status_code == 404
        assert client.get("/dashboard/assets/index.html").status_code == 404


def _metric_families(fleet: Fleet) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    with httpx.Client(base_url=fleet.base_url) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def test_metrics_report_the_training_queue_and_the_active_model(fleet: Fleet) -> None:
    families = _metric_families(fleet)

    def value(name: str, **labels: str) -> float:
        [sample] = [s for s in families[name].samples if s.labels == labels]
        return sample.value

    assert value("tps_state_up") == 1
    assert value("tps_model_active_version") == fleet.model_version
    assert value("tps_training_jobs", state="succeeded") == 1
    assert value("tps_training_jobs", state="queued") == 0
    assert value("tps_training_queue_oldest_seconds") == 0
    assert value("tps_training_last_duration_seconds", state="succeeded") > 0
    assert 0 < value("tps_model_active_age_seconds") < 3600
    [report] = _get(fleet, "/v1/dashboard/model")["reports"]
    for source in ("policy", "model", "baseline_nearest", "baseline_random"):
        for k in ("1", "5"):
            labels = {"op": "convolution", "holdout": report["holdout"], "source": source, "k": k}
            expected = report[source][f"score_at_{k}"]
            assert value("tps_model_heldout_score", **labels) == pytest.approx(expected)


def test_grafana_dashboard_queries_only_metrics_the_service_exports(fleet: Fleet) -> None:
    import json
    import re
    from pathlib import Path

    dashboard = json.loads(
        (Path(__file__).parents[2] / "deploy" / "grafana" / "tps-service.json").read_text()
    )
    exported = set(_metric_families(fleet))
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queried |= set(re.findall(r"\btps_[a-z0-9_]+", target["expr"]))
    assert queried, "the dashboard queries nothing"
    suffix = re.compile(r"_(total|bucket|count|sum)$")
    missing = {name for name in queried if suffix.sub("", name) not in exported}
    assert missing == set()
    # The training, queue and active-model metrics each have a panel.
    for name in (
        "tps_training_jobs",
        "tps_training_queue_oldest_seconds",
        "tps_model_active_version",
        "tps_model_heldout_score",
    ):
        assert name in queried


# -- the page in a real browser ----------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
# Chromium on a machine with no network: no background fetches, no sandbox (runs as root).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PLOTS = ["coverage", "speedups", "priors", "model-s1", "model-s5", "rates"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    import os
    import shutil

    executable = os.environ.get("TPS_CHROMIUM") or shutil.which("chromium") or CHROMIUM
    if not os.path.exists(executable):
        pytest.skip(f"no Chromium at {executable}: `make browser` installs Debian's package")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[dev]'")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _open(browser: Any, fleet: Fleet) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_request(request: Any) -> None:
        if not request.url.startswith(fleet.base_url):
            problems.append(f"off-site request: {request.url}")

    page.on("console", on_console)
    page.on("request", on_request)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(f"{fleet.base_url}/dashboard")
    # The form shows once the page's script has run: only then does submitting stay on the page.
    page.wait_for_selector("#token-form:not([hidden])")
    return page, problems


@pytest.mark.browser
def test_every_plot_renders_with_data_in_chromium(
    fleet: Fleet, browser: Any, tmp_path: Any
) -> None:
    import os
    import shutil

    page, problems = _open(browser, fleet)
    page.fill("#token", fleet.agent_token)  # a read-only (agent) token is enough
    page.click("button[type=submit]")
    page.wait_for_function(
        'names => names.every(n => document.querySelector(`[data-plot="${n}"]`).dataset.state)',
        arg=PLOTS,
        timeout=30_000,
    )
    for name in PLOTS:
        plot = page.locator(f'[data-plot="{name}"]')
        assert plot.get_attribute("data-state") == "rendered", (name, plot.inner_text())
        marks = int(plot.get_attribute("data-marks") or 0)
        assert marks > 0 and plot.locator("svg rect.mark").count() == marks, name
    assert page.locator("#tiles .tile").count() == 6
    assert f"v{fleet.model_version}" in page.locator("#tiles").inner_text()
    assert page.evaluate("sessionStorage.getItem('tps.dashboard.token')") == fleet.agent_token
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("TPS_DASHBOARD_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["TPS_DASHBOARD_SCREENSHOT"])
    page.close()
    assert problems == []


@pytest.mark.browser
def test_a_refused_token_asks_again(fleet: Fleet, browser: Any) -> None:
    page, problems = _open(browser, fleet)
    page.fill("#token", "tps_revoked-or-mistyped")
    page.click("button[type=submit]")
    page.wait_for_function(
        "() => document.getElementById('token-error')?.textContent.length > 0", timeout=60_000
    )
    assert "invalid or revoked token" in page.locator("#token-error").inner_text()
    assert page.locator("#token-form").is_visible()
    assert page.evaluate("sessionStorage.getItem('tps.dashboard.token')") is None
    page.close()
    # The browser logs the 401 answers themselves; nothing else may go wrong.
    assert all("401" in p for p in problems), problems
