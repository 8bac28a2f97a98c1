"""The dev stack: PostgreSQL 15, Neo4j 5.26 LTS and Weaviate 1.38 as plain local processes.

Users run the services deployment with ``docker compose up``; these machines have no Docker
engine, so developers and the test fixtures start the same servers here (``hrt dev up | down |
status``). Everything binds to loopback on free ports. Slow artefacts are cached by version under
``$HRT_CACHE_DIR`` (default ``~/.cache/hrt``): the Weaviate binary (built once with ``go install``),
the Neo4j jars (``mvn dependency:copy-dependencies``), HRT's Neo4j procedures (``neo4j-plugin/``,
``mvn package``, keyed by the hash of its sources); PostgreSQL comes from apt when missing.
A stack's addresses are written to ``<dir>/stack.json`` and ``<dir>/stack.env`` (``HRT_*``
variables that ``hrt serve`` reads).

Every server runs with authentication on, as in ``docker-compose.yml``: a loopback port is open to
every local user and process, so an open store would hand any of them every tenant's data. The
first ``up`` of a directory generates two PostgreSQL passwords (the ``postgres`` superuser's and
the ``hrt`` role's), a Neo4j password and a Weaviate API key, kept in ``stack.json``, readable by
its owner alone (mode 0600); ``stack.env`` (also 0600) holds what HRT needs of them. ``down``
keeps them in ``stack.json``: PostgreSQL and Neo4j keep the passwords (as hashes) in the data the
next ``up`` reuses. Data made without them (by a dev stack from before authentication) is refused,
never served open.

HRT connects to PostgreSQL as the ``hrt`` role, which owns the ``hrt`` database (and so its
``public`` schema, where the migrations put every table) and is no superuser: a flaw in HRT, or
its leaked DSN, reaches HRT's own tables, not the server (no ``COPY ... PROGRAM``, no server
files, no other role's data, no new databases or roles). ``up`` makes the role and the database
when they are missing (and sets the role's password to the one in ``stack.json``);
``Stack.postgres_admin_dsn`` (the superuser) is for tooling that makes databases, such as the test
fixtures, which create each test's database owned by ``hrt`` and give HRT the ``hrt`` role's DSN
for it (``Stack.postgres_dsn_for``).

Tooling (``hrt dev``, the test fixtures), outside the server's import graph.
"""

from __future__ import annotations

import contextlib
import functools
import secrets as secrets  # the credentials' source (tests make it predictable)
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hrt.devstack.common import (
    _GO_SIZE,
    _NEO4J_SIZE,
    HRT_POSTGRES_DB,
    HRT_POSTGRES_ROLE,
    JAVA17,
    NEO4J_BROWSER_VERSION,
    NEO4J_PAGE_CACHE,
    NEO4J_USER,
    NEO4J_VERSION,
    PG_BIN,
    POSTGRES_MAJOR,
    POSTGRES_USER,
    REDACTED,
    SERVICES,
    WEAVIATE_MEMORY,
    WEAVIATE_USER,
    WEAVIATE_VERSION,
    DevStackError,
    _reusable,
    cache_dir,
    free_port,
    free_port_block,
    log,
    port_open,
    stop_pid,
    tail,
    wait_until,
)
from hrt.devstack.common import _alive as _alive
from hrt.devstack.common import _run as _run
from hrt.devstack.common import _spawn as _spawn
from hrt.devstack.install import (
    ensure_java17,
    ensure_neo4j_jars,
    ensure_neo4j_plugin,
    ensure_postgres,
    ensure_weaviate,
    plugin_source_dir,
)
from hrt.devstack.neo4j import start_neo4j
from hrt.devstack.postgres import _pg_command as _pg_command
from hrt.devstack.postgres import _pg_hba_problems as _pg_hba_problems
from hrt.devstack.postgres import ensure_hrt_role, start_postgres, stop_postgres
from hrt.devstack.stack import Credentials, ServiceInfo, Stack
from hrt.devstack.stack import _pg_dsn as _pg_dsn
from hrt.devstack.stack import _secret as _secret
from hrt.devstack.weaviate import _weaviate_env as _weaviate_env
from hrt.devstack.weaviate import _weaviate_ready as _weaviate_ready
from hrt.devstack.weaviate import start_weaviate

INSTALLERS: dict[str, Callable[[], object]] = {
    "postgres": ensure_postgres,
    "neo4j": lambda: (ensure_java17(), ensure_neo4j_jars(), ensure_neo4j_plugin()),
    "weaviate": ensure_weaviate,
}

