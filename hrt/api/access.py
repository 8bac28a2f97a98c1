"""Who may call each route, declared once on the route: ``dependencies=[needs("retrieve")]``.

:func:`needs` (a key with this scope; ``audited``: every outcome is one ``hrt.audit`` line; ``bulk_body``:
the body may be as large as ``HRT_MAX_INGEST_BODY_BYTES``) or :func:`no_key` is the one place a
route says it. :func:`route_rules` reads these declarations back from the app's routes, and from
them come the :class:`hrt.api.guard.Guard`'s scope table, its audited routes and open paths, the
body limits (:class:`hrt.api.bodies.BodyLimit`) and each operation's security in the OpenAPI
document (:mod:`hrt.api.openapi`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute

from hrt.auth import Principal, Scope


@dataclass(frozen=True)
class Access:
    """A route's access rule. ``scope`` None: no key needed."""

    scope: Scope | None
    audited: bool = False
    bulk_body: bool = False

    async def __call__(self, request: Request) -> None:
        # the Guard has checked the scope before the request got here; checked again where it is declared
        if self.scope is not None:
            principal_of(request).require_scope(self.scope)


def needs(scope: Scope, *, audited: bool = False, bulk_body: bool = False) -> Any:
    """The dependency declaring that a route needs a key with ``scope``."""
    return Depends(Access(scope, audited=audited, bulk_body=bulk_body))


def no_key() -> Any:
    """The dependency declaring that a route answers without a key."""
    return Depends(Access(None))


def access_of(route: APIRoute) -> list[Access]:
    """The access rules a route declares (exactly one on every route of the app)."""
    return [
        d.dependency for d in route.dependencies if isinstance(d, DependsParam) and isinstance(d.dependency, Access)
    ]


@dataclass(frozen=True)
class RouteRules:
    """The declarations of every route, by (method, route path)."""

    scopes: dict[tuple[str, str], str] = field(default_factory=dict)
    audited: frozenset[tuple[str, str]] = frozenset()
    open_paths: frozenset[str] = frozenset()
    bulk_paths: frozenset[str] = frozenset()


def route_rules(routes: Iterable[Any]) -> RouteRules:
    """Read the routes' :class:`Access` declarations; a route without one is not an API route."""
    scopes: dict[tuple[str, str], str] = {}
    audited: set[tuple[str, str]] = set()
    open_paths: set[str] = set()
    bulk_paths: set[str] = set()
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        for rule in access_of(route):
            if rule.scope is None:
                open_paths.add(route.path)
            if rule.bulk_body:
                bulk_paths.add(route.path)
            for method in route.methods or ():
                if rule.scope is not None:
                    scopes[(method, route.path)] = rule.scope
                if rule.audited:
                    audited.add((method, route.path))
    return RouteRules(scopes, frozenset(audited), frozenset(open_paths), frozenset(bulk_paths))


def principal_of(request: Request) -> Principal:
    """The key the guard authenticated for this request."""
    found = request.state.principal
    assert isinstance(found, Principal)
    return found


async def principal(request: Request) -> Principal:
    return principal_of(request)


Caller = Annotated[Principal, Depends(principal)]
