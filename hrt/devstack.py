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
import hashlib
import json
import logging
import os
import pwd
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hrt.config import default_cache_dir

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
POSTGRES_USER = "postgres"  # the superuser initdb makes: the dev stack's tooling, never HRT
HRT_POSTGRES_ROLE = "hrt"  # the role HRT connects as: owns HRT_POSTGRES_DB, no superuser
HRT_POSTGRES_DB = "hrt"
NEO4J_USER = "neo4j"  # the initial admin user, the one `dbms set-initial-password` sets
WEAVIATE_USER = "hrt"  # the user Weaviate's one API key authenticates as (no authorization module: full access)
REDACTED = "<secret: see stack.env>"


class DevStackError(RuntimeError):
    pass


def cache_dir() -> Path:
    """``$HRT_CACHE_DIR``, default ``~/.cache/hrt`` (``Settings.cache_dir``: the ONNX export lives there too)."""
    return Path(os.environ.get("HRT_CACHE_DIR", default_cache_dir()))


# Servers listen below the kernel's ephemeral range (32768-60999 by default), from which outgoing
# connections take their local ports: a port picked there can be the local end of some connection
# by the time a stopped server starts again on it ("address already in use", seen with Weaviate's
# Raft port while its peers kept dialling).
_LISTEN_PORTS = range(20000, 32000)


def free_port() -> int:
    return free_port_block(1)


