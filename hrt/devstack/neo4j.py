"""The dev stack's Neo4j: its home (jars, HRT's procedures, configuration), the initial admin
password, the server on loopback and its readiness."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hrt.devstack.common import (
    NEO4J_PAGE_CACHE,
    NEO4J_USER,
    DevStackError,
    _run,
    _spawn,
    _write_private,
    free_port,
    port_open,
    wait_until,
)
from hrt.devstack.install import ensure_java17, ensure_neo4j_jars, ensure_neo4j_plugin
from hrt.devstack.stack import Credentials, ServiceInfo


def _neo4j_set_initial_password(java: Path, lib: Path, home: Path, password: str) -> None:
    """``neo4j-admin dbms set-initial-password``: writes the admin user's password hash to
    ``data/dbms/auth.ini``, which Neo4j takes into its system database on its first start (and
    ignores after). The password goes through a picocli argument file (``@file``), not the command
    line, which every local user can read."""
    argfile = home / "run" / "initial-password.args"
    _write_private(argfile, password + "\n")
    try:
        _run(
            [
                str(java),
                "-cp",
                f"{lib}/*",
                "org.neo4j.cli.AdminTool",
                "dbms",
                "set-initial-password",
                f"@{argfile}",
            ],
            env={**os.environ, "NEO4J_HOME": str(home), "NEO4J_CONF": str(home / "conf")},
            cwd=home,
        )
    except subprocess.CalledProcessError as exc:
        raise DevStackError(f"setting Neo4j's initial password failed:\n{exc.stdout}{exc.stderr}") from exc
    finally:
        argfile.unlink(missing_ok=True)


def start_neo4j(
    root: Path,
    credentials: Credentials,
    timeout: float = 180.0,
    page_cache: str = NEO4J_PAGE_CACHE,
    ports: Mapping[str, int] | None = None,
) -> ServiceInfo:
    java = ensure_java17()
    lib = ensure_neo4j_jars()
    plugin = ensure_neo4j_plugin()
    home = root / "neo4j"
    _neo4j_prepare_home(home, plugin)
    bolt, http = (ports["bolt"], ports["http"]) if ports else (free_port(), free_port())
    (home / "conf" / "neo4j.conf").write_text(_neo4j_conf(bolt, http, page_cache))
    if not (home / "data" / "databases" / "system").exists():  # never started: its users are not made yet
        _neo4j_set_initial_password(java, lib, home, credentials.neo4j_password)
    logfile = home / "neo4j-console.log"
    started = time.monotonic()
    proc = _spawn(_neo4j_command(java, lib, home), logfile, env={**os.environ, "NEO4J_HOME": str(home)}, cwd=home)
    wait_until(_neo4j_ready(bolt, home, credentials.neo4j_password), "Neo4j", timeout, proc, logfile)
    return ServiceInfo(
        "neo4j", proc.pid, {"bolt": bolt, "http": http}, str(home), str(logfile), round(time.monotonic() - started, 2)
    )


def _neo4j_prepare_home(home: Path, plugin: Path) -> None:
    """Neo4j's folders, private to their owner, with the current build of HRT's plugin."""
    for sub in ("conf", "data", "logs", "plugins", "import", "run"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)  # its files are the graph: other local users must not read past the password
    for old in (home / "plugins").glob("hrt-neo4j*.jar"):
        old.unlink()
    shutil.copy2(plugin, home / "plugins" / "hrt-neo4j.jar")


def _neo4j_conf(bolt: int, http: int, page_cache: str) -> str:
    """``neo4j.conf``: loopback only, authentication on, no HTTPS, no usage reports."""
    return (
        "\n".join(
            [
                "server.default_listen_address=127.0.0.1",
                "server.bolt.enabled=true",
                f"server.bolt.listen_address=127.0.0.1:{bolt}",
                f"server.bolt.advertised_address=127.0.0.1:{bolt}",
                "server.http.enabled=true",
                f"server.http.listen_address=127.0.0.1:{http}",
                "server.https.enabled=false",
                "dbms.security.auth_enabled=true",
                "dbms.usage_report.enabled=false",
                f"server.memory.pagecache.size={page_cache}",
                "dbms.memory.transaction.total.max=512m",
                "server.jvm.additional=-XX:+UseG1GC",
            ]
        )
        + "\n"
    )


def _neo4j_command(java: Path, lib: Path, home: Path) -> list[str]:
    return [
        str(java),
        "-Xms256m",
        "-Xmx1g",
        "-XX:+UseG1GC",
        "-XX:-OmitStackTraceInFastThrow",
        "-XX:+UnlockExperimentalVMOptions",
        "-XX:+TrustFinalNonStaticFields",
        "-XX:+DisableExplicitGC",
        "-Djdk.nio.maxCachedBufferSize=1024",
        "-Dio.netty.tryReflectionSetAccessible=true",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--enable-native-access=ALL-UNNAMED",
        "-Dlog4j2.disable.jmx=true",
        "-Dfile.encoding=UTF-8",
        "-cp",
        f"{lib}/*",
        "org.neo4j.server.CommunityEntryPoint",
        f"--home-dir={home}",
        f"--config-dir={home / 'conf'}",
        "--console-mode",
    ]


def _neo4j_ready(bolt: int, home: Path, password: str) -> Callable[[], bool]:
    """The readiness check of :func:`wait_until`; a refused password is a :class:`DevStackError`."""

    def ready() -> bool:
        # a port check first, then one auto-commit query: execute_query would retry a Neo4j still
        # starting for 30 s, logging a warning for each attempt
        if not port_open(bolt):
            return False
        from neo4j import GraphDatabase
        from neo4j.exceptions import AuthError

        with GraphDatabase.driver(f"bolt://127.0.0.1:{bolt}", auth=(NEO4J_USER, password)) as driver:
            try:
                with driver.session(database="neo4j") as session:
                    record = session.run("RETURN 1 AS one").single()
            except AuthError as exc:
                raise DevStackError(
                    f"Neo4j in {home} refuses the password in stack.json (its data was made without it: by a "
                    f"dev stack from before authentication, or with another password); delete its data "
                    f"(`rm -rf {home / 'data'}`) and run `hrt dev up` again"
                ) from exc
            return bool(record and record["one"] == 1)

    return ready
