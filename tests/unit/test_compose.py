"""docker-compose.yml is for users (no Docker engine here): check what can be checked without one."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hrt import devstack
from hrt.config import PLACEHOLDER_SECRET, Settings

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(TEXT)
# compose's variable references: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
SECRET_NAME = re.compile(r"PASSWORD|API_KEY|ALLOWED_KEYS|SECRET|TOKEN|_AUTH$")
SECRETS = {"POSTGRES_PASSWORD", "POSTGRES_HRT_PASSWORD", "NEO4J_PASSWORD", "WEAVIATE_API_KEY", "RERANKER_API_KEY"}
INIT_SCRIPT = ROOT / "scripts" / "postgres-init" / "10-hrt-role.sh"


def reranker_key(service: dict[str, object]) -> str:
    """The key the llama.cpp server demands: its ``API_KEY`` variable (llama_cpp.server's setting
    for ``--api_key``), never on its command line, where process listings show it."""
    command = service["command"]
    assert isinstance(command, list) and not any("api_key" in str(a) for a in command)
    environment = service["environment"]
    assert isinstance(environment, dict)
    return str(environment["API_KEY"])


def env_example() -> dict[str, str]:
    out = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, value = line.split("=", 1)
            out[name.strip()] = value.strip()
    return out


def interpolate(text: str, env: dict[str, str]) -> str:
    """What compose does to the file with ``env`` as its .env (the subset of its syntax used here)."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name)
        if op in (":?", "?") and not value:
            raise KeyError(f"{name}: {arg}")
        if op in (":-", "-") and not value:
            return arg
        return value or ""

    return REFERENCE.sub(one, text.replace("$$", "\0")).replace("\0", "$")


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
        "postgres": "service_healthy",
        "neo4j": "service_healthy",
        "weaviate": "service_healthy",
    }
    assert COMPOSE["services"]["reranker"]["profiles"] == ["rerank"]


def test_hrt_environment_uses_real_settings_and_the_dev_stack_names():
    env = COMPOSE["services"]["hrt"]["environment"]
    fields = {f"HRT_{n.upper()}" for n in Settings.model_fields}
    assert set(env) <= fields, set(env) - fields
    stack = devstack.Stack(
        dir="/x",
        services={
            "postgres": devstack.ServiceInfo("postgres", 1, {"port": 1}, "", ""),
            "neo4j": devstack.ServiceInfo("neo4j", 1, {"bolt": 1, "http": 2}, "", ""),
            "weaviate": devstack.ServiceInfo("weaviate", 1, {"http": 1, "grpc": 2}, "", ""),
        },
        credentials=devstack.Credentials.generate(),
    )
    assert set(stack.env()) <= set(env)
    assert (env["HRT_RECORD_STORE"], env["HRT_GRAPH_STORE"], env["HRT_VECTOR_INDEX"]) == (
        "postgres",
        "neo4j",
        "weaviate",
    )
    Settings(**{k[4:].lower(): v for k, v in env.items() if "${" not in str(v)})  # valid values


