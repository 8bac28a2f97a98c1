"""The HTTP routes, one router per resource; each route declares its access once
(:mod:`hrt.api.access`)."""

from __future__ import annotations

from fastapi import APIRouter

from hrt.api.routes import entities, export, health, keys, retrieve, writes

# in the OpenAPI document's order
ROUTERS: tuple[APIRouter, ...] = (
    retrieve.router,
    writes.router,
    entities.router,
    export.router,
    keys.router,
    health.router,
)