def free_port_block(n: int) -> int:
    """A base port B with B..B+n-1 all free (Weaviate derives cluster ports by +1 convention),
    outside the ephemeral range."""
    rng = random.SystemRandom()
    for _ in range(500):
        base = rng.randrange(_LISTEN_PORTS.start, _LISTEN_PORTS.stop - n)
        if all(not port_open(base + i) and _bindable(base + i) for i in range(n)):
            return base
    raise DevStackError(f"no block of {n} free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reusable(port: int) -> bool:
    """Nothing listens on ``port``: a server may bind it again (connections of its previous run
    left in TIME_WAIT do not count, as for the servers themselves, which set SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
    """Poll ``check`` until it is true. It may raise anything while the server starts, except a
    DevStackError: that is a definite answer (wrong credentials), which no waiting changes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DevStackError(f"{what} exited with {proc.returncode}; log tail:\n{tail(logfile)}")
        try:
            if check():
                return
        except DevStackError:
            if proc is not None:
                stop_pid(proc.pid, grace=10)
            raise
        except Exception:  # not up yet
            pass
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


def _secret() -> str:
    # URL-safe base64: nothing a libpq DSN, an env file or a shell would need quoted; never a
    # leading "-", which neo4j-admin (picocli) reads as an option (1 start in 64 failed so)
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token


@dataclass
class Credentials:
    """A stack's secrets, made by the first ``up`` of its directory and kept as long as its data."""

    postgres_password: str  # the postgres superuser's: for making roles and databases, not for HRT
    neo4j_password: str
    weaviate_api_key: str
    # the hrt role's, the one HRT connects with; a stack.json from before the role gets one on
    # load, and the next ``up`` (which sets the role's password on every start) puts it in place
    postgres_hrt_password: str = field(default_factory=_secret)

    @classmethod
    def generate(cls) -> Credentials:
        return cls(_secret(), _secret(), _secret(), _secret())


@dataclass
class Stack:
    dir: str
    services: dict[str, ServiceInfo] = field(default_factory=dict)
    credentials: Credentials | None = None

    # --- credentials --------------------------------------------------------------------------

    @property
    def _creds(self) -> Credentials:
        if self.credentials is None:
            raise DevStackError(f"the dev stack in {self.dir} has no credentials; run `hrt dev up --dir {self.dir}`")
        return self.credentials

    @property
    def postgres_password(self) -> str:
        """The ``postgres`` superuser's password (in :attr:`postgres_admin_dsn`)."""
        return self._creds.postgres_password

    @property
    def postgres_hrt_password(self) -> str:
        """The ``hrt`` role's password (in :attr:`postgres_dsn`)."""
        return self._creds.postgres_hrt_password

    @property
    def neo4j_user(self) -> str:
        return NEO4J_USER

    @property
    def neo4j_password(self) -> str:
        return self._creds.neo4j_password

    @property
    def neo4j_auth(self) -> tuple[str, str]:
        """What the Neo4j driver takes as ``auth``."""
        return (NEO4J_USER, self._creds.neo4j_password)

    @property
    def weaviate_api_key(self) -> str:
        return self._creds.weaviate_api_key

    # --- addresses --------------------------------------------------------------------------

    @property
    def postgres_dsn(self) -> str:
        """HRT's DSN: the ``hrt`` role (no superuser) on the ``hrt`` database it owns."""
        return self.postgres_dsn_for(HRT_POSTGRES_DB)

    def postgres_dsn_for(self, dbname: str) -> str:
        """The ``hrt`` role's DSN for another database it owns (one made with ``OWNER hrt`` through
        :attr:`postgres_admin_dsn`, as the test fixtures make one per test)."""
        return _pg_dsn(self.services["postgres"].ports["port"], HRT_POSTGRES_ROLE, self.postgres_hrt_password, dbname)

    @property
    def postgres_admin_dsn(self) -> str:
        """The superuser's DSN (database ``postgres``): for making databases, never for HRT."""
        p = self.services["postgres"].ports["port"]
        return _pg_dsn(p, POSTGRES_USER, self.postgres_password, "postgres")

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

    def env(self, *, redacted: bool = False) -> dict[str, str]:
        """The ``HRT_*`` variables that point HRT at this stack, credentials included;
        ``redacted``: with each secret replaced by a pointer to stack.env, for printing."""
        out: dict[str, str] = {}
        # which backends HRT uses: the stack's servers (hrt serve needs nothing exported by hand)
        if "postgres" in self.services:
            out["HRT_RECORD_STORE"] = "postgres"
            out["HRT_GRAPH_STORE"] = "neo4j" if "neo4j" in self.services else "embedded"
            out["HRT_VECTOR_INDEX"] = "weaviate" if "weaviate" in self.services else "embedded"
        if "postgres" in self.services:
            out["HRT_POSTGRES_DSN"] = self.postgres_dsn
        if "neo4j" in self.services:
            out["HRT_NEO4J_URI"] = self.neo4j_uri
            out["HRT_NEO4J_USER"] = self.neo4j_user
            out["HRT_NEO4J_PASSWORD"] = self.neo4j_password
        if "weaviate" in self.services:
            out["HRT_WEAVIATE_HOST"] = "127.0.0.1"
            out["HRT_WEAVIATE_HTTP_PORT"] = str(self.weaviate_http_port)
            out["HRT_WEAVIATE_GRPC_PORT"] = str(self.weaviate_grpc_port)
            out["HRT_WEAVIATE_API_KEY"] = self.weaviate_api_key
        if redacted:
            for secret in asdict(self._creds).values():
                out = {k: v.replace(secret, REDACTED) for k, v in out.items()}
        return out

    # --- persistence --------------------------------------------------------------------------

    def save(self) -> None:
        """stack.json (addresses and credentials) and, while services run, stack.env; both mode
        0600. Without services stack.json only keeps the credentials for the next ``up``."""
        d = Path(self.dir)
        _write_private(d / "stack.json", json.dumps(asdict(self), indent=2) + "\n")
        if self.services:
            _write_private(d / "stack.env", "".join(f"{k}='{v}'\n" for k, v in sorted(self.env().items())))
        else:
            (d / "stack.env").unlink(missing_ok=True)

    @classmethod
    def load(cls, directory: Path) -> Stack | None:
        f = directory / "stack.json"
        if not f.exists():
            return None
        raw = json.loads(f.read_text())
        credentials = raw.get("credentials")  # absent in a stack.json from before authentication
        return cls(
            dir=raw["dir"],
            services={k: ServiceInfo(**v) for k, v in raw["services"].items()},
            credentials=Credentials(**credentials) if credentials else None,
        )


def _pg_dsn(port: int, user: str, password: str, dbname: str) -> str:
    return f"host=127.0.0.1 port={port} user={user} password={password} dbname={dbname}"


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read: created 0600 under a temporary name, then renamed
    over ``path``, so the secrets in it are never readable by others, not even for a moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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


def start_weaviate(
    root: Path,
    credentials: Credentials,
    timeout: float = 120.0,
    memory: str = WEAVIATE_MEMORY,
    ports: Mapping[str, int] | None = None,
) -> ServiceInfo:
    binary = ensure_weaviate()
    home = root / "weaviate"
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)  # its files are the vectors and texts: other local users must not read past the key
    http, grpc = (ports["http"], ports["grpc"]) if ports else (free_port(), free_port())
    gossip = ports["gossip"] if ports else free_port_block(4)
    raft = gossip + 2
    env = _weaviate_env(data, credentials.weaviate_api_key, memory, grpc=grpc, gossip=gossip)
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
    wait_until(_weaviate_ready(http, grpc, credentials.weaviate_api_key), "Weaviate", timeout, proc, logfile)
    return ServiceInfo(
        "weaviate",
        proc.pid,
        {"http": http, "grpc": grpc, "gossip": gossip, "raft": raft},
        str(data),
        str(logfile),
        round(time.monotonic() - started, 2),
    )


