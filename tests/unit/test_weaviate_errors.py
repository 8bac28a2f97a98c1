"""How Weaviate's failures are judged (:func:`hrt.stores.weaviate.vectors._unavailable`): a store
that cannot answer (the answer is degraded, the circuit opens) or a request it refused (an error)."""

from __future__ import annotations

from grpc import StatusCode
from grpc.aio import AioRpcError, Metadata
from weaviate.exceptions import WeaviateQueryError

from hrt.stores.weaviate.vectors import _unavailable


def raised_by_the_client(code: StatusCode, details: str) -> WeaviateQueryError:
    """The error as the client raises it: a WeaviateQueryError raised while handling gRPC's."""
    try:
        try:
            raise AioRpcError(code, Metadata(), Metadata(), details=details)
        except AioRpcError as rpc:
            raise WeaviateQueryError(str(rpc.details()), "GRPC search") from None
    except WeaviateQueryError as exc:
        return exc


def test_a_node_still_loading_the_collections_index_is_unavailable() -> None:
    exc = raised_by_the_client(
        StatusCode.UNKNOWN,
        "explorer: get class: vector search: tried to browse non-existing index for HRTDrill",
    )
    assert _unavailable(exc)


def test_a_refused_search_is_not_an_unavailable_store() -> None:
    assert not _unavailable(raised_by_the_client(StatusCode.UNKNOWN, 'tenant not found: "u-1"'))
    assert not _unavailable(raised_by_the_client(StatusCode.INVALID_ARGUMENT, "no such property: tags"))


def test_a_refusal_of_the_connection_is_unavailable() -> None:
    assert _unavailable(raised_by_the_client(StatusCode.UNAVAILABLE, "connection refused"))
    assert _unavailable(raised_by_the_client(StatusCode.DEADLINE_EXCEEDED, "deadline"))


def test_a_node_that_has_not_loaded_its_schema_yet_is_unavailable() -> None:
    # a single node just started answers before its schema is loaded (the fault drill's restart)
    assert _unavailable(raised_by_the_client(StatusCode.UNKNOWN, "could not find class HRTDrill in schema"))
