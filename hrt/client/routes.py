"""The client's calls, each written once (:class:`_Routes`): a method as users call it, with its
signature and docstring, that says what the call sends and how its answer is read. Each client
makes every one of them a method of its kind: blocking in :class:`~hrt.client.HRTClient`, a
coroutine in :class:`~hrt.client.AsyncHRTClient`, with the same signature and docstring."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from pydantic import BaseModel

from hrt.auth import Scope as KeyScope
from hrt.browse import EntityView
from hrt.client.calls import (
    EntityKind,
    _Call,
    _context,
    _conversation_call,
    _create_key_call,
    _get_entity_call,
    _model,
    _record_json,
    _retrieve_call,
    _segment,
)
from hrt.contract import (
    AugmentedMemoryContext,
    Health,
    KeyInfo,
    MergeResult,
    NewKey,
    Readiness,
    RetrieveRequest,
    UserStats,
    WriteSummary,
)
from hrt.extraction.messages import ConversationResult, Message

if TYPE_CHECKING:
    from hrt.client import AsyncHRTClient, HRTClient

P = ParamSpec("P")
T = TypeVar("T")


class _Route(Generic[P, T]):
    """One call: ``build`` takes the method's arguments and returns the request to send and how to
    read its answer. A client class made from :class:`_Routes` holds it as a method of its kind:
    for the type checker, it is ``build``'s parameters returning ``T`` (or a coroutine of ``T``)."""

    def __init__(self, build: Callable[Concatenate[Any, P], _Call[T]]) -> None:
        self.build = build

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: HRTClient, owner: type[Any]) -> Callable[P, T]: ...

    @overload
    def __get__(self, obj: AsyncHRTClient, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        if obj is None:
            return self
        raise TypeError(f"{owner.__name__} was not made from _Routes")  # its subclasses hold methods


_CALL = re.compile(r"^_Call\[(.*)\]$")


def _method(route: _Route[Any, Any], owner: type, asynchronous: bool) -> Callable[..., Any]:
    """``route`` as a method of ``owner``: ``self._do`` of its request, awaited when ``asynchronous``;
    with the name, docstring and signature of ``route.build``, returning what the call answers."""
    build = route.build
    method: Callable[..., Any]
    if asynchronous:

        async def method(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            return await self._do(build(self, *args, **kwargs))
    else:

        def method(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            return self._do(build(self, *args, **kwargs))

    functools.update_wrapper(method, build)
    signature = inspect.signature(build)
    answer = _CALL.sub(r"\1", str(signature.return_annotation))
    method.__qualname__ = f"{owner.__qualname__}.{build.__name__}"
    method.__module__ = owner.__module__
    method.__annotations__ = {**build.__annotations__, "return": answer}
    vars(method)["__signature__"] = signature.replace(return_annotation=answer)
    return method


class _Routes:
    """The calls of both clients. A subclass gets each as a method (``asynchronous``: coroutines);
    it provides ``_do``, which sends a :class:`~hrt.client.calls._Call` and returns its answer."""

    def __init_subclass__(cls, *, asynchronous: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(_Routes).items():
            if isinstance(value, _Route):
                setattr(cls, name, _method(value, cls, asynchronous))

    @_Route
    def retrieve(
        self, request: RetrieveRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> _Call[AugmentedMemoryContext]:
        """``POST /v1/retrieve``: a :class:`RetrieveRequest`, a mapping, or its fields as keywords."""
        return _retrieve_call(request, fields, _context)

    @_Route
    def retrieve_json(
        self, request: RetrieveRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> _Call[bytes]:
        """The response's canonical JSON bytes, as the server sent them."""
        return _retrieve_call(request, fields, lambda r: r.content)

    @_Route
    def ingest(self, records: Iterable[Mapping[str, Any] | BaseModel]) -> _Call[WriteSummary]:
        """``POST /v1/ingest``: records (dicts in the ingest format, or ``hrt.records`` models), one transaction."""
        body = {"records": [_record_json(r) for r in records]}
        return _Call("POST", "/v1/ingest", _model(WriteSummary), idempotent=True, write=True, json_body=body)

    @_Route
    def ingest_jsonl(self, data: bytes | str) -> _Call[WriteSummary]:
        """``POST /v1/ingest`` of JSON Lines (a file's contents), one transaction."""
        content = data.encode("utf-8") if isinstance(data, str) else data
        headers = {"content-type": "application/x-ndjson"}
        return _Call(
            "POST", "/v1/ingest", _model(WriteSummary), idempotent=True, write=True, content=content, headers=headers
        )

    @_Route
    def add_messages(
        self,
        user_id: str,
        session_id: str,
        messages: Iterable[Mapping[str, Any] | Message],
        *,
        agent_id: str | None = None,
        start: int | None = None,
        user_name: str | None = None,
        agent_name: str | None = None,
    ) -> _Call[ConversationResult]:
        """``POST /v1/conversations``: messages of one session (dicts ``{role, content, ...}`` or
        :class:`~hrt.extraction.messages.Message`), one transaction; each message's memory unit in
        the result. ``user_name`` and ``agent_name`` name the speakers of the user's and the
        assistant's messages that carry no ``name``."""
        return _conversation_call(user_id, session_id, messages, agent_id, start, (user_name, agent_name))

    @_Route
    def delete_entity(self, user_id: str, kind: EntityKind, entity_id: str) -> _Call[WriteSummary]:
        path = f"/v1/users/{_segment(user_id)}/entities/{_segment(kind)}/{_segment(entity_id)}"
        return _Call("DELETE", path, _model(WriteSummary), idempotent=True, write=True)

    @_Route
    def delete_user(self, user_id: str) -> _Call[WriteSummary]:
        return _Call("DELETE", f"/v1/users/{_segment(user_id)}", _model(WriteSummary), idempotent=True, write=True)

    @_Route
    def merge_concepts(self, user_id: str, target: str, ids: Sequence[str]) -> _Call[MergeResult]:
        """``POST /v1/users/{user_id}/concepts/{target}/merge``: ``ids`` merged into ``target``."""
        # a merge sent twice changes nothing the second time (the merged concepts are gone)
        path = f"/v1/users/{_segment(user_id)}/concepts/{_segment(target)}/merge"
        return _Call("POST", path, _model(MergeResult), idempotent=True, write=True, json_body={"ids": list(ids)})

    @_Route
    def stats(self, user_id: str) -> _Call[UserStats]:
        return _Call("GET", f"/v1/users/{_segment(user_id)}/stats", _model(UserStats), idempotent=True)

    @_Route
    def healthz(self) -> _Call[Health]:
        return _Call("GET", "/healthz", _model(Health), idempotent=True)

    @_Route
    def readyz(self) -> _Call[Readiness]:
        """The readiness report, whether the server is ready (200) or not (503)."""
        # 503 here is an answer (not ready, with the reason), not an error to retry
        return _Call("GET", "/readyz", _model(Readiness), idempotent=True, accept=(200, 503))

    @_Route
    def metrics(self) -> _Call[str]:
        return _Call("GET", "/metrics", lambda r: r.text, idempotent=True)

    @_Route
    def list_keys(self) -> _Call[list[KeyInfo]]:
        return _Call("GET", "/v1/keys", _model(list[KeyInfo]), idempotent=True)

    @_Route
    def create_key(
        self,
        name: str,
        scopes: Iterable[KeyScope],
        users: Iterable[str] | None,
        *,
        expires: str | None = None,
        rate_limit: float | None = None,
        max_concurrency: int | None = None,
    ) -> _Call[NewKey]:
        """``POST /v1/keys``; ``users`` None: every user. The secret is in ``.key``, once."""
        return _create_key_call(name, scopes, users, expires, rate_limit, max_concurrency)

    @_Route
    def revoke_key(self, name: str) -> _Call[KeyInfo]:
        return _Call("DELETE", f"/v1/keys/{_segment(name)}", _model(KeyInfo), idempotent=False)

    @_Route
    def get_entity(
        self, user_id: str, kind: EntityKind, entity_id: str, *, relation_limit: int | None = None
    ) -> _Call[EntityView]:
        """``GET /v1/users/{user_id}/entities/{kind}/{id}``: the record as ingested, its relations
        (at most ``relation_limit``, default 100), validity, supersession and writer; NotFound when absent."""
        return _get_entity_call(user_id, kind, entity_id, relation_limit)
