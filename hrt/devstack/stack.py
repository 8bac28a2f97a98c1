"""A dev stack's state: its servers (:class:`ServiceInfo`), its :class:`Credentials`, and the
:class:`Stack` saved as ``stack.json`` and ``stack.env`` with the addresses and DSNs derived from it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hrt.devstack.common import (
    HRT_POSTGRES_DB,
    HRT_POSTGRES_ROLE,
    NEO4J_USER,
    POSTGRES_USER,
    REDACTED,
    DevStackError,
    _write_private,
)


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
        out.update(backend_choices(self.services))
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


def backend_choices(services: Mapping[str, object] | Sequence[str]) -> dict[str, str]:
    """``HRT_RECORD_STORE``, ``HRT_GRAPH_STORE`` and ``HRT_VECTOR_INDEX`` for a stack running
    ``services``: per role, the registered backend that one of them runs (its ``dev_service``), else
    the embedded one; nothing when no record backend runs in the stack (the embedded default)."""
    from hrt.stores import registry
    from hrt.stores.backend import ROLES, VARIABLES

    running = {b.name: b for b in registry.backends() if b.dev_service is not None and b.dev_service in services}
    if not any("records" in b.roles for b in running.values()):
        return {}
    return {
        VARIABLES[role]: next((name for name, b in running.items() if role in b.roles), "embedded") for role in ROLES
    }
