"""docker-compose.yml is for users (no Docker engine here): check what can be checked without one."""

import shutil
import subprocess
from pathlib import Path

import yaml

from hrt import devstack
from hrt.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_versions_match_the_dev_stack():
    s = COMPOSE["services"]
    assert s["postgres"]["image"] == f"postgres:{devstack.POSTGRES_MAJOR}"
    assert s["neo4j"]["image"] == f"hrt-neo4j:{devstack.NEO4J_VERSION}"
    build = s["neo4j"]["build"]["dockerfile_inline"]  # Neo4j of the dev stack's version, with HRT's procedures
    assert f"FROM neo4j:{devstack.NEO4J_VERSION}-community" in build
    assert f"-Dneo4j.version={devstack.NEO4J_VERSION}" in build and "/plugins/hrt-neo4j.jar" in build
    assert (ROOT / s["neo4j"]["build"]["context"] / "pom.xml").is_file()
    assert s["weaviate"]["image"].endswith(":" + devstack.WEAVIATE_VERSION.lstrip("v"))
    assert s["weaviate"]["environment"]["DEFAULT_VECTORIZER_MODULE"] == "none"
    assert "7474" in " ".join(s["neo4j"]["ports"]) and "50051" in " ".join(s["weaviate"]["ports"])


def test_every_service_has_a_healthcheck_and_hrt_waits_for_healthy_stores():
    for name, svc in COMPOSE["services"].items():
        assert "healthcheck" in svc, name
    deps = COMPOSE["services"]["hrt"]["depends_on"]
    assert {k: v["condition"] for k, v in deps.items()} == {
        "postgres": "service_healthy", "neo4j": "service_healthy", "weaviate": "service_healthy"}
    assert COMPOSE["services"]["reranker"]["profiles"] == ["rerank"]


def test_hrt_environment_uses_real_settings_and_the_dev_stack_names():
    env = COMPOSE["services"]["hrt"]["environment"]
    fields = {f"HRT_{n.upper()}" for n in Settings.model_fields}
    assert set(env) <= fields, set(env) - fields
    stack = devstack.Stack(dir="/x", services={
        "postgres": devstack.ServiceInfo("postgres", 1, {"port": 1}, "", ""),
        "neo4j": devstack.ServiceInfo("neo4j", 1, {"bolt": 1, "http": 2}, "", ""),
        "weaviate": devstack.ServiceInfo("weaviate", 1, {"http": 1, "grpc": 2}, "", ""),
    })
    assert set(stack.env()) <= set(env)
    assert (env["HRT_RECORD_STORE"], env["HRT_GRAPH_STORE"], env["HRT_VECTOR_INDEX"]) == (
        "postgres", "neo4j", "weaviate")
    Settings(**{k[4:].lower(): v for k, v in env.items() if "${" not in str(v)})  # valid values


def test_docker_compose_config_when_the_plugin_exists():
    docker = shutil.which("docker")
    has_compose = docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    if has_compose:
        r = subprocess.run([docker, "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    else:  # no compose plugin here: the YAML parsed above is what can be checked
        assert COMPOSE["name"] == "hrt"
