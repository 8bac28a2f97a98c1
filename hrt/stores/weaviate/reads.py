"""The reads of the Weaviate adapter: the search legs (one ``near_vector`` and one ``bm25`` gRPC
query per phrase, their ties at the ``k`` cut broken by id), objects read by id, and the own
cosines of given objects (Weaviate's distances from one search over those objects). The replies
are read from the gRPC protobuf directly (see :meth:`WeaviateReads._search`)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import weaviate
from hrt.records import Kind
from hrt.stores.base import Vector, VectorHit
from hrt.stores.weaviate.errors import _missing_tenant_candidate, guard
from hrt.stores.weaviate.objects import (
    WRITE_CHUNK,
    _cosine,
    _kind,
    _number,
    _stored_blob,
    _unblob,
    object_uuid,
    tenant_name,
)
from hrt.stores.weaviate.schema import PROPERTIES
from hrt.text import content_words
from weaviate.collections import CollectionAsync
from weaviate.proto.v1 import base_pb2, base_search_pb2, search_get_pb2

RETURNED = ["entity_id", "kind"]
TIE_SLACK = 4  # extra hits fetched per leg so that ties at the k cut can be broken by id
# BM25 ties are common (equal term counts in equally long texts): with 50 extra hits the first page
# holds the tie run at the cut for ~96% of the lexical legs at 100k (~73% with 4), so few need a
# grown page (a page holds ids and scores only, ~60 bytes a hit)
LEXICAL_TIE_SLACK = 50
MAX_FETCH = 10_000  # Weaviate's default QUERY_MAXIMUM_RESULTS
_RETURNED_PB = search_get_pb2.PropertiesRequest(non_ref_properties=RETURNED)
_ID_PB = search_get_pb2.PropertiesRequest(non_ref_properties=["entity_id"])  # own cosines need no more
_STORED_PB = search_get_pb2.PropertiesRequest(non_ref_properties=list(PROPERTIES))
_PASSAGES_PB = search_get_pb2.PropertiesRequest(non_ref_properties=["entity_id", "passages"])
_DISTANCE = search_get_pb2.MetadataRequest(distance=True)
_SCORE = search_get_pb2.MetadataRequest(score=True)
_VECTOR = search_get_pb2.MetadataRequest(vector=True)
_OR = base_search_pb2.SearchOperatorOptions(
    operator=base_search_pb2.SearchOperatorOptions.OPERATOR_OR, minimum_or_tokens_match=1
)
_SINGLE = (base_pb2.Vectors.VECTOR_TYPE_UNSPECIFIED, base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32)


def lexical_query(phrase: str) -> str | None:
    """The BM25 query: the phrase's distinct content words (the embedded adapter ORs the same)."""
    chosen = sorted(set(content_words(phrase)))
    return " ".join(chosen) if chosen else None


def _nearest_phrase(queries: np.ndarray) -> base_search_pb2.NearVector:
    """One near-vector query for all the phrase vectors (rows of ``queries``) against the stored
    ``default`` vector, an object's distance the smallest of theirs (a multi-target search with
    the ``minimum`` join): 1 - distance is its best cosine to the phrases."""
    packed = struct.pack("<H", queries.shape[1]) + np.ascontiguousarray(queries, dtype="<f4").tobytes()
    multi = base_pb2.Vectors(name="default", vector_bytes=packed, type=base_pb2.Vectors.VECTOR_TYPE_MULTI_FP32)
    return base_search_pb2.NearVector(
        vector_for_targets=[base_search_pb2.VectorForTarget(name="default", vectors=[multi])],
        targets=base_search_pb2.Targets(
            target_vectors=["default"], combination=base_search_pb2.CombinationMethod.COMBINATION_METHOD_TYPE_MIN
        ),
    )


def _best_cosine(rows: np.ndarray, queries: np.ndarray) -> float:
    """The best cosine of any of ``rows`` to any of ``queries`` (0 for a zero vector)."""
    norms = np.linalg.norm(rows, axis=1)[:, None] * np.linalg.norm(queries, axis=1)[None, :]
    return float(((rows @ queries.T) / np.where(norms > 0.0, norms, 1.0)).max())


@dataclass(frozen=True, slots=True)
class _Found:
    """One object of one leg: ``score`` orders the leg (cosine, or BM25 score); ``similarity`` is
    None for a lexical hit whose stored vector has not been read yet."""

    id: str
    kind: Kind
    score: float
    similarity: float | None


async def _top_k(fetch: Callable[[int], Awaitable[list[_Found]]], k: int, slack: int) -> list[_Found]:
    """The first ``k`` by (-score, id). A page is complete for that order unless a run of equal
    scores reaches its last row; then the page grows until the run ends or the server cap."""
    limit = min(k + slack, MAX_FETCH)
    while True:
        page = sorted(await fetch(limit), key=lambda f: (-f.score, f.id))
        if len(page) < limit or len(page) <= k or page[k - 1].score != page[-1].score or limit >= MAX_FETCH:
            return page[:k]
        limit = min(limit * 4, MAX_FETCH)