def _weaviate_env(
    data: Path,
    api_key: str,
    memory: str,
    *,
    grpc: int,
    gossip: int,
    node: str = "node1",
    peers: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """Weaviate's whole environment: a node on loopback whose cluster ports follow ``gossip``
    (data +1, raft +2, raft RPC +3). ``peers`` (node name -> gossip port, this node included)
    makes it one node of a cluster (:mod:`hrt.devcluster`); without, a cluster of one."""
    data_port, raft, raft_rpc = gossip + 1, gossip + 2, gossip + 3
    peers = dict(peers or {node: gossip})
    first = min(peers.values())
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PERSISTENCE_DATA_PATH": str(data),
        # one API key, one user; without an authorization module an authenticated user may do
        # everything, an anonymous request nothing (401)
        "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "false",
        "AUTHENTICATION_APIKEY_ENABLED": "true",
        "AUTHENTICATION_APIKEY_ALLOWED_KEYS": api_key,
        "AUTHENTICATION_APIKEY_USERS": WEAVIATE_USER,
        "DEFAULT_VECTORIZER_MODULE": "none",
        "CLUSTER_HOSTNAME": node,
        "CLUSTER_IN_LOCALHOST": "true",
        "CLUSTER_BIND_ADDR": "127.0.0.1",
        "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
        "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
        "CLUSTER_DATA_BIND_PORT": str(data_port),
        "RAFT_PORT": str(raft),
        "RAFT_INTERNAL_RPC_PORT": str(raft_rpc),
        "RAFT_BOOTSTRAP_EXPECT": str(len(peers)),
        "RAFT_JOIN": ",".join(f"{name}:{port + 2}" for name, port in sorted(peers.items())),
        **({"CLUSTER_JOIN": f"127.0.0.1:{first}"} if len(peers) > 1 else {}),
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


def _weaviate_ready(http: int, grpc: int, api_key: str) -> Callable[[], bool]:
    """The readiness check of :func:`wait_until`: ready, the schema readable with the key, gRPC open."""

    def ready() -> bool:
        import httpx

        r = httpx.get(f"http://127.0.0.1:{http}/v1/.well-known/ready", timeout=2)  # open to anyone
        schema = httpx.get(
            f"http://127.0.0.1:{http}/v1/schema",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=2,
        )
        return r.status_code == 200 and schema.status_code == 200 and port_open(grpc)

    return ready


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


def stop_postgres(pid: int, grace: float = 30.0) -> None:
    """PostgreSQL's fast shutdown, as ``pg_ctl stop`` (its default mode) does: SIGINT to the
    postmaster, which ends its sessions (open transactions roll back), writes a checkpoint and
    exits; every acknowledged commit is on disk. (SIGTERM is its "smart" shutdown, which serves the
    connected clients until they leave.) A SIGKILL after ``grace``."""
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    stop_pid(pid, grace, first=None)


def stop_pid(pid: int, grace: float = 30.0, first: signal.Signals | None = signal.SIGTERM) -> None:
    """``first`` (SIGTERM) to the process group, then SIGKILL after ``grace``."""
    if not _alive(pid):
        return
    if first is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, first)
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
