"""What the routes share, kept on ``app.state.hrt``: the settings, the HRT service, the key ring
and the bounds held across requests; and the dependencies by which a route reaches them."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Annotated

from fastapi import Depends, Request

from hrt.api.bodies import IngestBodies
from hrt.auth import KeyLimiter, KeyRing
from hrt.config import Settings
from hrt.errors import RateLimited
from hrt.export import ExportSlots
from hrt.service import HRTService
from hrt.shares import ByteRates, Place, Shares, Tarpit

AUTH_OFF_WARNING = "HRT_AUTH=off: every route answers without an API key (development on loopback only)"


class ServerState:
    """``service``: set by :func:`hrt.api.create_app` when given, else by the app's lifespan."""

    def __init__(self, settings: Settings, service: HRTService | None) -> None:
        self.settings = settings
        self._service = service
        self._keyring: KeyRing | None = None
        self.limiter = KeyLimiter(settings.key_rate_limit, settings.key_max_concurrency)
        self.ingest_bodies = IngestBodies(settings.max_ingest_bodies, settings.ingest_retry_after_s)
        self.export_slots = ExportSlots()
        self.browse_pages = Shares(settings.max_concurrent_browse_pages)
        self.browse_bytes = ByteRates(
            settings.browse_tenant_bytes_per_s, 2 * settings.browse_max_page_bytes, time.monotonic
        )
        self.body_bytes = ByteRates(
            settings.tenant_body_bytes_per_s, 2 * settings.max_ingest_body_bytes, time.monotonic
        )
        self.tarpit = Tarpit(settings.refusal_hold_max_s, time.monotonic)

    def note_tenant(self, tenant: str) -> None:
        """A request of ``tenant`` came in (whether other tenants are active decides whether a
        tenant's writes are held to their share of time, :class:`hrt.shares.WriteTime`)."""
        if self._service is not None:
            self._service.write_time.activity.note(tenant)

    def browse_page(self, tenant: str) -> contextlib.AbstractContextManager[Place]:
        """A place for one browse page of ``tenant`` (its read and build hold CPU and a page of
        memory: one tenant's pages never take them all), or 429; 429 too while the tenant is past
        its bytes per second (the page's size is charged by the route, :attr:`browse_bytes`)."""

        def refuse(held: int, mine: bool) -> RateLimited:
            where = "for this tenant, its share" if mine else "as many as this server builds at once"
            return RateLimited(
                f"{held} browse pages are being built, {where}; retry later",
                retry_after_s=1,
                reason="browse_concurrency",
            )

        def owes(seconds: float) -> RateLimited:
            return RateLimited(
                "this tenant's browse pages are past HRT_BROWSE_TENANT_BYTES_PER_S; retry later",
                retry_after_s=math.ceil(seconds),
                reason="browse_rate",
            )

        self.browse_bytes.check(tenant, owes)
        return self.browse_pages.place(tenant, refuse)

    @property
    def has_service(self) -> bool:
        return self._service is not None

    @property
    def service(self) -> HRTService:
        assert self._service is not None
        return self._service

    def set_service(self, service: HRTService) -> None:
        self._service = service

    def keyring(self) -> KeyRing:
        """Made at start by the lifespan (which checks that a key exists); an app driven without its
        lifespan (an in-process test client) makes it on first use."""
        if self._keyring is None:
            self._keyring = KeyRing(
                self.service.records,
                refresh_s=self.settings.auth_refresh_s,
                outage_grace_s=self.settings.auth_outage_grace_s,
            )
        return self._keyring

    def set_keyring(self, ring: KeyRing) -> None:
        self._keyring = ring

    def take_keyring(self) -> KeyRing | None:
        """The key ring, forgotten (the lifespan's end)."""
        ring, self._keyring = self._keyring, None
        return ring


def server_state(request: Request) -> ServerState:
    found = request.app.state.hrt
    assert isinstance(found, ServerState)
    return found


async def _server(request: Request) -> ServerState:
    return server_state(request)


async def _service(request: Request) -> HRTService:
    return server_state(request).service


Server = Annotated[ServerState, Depends(_server)]
Service = Annotated[HRTService, Depends(_service)]