class WeaviateReads:
    """The reading half of :class:`~hrt.stores.weaviate.vectors.WeaviateVectorIndex`, over its
    client and collection."""

    collection_name: str
    _client: weaviate.WeaviateAsyncClient
    _collection: CollectionAsync[Any, Any]
    _query_timeout: float

    def _by_uuid_requests(
        self,
        user_id: str,
        tenant: str,
        ids: Sequence[str],
        properties: search_get_pb2.PropertiesRequest,
        metadata: search_get_pb2.MetadataRequest,
        per_request: int = WRITE_CHUNK,
        **search: Any,
    ) -> list[search_get_pb2.SearchRequest]:
        """Requests for the tenant's objects of ``ids`` by their uuids, one per ``per_request``
        ids, each returning ``properties`` and ``metadata`` (``search``: a query ranking them)."""
        requests = []
        for start in range(0, len(ids), per_request):
            chunk = ids[start : start + per_request]
            by_uuid = base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_CONTAINS_ANY,
                value_text_array=base_pb2.TextArray(values=[str(object_uuid(user_id, ident)) for ident in chunk]),
                target=base_pb2.FilterTarget(property="_id"),
            )
            request = self._request(tenant, len(chunk), by_uuid, metadata, **search)
            request.properties.CopyFrom(properties)
            requests.append(request)
        return requests

    async def _results(self, tenant: str, requests: Sequence[search_get_pb2.SearchRequest]) -> list[Any]:
        """The objects the ``requests`` (all in flight at once) return; none for a tenant not
        created yet."""
        replies = await asyncio.gather(*(self._search(r) for r in requests), return_exceptions=True)
        out: list[Any] = []
        for reply in replies:
            if isinstance(reply, BaseException):
                if _missing_tenant_candidate(reply) and not await self._collection.tenants.exists(tenant):
                    return []  # a user with nothing indexed yet
                raise reply
            out.extend(reply.results)
        return out

    async def _by_ids(
        self, user_id: str, tenant: str, ids: Sequence[str], properties: search_get_pb2.PropertiesRequest
    ) -> list[tuple[Any, bytes | None]]:
        """The tenant's objects of ``ids``, as (their ``properties`` fields, their stored vector's
        bytes or None)."""
        out: list[tuple[Any, bytes | None]] = []
        for obj in await self._results(tenant, self._by_uuid_requests(user_id, tenant, ids, properties, _VECTOR)):
            vector = next((v for v in obj.metadata.vectors if v.name == "default" and v.type in _SINGLE), None)
            out.append((obj.properties.non_ref_props.fields, vector.vector_bytes if vector is not None else None))
        return out

    async def _stored(self, user_id: str, tenant: str, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """The stored form (:func:`~hrt.stores.weaviate.objects._stored_form`) of those of ``ids`` the tenant holds."""
        return {
            f["entity_id"].text_value: (
                f["kind"].text_value,
                f["text"].text_value,
                f["ts"].number_value,
                vector or b"",
                tuple(f["tags"].list_value.text_values.values) if "tags" in f else (),
                f["source_agent_id"].text_value if "source_agent_id" in f else "",
                _number(f, "valid_from"),
                _number(f, "valid_to"),
                _stored_blob(f),
            )
            for f, vector in await self._by_ids(user_id, tenant, ids, _STORED_PB)
        }

    async def _cosines(
        self, user_id: str, ids: Sequence[str], vectors: Vector, passages: bool
    ) -> dict[str, tuple[float, float]]:
        """Each found id: its own vector's best cosine to the phrases, as Weaviate computes it
        (:func:`_nearest_phrase`: float32, within 1e-6 of the cosine of the stored vectors:
        docs/bench.md), and (with ``passages``) its passages' best, else the own one again. The
        ids are the only objects searched, fewer than Weaviate's ``flatSearchCutoff``: an exact
        (flat) search over them, not the HNSW graph. A reply holds ids and distances (~50 bytes an
        object): one request for up to Weaviate's result cap; with passages (~6 KB an object), one
        per :data:`WRITE_CHUNK`."""
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        wanted = sorted(set(ids))
        if not wanted or queries.shape[0] == 0:
            return {}
        tenant = tenant_name(user_id)
        fields, per_request = (_PASSAGES_PB, WRITE_CHUNK) if passages else (_ID_PB, MAX_FETCH)
        near = _nearest_phrase(queries)
        requests = self._by_uuid_requests(user_id, tenant, wanted, fields, _DISTANCE, per_request, near_vector=near)
        async with guard("similarities", self._query_timeout):
            found = await self._results(tenant, requests)
        out: dict[str, tuple[float, float]] = {}
        for obj in found:
            if not obj.metadata.distance_present:
                continue
            props = obj.properties.non_ref_props.fields
            own = 1.0 - obj.metadata.distance
            rows = _unblob(_stored_blob(props), queries.shape[1]) if passages else None
            out[props["entity_id"].text_value] = (own, own if rows is None else _best_cosine(rows, queries))
        return out

    @staticmethod
    def _merge(by_vector: list[_Found], by_lexical: list[_Found]) -> list[VectorHit]:
        vector_rank = {f.id: r for r, f in enumerate(by_vector, start=1)}
        lexical_rank = {f.id: r for r, f in enumerate(by_lexical, start=1)}
        first: dict[str, _Found] = {}
        for f in (*by_vector, *by_lexical):  # the vector leg's similarity (from distance) wins
            first.setdefault(f.id, f)
        hits = [
            VectorHit(
                id=f.id,
                kind=f.kind,
                similarity=f.similarity if f.similarity is not None else 0.0,
                vector_rank=vector_rank.get(f.id),
                lexical_rank=lexical_rank.get(f.id),
            )
            for f in first.values()
        ]
        hits.sort(key=lambda h: (-h.similarity, h.id))
        return hits

    def _request(
        self,
        tenant: str,
        limit: int,
        filters: base_pb2.Filters | None,
        metadata: search_get_pb2.MetadataRequest,
        **search: Any,
    ) -> search_get_pb2.SearchRequest:
        return search_get_pb2.SearchRequest(
            collection=self.collection_name,
            tenant=tenant,
            limit=limit,
            filters=filters,
            properties=_RETURNED_PB,
            metadata=metadata,
            uses_123_api=True,
            uses_125_api=True,
            uses_127_api=True,
            **search,
        )

    async def _search(self, request: search_get_pb2.SearchRequest) -> search_get_pb2.SearchReply:
        """One gRPC ``Search`` through the client's connection (its channel, auth headers, retries,
        timeout, and its errors: ``WeaviateQueryError``), read from the protobuf reply here: the
        client's object model costs ~25 us an object and ~30 more for a vector, reading the reply
        ~2 us (docs/bench.md). The query API has no
        call that returns the raw reply, so this one uses the connection the client exposes to its
        own executors (covered by the contract tests of this adapter)."""
        reply: search_get_pb2.SearchReply = await self._client._connection.grpc_search(request)
        return reply

    async def _vector_leg(self, tenant: str, query: Vector, filters: base_pb2.Filters | None, k: int) -> list[_Found]:
        near = base_search_pb2.NearVector(
            vectors=[
                base_pb2.Vectors(
                    vector_bytes=np.asarray(query, dtype="<f4").tobytes(), type=base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32
                )
            ]
        )

        async def fetch(limit: int) -> list[_Found]:
            reply = await self._search(self._request(tenant, limit, filters, _DISTANCE, near_vector=near))
            out = []
            for obj in reply.results:
                fields = obj.properties.non_ref_props.fields
                cos = 1.0 - (obj.metadata.distance if obj.metadata.distance_present else 2.0)
                out.append(_Found(fields["entity_id"].text_value, _kind(fields["kind"].text_value), cos, cos))
            return out

        return await _top_k(fetch, k, TIE_SLACK)

    async def _lexical_leg(self, tenant: str, phrase: str, filters: base_pb2.Filters | None, k: int) -> list[_Found]:
        """The top ``k`` BM25 hits, ids and scores only (no similarity yet: the pages carry no
        stored vectors; :meth:`_lexical_similarities` reads those it needs)."""
        text = lexical_query(phrase)
        if text is None:
            return []
        bm25 = base_search_pb2.BM25(query=text, properties=["text"], search_operator=_OR)

        async def fetch(limit: int) -> list[_Found]:
            reply = await self._search(self._request(tenant, limit, filters, _SCORE, bm25_search=bm25))
            out = []
            for obj in reply.results:
                fields = obj.properties.non_ref_props.fields
                score = obj.metadata.score if obj.metadata.score_present else 0.0
                out.append(_Found(fields["entity_id"].text_value, _kind(fields["kind"].text_value), score, None))
            return out

        return await _top_k(fetch, k, LEXICAL_TIE_SLACK)

    async def _lexical_similarities(
        self, user_id: str, tenant: str, queries: np.ndarray, legs: Sequence[tuple[list[_Found], list[_Found]]]
    ) -> list[list[_Found]]:
        """Each phrase's lexical hits (its ``legs``: vector, lexical) with their cosine to its
        vector. A hit its vector leg also found takes that leg's similarity in :meth:`_merge`, so
        only the others need a stored vector: those of every phrase are read in one request (by
        uuid, per :data:`WRITE_CHUNK`), their cosines computed here from the stored float32
        vectors."""
        lexical_only = [{f.id for f in by_lexical} - {f.id for f in by_vector} for by_vector, by_lexical in legs]
        wanted = sorted(set().union(*lexical_only))
        stored = {
            fields["entity_id"].text_value: np.frombuffer(vector, dtype="<f4")
            for fields, vector in (await self._by_ids(user_id, tenant, wanted, _ID_PB) if wanted else [])
            if vector is not None
        }
        out = []
        for query, only, (_, by_lexical) in zip(queries, lexical_only, legs, strict=True):
            norm = float(np.linalg.norm(query))
            # a hit deleted meanwhile has no vector: cosine 0.0, as for a stored vector of another size
            out.append(
                [
                    replace(f, similarity=_cosine(query, stored[f.id], norm) if f.id in stored else 0.0)
                    if f.id in only
                    else f
                    for f in by_lexical
                ]
            )
        return out