STARTERS: dict[str, Callable[[Path, Credentials], ServiceInfo]] = {
    "postgres": start_postgres,
    "neo4j": start_neo4j,
    "weaviate": start_weaviate,
}


def _refuse_unauthenticated(stack: Stack | None, directory: Path) -> None:
    """Before a directory gets credentials: it must hold no server and no data made without them
    (a dev stack from before authentication, or one whose stack.json was deleted). Those would run
    open, or refuse the new passwords; either way only the user can decide to drop that data."""
    live = [n for n, i in (stack.services.items() if stack else []) if _alive(i.pid)]
    data = [
        p
        for p in (directory / "postgres" / "data" / "PG_VERSION", directory / "neo4j" / "data" / "databases")
        if p.exists()
    ]
    if not live and not data:
        return
    found = []
    if live:
        found.append(f"servers running: {', '.join(live)}")
    if data:
        found.append(f"data: {', '.join(str(p.parent) for p in data)}")
    steps = [f"`hrt dev down --dir {directory}`"] if live else []
    steps.append(f"`rm -rf {directory}` (the stack's databases go with it)")
    raise DevStackError(
        f"the dev stack in {directory} predates authentication or lost its credentials ({'; '.join(found)}). "
        f"Run {' then '.join(steps)}, then `hrt dev up --dir {directory}`: it starts every server with new "
        "credentials (in stack.env)"
    )


def up(
    directory: Path,
    services: tuple[str, ...] = SERVICES,
    *,
    neo4j_page_cache: str = NEO4J_PAGE_CACHE,
    weaviate_memory: str = WEAVIATE_MEMORY,
) -> Stack:
    """Start what is not running yet (reusing a live stack in ``directory``); returns addresses.
    ``neo4j_page_cache`` (e.g. ``2g``) and ``weaviate_memory`` (Weaviate's GOMEMLIMIT, e.g.
    ``4GiB``) size the servers it starts."""
    if not _NEO4J_SIZE.match(neo4j_page_cache):
        raise DevStackError(f"the Neo4j page cache must look like 256m or 2g, got {neo4j_page_cache!r}")
    if not _GO_SIZE.match(weaviate_memory):
        raise DevStackError(f"Weaviate's memory must look like 512MiB or 4GiB, got {weaviate_memory!r}")
    starters: dict[str, Callable[[Path, Credentials], ServiceInfo]] = {
        **STARTERS,
        "neo4j": functools.partial(start_neo4j, page_cache=neo4j_page_cache),
        "weaviate": functools.partial(start_weaviate, memory=weaviate_memory),
    }
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # PostgreSQL runs as another user and must traverse it
    stack = Stack.load(directory)
    if stack is None or stack.credentials is None:
        _refuse_unauthenticated(stack, directory)
        stack = Stack(dir=str(directory), credentials=Credentials.generate())
    credentials = stack._creds
    missing = [n for n in services if n not in stack.services or not _alive(stack.services[n].pid)]
    # Installs first, one at a time (apt and maven must not race), then the servers in parallel.
    for name in missing:
        INSTALLERS[name]()
    errors: list[str] = []
    # a service that stopped comes back on its old ports: running clients (hrt serve) keep their
    # addresses and reconnect by themselves, and stack.env stays as it is
    old_ports = {n: stack.services[n].ports for n in missing if n in stack.services}
    with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
        futures = {
            name: pool.submit(_start_on, starters[name], directory, credentials, old_ports.get(name))
            for name in missing
        }
        for name, future in futures.items():
            try:
                stack.services[name] = future.result()
            except Exception as exc:  # report every service that failed, not just the first
                errors.append(f"{name}: {exc}")
    stack.save()
    if errors:
        raise DevStackError("\n".join(errors))
    return stack


def _start_on(
    starter: Callable[..., ServiceInfo], directory: Path, credentials: Credentials, ports: Mapping[str, int] | None
) -> ServiceInfo:
    """Start a service on ``ports`` (its old ones) when they are all free, else on new ones."""
    if ports and all(_reusable(p) for k, p in ports.items() if k != "raft"):
        return starter(directory, credentials, ports=ports)
    if ports:
        log.warning("the old ports %s are taken: starting on new ones (stack.env changes)", dict(ports))
    return starter(directory, credentials)


