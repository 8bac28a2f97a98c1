"""Each route declares its access once (hrt.api.access), and everything that depends on it is read
back from that declaration: the Guard's scope table, the audited routes, the open paths, the body
limits and the OpenAPI document's security. The MCP server shares the front door's code without
importing the HTTP package."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from hrt.api import create_app
from hrt.api.access import Access, route_rules
from hrt.api.bodies import BodyLimit
from hrt.api.guard import Guard
from hrt.api.ui import ui_files, ui_paths
from hrt.config import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(Settings())


def api_routes(app: FastAPI) -> list[APIRoute]:
    return [r for r in app.routes if isinstance(r, APIRoute)]


def declared(route: APIRoute) -> list[Access]:
    """The Access dependencies of a route, found in its dependant (not by hrt.api.access)."""
    return [d.call for d in route.dependant.dependencies if isinstance(d.call, Access)]


def middleware_options(app: FastAPI, cls: type) -> dict[str, Any]:
    (found,) = [m for m in app.user_middleware if m.cls is cls]
    return dict(found.kwargs)


def test_every_route_but_healthz_declares_exactly_one_scope(app):
    routes = api_routes(app)
    assert len(routes) >= 16
    for route in routes:
        rules = declared(route)
        assert len(rules) == 1, route.path
        if route.path == "/healthz":
            assert rules[0].scope is None
        else:
            assert rules[0].scope is not None, route.path


def test_the_guard_uses_what_the_routes_declare(app):
    guard = middleware_options(app, Guard)
    expected = {(m, r.path): declared(r)[0].scope for r in api_routes(app) for m in r.methods if r.path != "/healthz"}
    assert guard["scopes"] == expected
    assert guard["audited"] == {(m, r.path) for r in api_routes(app) for m in r.methods if declared(r)[0].audited}
    assert guard["open_paths"] == {"/healthz"} | ui_paths(ui_files())  # and the inspector's files, no data
    assert route_rules(app.routes).scopes == expected


def test_the_audited_routes_are_the_writes_the_key_routes_and_the_export(app):
    assert route_rules(app.routes).audited == {
        ("POST", "/v1/ingest"),
        ("POST", "/v1/conversations"),
        ("DELETE", "/v1/users/{user_id}/entities/{kind}/{entity_id}"),
        ("POST", "/v1/users/{user_id}/concepts/{concept_id}/merge"),
        ("DELETE", "/v1/users/{user_id}"),
        ("POST", "/v1/keys"),
        ("DELETE", "/v1/keys/{name}"),
        ("GET", "/v1/users/{user_id}/export"),
    }


def test_the_bulk_body_limit_applies_to_the_routes_that_declare_it(app):
    limits = middleware_options(app, BodyLimit)["limits"]
    assert set(limits) == {"/v1/ingest", "/v1/conversations"}
    assert set(limits.values()) == {Settings().max_ingest_body_bytes}


def test_the_openapi_security_and_summaries_follow_the_declarations(app):
    doc = app.openapi()
    assert doc["security"] == [{"bearer": []}]
    for route in api_routes(app):
        (rule,) = declared(route)
        for method in route.methods:
            operation = doc["paths"][route.path][method.lower()]
            if rule.scope is None:
                assert operation["security"] == [] and operation["summary"].endswith("(no key needed)")
            else:
                assert "security" not in operation, route.path
                assert operation["summary"].endswith(f"(scope: {rule.scope})"), route.path


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_mcp_server_imports_nothing_from_the_http_package():
    modules = imported_modules(ROOT / "hrt" / "mcp_server.py") | imported_modules(ROOT / "hrt" / "front.py")
    assert not [m for m in modules if m == "hrt.api" or m.startswith("hrt.api.")]


FRONT_FILES = [ROOT / "hrt" / "mcp_server.py", ROOT / "hrt" / "front.py", *sorted((ROOT / "hrt" / "api").rglob("*.py"))]


@pytest.mark.parametrize("path", FRONT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_of_the_front_door_is_over_80_lines(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []


async def test_the_mcp_arguments_carry_the_contracts_schemas():
    from mcp import Client

    from hrt.contract import RetrieveRequest
    from hrt.mcp_server import RETRIEVE_FIELDS, build_server, operator_principal
    from hrt.records import ID_PATTERN

    server = build_server(lambda: None, lambda _ctx: operator_principal())  # list_tools needs no service
    async with Client(server) as client:
        tools = {t.name: t.input_schema["properties"] for t in (await client.list_tools()).tools}
    own = {"user_id", "include_json"}
    for name, schema in tools["retrieve_memory"].items():
        if name not in own:
            assert name in RetrieveRequest.model_fields
            shown = {k: v for k, v in schema.items() if k not in ("description", "title", "default")}
            assert shown == {k: v for k, v in RETRIEVE_FIELDS[name].items() if k != "description"}, name
    ids = [p for props in tools.values() for n, p in props.items() if n in ("user_id", "entity_id")]
    assert len(ids) >= 6 and all(p["pattern"] == ID_PATTERN for p in ids)
