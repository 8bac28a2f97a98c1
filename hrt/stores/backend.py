"""What a backend says of itself: the roles it can fill, the settings it reads, how it opens its
ports, how its schema is migrated, and which dev-stack service runs it.

A backend is a package under ``hrt/stores/`` (or anywhere: a test registers one of its own) with
one :class:`Backend` value; :mod:`hrt.stores.registry` lists them and :mod:`hrt.stores.factory`
composes the chosen ones into :class:`Stores`. The factory knows no backend by name: it asks the
record backend for its side (:class:`RecordSide`), each projection backend for its port, puts the
ones that run as servers behind their circuits with the record side's fallback reads, and gives
stores that live in this process (:class:`InProcess`) to the server that preloads them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from hrt.config import Settings
from hrt.stores.base import GraphStore, Outbox, RecordStore, VectorIndex, VectorRewriter, Writer
from hrt.stores.circuit import StoreCircuit
from hrt.stores.fallback import FallbackReads

if TYPE_CHECKING:
    from hrt.metrics import Metrics

Role = Literal["records", "graph", "vectors"]
ROLES: tuple[Role, ...] = ("records", "graph", "vectors")
# the setting that chooses each role's backend
VARIABLES: dict[Role, str] = {"records": "HRT_RECORD_STORE", "graph": "HRT_GRAPH_STORE", "vectors": "HRT_VECTOR_INDEX"}
ROLE_NAMES: dict[Role, str] = {"records": "record store", "graph": "graph store", "vectors": "vector index"}


class InProcess(Protocol):
    """What a server does for stores that live in its own process: claim their file, preload users'
    caches at start, and read records from worker threads. Stores behind servers need none of it
    (:data:`NOT_IN_PROCESS`)."""

    @property
    def caches_in_process(self) -> bool:
        """Whether a store keeps per-user caches in this process, which a server preloads."""
        ...

    @property
    def reads_from_any_thread(self) -> bool:
        """Whether the record store may be read from a worker thread's own event loop."""
        ...

    def claim(self, purpose: str) -> None:
        """Hold the stores' file for this process (a second writer is refused, naming ``purpose``)."""
        ...

    def largest_users(self, limit: int) -> list[str]:
        """The users with the most entities, most first: those whose caches a server preloads."""
        ...

    def preload(self, user_ids: Sequence[str]) -> None:
        """Load the users' in-process caches now instead of on a first request."""
        ...

    def close(self) -> None: ...


class NotInProcess:
    """No store lives in this process: nothing to claim, preload or close."""

    caches_in_process = False
    reads_from_any_thread = False

    def claim(self, purpose: str) -> None:
        return None

    def largest_users(self, limit: int) -> list[str]:
        return []

    def preload(self, user_ids: Sequence[str]) -> None:
        return None

    def close(self) -> None:
        return None


NOT_IN_PROCESS = NotInProcess()


@dataclass
class Opening:
    """One composition of stores under way: what every backend's opener is given. ``shared`` holds
    what a backend opened for one role and reuses for its others (the embedded file), ``in_process``
    what a backend whose stores live in this process sets, and ``closers`` what is undone if a later
    opener fails."""

    settings: Settings
    dim: int
    model_id: str
    metrics: Metrics | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    in_process: InProcess = NOT_IN_PROCESS
    closers: list[Callable[[], None]] = field(default_factory=list)

    def circuit(self, store: str, probe: Callable[[], Awaitable[None]]) -> StoreCircuit:
        """A circuit for ``store`` (a name for people: "Neo4j") with the settings' timings;
        ``probe`` raises unless the store answers (never waiting on a pool)."""
        s = self.settings
        return StoreCircuit(
            store,
            probe,
            probe_every_s=s.store_probe_interval_s,
            probe_timeout_s=s.store_probe_timeout_s,
            suspect_after_s=s.store_suspect_after_s,
            metrics=self.metrics,
        )


@dataclass(frozen=True)
class RecordSide:
    """What a record backend opens: the record store, the writer of records, the outbox when the
    projections are delivered by the projector (None: they commit with the records), the reads that
    stand in for a projection server while it is down (None: none), the backend its projections must
    live in when they commit with the records (None: any), and the rewriter ``hrt reembed`` uses
    (given a ``drain`` that waits until the projector delivered the new vectors)."""

    records: RecordStore
    writer: Writer
    outbox: Outbox | None
    fallback: FallbackReads | None
    projects_only_into: str | None
    rewriter: Callable[[Callable[[], Awaitable[None]]], VectorRewriter]


@dataclass(frozen=True)
class Backend:
    """One backend, as the registry lists it.

    ``title`` is its name for people (logs, circuits: "Neo4j"); ``variables`` are the settings it
    reads besides the one choosing it (docs, checks); an opener is given for each role in ``roles``;
    ``behind_server`` puts its graph or vector port behind a circuit with the record side's fallback
    reads, and its port applies its own schema (``hrt migrate``); ``key_store`` opens its record
    store alone (API keys, ``hrt export``); ``migrate`` applies the pending schema steps it keeps
    (``hrt migrate``); ``dev_service`` is the ``hrt dev up`` service that runs it (None: none)."""

    name: str
    title: str
    summary: str
    roles: frozenset[Role]
    variables: tuple[str, ...] = ()
    open_records: Callable[[Opening], RecordSide] | None = None
    open_graph: Callable[[Opening], GraphStore] | None = None
    open_vectors: Callable[[Opening], VectorIndex] | None = None
    key_store: Callable[[Settings], AbstractAsyncContextManager[RecordStore]] | None = None
    migrate: Callable[[Settings], dict[str, Any]] | None = None
    behind_server: bool = False
    dev_service: str | None = None

    def __post_init__(self) -> None:
        openers = {"records": self.open_records, "graph": self.open_graph, "vectors": self.open_vectors}
        for role in ROLES:
            if (role in self.roles) != (openers[role] is not None):
                raise ValueError(f"backend {self.name!r}: an opener is given exactly for each of its roles ({role})")
        if "records" in self.roles and self.key_store is None:
            raise ValueError(f"backend {self.name!r}: a record backend opens its key store alone")