def test_docker_compose_config_when_the_plugin_exists():
    docker = shutil.which("docker")
    has_compose = docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    if has_compose:
        r = subprocess.run(
            [docker, "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
    else:  # no compose plugin here: the YAML parsed above is what can be checked
        assert COMPOSE["name"] == "hrt"


# ------------------------------------------------------------------------------------------
# authentication: every store has it on, every secret comes from .env
# ------------------------------------------------------------------------------------------


def test_every_secret_is_a_required_reference_to_env() -> None:
    refs = [(m.group(1), m.group(2)) for m in REFERENCE.finditer(TEXT)]
    secret_refs = {name for name, _ in refs if SECRET_NAME.search(name)}
    assert secret_refs == SECRETS
    for name, op in refs:
        if name in SECRETS:  # never a default: an unset secret stops compose instead of running open
            assert op == ":?", (name, op)
    # every variable whose name says it holds a secret gets its value from such a reference
    for service, svc in COMPOSE["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                names = {m.group(1) for m in REFERENCE.finditer(str(value))}
                assert names & SECRETS, (service, key, value)
                literal = REFERENCE.sub("", str(value))
                assert literal in ("", "neo4j/"), (service, key, literal)  # the user name, nothing secret


def test_no_secret_literal_in_the_file() -> None:
    assert "password=hrt" not in TEXT and "POSTGRES_PASSWORD: hrt" not in TEXT
    for value in env_example().values():  # not even the placeholders
        assert value not in TEXT
    for m in re.finditer(r"password=(\$\{[^}]*\}|\S+)", TEXT):  # the DSN's password
        assert REFERENCE.fullmatch(m.group(1)), m.group(0)
    assert REFERENCE.fullmatch(reranker_key(COMPOSE["services"]["reranker"]))


def test_env_example_defines_every_required_variable_and_env_is_not_committed() -> None:
    required = {m.group(1) for m in REFERENCE.finditer(TEXT) if m.group(2) in (":?", "?")}
    assert required == SECRETS
    example = env_example()
    assert set(example) >= required
    assert all(example[n] for n in required)
    assert "secrets.token_urlsafe" in (ROOT / ".env.example").read_text()  # how to make real values
    ignore = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in ignore or "/.env" in ignore
    git = shutil.which("git")
    if git and (ROOT / ".git").exists():
        tracked = subprocess.run([git, "ls-files", "--", ".env"], cwd=ROOT, capture_output=True, text=True)
        assert tracked.returncode == 0 and tracked.stdout == ""


def test_every_store_has_authentication_on() -> None:
    s = COMPOSE["services"]
    assert s["neo4j"]["environment"]["NEO4J_AUTH"] not in ("none", "", None)
    assert str(s["neo4j"]["environment"]["NEO4J_AUTH"]).startswith("neo4j/${NEO4J_PASSWORD:?")
    weaviate = s["weaviate"]["environment"]
    assert weaviate["AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED"] == "false"
    assert weaviate["AUTHENTICATION_APIKEY_ENABLED"] == "true"
    assert weaviate["AUTHENTICATION_APIKEY_USERS"] == devstack.WEAVIATE_USER
    assert "POSTGRES_HOST_AUTH_METHOD" not in s["postgres"]["environment"]  # "trust" would drop the password
    assert reranker_key(s["reranker"])


def test_healthchecks_work_with_authentication_on() -> None:
    """Neo4j's HTTP root and Weaviate's readiness answer anonymous requests (the dev stack's tests
    check both on real servers); the reranker's /v1/models wants the key."""
    s = COMPOSE["services"]
    assert "http://localhost:7474/ " in " ".join(s["neo4j"]["healthcheck"]["test"]) + " "
    assert "/v1/.well-known/ready" in " ".join(s["weaviate"]["healthcheck"]["test"])
    rerank = " ".join(s["reranker"]["healthcheck"]["test"])
    assert "'Authorization': 'Bearer ' + os.environ['RERANKER_API_KEY']" in rerank
    assert s["reranker"]["environment"]["RERANKER_API_KEY"].startswith("${RERANKER_API_KEY:?")


def test_with_env_example_every_client_gets_the_secret_its_server_was_given() -> None:
    # values of its own in place of the placeholders, which HRT refuses (tests/unit/test_store_files.py)
    example = {k: v.replace(PLACEHOLDER_SECRET, "own") for k, v in env_example().items()}
    resolved = yaml.safe_load(interpolate(TEXT, example))["services"]
    hrt = resolved["hrt"]["environment"]
    assert f"password={example['POSTGRES_HRT_PASSWORD']} " in hrt["HRT_POSTGRES_DSN"]
    assert resolved["postgres"]["environment"]["POSTGRES_PASSWORD"] == example["POSTGRES_PASSWORD"]
    assert resolved["postgres"]["environment"]["HRT_DB_PASSWORD"] == example["POSTGRES_HRT_PASSWORD"]
    assert resolved["neo4j"]["environment"]["NEO4J_AUTH"] == f"{hrt['HRT_NEO4J_USER']}/{hrt['HRT_NEO4J_PASSWORD']}"
    assert resolved["weaviate"]["environment"]["AUTHENTICATION_APIKEY_ALLOWED_KEYS"] == hrt["HRT_WEAVIATE_API_KEY"]
    assert reranker_key(resolved["reranker"]) == hrt["HRT_RERANKER_API_KEY"]
    assert hrt["HRT_RERANKER_API_KEY"] == example["RERANKER_API_KEY"]
    settings = Settings(**{k[4:].lower(): v for k, v in hrt.items()})  # every value valid once resolved
    assert settings.neo4j_password is not None
    assert settings.neo4j_password.get_secret_value() == example["NEO4J_PASSWORD"]
    for name in SECRETS:  # one secret missing from .env: compose refuses to start
        with pytest.raises(KeyError, match=name):
            interpolate(TEXT, {k: v for k, v in example.items() if k != name})


def test_the_hrt_image_runs_as_a_non_root_user_that_owns_what_it_writes() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")  # the last USER is the one CMD runs as
    user = users[-1]
    at = lines.index(f"USER {user}")
    assert at > max(i for i, line in enumerate(lines) if line.startswith("RUN pip install"))
    env = " ".join(line for line in lines if line.startswith("ENV "))
    cache = re.search(r"HRT_CACHE_DIR=(\S+)", env)
    assert cache is not None  # the ONNX export lands in $HRT_CACHE_DIR/onnx on first start
    setup = " ".join(lines[:at])
    assert f"useradd --system --gid {user}" in setup
    assert f'chown {user}:{user} /data "$HRT_CACHE_DIR"' in setup
    # what the hrt service writes: its volume and its SQLite path are that /data
    hrt = COMPOSE["services"]["hrt"]
    assert "hrt-data:/data" in hrt["volumes"] and hrt["environment"]["HRT_DB_PATH"].startswith("/data/")
    assert "HRT_CACHE_DIR" not in hrt["environment"]  # the image's writable one applies


def dsn_fields(dsn: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in dsn.split())


def test_hrt_connects_to_postgres_as_the_role_the_init_script_makes_not_the_superuser() -> None:
    """HRT's DSN names the role and database that scripts/postgres-init/ makes (the role owns the
    database), never the superuser, and HRT's environment holds no superuser password; the script
    reaches the postgres image's /docker-entrypoint-initdb.d, executable (run, not sourced).
    tests/integration/test_postgres_role.py runs the script against a real PostgreSQL."""
    example = {k: v.replace(PLACEHOLDER_SECRET, "own") for k, v in env_example().items()}
    resolved = yaml.safe_load(interpolate(TEXT, example))["services"]
    postgres, hrt = resolved["postgres"]["environment"], resolved["hrt"]["environment"]
    dsn = dsn_fields(hrt["HRT_POSTGRES_DSN"])
    superuser = postgres["POSTGRES_USER"]
    assert dsn["user"] != superuser and dsn["user"] != "postgres"
    assert (dsn["user"], dsn["dbname"], dsn["password"]) == (
        postgres["HRT_DB_USER"],
        postgres["HRT_DB_NAME"],
        postgres["HRT_DB_PASSWORD"],
    )
    assert example["POSTGRES_PASSWORD"] != example["POSTGRES_HRT_PASSWORD"]
    assert not any(example["POSTGRES_PASSWORD"] in str(v) for v in hrt.values())
    assert "POSTGRES_PASSWORD" not in COMPOSE["services"]["hrt"]["environment"]["HRT_POSTGRES_DSN"]
    mounts = COMPOSE["services"]["postgres"]["volumes"]
    assert "./scripts/postgres-init:/docker-entrypoint-initdb.d:ro" in mounts
    assert INIT_SCRIPT.is_file() and INIT_SCRIPT.stat().st_mode & 0o111
    script = INIT_SCRIPT.read_text()
    for name in ("HRT_DB_USER", "HRT_DB_NAME", "HRT_DB_PASSWORD"):
        assert "${" + name in script
    assert "NOSUPERUSER" in script and "OWNER %I" in script
