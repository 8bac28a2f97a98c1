"""The dev stack: PostgreSQL 15, Neo4j 5.26 LTS and Weaviate 1.38 as plain local processes.

Users run the services deployment with ``docker compose up``; these machines have no Docker
engine, so developers and the test fixtures start the same servers here (``hrt dev up | down |
status``). Everything binds to loopback on free ports. Slow artefacts are cached by version under
``$HRT_CACHE_DIR`` (default ``~/.cache/hrt``): the Weaviate binary (built once with ``go install``),
the Neo4j jars (``mvn dependency:copy-dependencies``), HRT's Neo4j procedures (``neo4j-plugin/``,
``mvn package``, keyed by the hash of its sources); PostgreSQL comes from apt when missing.
A stack's addresses are written to ``<dir>/stack.json`` and ``<dir>/stack.env`` (``HRT_*``
variables that ``hrt serve`` reads).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

POSTGRES_MAJOR = "15"
NEO4J_VERSION = "5.26.28"
NEO4J_BROWSER_VERSION = "5.24.0"
WEAVIATE_VERSION = "v1.38.11"
JAVA17 = Path("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
PG_BIN = Path(f"/usr/lib/postgresql/{POSTGRES_MAJOR}/bin")
SERVICES = ("postgres", "neo4j", "weaviate")
# Memory of the dev stack's servers: enough for the tests and 100k entities; a million entities
# need more (Weaviate refuses writes near its GOMEMLIMIT: "not enough memory"), see hrt bench
NEO4J_PAGE_CACHE = "256m"
WEAVIATE_MEMORY = "1GiB"
_NEO4J_SIZE = re.compile(r"^[1-9][0-9]*[kmg]$")
_GO_SIZE = re.compile(r"^[1-9][0-9]*(MiB|GiB)$")


class DevStackError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("HRT_CACHE_DIR", Path.home() / ".cache" / "hrt"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_block(n: int) -> int:
    """A base port B with B..B+n-1 all free (Weaviate derives cluster ports by +1 convention)."""
    for _ in range(200):
        base = free_port()
        if base + n < 65535 and all(not port_open(base + i) and _bindable(base + i) for i in range(n)):
            return base
    raise DevStackError(f"no block of {n} free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    log.info("running %s", " ".join(cmd)[:300])
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def wait_until(
    check: Callable[[], bool], what: str, timeout: float, proc: subprocess.Popen[bytes] | None, logfile: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DevStackError(f"{what} exited with {proc.returncode}; log tail:\n{tail(logfile)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.3)
    if proc is not None:
        stop_pid(proc.pid, grace=10)
    raise DevStackError(f"{what} was not ready within {timeout:.0f}s; log tail:\n{tail(logfile)}")


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


# ------------------------------------------------------------------------------------------
# installs (idempotent, cached by version)
# ------------------------------------------------------------------------------------------


def _apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise DevStackError(f"missing {' '.join(packages)}; install them (apt-get install {' '.join(packages)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-q"], env=env)
    _run(["apt-get", "install", "-y", "-q", *packages], env=env)


def ensure_postgres() -> Path:
    if not (PG_BIN / "initdb").exists():
        _apt_install(f"postgresql-{POSTGRES_MAJOR}")
    return PG_BIN


def ensure_java17() -> Path:
    if not JAVA17.exists():
        _apt_install("openjdk-17-jre-headless")
    return JAVA17


def ensure_neo4j_jars() -> Path:
    home = cache_dir() / "neo4j" / NEO4J_VERSION
    lib = home / "lib"
    marker = home / ".complete"
    if marker.exists():
        return lib
    home.mkdir(parents=True, exist_ok=True)
    if shutil.which("mvn") is None:
        _apt_install("maven")
    (home / "pom.xml").write_text(
        f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>local.hrt</groupId><artifactId>neo4j-runner</artifactId><version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.neo4j</groupId><artifactId>neo4j</artifactId><version>{NEO4J_VERSION}</version></dependency>
    <dependency><groupId>org.neo4j.client</groupId><artifactId>neo4j-browser</artifactId>
      <version>{NEO4J_BROWSER_VERSION}</version></dependency>
  </dependencies></project>
"""
    )
    _run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(home / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ]
    )
    if not any(lib.glob("neo4j-kernel-*.jar")):
        raise DevStackError(f"the Neo4j jars did not arrive in {lib}")
    marker.write_text(NEO4J_VERSION)
    return lib


