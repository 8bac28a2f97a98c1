"""Unknown query parameters are refused, not ignored.

A misspelt parameter (``limt=5``, ``valid_ta=...``) would otherwise be dropped silently and the
request answered as if it had not been given: the caller could not tell. Each router depends on
:func:`known_query`, which answers 422 (field ``query``, the parameter's name not echoed: it is
the caller's input) when the query string holds a name the route does not declare, or a value that holds
U+0000 (field: that parameter), which PostgreSQL's text refuses: the services deployment answered
500 before, when the browse's ``tags`` reached it as they came.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from hrt.errors import InvalidInput


def declared(route: APIRoute) -> frozenset[str]:
    """The names (aliases) of the query parameters ``route`` declares, its dependencies' included
    (a walk of a few nodes, made only for a request that has a query string)."""
    return frozenset(_query_names(route.dependant))


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    """422 when the query string names a parameter the route does not declare."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = declared(route)
    if any(name not in known for name in request.query_params):
        raise InvalidInput("an unknown query parameter: the route takes only the parameters it declares", field="query")
    for name, value in request.query_params.multi_items():
        if "\x00" in value:
            raise InvalidInput("a query parameter holds the character U+0000, which no field takes", field=name)
