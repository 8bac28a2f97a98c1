"""The dev stack's PostgreSQL: initdb with a superuser password, the server on loopback with
password authentication, HRT's own role and database, and its fast shutdown."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hrt.devstack.common import (
    HRT_POSTGRES_DB,
    HRT_POSTGRES_ROLE,
    POSTGRES_USER,
    DevStackError,
    _alive,
    _spawn,
    _write_private,
    free_port,
    stop_pid,
    wait_until,
)
from hrt.devstack.install import ensure_postgres
from hrt.devstack.stack import Credentials, ServiceInfo, _pg_dsn


def _pg_user() -> str | None:
    """initdb and postgres refuse to run as root: use Debian's postgres account then."""
    return "postgres" if os.geteuid() == 0 else None


def _pg_hba_problems(data: Path) -> list[str]:
    """The lines of a data directory's pg_hba.conf that let a TCP client in without a password
    (``trust``: what the dev stack's initdb wrote before it had authentication)."""
    problems = []
    for line in (data / "pg_hba.conf").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields and fields[0].startswith("host") and "trust" in fields[3:]:
            problems.append(line.strip())
    return problems


def start_postgres(
    root: Path, credentials: Credentials, timeout: float = 60.0, ports: Mapping[str, int] | None = None
) -> ServiceInfo:
    pg = ensure_postgres()
    base = root / "postgres"
    base.mkdir(parents=True, exist_ok=True)
    data = base / "data"
    logfile = base / "postgres.log"
    user = _pg_user()
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(base, pw.pw_uid, pw.pw_gid)
        os.chmod(base, 0o750)
    run_as: dict[str, Any] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        run_as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    env = {"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}
    if (data / "PG_VERSION").exists():
        _pg_refuse_open_data(data)
    else:
        _pg_initdb(pg, base, data, credentials.postgres_password, run_as, env)
    port = ports["port"] if ports else free_port()
    started = time.monotonic()
    proc = _spawn(_pg_command(pg, base, data, port), logfile, env=env, user=user)
    wait_until(_pg_ready(port, data, credentials.postgres_password), "PostgreSQL", timeout, proc, logfile)
    try:
        ensure_hrt_role(_pg_dsn(port, POSTGRES_USER, credentials.postgres_password, "postgres"), credentials)
    except Exception:
        stop_pid(proc.pid, grace=10)
        raise
    return ServiceInfo(
        "postgres", proc.pid, {"port": port}, str(data), str(logfile), round(time.monotonic() - started, 2)
    )


def _pg_refuse_open_data(data: Path) -> None:
    """Refuse a data directory whose pg_hba.conf lets TCP clients in without a password."""
    open_lines = _pg_hba_problems(data)
    if open_lines:
        raise DevStackError(
            f"PostgreSQL's data directory {data} lets clients in without a password ({open_lines[0]!r} in "
            "pg_hba.conf: made by a dev stack from before authentication); delete it "
            f"(`rm -rf {data}`, its databases go with it) and run `hrt dev up` again"
        )


def _pg_initdb(pg: Path, base: Path, data: Path, password: str, run_as: dict[str, Any], env: dict[str, str]) -> None:
    """``initdb`` a new data directory with the superuser's ``password``."""
    # the superuser's password from a file (never on a command line, which every local user
    # can read): TCP clients need it (SCRAM); the socket stays peer, the postgres OS user alone
    pwfile = base / ".pwfile"
    _write_private(pwfile, password + "\n")
    if run_as:
        os.chown(pwfile, run_as["user"], run_as["group"])
    try:
        subprocess.run(
            [
                str(pg / "initdb"),
                "-D",
                str(data),
                "-U",
                POSTGRES_USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=peer",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            env=env,
            **run_as,
        )
    finally:
        pwfile.unlink(missing_ok=True)


def _pg_command(pg: Path, base: Path, data: Path, port: int) -> list[str]:
    return [
        str(pg / "postgres"),
        "-D",
        str(data),
        "-p",
        str(port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        f"unix_socket_directories={base}",
        *(arg for setting in _pg_durability() for arg in ("-c", setting)),
        "-c",
        "max_connections=100",
    ]


def _pg_durability() -> list[str]:
    """Fast and not crash-safe by default (tests): ``synchronous_commit=off`` acknowledges a commit
    before its WAL is written, so a PostgreSQL killed (SIGKILL) may lose the last ~0.6 s of
    acknowledged commits; a clean stop (``pg_ctl stop``, SIGINT or SIGTERM) loses nothing.
    ``HRT_DEV_POSTGRES_DURABLE=1``: PostgreSQL's own defaults (fsync, synchronous commit, full
    pages), as a deployment runs it, under which an acknowledged commit survives a crash."""
    if os.environ.get("HRT_DEV_POSTGRES_DURABLE", "") in ("1", "true", "yes"):
        return ["fsync=on", "synchronous_commit=on", "full_page_writes=on"]
    return ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]


def _pg_ready(port: int, data: Path, password: str) -> Callable[[], bool]:
    """The readiness check of :func:`wait_until`: the superuser runs ``select 1``; a refused password
    is a :class:`DevStackError` (data made with another one), which no waiting changes."""

    def ready() -> bool:
        import psycopg

        dsn = f"host=127.0.0.1 port={port} user={POSTGRES_USER} dbname=postgres"
        try:
            with psycopg.connect(dsn, password=password, connect_timeout=2) as c:
                return c.execute("select 1").fetchone() == (1,)
        except psycopg.OperationalError as exc:
            if "password authentication failed" in str(exc):
                raise DevStackError(
                    f"PostgreSQL in {data} refuses the password in stack.json (its data was made with another "
                    f"one); delete it (`rm -rf {data}`, its databases go with it) and run `hrt dev up` again"
                ) from exc
            raise

    return ready


def ensure_hrt_role(admin_dsn: str, credentials: Credentials) -> None:
    """The role HRT connects as (``hrt``: a login, no superuser, no CREATEDB, no CREATEROLE) with
    the password in ``credentials``, and its database (``hrt``, owned by it, and so its ``public``
    schema: PostgreSQL 15 gives that schema to the database's owner). Idempotent; run on every
    start, so a stack whose data predates the role gets it, and the role's password is always the
    one in stack.json. docker-compose.yml does the same with scripts/postgres-init/."""
    import psycopg
    from psycopg import sql

    role, db = sql.Identifier(HRT_POSTGRES_ROLE), sql.Identifier(HRT_POSTGRES_DB)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (HRT_POSTGRES_ROLE,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        # the SCRAM verifier, made here by libpq: the password itself never reaches the server
        # (nor its log, should the statement be logged)
        verifier = conn.pgconn.encrypt_password(
            credentials.postgres_hrt_password.encode(), HRT_POSTGRES_ROLE.encode(), b"scram-sha-256"
        ).decode()
        conn.execute(
            sql.SQL(
                "ALTER ROLE {} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD {}"
            ).format(role, sql.Literal(verifier))
        )
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (HRT_POSTGRES_DB,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(db, role))


def stop_postgres(pid: int, grace: float = 30.0) -> None:
    """PostgreSQL's fast shutdown, as ``pg_ctl stop`` (its default mode) does: SIGINT to the
    postmaster, which ends its sessions (open transactions roll back), writes a checkpoint and
    exits; every acknowledged commit is on disk. (SIGTERM is its "smart" shutdown, which serves the
    connected clients until they leave.) A SIGKILL after ``grace``."""
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    stop_pid(pid, grace, first=None)