def plugin_source_dir() -> Path:
    """``neo4j-plugin/``: packaged as ``hrt.neo4j_plugin`` when installed, else the source tree's."""
    from importlib import resources

    try:
        packaged = Path(str(resources.files("hrt.neo4j_plugin")))
    except ModuleNotFoundError:
        packaged = None
    if packaged is not None and (packaged / "pom.xml").is_file():
        return packaged
    return Path(__file__).resolve().parents[1] / "neo4j-plugin"


def ensure_neo4j_plugin() -> Path:
    """HRT's Neo4j procedures (``hrt.expand``) as a jar for Neo4j's ``plugins/`` folder, built once
    with ``mvn package`` per content of ``neo4j-plugin/`` (its pom and Java sources)."""
    source = plugin_source_dir()
    files = sorted(
        p
        for p in source.rglob("*")
        if p.is_file() and p.suffix in (".xml", ".java") and "target" not in p.relative_to(source).parts
    )
    if not files:
        raise DevStackError(f"no Neo4j plugin sources in {source}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    home = cache_dir() / "neo4j-plugin" / f"{NEO4J_VERSION}-{digest.hexdigest()[:16]}"
    jar = home / "hrt-neo4j.jar"
    if jar.exists():
        return jar
    if shutil.which("mvn") is None:
        _apt_install("maven")
    if not (JAVA17.parent / "javac").exists():
        _apt_install("openjdk-17-jdk-headless")
    build = home.parent / f".build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(source, build, ignore=shutil.ignore_patterns("target"))
    env = {**os.environ, "JAVA_HOME": str(JAVA17.parents[1])}
    try:
        _run(["mvn", "-q", "-B", "-f", str(build / "pom.xml"), "package", f"-Dneo4j.version={NEO4J_VERSION}"], env=env)
    except subprocess.CalledProcessError as exc:  # Maven reports compile errors on stdout
        output = (exc.stdout or "")[-3000:] + (exc.stderr or "")
        raise DevStackError(f"building the Neo4j plugin failed:\n{output}") from exc
    home.mkdir(parents=True, exist_ok=True)
    os.replace(build / "target" / "hrt-neo4j.jar", jar)  # same filesystem: the jar appears whole or not at all
    shutil.rmtree(build, ignore_errors=True)
    return jar


def ensure_weaviate() -> Path:
    home = cache_dir() / "weaviate" / WEAVIATE_VERSION
    binary = home / "weaviate-server"
    if binary.exists():
        return binary
    home.mkdir(parents=True, exist_ok=True)
    if shutil.which("go") is None:
        raise DevStackError("Go (1.26+) is needed once to build the Weaviate server; install it and retry")
    env = {**os.environ, "GOBIN": str(home), "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-trimpath"}
    log.warning("building weaviate-server %s once (several minutes; cached in %s)", WEAVIATE_VERSION, home)
    _run(
        [
            "go",
            "install",
            "-tags",
            "netgo",
            "-ldflags=-s -w",
            f"github.com/weaviate/weaviate/cmd/weaviate-server@{WEAVIATE_VERSION}",
        ],
        env=env,
    )
    if not binary.exists():
        raise DevStackError(f"go install did not produce {binary}")
    return binary


# ------------------------------------------------------------------------------------------
# processes
# ------------------------------------------------------------------------------------------


@dataclass
class ServiceInfo:
    name: str
    pid: int
    ports: dict[str, int]
    data_dir: str
    log: str
    started_s: float = 0.0


@dataclass
class Stack:
    dir: str
    services: dict[str, ServiceInfo] = field(default_factory=dict)

    # --- addresses --------------------------------------------------------------------------

    @property
    def postgres_dsn(self) -> str:
        p = self.services["postgres"].ports["port"]
        return f"host=127.0.0.1 port={p} user=postgres dbname=postgres"

    @property
    def neo4j_uri(self) -> str:
        return f"bolt://127.0.0.1:{self.services['neo4j'].ports['bolt']}"

    @property
    def neo4j_browser(self) -> str:
        return f"http://127.0.0.1:{self.services['neo4j'].ports['http']}/browser/"

    @property
    def weaviate_http_port(self) -> int:
        return self.services["weaviate"].ports["http"]

    @property
    def weaviate_grpc_port(self) -> int:
        return self.services["weaviate"].ports["grpc"]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if "postgres" in self.services:
            out["HRT_POSTGRES_DSN"] = self.postgres_dsn
        if "neo4j" in self.services:
            out["HRT_NEO4J_URI"] = self.neo4j_uri
        if "weaviate" in self.services:
            out["HRT_WEAVIATE_HOST"] = "127.0.0.1"
            out["HRT_WEAVIATE_HTTP_PORT"] = str(self.weaviate_http_port)
            out["HRT_WEAVIATE_GRPC_PORT"] = str(self.weaviate_grpc_port)
        return out

    # --- persistence --------------------------------------------------------------------------

    def save(self) -> None:
        d = Path(self.dir)
        (d / "stack.json").write_text(json.dumps(asdict(self), indent=2) + "\n")
        (d / "stack.env").write_text("".join(f"{k}='{v}'\n" for k, v in sorted(self.env().items())))

    @classmethod
    def load(cls, directory: Path) -> Stack | None:
        f = directory / "stack.json"
        if not f.exists():
            return None
        raw = json.loads(f.read_text())
        return cls(dir=raw["dir"], services={k: ServiceInfo(**v) for k, v in raw["services"].items()})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spawn(
    cmd: list[str], logfile: Path, env: dict[str, str] | None = None, user: str | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    out = logfile.open("ab")
    kwargs: dict[str, Any] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    return subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True, **kwargs
    )


def _pg_user() -> str | None:
    """initdb and postgres refuse to run as root: use Debian's postgres account then."""
    return "postgres" if os.geteuid() == 0 else None


def start_postgres(root: Path, timeout: float = 60.0) -> ServiceInfo:
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
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            [
                str(pg / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
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
    port = free_port()
    started = time.monotonic()
    proc = _spawn(
        [
            str(pg / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={base}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=100",
        ],
        logfile,
        env=env,
        user=user,
    )

    def ready() -> bool:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", connect_timeout=2) as c:
            return c.execute("select 1").fetchone() == (1,)

    wait_until(ready, "PostgreSQL", timeout, proc, logfile)
    return ServiceInfo(
        "postgres", proc.pid, {"port": port}, str(data), str(logfile), round(time.monotonic() - started, 2)
    )


def start_neo4j(root: Path, timeout: float = 180.0, page_cache: str = NEO4J_PAGE_CACHE) -> ServiceInfo:
    java = ensure_java17()
    lib = ensure_neo4j_jars()
    plugin = ensure_neo4j_plugin()
    home = root / "neo4j"
    for sub in ("conf", "data", "logs", "plugins", "import", "run"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    for old in (home / "plugins").glob("hrt-neo4j*.jar"):
        old.unlink()
    shutil.copy2(plugin, home / "plugins" / "hrt-neo4j.jar")
    bolt, http = free_port(), free_port()
    (home / "conf" / "neo4j.conf").write_text(
        "\n".join(
            [
                "server.default_listen_address=127.0.0.1",
                "server.bolt.enabled=true",
                f"server.bolt.listen_address=127.0.0.1:{bolt}",
                f"server.bolt.advertised_address=127.0.0.1:{bolt}",
                "server.http.enabled=true",
                f"server.http.listen_address=127.0.0.1:{http}",
                "server.https.enabled=false",
                "dbms.security.auth_enabled=false",
                "dbms.usage_report.enabled=false",
                f"server.memory.pagecache.size={page_cache}",
                "dbms.memory.transaction.total.max=512m",
                "server.jvm.additional=-XX:+UseG1GC",
            ]
        )
        + "\n"
    )
    logfile = home / "neo4j-console.log"
    cmd = [
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
    started = time.monotonic()
    proc = _spawn(cmd, logfile, env={**os.environ, "NEO4J_HOME": str(home)}, cwd=home)

    def ready() -> bool:
        # a port check first, then one auto-commit query: execute_query would retry a Neo4j still
        # starting for 30 s, logging a warning for each attempt
        if not port_open(bolt):
            return False
        from neo4j import GraphDatabase

        with GraphDatabase.driver(f"bolt://127.0.0.1:{bolt}", auth=None) as driver:
            with driver.session(database="neo4j") as session:
                record = session.run("RETURN 1 AS one").single()
            return bool(record and record["one"] == 1)

    wait_until(ready, "Neo4j", timeout, proc, logfile)
    return ServiceInfo(
        "neo4j", proc.pid, {"bolt": bolt, "http": http}, str(home), str(logfile), round(time.monotonic() - started, 2)
    )


def start_weaviate(root: Path, timeout: float = 120.0, memory: str = WEAVIATE_MEMORY) -> ServiceInfo:
    binary = ensure_weaviate()
    home = root / "weaviate"
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    http, grpc = free_port(), free_port()
    gossip = free_port_block(4)
    data_port, raft, raft_rpc = gossip + 1, gossip + 2, gossip + 3
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PERSISTENCE_DATA_PATH": str(data),
        "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "true",
        "DEFAULT_VECTORIZER_MODULE": "none",
        "CLUSTER_HOSTNAME": "node1",
        "CLUSTER_IN_LOCALHOST": "true",
        "CLUSTER_BIND_ADDR": "127.0.0.1",
        "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
        "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
        "CLUSTER_DATA_BIND_PORT": str(data_port),
        "RAFT_PORT": str(raft),
        "RAFT_INTERNAL_RPC_PORT": str(raft_rpc),
        "RAFT_BOOTSTRAP_EXPECT": "1",
        "RAFT_JOIN": f"node1:{raft}",
        "GRPC_PORT": str(grpc),
        "GO_PROFILING_DISABLE": "true",
        "DISABLE_TELEMETRY": "true",
        "QUERY_DEFAULTS_LIMIT": "25",
        "GOMEMLIMIT": memory,
        "GOMAXPROCS": "2",
        "LOG_LEVEL": "warning",
        "DISK_USE_READONLY_PERCENTAGE": "100",
        "DISK_USE_WARNING_PERCENTAGE": "100",
    }
    logfile = home / "weaviate.log"
    started = time.monotonic()
    proc = _spawn(
        [
            str(binary),
            "--host",
            "127.0.0.1",
            "--port",
            str(http),
            "--scheme",
            "http",
            "--read-timeout=600s",
            "--write-timeout=600s",
        ],
        logfile,
        env=env,
        cwd=home,
    )

    def ready() -> bool:
        import httpx

        r = httpx.get(f"http://127.0.0.1:{http}/v1/.well-known/ready", timeout=2)
        schema = httpx.get(f"http://127.0.0.1:{http}/v1/schema", timeout=2)
        return r.status_code == 200 and schema.status_code == 200 and port_open(grpc)

    wait_until(ready, "Weaviate", timeout, proc, logfile)
    return ServiceInfo(
        "weaviate",
        proc.pid,
        {"http": http, "grpc": grpc, "gossip": gossip, "raft": raft},
        str(data),
        str(logfile),
        round(time.monotonic() - started, 2),
    )


INSTALLERS: dict[str, Callable[[], object]] = {
    "postgres": ensure_postgres,
    "neo4j": lambda: (ensure_java17(), ensure_neo4j_jars(), ensure_neo4j_plugin()),
    "weaviate": ensure_weaviate,
}

STARTERS: dict[str, Callable[[Path], ServiceInfo]] = {
    "postgres": start_postgres,
    "neo4j": start_neo4j,
    "weaviate": start_weaviate,
}


def stop_pid(pid: int, grace: float = 30.0) -> None:
    if not _alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


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
    starters: dict[str, Callable[[Path], ServiceInfo]] = {
        **STARTERS,
        "neo4j": functools.partial(start_neo4j, page_cache=neo4j_page_cache),
        "weaviate": functools.partial(start_weaviate, memory=weaviate_memory),
    }
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # PostgreSQL runs as another user and must traverse it
    stack = Stack.load(directory) or Stack(dir=str(directory))
    missing = [n for n in services if n not in stack.services or not _alive(stack.services[n].pid)]
    # Installs first, one at a time (apt and maven must not race), then the servers in parallel.
    for name in missing:
        INSTALLERS[name]()
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
        futures = {name: pool.submit(starters[name], directory) for name in missing}
        for name, future in futures.items():
            try:
                stack.services[name] = future.result()
            except Exception as exc:  # report every service that failed, not just the first
                errors.append(f"{name}: {exc}")
    stack.save()
    if errors:
        raise DevStackError("\n".join(errors))
    return stack


def down(directory: Path) -> list[str]:
    stack = Stack.load(directory.resolve())
    if stack is None:
        return []
    stopped = []
    for name, info in stack.services.items():
        if _alive(info.pid):
            stop_pid(info.pid)
            stopped.append(name)
    (Path(stack.dir) / "stack.json").unlink(missing_ok=True)
    (Path(stack.dir) / "stack.env").unlink(missing_ok=True)
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
        "running": all(s["alive"] for s in out.values()),
        "services": out,
        "env": stack.env(),
        "neo4j_browser": stack.neo4j_browser if "neo4j" in stack.services else None,
    }


@contextlib.contextmanager
def running(directory: Path, services: tuple[str, ...] = SERVICES) -> Iterator[Stack]:
    """Start a stack for the duration of a block (the test fixtures' way) and stop what it started."""
    before = Stack.load(directory.resolve())
    live_before = {n for n, i in (before.services.items() if before else []) if _alive(i.pid)}
    stack = up(directory, services)
    try:
        yield stack
    finally:
        for name, info in stack.services.items():
            if name not in live_before:
                stop_pid(info.pid)
