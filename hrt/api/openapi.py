"""The OpenAPI document: FastAPI's, with what it cannot know added. Each operation's security and
the scope in its summary come from the route's access declaration (:mod:`hrt.api.access`); the
bodies the ingest and conversation routes parse themselves, and the AugmentedMemoryContext that
the retrieve route answers as raw canonical JSON, are added as components."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from hrt.api.access import access_of
from hrt.auth import SCOPES
from hrt.contract import AugmentedMemoryContext
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import ingest_body_schema

_REF = "#/components/schemas/{model}"
# the conversation body's Message is not the retrieve request's (hrt.contract.Message): prefixed apart
_CONVERSATION_REF = "#/components/schemas/Conversation{model}"

CONVERSATION_BODY: dict[str, Any] = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConversationRequest"}}},
}


@cache
def _ingest_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    return ingest_body_schema(ref_template=_REF)


def ingest_request_body() -> dict[str, Any]:
    """``POST /v1/ingest``'s request body: JSON or NDJSON records."""
    return {
        "required": True,
        "content": {
            "application/json": {"schema": _ingest_schema()[0]},
            "application/x-ndjson": {"schema": {"type": "string", "description": "one JSON record per line"}},
        },
    }


def _add_components(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    full = AugmentedMemoryContext.model_json_schema(ref_template=_REF)
    for name, definition in full.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components["AugmentedMemoryContext"] = full
    for name, definition in _ingest_schema()[1].items():
        components.setdefault(name, definition)
    conversation = ConversationRequest.model_json_schema(ref_template=_CONVERSATION_REF)
    for name, definition in conversation.pop("$defs", {}).items():
        components[f"Conversation{name}"] = definition
    components["ConversationRequest"] = conversation


def _add_access(schema: dict[str, Any], routes: list[Any]) -> None:
    """Bearer keys for every operation but those declared open; each summary names its scope."""
    schema["security"] = [{"bearer": []}]
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        (rule,) = access_of(route)
        for method in route.methods or ():
            operation = schema["paths"][route.path_format][method.lower()]
            if rule.scope is None:
                operation["security"] = []
                operation["summary"] = f"{operation['summary']} (no key needed)"
            else:
                operation["summary"] = f"{operation['summary']} (scope: {rule.scope})"


def openapi_document(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": f"an HRT API key (hrt_<id>_<secret>); scopes: {', '.join(SCOPES)}",
    }
    _add_components(schema)
    _add_access(schema, list(app.routes))
    return schema
