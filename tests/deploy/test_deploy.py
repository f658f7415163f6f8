"""The deployment files, checked offline: Kubernetes manifests against the Kubernetes schemas
(kubernetes-validate ships them), docker-compose.yml against the Compose specification's schema
(vendored by check-jsonschema), and what each must say to run TPS safely.

deploy/build_images.sh builds and starts the images themselves (it needs a container builder);
deploy/proof/images.txt records what it printed.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"  # the oldest release the manifests promise to work on
SECRET_NAMES = re.compile(r"TOKEN|SECRET|PASSWORD|DATABASE_URL")


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in _manifests() if doc["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in _kind(kind) if d["metadata"]["name"] == name]
    return doc


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for _, doc in _manifests():
        spec = doc.get("spec", {})
        if doc["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            specs.append((doc["metadata"]["name"], spec["template"]["spec"]))
    return specs


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, None])
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str | None) -> None:
    import kubernetes_validate

    version = version or kubernetes_validate.latest_version()
    manifests = _manifests()
    assert len(manifests) >= 12
    for filename, doc in manifests:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{filename}: {doc['kind']}/{doc['metadata']['name']}: {exc.message}")


def test_a_broken_manifest_is_caught() -> None:
    import kubernetes_validate

    deployment = _named("Deployment", "tps-api")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment["spec"]["replicas"] = 2
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_api_scales_and_survives_disruptions() -> None:
    labels = _named("Deployment", "tps-api")["spec"]["template"]["metadata"]["labels"]
    hpa = _named("HorizontalPodAutoscaler", "tps-api")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "tps-api",
    }
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    pdb = _named("PodDisruptionBudget", "tps-api")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    service = _named("Service", "tps-api")["spec"]
    assert service["selector"].items() <= labels.items()
    paths = _named("Ingress", "tps-api")["spec"]["rules"][0]["http"]["paths"]
    routes = {p["path"]: p["backend"]["service"]["name"] for p in paths}
    assert routes["/"] == "tps-api"


def test_ingest_has_a_deployment_of_its_own_below_the_readers() -> None:
    paths = _named("Ingress", "tps-api")["spec"]["rules"][0]["http"]["paths"]
    routes = {p["path"]: p["backend"]["service"]["name"] for p in paths}
    assert routes["/v1/probe-runs"] == "tps-ingest"
    service = _named("Service", "tps-ingest")["spec"]
    pod = _named("Deployment", "tps-ingest")["spec"]["template"]
    assert service["selector"].items() <= pod["metadata"]["labels"].items()
    assert _named("HorizontalPodAutoscaler", "tps-ingest")["spec"]["minReplicas"] >= 2
    [ingest] = pod["spec"]["containers"]
    [api] = _named("Deployment", "tps-api")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in ingest["env"]}
    assert int(env["TPS_CPU_NICE"]) > 0 and env["TPS_TRAINING_WORKER"] == "false"

    def millicores(c: dict[str, Any]) -> float:
        cpu = str(c["resources"]["requests"]["cpu"])
        return float(cpu[:-1]) if cpu.endswith("m") else float(cpu) * 1000

    assert millicores(ingest) < millicores(api)
    # The agents in the cluster push there and ask the readers for priors.
    config = yaml.safe_load(_named("ConfigMap", "tps-agent")["data"]["agent.yaml"])
    assert config["ingest_url"].startswith("http://tps-ingest.")
    assert config["service_url"].startswith("http://tps-api.")


def test_each_api_pod_migrates_before_it_serves() -> None:
    pod = _named("Deployment", "tps-api")["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["command"] == ["tps", "db", "upgrade"]
    [api] = pod["containers"]
    assert "--no-migrate" in api["args"]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_agents_run_on_gpu_nodes_with_their_device_plugin_resource() -> None:
    daemonsets = {d["metadata"]["name"]: d for d in _kind("DaemonSet")}
    for name, resource in (
        ("tps-agent-nvidia", "nvidia.com/gpu"),
        ("tps-agent-amd", "amd.com/gpu"),
    ):
        pod = daemonsets[name]["spec"]["template"]["spec"]
        assert pod["nodeSelector"], name
        [agent] = pod["containers"]
        assert agent["resources"]["limits"][resource] == 1
        assert agent["args"][:3] == ["tps", "agent", "run"]
        env = {e["name"]: e for e in agent["env"]}
        assert (
            env["TPS_AGENT_DEPLOYMENT_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "tps-agent"
        )


def test_the_retrain_cronjob_calls_the_admin_endpoint_with_a_secret_token() -> None:
    cron = _named("CronJob", "tps-retrain")["spec"]
    [container] = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert "/v1/admin/retrain" in " ".join(container["command"])
    env = {e["name"]: e for e in container["env"]}
    assert env["TPS_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "tps-admin",
        "key": "token",
    }
    assert cron["concurrencyPolicy"] == "Forbid"


def test_secrets_reach_pods_only_from_secrets() -> None:
    secrets = {s["metadata"]["name"]: set(s["stringData"]) for s in _kind("Secret")}
    for name, pod in _pod_specs():
        for container in pod.get("initContainers", []) + pod["containers"]:
            for env in container.get("env", []):
                if SECRET_NAMES.search(env["name"]):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    assert ref, f"{name}: {env['name']} is a literal"
                    assert ref["key"] in secrets[ref["name"]], (
                        f"{name}: {ref} is not in the examples"
                    )


# -- docker compose -----------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _compose_validator() -> jsonschema.protocols.Validator:
    vendor = files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads((vendor / "compose-spec.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def test_compose_file_is_valid_against_the_compose_specification() -> None:
    validator = _compose_validator()
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(_compose())]
    assert errors == []
    broken = _compose()
    broken["services"]["api"]["healthchek"] = {"test": ["CMD", "true"]}  # a misspelt key
    assert list(validator.iter_errors(broken))


def test_compose_runs_postgres_migrate_api_and_a_gpu_or_cpu_agent() -> None:
    services = _compose()["services"]
    assert {"postgres", "migrate", "api", "agent", "agent-cpu"} <= set(services)
    assert services["migrate"]["command"] == ["tps", "db", "upgrade"]
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    [gpu] = services["agent"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert services["agent"]["profiles"] == ["gpu"]
    assert services["agent-cpu"]["profiles"] == ["cpu"]
    assert services["agent-cpu"]["environment"]["TPS_AGENT_DEVICE"] == "cpu"
    assert "deploy" not in services["agent-cpu"]


def test_compose_takes_every_secret_from_the_env_file() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    example = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^([A-Z_]+)=", example, re.M))
    referenced = set(re.findall(r"\$\{([A-Z_]+)", text))
    assert referenced <= documented, referenced - documented
    for name, service in _compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAMES.search(key):
                assert "${" in str(value), f"{name}: {key} is a literal"
    # The example holds no secret: every secret is left for the operator to fill in.
    for line in example.splitlines():
        key, _, value = line.partition("=")
        if SECRET_NAMES.search(key) and not line.startswith("#"):
            assert value == "", line


# -- the images ---------------------------------------------------------------------------------


def test_the_service_image_carries_the_service_extra_only() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    service = " ".join(extras["service"])
    for heavy in ("torch", "pgserver", "matplotlib"):
        assert heavy not in service
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert '".[service]"' in dockerfile
    assert "libgomp1" in dockerfile  # LightGBM's OpenMP runtime
    assert "COPY tools" not in dockerfile  # the demo, benchmarks and embedded Postgres stay out
    agent = (ROOT / "deploy" / "agent.Dockerfile").read_text()
    assert '".[agent]"' in agent and "TORCH_SPEC" in agent


def test_the_build_context_leaves_out_the_checkout_s_state() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "**/__pycache__", ".pytest_cache", ".mypy_cache", "tests"):
        assert path in ignored
