"""The Weaviate backend as the registry lists it: the vector index of the services deployment, run
as a server (behind a circuit, with the record store's reads while it is down)."""

from __future__ import annotations

from hrt.stores.backend import Backend, Opening
from hrt.stores.base import VectorIndex


def _vectors(opening: Opening) -> VectorIndex:
    from hrt.stores.weaviate.vectors import WeaviateVectorIndex  # the client is imported when it is chosen

    s = opening.settings
    return WeaviateVectorIndex(
        host=s.weaviate_host,
        http_port=s.weaviate_http_port,
        grpc_port=s.weaviate_grpc_port,
        collection=s.weaviate_collection,
        api_key=s.weaviate_api_key.get_secret_value() if s.weaviate_api_key is not None else None,
        replication_factor=s.weaviate_replication_factor,
    )


BACKEND = Backend(
    name="weaviate",
    title="Weaviate",
    summary="Weaviate: the vectors and the lexical index (HRT supplies the vectors; no vectorizer module)",
    roles=frozenset({"vectors"}),
    variables=(
        "HRT_WEAVIATE_HOST",
        "HRT_WEAVIATE_HTTP_PORT",
        "HRT_WEAVIATE_GRPC_PORT",
        "HRT_WEAVIATE_COLLECTION",
        "HRT_WEAVIATE_API_KEY",
        "HRT_WEAVIATE_REPLICATION_FACTOR",
    ),
    open_vectors=_vectors,
    behind_server=True,
    dev_service="weaviate",
)