def down(directory: Path) -> list[str]:
    stack = Stack.load(directory.resolve())
    if stack is None:
        return []
    stopped = []
    for name, info in stack.services.items():
        if _alive(info.pid):
            stop_pid(info.pid)
            stopped.append(name)
    if stack.credentials is None:  # a stack from before authentication: nothing worth keeping
        (Path(stack.dir) / "stack.json").unlink(missing_ok=True)
        (Path(stack.dir) / "stack.env").unlink(missing_ok=True)
    else:  # the data stays, and with it the passwords PostgreSQL and Neo4j know: keep them for `up`
        Stack(dir=stack.dir, credentials=stack.credentials).save()
    return stopped


def status(directory: Path) -> dict[str, Any]:
    stack = Stack.load(directory.resolve())
    if stack is None:
        return {"running": False, "services": {}}
    out: dict[str, Any] = {}
    for name, info in stack.services.items():
        out[name] = {
            "pid": info.pid,
            "alive": _alive(info.pid),
            "ports": info.ports,
            "open": all(port_open(p) for k, p in info.ports.items() if k not in ("gossip", "raft")),
        }
    return {
        "running": bool(out) and all(s["alive"] for s in out.values()),
        "services": out,
        # secrets stay in stack.env (mode 0600): this output ends up in terminals and logs; a stack
        # without credentials predates authentication (`up` says what to do)
        "env": stack.env(redacted=True) if stack.credentials is not None else {},
        "env_file": str(Path(stack.dir) / "stack.env"),
        "neo4j_browser": stack.neo4j_browser if "neo4j" in stack.services else None,
    }


def restart(directory: Path, name: str) -> Stack:
    """Start a stopped service of the stack in ``directory`` again on its old ports and data (a
    store coming back, as the fault tests need it: its clients keep their addresses)."""
    stack = Stack.load(directory.resolve())
    if stack is None or name not in stack.services or stack.credentials is None:
        raise DevStackError(f"no {name} in the stack at {directory}")
    old = stack.services[name]
    if _alive(old.pid):
        return stack
    starters: dict[str, Callable[..., ServiceInfo]] = {
        "postgres": start_postgres,
        "neo4j": start_neo4j,
        "weaviate": start_weaviate,
    }
    stack.services[name] = starters[name](directory.resolve(), stack._creds, ports=old.ports)
    stack.save()
    return stack


@contextlib.contextmanager
def running(directory: Path, services: tuple[str, ...] = SERVICES) -> Iterator[Stack]:
    """Start a stack for the duration of a block (the test fixtures' way) and stop what it started."""
    before = Stack.load(directory.resolve())
    live_before = {n for n, i in (before.services.items() if before else []) if _alive(i.pid)}
    try:
        stack = up(directory, services)
    except DevStackError:  # one server failed: stop those this call started, not leave them running
        started = Stack.load(directory.resolve())
        for name, info in started.services.items() if started else []:
            if name not in live_before:
                stop_pid(info.pid)
        raise
    try:
        yield stack
    finally:
        # restart() may have replaced a process in the block: stop the one stack.json names now too
        current = Stack.load(directory.resolve())
        for name, info in stack.services.items():
            if name not in live_before:
                stop_pid(info.pid)
                if current is not None and name in current.services and current.services[name].pid != info.pid:
                    stop_pid(current.services[name].pid)


__all__ = [
    "HRT_POSTGRES_DB",
    "HRT_POSTGRES_ROLE",
    "INSTALLERS",
    "JAVA17",
    "NEO4J_BROWSER_VERSION",
    "NEO4J_PAGE_CACHE",
    "NEO4J_USER",
    "NEO4J_VERSION",
    "PG_BIN",
    "POSTGRES_MAJOR",
    "POSTGRES_USER",
    "REDACTED",
    "SERVICES",
    "STARTERS",
    "WEAVIATE_MEMORY",
    "WEAVIATE_USER",
    "WEAVIATE_VERSION",
    "Credentials",
    "DevStackError",
    "ServiceInfo",
    "Stack",
    "cache_dir",
    "down",
    "ensure_hrt_role",
    "ensure_java17",
    "ensure_neo4j_jars",
    "ensure_neo4j_plugin",
    "ensure_postgres",
    "ensure_weaviate",
    "free_port",
    "free_port_block",
    "plugin_source_dir",
    "port_open",
    "restart",
    "running",
    "start_neo4j",
    "start_postgres",
    "start_weaviate",
    "status",
    "stop_pid",
    "stop_postgres",
    "tail",
    "up",
    "wait_until",
]
