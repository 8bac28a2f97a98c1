"""The dev stack's credentials without starting a server: generated, written only for their owner,
kept across ``down``, never printed, and a stack directory from before authentication refused."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hrt import devstack


def stack_in(directory: Path) -> devstack.Stack:
    return devstack.Stack(
        dir=str(directory),
        services={
            "postgres": devstack.ServiceInfo("postgres", 1, {"port": 5433}, "", ""),
            "neo4j": devstack.ServiceInfo("neo4j", 1, {"bolt": 7688, "http": 7475}, "", ""),
            "weaviate": devstack.ServiceInfo("weaviate", 1, {"http": 8082, "grpc": 50052}, "", ""),
        },
        credentials=devstack.Credentials.generate(),
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generated_credentials_are_long_random_and_distinct() -> None:
    first, second = devstack.Credentials.generate(), devstack.Credentials.generate()
    values = [*vars(first).values(), *vars(second).values()]
    assert len(set(values)) == 8
    assert all(len(v) >= 40 and v.replace("-", "").replace("_", "").isalnum() for v in values)


def test_stack_env_and_stack_json_are_written_for_their_owner_alone(tmp_path: Path) -> None:
    stack = stack_in(tmp_path)
    (tmp_path / "stack.env").write_text("OLD=1\n")  # an older world-readable file is replaced, not reused
    (tmp_path / "stack.env").chmod(0o644)
    stack.save()
    assert mode(tmp_path / "stack.env") == 0o600
    assert mode(tmp_path / "stack.json") == 0o600
    creds = stack.credentials
    assert creds is not None
    env = dict(line.split("=", 1) for line in (tmp_path / "stack.env").read_text().splitlines())
    assert env["HRT_NEO4J_USER"] == "'neo4j'"
    assert env["HRT_NEO4J_PASSWORD"] == f"'{creds.neo4j_password}'"
    assert env["HRT_WEAVIATE_API_KEY"] == f"'{creds.weaviate_api_key}'"
    # HRT gets the hrt role's password; the superuser's stays in stack.json
    assert f"user=hrt password={creds.postgres_hrt_password} " in env["HRT_POSTGRES_DSN"]
    assert creds.postgres_password not in (tmp_path / "stack.env").read_text()
    assert creds.postgres_password in (tmp_path / "stack.json").read_text()
    assert "OLD" not in env
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed, not left behind
    loaded = devstack.Stack.load(tmp_path)
    assert loaded == stack


def test_accessors_give_each_client_its_credentials(tmp_path: Path) -> None:
    stack = stack_in(tmp_path)
    creds = stack.credentials
    assert creds is not None
    assert stack.neo4j_auth == ("neo4j", creds.neo4j_password)
    assert stack.weaviate_api_key == creds.weaviate_api_key
    assert stack.postgres_dsn == (
        f"host=127.0.0.1 port=5433 user=hrt password={creds.postgres_hrt_password} dbname=hrt"
    )
    assert stack.postgres_dsn_for("t_1") == stack.postgres_dsn.replace("dbname=hrt", "dbname=t_1")
    assert stack.env()["HRT_POSTGRES_DSN"] == stack.postgres_dsn
    assert stack.postgres_admin_dsn == (
        f"host=127.0.0.1 port=5433 user=postgres password={creds.postgres_password} dbname=postgres"
    )
    with pytest.raises(devstack.DevStackError, match="no credentials"):
        _ = devstack.Stack(dir="/x", services=stack.services).neo4j_auth


def test_a_stack_json_from_before_the_hrt_role_gets_a_password_for_it(tmp_path: Path) -> None:
    """Its other credentials are kept (the data holds them); the next ``up`` gives the role the
    new password (tests/integration/test_postgres_role.py, on a real server)."""
    stack = stack_in(tmp_path)
    stack.save()
    raw = json.loads((tmp_path / "stack.json").read_text())
    del raw["credentials"]["postgres_hrt_password"]
    (tmp_path / "stack.json").write_text(json.dumps(raw))
    loaded = devstack.Stack.load(tmp_path)
    assert loaded is not None and loaded.credentials is not None and stack.credentials is not None
    assert loaded.credentials.postgres_password == stack.credentials.postgres_password
    assert loaded.credentials.neo4j_password == stack.credentials.neo4j_password
    new = loaded.credentials.postgres_hrt_password
    assert len(new) >= 40 and new != stack.credentials.postgres_hrt_password


def test_redacted_env_and_status_show_no_secret(tmp_path: Path) -> None:
    stack = stack_in(tmp_path)
    stack.save()
    creds = stack.credentials
    assert creds is not None
    secrets = list(vars(creds).values())
    redacted = stack.env(redacted=True)
    assert set(redacted) == set(stack.env())
    assert redacted["HRT_NEO4J_PASSWORD"] == devstack.REDACTED
    printed = json.dumps(redacted) + json.dumps(devstack.status(tmp_path))
    assert not any(s in printed for s in secrets)
    assert "HRT_NEO4J_URI" in devstack.status(tmp_path)["env"]


def test_down_keeps_the_credentials_the_data_was_made_with(tmp_path: Path) -> None:
    stack = stack_in(tmp_path)
    for info in stack.services.values():
        info.pid = 2**22 + 1  # above pid_max: not running
    stack.save()
    assert devstack.down(tmp_path) == []
    assert not (tmp_path / "stack.env").exists()
    kept = devstack.Stack.load(tmp_path)
    assert kept is not None and kept.services == {} and kept.credentials == stack.credentials
    assert mode(tmp_path / "stack.json") == 0o600
    assert devstack.status(tmp_path)["running"] is False


@pytest.mark.parametrize("data", ["postgres/data/PG_VERSION", "neo4j/data/databases"])
def test_data_made_before_authentication_is_refused_with_what_to_do(tmp_path: Path, data: str) -> None:
    target = tmp_path / data
    target.parent.mkdir(parents=True)
    target.mkdir() if data.endswith("databases") else target.write_text("15\n")
    # a stack.json of the dev stack from before authentication: addresses, no credentials
    old = {
        "dir": str(tmp_path),
        "services": {
            "postgres": {"name": "postgres", "pid": 2**22 + 1, "ports": {"port": 1}, "data_dir": "", "log": ""}
        },
    }
    (tmp_path / "stack.json").write_text(json.dumps(old))
    with pytest.raises(devstack.DevStackError, match="predates authentication") as info:
        devstack.up(tmp_path)
    assert f"rm -rf {tmp_path}" in str(info.value) and str(target.parent) in str(info.value)
    assert not (tmp_path / "stack.env").exists()
    assert "credentials" not in json.loads((tmp_path / "stack.json").read_text())  # nothing made up


def test_a_live_stack_from_before_authentication_is_refused(tmp_path: Path) -> None:
    import os

    old = {
        "dir": str(tmp_path),
        "services": {
            "neo4j": {
                "name": "neo4j",
                "pid": os.getpid(),  # alive
                "ports": {"bolt": 1, "http": 2},
                "data_dir": "",
                "log": "",
            }
        },
    }
    (tmp_path / "stack.json").write_text(json.dumps(old))
    with pytest.raises(devstack.DevStackError, match="servers running: neo4j") as info:
        devstack.up(tmp_path)
    assert f"hrt dev down --dir {tmp_path}" in str(info.value)


def test_pg_hba_lines_that_trust_tcp_clients_are_found(tmp_path: Path) -> None:
    (tmp_path / "pg_hba.conf").write_text(
        "# TYPE DATABASE USER ADDRESS METHOD\n"
        "local all all peer\n"
        "host all all 127.0.0.1/32 scram-sha-256\n"
        "# host all all ::1/128 trust\n"
        "host all all ::1/128 trust\n"
        "hostssl replication all 0.0.0.0/0 trust # comment\n"
    )
    assert devstack._pg_hba_problems(tmp_path) == [
        "host all all ::1/128 trust",
        "hostssl replication all 0.0.0.0/0 trust # comment",
    ]


def test_a_postgres_data_directory_that_trusts_clients_is_not_started(tmp_path: Path) -> None:
    data = tmp_path / "postgres" / "data"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("15\n")
    (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
    with pytest.raises(devstack.DevStackError, match="without a password") as info:
        devstack.start_postgres(tmp_path, devstack.Credentials.generate())
    assert f"rm -rf {data}" in str(info.value)
    assert not (tmp_path / "postgres" / "postgres.log").exists()  # refused before starting anything
