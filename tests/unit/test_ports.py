"""The store ports declare the adapters' whole surface (issue 21): every adapter class has every
member of its ports, with a compatible signature, and the callers (service, CLI, doctor, API) use
the ports as declared: no probing of a store for a method, no SQL of their own.

mypy checks the same thing where the service assigns each adapter to a port-typed name; this test
fails without mypy, and names the member that is missing."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any, Protocol

import pytest

from hrt.stores.backend import InProcess, NotInProcess
from hrt.stores.base import GraphStore, Outbox, OutboxLease, RecordStore, StoreLifecycle, VectorIndex
from hrt.stores.embedded.backend import EmbeddedInProcess
from hrt.stores.embedded.graph import EmbeddedGraphStore
from hrt.stores.embedded.records import EmbeddedRecordStore
from hrt.stores.embedded.vectors import EmbeddedVectorIndex
from hrt.stores.neo4j.graph import Neo4jGraphStore
from hrt.stores.postgres.records import PostgresOutboxLease, PostgresRecordStore
from hrt.stores.weaviate.vectors import WeaviateVectorIndex

ROOT = Path(__file__).resolve().parents[2]

ADAPTERS: list[tuple[type, type]] = [
    (EmbeddedRecordStore, RecordStore),
    (EmbeddedGraphStore, GraphStore),
    (EmbeddedVectorIndex, VectorIndex),
    (PostgresRecordStore, RecordStore),
    (PostgresRecordStore, Outbox),
    (PostgresOutboxLease, OutboxLease),
    (Neo4jGraphStore, GraphStore),
    (WeaviateVectorIndex, VectorIndex),
    (EmbeddedInProcess, InProcess),
    (NotInProcess, InProcess),
]


def port_members(port: type) -> set[str]:
    """The public members a Protocol declares, its base protocols' included."""
    names: set[str] = set()
    for cls in port.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")}
        names |= {n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")}
    return names


def conformance_problems(adapter: type, port: type) -> list[str]:
    """What ``adapter`` lacks of ``port``: members, async-ness, parameters."""
    problems = []
    for name in sorted(port_members(port)):
        declared = inspect.getattr_static(port, name)
        try:
            found = inspect.getattr_static(adapter, name)
        except AttributeError:
            problems.append(f"{adapter.__name__} has no {name!r} of {port.__name__}")
            continue
        if isinstance(declared, property):
            if callable(found) and not isinstance(found, property):
                problems.append(f"{adapter.__name__}.{name} is a method; {port.__name__} reads it as a property")
            continue
        if not callable(found):
            problems.append(f"{adapter.__name__}.{name} is not callable")
            continue
        if inspect.iscoroutinefunction(declared) != inspect.iscoroutinefunction(found):
            problems.append(f"{adapter.__name__}.{name}: async in one of adapter and port only")
        problems += _parameter_problems(adapter, port, name, declared, found)
    return problems


def _parameter_problems(adapter: type, port: type, name: str, declared: Any, found: Any) -> list[str]:
    want = inspect.signature(declared).parameters
    have = inspect.signature(found).parameters
    problems = []
    for pname, p in want.items():
        q = have.get(pname)
        if q is None or (q.kind != p.kind and q.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD):
            problems.append(f"{adapter.__name__}.{name} does not take {pname!r} as {port.__name__} does")
        elif p.default is not inspect.Parameter.empty and q.default is inspect.Parameter.empty:
            problems.append(f"{adapter.__name__}.{name}: {pname!r} has no default, {port.__name__}'s has")
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for pname, q in have.items():
        if pname not in want and q.default is inspect.Parameter.empty and q.kind not in variadic:
            problems.append(f"{adapter.__name__}.{name} needs {pname!r}, which {port.__name__} never passes")
    return problems


@pytest.mark.parametrize(("adapter", "port"), ADAPTERS, ids=lambda c: c.__name__)
def test_adapter_implements_its_port(adapter: type, port: type) -> None:
    assert conformance_problems(adapter, port) == []


def test_ports_declare_lifecycle_and_maintenance() -> None:
    lifecycle = {"open", "close", "ping", "apply_schema", "warm"}
    assert port_members(StoreLifecycle) == lifecycle
    assert port_members(RecordStore) >= lifecycle | {"outbox", "users", "ids", "entity_rows", "all_relations"}
    assert port_members(GraphStore) >= lifecycle | {"expansion_path", "ids", "nodes", "edges"}
    assert port_members(VectorIndex) >= lifecycle | {"ids", "docs"}
    assert port_members(Outbox) >= {"outbox_lease", "dead_letters", "clear_dead_letters"}


def test_a_missing_member_or_parameter_is_reported() -> None:
    class Partial(EmbeddedGraphStore):
        async def warm(self, depths: list[int]) -> None:  # type: ignore[override]
            """Takes an argument the port never passes."""

    class Missing:
        pass

    for name in port_members(GraphStore) - {"edges"}:
        setattr(Missing, name, inspect.getattr_static(EmbeddedGraphStore, name))
    assert conformance_problems(Missing, GraphStore) == ["Missing has no 'edges' of GraphStore"]
    assert conformance_problems(Partial, GraphStore) == ["Partial.warm needs 'depths', which GraphStore never passes"]


CALLERS = ["hrt/service.py", "hrt/cli.py", "hrt/doctor.py", "hrt/api/app.py", "hrt/projector.py"]
# what callers may still look up by name: argparse's namespace, the ASGI scope's route
GETATTR_ALLOWED = {"args", 'scope.get("route")'}


@pytest.mark.parametrize("path", CALLERS)
def test_callers_use_the_ports_without_probing_or_sql(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    assert "hasattr(" not in text
    probed = {m.group(1).strip() for m in re.finditer(r"\bgetattr\(([^,]+),", text)}
    assert probed <= GETATTR_ALLOWED, f"{path} probes {probed - GETATTR_ALLOWED}: declare it on the port"
    # SQL belongs to the store modules (hrt/stores/)
    assert not re.search(r"\.execute(many)?\(|\bSELECT\b", text), f"{path} runs SQL of its own"
