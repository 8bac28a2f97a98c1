"""The dev stack's installs, idempotent and cached by version: PostgreSQL and Java from apt, the
Neo4j jars and HRT's Neo4j procedures from Maven, the Weaviate binary from ``go install``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from hrt.devstack.common import (
    JAVA17,
    NEO4J_BROWSER_VERSION,
    NEO4J_VERSION,
    PG_BIN,
    POSTGRES_MAJOR,
    WEAVIATE_VERSION,
    DevStackError,
    _run,
    cache_dir,
    log,
)


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
    return Path(__file__).resolve().parents[2] / "neo4j-plugin"


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
