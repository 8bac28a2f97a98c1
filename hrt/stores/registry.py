"""The backends HRT knows, by name: what :mod:`hrt.stores.factory` composes, the docs list and
``hrt dev up`` starts.

Adding a backend: a package that implements the ports of :mod:`hrt.stores.base` and declares one
:class:`~hrt.stores.backend.Backend`, and one line in :data:`BUILT_IN` (or one :func:`register`
call, as a test's fake backend does). Nothing else names it: the settings take any registered
name, the factory asks the descriptor to open its ports.
"""

from __future__ import annotations

from hrt.errors import StoreError
from hrt.stores.backend import ROLE_NAMES, ROLES, VARIABLES, Backend, Role
from hrt.stores.embedded.backend import BACKEND as EMBEDDED
from hrt.stores.neo4j.backend import BACKEND as NEO4J
from hrt.stores.postgres.backend import BACKEND as POSTGRES
from hrt.stores.weaviate.backend import BACKEND as WEAVIATE

BUILT_IN: tuple[Backend, ...] = (EMBEDDED, POSTGRES, NEO4J, WEAVIATE)

_registered: dict[str, Backend] = {b.name: b for b in BUILT_IN}


def register(backend: Backend) -> None:
    """List ``backend`` under its name (a second backend of the same name is refused)."""
    if backend.name in _registered and _registered[backend.name] is not backend:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _registered[backend.name] = backend


def unregister(name: str) -> None:
    """Take a backend off the list (a test's own, when it is done); the built-in ones stay."""
    if any(b.name == name for b in BUILT_IN):
        raise ValueError(f"{name!r} is built in")
    _registered.pop(name, None)


def backends() -> tuple[Backend, ...]:
    """Every registered backend, the built-in ones first, in the order they were registered."""
    return tuple(_registered.values())


def names(role: Role) -> list[str]:
    """The names of the backends that can fill ``role``."""
    return [b.name for b in backends() if role in b.roles]


def backend(role: Role, name: str) -> Backend:
    """The backend called ``name`` for ``role``, or a :class:`StoreError` naming the setting and the
    backends that can fill the role (the unknown value is not repeated)."""
    found = _registered.get(name)
    if found is None or role not in found.roles:
        raise StoreError(f"{VARIABLES[role]} names no {ROLE_NAMES[role]} HRT knows; one of: {', '.join(names(role))}")
    return found


__all__ = ["BUILT_IN", "ROLES", "backend", "backends", "names", "register", "unregister"]
