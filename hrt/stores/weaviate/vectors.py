"""VectorIndex over Weaviate (HNSW + BM25), spoken to with the async client over gRPC.

One collection (``HRTEntity`` by default) holds one object per (user, entity): properties
``entity_id``, ``kind``, ``text`` (the BM25-searchable text, ``hrt.records.entity_text``) and
``ts``, plus HRT's own vector (self-provided, cosine distance, no vectorizer module). Object UUIDs
are ``uuid5(user_id, entity id)``, so a repeated upsert overwrites instead of duplicating, and
the outbox projector can deliver at least once.

Tenancy: one Weaviate tenant per HRT user (native multi-tenancy, tenants created on first write).
An enforced ``user_id`` filter on one shared index was the alternative; tenants win on every
count that matters for HRT:

- *Isolation is structural.* A tenant is its own shard (own HNSW graph, own inverted index); the
  server refuses a query on the collection without a tenant, so forgetting a filter cannot leak.
- *BM25 statistics are per user.* Document frequencies and average lengths come from the user's
  own shard, so one large user's vocabulary neither skews a small user's lexical ranking nor
  becomes a side channel (a shared index computes IDF over everyone's text).
- *Thousands of small users.* A filtered search on a shared HNSW index must walk a graph built
  over everyone to find a user's handful of entities (ACORN or a flat fallback helps, at a cost);
  in a tenant, a query touches only that user's objects, and a filtered query on a small tenant is
  an exact flat scan (``flat_search_cutoff``). Idle users' tenants can be deactivated or
  offloaded (``auto_tenant_activation`` wakes them on use), which a filter cannot do.
- *Few large users.* Each gets its own index sized to it, and tenants spread across the nodes of a
  cluster like shards.
- *Deleting a user* (the right to be forgotten) drops one tenant: its files go at once, with no
  tombstones left in a shared graph and no delete-by-filter capped at the query limit.

The cost is some fixed memory and files per active tenant; Weaviate documents multi-tenancy for
this shape (many isolated users) and it needs nothing of HRT beyond :func:`tenant_name`.

Tenant names: Weaviate allows ``[A-Za-z0-9_-]{1,64}``; HRT user ids allow ``.``, ``:``, ``@`` and
128 characters. A user id that already is a valid name and starts with a letter or digit is used
as is (operators see ``u-maya``); any other becomes ``_<slug>_<32 hex of sha256>``, which starts
with ``_`` and so can never equal an id used as is.

Timestamps: ``ts`` is epoch seconds; an entity without one (a concept) stores :data:`NO_TS`, a
sentinel before any real date, so ``ts <= not_after`` alone admits it (no null-state index and
no OR in every filter). :meth:`WeaviateVectorIndex.ids` never exposes the sentinel.

Validity: ``valid_from`` / ``valid_to`` (epoch seconds, range-filterable) hold a document's
own interval, null for an open end: no sentinel, because objects written before the properties
existed have them null too and must pass a ``valid_at`` filter. The filter is
``NOT(valid_from > at) AND NOT(valid_to <= at)``: a comparison never matches a null or missing
property, so ``valid_from <= at AND valid_to > at`` would drop every open or older document (checked
on Weaviate 1.38: it keeps only documents with both ends set), while the NOTs of the opposite
comparisons let them through (:func:`~hrt.stores.weaviate.filters._valid_at`).

Search: per phrase, one ``near_vector`` and one ``bm25`` query, all 2 x phrases queries issued
concurrently over the client's single HTTP/2 gRPC channel (``asyncio.gather``). Weaviate's gRPC
API has no multi-query call, and a ``hybrid`` query returns only the fused score, not the two
ranks grounding needs. Kinds and ``not_after`` are server-side filters. The lexical query is the
phrase's content words (``hrt.text.content_words``), de-duplicated, with the BM25 ``Or`` operator
(Weaviate's default, set explicitly) and the collection's stopword preset ``none``: HRT removes
its own stopwords so both deployments use one list. BM25 pages carry ids and scores, no stored
vectors: once all legs are in, the lexical hits that no vector leg of their phrase found (only
those need a cosine of their own) have their stored vectors read in one request by object id for
all phrases, the cosines computed here. Each leg is ordered by (-score, id) like the embedded
adapter; a leg fetches more than ``k`` (the vector leg a few, the lexical leg
:data:`LEXICAL_TIE_SLACK` more) and, when a run of equal scores reaches the end of the page,
fetches again with a larger page, so the id tie-break at the ``k`` cut is exact (BM25 ties are
common: equal term counts in equally long texts). The legs' replies are read from the gRPC
protobuf directly, not through the client's result objects (see
:meth:`~hrt.stores.weaviate.reads.WeaviateReads._search`).

Differences from the embedded adapter that a reader of congruence results should know (the
vector legs agree; the lexical legs mostly do): the embedded FTS5 index stems words (porter:
"migrate table" finds "Migrated the billing tables"), Weaviate has no stemmer (both fold
diacritics); FTS5 keeps one set of BM25 statistics over all users and scores with its own BM25
variant, Weaviate scores BM25F per tenant, so equal sets may come in a different order; and the
embedded lexical leg filters kinds and ``not_after`` after fetching ``2k``, Weaviate before.

Errors: client, gRPC and HTTP failures are translated at this edge by
:func:`~hrt.stores.weaviate.errors.guard`: unreachable, timed out or closed become
:class:`~hrt.errors.StoreUnavailable`, anything else :class:`~hrt.errors.StoreError`. Every call
also runs under an ``asyncio`` deadline, because the client retries an unavailable gRPC server with
exponential backoff for about a minute.

The adapter's parts: :mod:`~hrt.stores.weaviate.objects` (tenant names, object ids, the stored
form of a document), :mod:`~hrt.stores.weaviate.schema` (the collection),
:mod:`~hrt.stores.weaviate.filters` (search filters), :mod:`~hrt.stores.weaviate.reads` (the search
legs and reads by id), :mod:`~hrt.stores.weaviate.errors` (the edge); this module holds
:class:`WeaviateVectorIndex`, its lifecycle, schema check and writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

import numpy as np

import weaviate
from hrt.errors import StoreError, StoreUnavailable
from hrt.records import Kind
from hrt.stores.base import PhraseVectors, SearchFilter, Vector, VectorDoc, VectorHit, resolve_vectors
from hrt.stores.user_cache import keep_out_of_gc
from hrt.stores.weaviate.errors import _missing_tenant_candidate, _unavailable, guard
from hrt.stores.weaviate.filters import search_filters
from hrt.stores.weaviate.objects import (
    NO_TS,
    WRITE_CHUNK,
    _blob,
    _float_or_none,
    _stored_form,
    _unblob,
    object_uuid,
    tenant_name,
)
from hrt.stores.weaviate.reads import LEXICAL_TIE_SLACK, RETURNED, WeaviateReads, _Found
from hrt.stores.weaviate.schema import (
    DEFAULT_COLLECTION,
    FILTER_PROPERTIES,
    PASSAGE_PROPERTIES,
    VALIDITY_PROPERTIES,
    _later_properties,
    create_collection,
    unfit,
)
from weaviate.classes.data import DataObject
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter
from weaviate.collections import CollectionAsync
from weaviate.exceptions import WeaviateBaseError, WeaviateQueryError

__all__ = ["LEXICAL_TIE_SLACK", "NO_TS", "WeaviateVectorIndex", "_unavailable", "object_uuid", "tenant_name"]

log = logging.getLogger(__name__)


class WeaviateVectorIndex(WeaviateReads):
    """The services deployment's VectorIndex. Create, ``await open()``, ``await apply_schema()``
    once per process (idempotent), use, ``await close()``; or ``async with``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        http_port: int = 8080,
        grpc_port: int = 50051,
        *,
        collection: str = DEFAULT_COLLECTION,
        secure: bool = False,
        api_key: str | None = None,
        connect_timeout: float = 10.0,
        query_timeout: float = 10.0,
        write_timeout: float = 60.0,
        client: weaviate.WeaviateAsyncClient | None = None,
        replication_factor: int = 1,
    ) -> None:
        """``client``: an injected async client (connected or not); it is then neither configured
        nor closed here. The timeouts are also this adapter's deadlines around each call.
        ``replication_factor``: the copies a collection created here asks for (a cluster of at
        least that many nodes; with more than one, asynchronous replication repairs a node that
        was down once it is back)."""
        self.collection_name = collection
        self.replication_factor = replication_factor
        self._connect_timeout = connect_timeout
        self._query_timeout = query_timeout
        self._write_timeout = write_timeout
        self._owns_client = client is None
        if client is None:
            client = weaviate.use_async_with_custom(
                http_host=host,
                http_port=http_port,
                http_secure=secure,
                grpc_host=host,
                grpc_port=grpc_port,
                grpc_secure=secure,
                auth_credentials=Auth.api_key(api_key) if api_key else None,
                additional_config=AdditionalConfig(
                    timeout=Timeout(init=connect_timeout, query=query_timeout, insert=write_timeout)
                ),
            )
        self._client = client
        self._collection: CollectionAsync[Any, Any] = client.collections.use(collection)
        self._schema_applied = False  # apply_schema has seen the collection (ping: a 404 is a node loading)

    # ------------------------------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------------------------------

    async def open(self, *, keep_trying: bool = False) -> None:
        """Connect the client (once), then move everything alive out of the cyclic garbage
        collector's reach: the client's generated protobuf modules alone are ~80k objects whose
        traversal made every full collection slow, which landed on random requests
        (docs/bench.md). Nothing connects in the background: with ``keep_trying`` the caller opens
        it again."""
        if self._client.is_connected():
            return
        async with guard("connect", self._connect_timeout):
            await self._client.connect()
        keep_out_of_gc()

    async def close(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> WeaviateVectorIndex:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the node answers an authenticated read of the schema (does
        the collection exist), and a StoreError unless it takes HRT's credentials. Not Weaviate's
        readiness endpoint: a cluster answers "not ready" while it elects a schema (Raft) leader,
        and meanwhile serves the searches and writes of existing tenants, all HRT's reads need
        (a replicated Weaviate losing its leader is not a store down: docs/reliability.md)."""
        async with guard("ping", self._connect_timeout):
            await self._read_local_schema()

    async def _read_local_schema(self) -> None:
        """``GET /v1/schema/<collection>`` answered by the node itself (``consistency: false``):
        by default Weaviate proxies a schema read to the Raft leader, so while a stopped leader
        hands its role over the read failed at once and a healthy cluster was judged down
        (the circuit opened, answers were degraded). Through the client's own HTTP connection
        and credentials; any HTTP answer but 200 or 404 is an error (401/403: the credentials).
        A 404 once this adapter has applied the schema is a node that has not loaded it yet (just
        started): unavailable, or the circuit would close before the node can search."""
        conn = self._client._connection
        http = getattr(conn, "_client", None)
        if http is None:  # not connected yet: the client's own read says why
            await self._client.collections.exists(self.collection_name)
            return
        headers = {"consistency": "false"}
        if token := conn.get_current_bearer_token():
            headers["authorization"] = token
        name = self.collection_name[:1].upper() + self.collection_name[1:]
        reply = await http.get(f"{conn.url}/v1/schema/{name}", headers=headers, timeout=self._connect_timeout)
        if reply.status_code in (502, 503, 504):
            raise StoreUnavailable(f"Weaviate unavailable during ping: HTTP {reply.status_code}", store="Weaviate")
        if reply.status_code == 404 and self._schema_applied:  # ours, not loaded (yet) on this node
            raise StoreUnavailable("Weaviate unavailable during ping: the collection is not loaded", store="Weaviate")
        if reply.status_code not in (200, 404):
            raise StoreError(f"Weaviate error during ping: HTTP {reply.status_code}", store="Weaviate")

    async def warm(self) -> None:
        """Nothing to prepare: Weaviate has no query plans to warm."""

    async def apply_schema(self) -> None:
        """Create the collection when missing (a concurrent creator may win the race), then check
        that an existing one has what HRT relies on. Safe to call on every start."""
        async with guard("ensure the schema", self._write_timeout):
            if not await self._client.collections.exists(self.collection_name):
                try:
                    await create_collection(self._client, self.collection_name, self.replication_factor)
                except WeaviateBaseError:
                    if not await self._client.collections.exists(self.collection_name):
                        raise
                    log.info("collection %s was created concurrently", self.collection_name)
            config = await self._collection.config.get()
            if await self._add_later_properties({p.name for p in config.properties}):
                config = await self._collection.config.get()
        factor = config.replication_config.factor
        if factor != self.replication_factor:
            log.warning(
                "Weaviate collection %s keeps %d cop%s of each object, not the %d configured "
                "(HRT_WEAVIATE_REPLICATION_FACTOR applies when the collection is created)",
                self.collection_name,
                factor,
                "y" if factor == 1 else "ies",
                self.replication_factor,
            )
        problems = unfit(config)
        if problems:
            raise StoreError(
                f"Weaviate collection {self.collection_name!r} exists but does not fit HRT: {'; '.join(problems)}; "
                "drop it or set another HRT_WEAVIATE_COLLECTION, then run `hrt migrate` and `hrt doctor --repair`",
                store="Weaviate",
            )
        self._schema_applied = True

    async def _add_later_properties(self, have: set[str]) -> bool:
        """Add the properties HRT gained after the first collections were made to a collection
        that lacks them (``have``: its properties), warning what that means for the objects
        written before; True when any was added."""
        later = [p for p in _later_properties() if p.name not in have]
        for prop in later:  # a collection from before these properties: objects gain them on rewrite
            await self._collection.config.add_property(prop)
        added = {p.name for p in later}
        if added & set(FILTER_PROPERTIES):
            log.warning(
                "added %s to Weaviate collection %s; objects written before have none, so tag and agent "
                "filters miss them until they are written again (`hrt doctor --repair`)",
                ", ".join(p for p in FILTER_PROPERTIES if p in added),
                self.collection_name,
            )
        if added & set(VALIDITY_PROPERTIES):
            log.warning(
                "added %s to Weaviate collection %s; objects written before have none, so a valid_at "
                "filter keeps them whatever their interval until they are written again (`hrt doctor --repair`)",
                ", ".join(p for p in VALIDITY_PROPERTIES if p in added),
                self.collection_name,
            )
        if added & set(PASSAGE_PROPERTIES):
            log.warning(
                "added passages to Weaviate collection %s; objects written before have none, so their "
                "memory units score with their own vector until they are ingested again",
                self.collection_name,
            )
        return bool(later)

    # ------------------------------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------------------------------

    async def upsert(self, user_id: str, docs: Sequence[VectorDoc]) -> None:
        """Write the docs that differ from what the tenant stores; an identical doc is not written.
        Weaviate rewrites an identical object anyway (a newer update time), and that write is not
        invisible to searches: while it is applied, BM25 searches of the tenant miss some of its
        hits, and afterwards every BM25 score of the tenant has changed (the property length
        tracker keeps one more length per batch, so the average length drifts), which can reorder
        near ties. A repeated delivery of unchanged data (the projector delivers at least once)
        must not change an answer, so it writes nothing."""
        latest: dict[str, VectorDoc] = {doc.id: doc for doc in docs}  # the last write of an id wins
        if not latest:
            return
        name = tenant_name(user_id)
        # a read, under the read deadline: a Weaviate that went down fails the write in seconds
        async with guard("upsert (reading what is stored)", self._query_timeout):
            stored = await self._stored(user_id, name, list(latest))
        changed = [doc for ident, doc in latest.items() if stored.get(ident) != _stored_form(doc)]
        if not changed:
            return
        objects = [
            DataObject(
                properties={
                    "entity_id": doc.id,
                    "kind": Kind(doc.kind).value,
                    "text": doc.text,
                    "ts": NO_TS if doc.ts is None else float(doc.ts),
                    "tags": list(doc.tags),
                    "source_agent_id": doc.source_agent_id or "",
                    "valid_from": _float_or_none(doc.valid_from),  # null when open: no sentinel
                    "valid_to": _float_or_none(doc.valid_to),
                    **({"passages": _blob(doc.passages)} if doc.passages is not None else {}),
                },
                uuid=object_uuid(user_id, doc.id),
                vector=np.asarray(doc.vector, dtype=np.float32).tolist(),
            )
            for doc in changed
        ]
        tenant = self._collection.with_tenant(name)
        async with guard("upsert", self._write_timeout):
            for start in range(0, len(objects), WRITE_CHUNK):
                result = await tenant.data.insert_many(objects[start : start + WRITE_CHUNK])
                if result.has_errors:
                    first = next(iter(result.errors.values()))
                    raise StoreError(
                        f"Weaviate rejected {len(result.errors)} of {len(objects)} objects of user {user_id!r}: "
                        f"{first.message[:300]}",
                        store="Weaviate",
                    )

    async def delete(self, user_id: str, ids: Sequence[str]) -> None:
        uuids = sorted({object_uuid(user_id, ident) for ident in ids})
        if not uuids:
            return
        name = tenant_name(user_id)
        tenant = self._collection.with_tenant(name)
        async with guard("delete", self._write_timeout):
            for start in range(0, len(uuids), WRITE_CHUNK):
                try:
                    await tenant.data.delete_many(where=Filter.by_id().contains_any(uuids[start : start + WRITE_CHUNK]))
                except WeaviateQueryError as exc:
                    if _missing_tenant_candidate(exc) and not await self._collection.tenants.exists(name):
                        return  # nothing was ever written for this user
                    raise

    async def delete_user(self, user_id: str) -> None:
        """Drop the user's tenant: every object, vector and index file of the user, at once."""
        async with guard("delete a user", self._write_timeout):
            await self._collection.tenants.remove([tenant_name(user_id)])

    # ------------------------------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------------------------------

    async def ids(self, user_id: str) -> dict[str, str]:
        """Every entity id of the user with its kind, for drift checks against the record store."""
        name = tenant_name(user_id)
        out: dict[str, str] = {}
        async with guard("list ids", self._write_timeout):
            if not await self._collection.tenants.exists(name):
                return out
            async for obj in self._collection.with_tenant(name).iterator(return_properties=RETURNED):
                out[str(obj.properties["entity_id"])] = str(obj.properties["kind"])
        return out

    async def docs(self, user_id: str) -> dict[str, VectorDoc]:
        """Every document of one user as indexed (``hrt doctor`` compares them with the records)."""
        ids = sorted(await self.ids(user_id))
        async with guard("read documents", self._write_timeout):
            stored = await self._stored(user_id, tenant_name(user_id), ids)
        return {
            ident: VectorDoc(
                ident,
                Kind(kind),
                text,
                np.frombuffer(vector, dtype="<f4").astype(np.float32),
                None if ts == NO_TS else ts,
                tuple(tags),
                agent or None,
                start,
                end,
                _unblob(passages, len(vector) // 4),
            )
            for ident, (kind, text, ts, vector, tags, agent, start, end, passages) in stored.items()
        }

    async def search(
        self,
        user_id: str,
        phrases: Sequence[str],
        vectors: PhraseVectors,
        kinds: Sequence[Kind],
        k: int,
        not_after: float | None = None,
        where: SearchFilter | None = None,
    ) -> list[list[VectorHit]]:
        """Per phrase, the union of the top ``k`` vector hits and top ``k`` BM25 hits, each with its
        cosine similarity and both 1-based ranks; hits ordered by similarity, then id. The vectors
        are awaited before any request (starting the BM25 requests during the embedding gained
        nothing measurable here). Identical answers need an unchanged tenant: Weaviate rewrites an
        object upserted again unchanged, which shifts BM25 statistics, hence :meth:`upsert` writes
        only what differs (CHANGELOG.md)."""
        vectors = await resolve_vectors(vectors)
        if not phrases:
            return []
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.shape[0] != len(phrases):
            raise ValueError(f"{len(phrases)} phrases but {queries.shape[0]} vectors")
        empty: list[list[VectorHit]] = [[] for _ in phrases]
        if k < 1 or not kinds:
            return empty
        name = tenant_name(user_id)
        filters = search_filters(kinds, not_after, where)
        legs: list[Awaitable[list[_Found]]] = []
        for phrase, query in zip(phrases, queries, strict=True):
            legs.append(self._vector_leg(name, query, filters, k))
            legs.append(self._lexical_leg(name, phrase, filters, k))
        async with guard("search", self._query_timeout):
            results = await asyncio.gather(*legs, return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                if all(_missing_tenant_candidate(f) for f in failures) and not (
                    await self._collection.tenants.exists(name)
                ):
                    return empty  # a user with nothing indexed yet
                raise failures[0]
            found = [r for r in results if not isinstance(r, BaseException)]
            by_vector = found[0::2]
            legs_of = list(zip(by_vector, found[1::2], strict=True))
            by_lexical = await self._lexical_similarities(user_id, name, queries, legs_of)
        return [self._merge(v, lex) for v, lex in zip(by_vector, by_lexical, strict=True)]

    async def similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        """The objects of ``ids`` by their uuids, each with its distance to the nearest phrase
        vector, computed by Weaviate (one gRPC search per :data:`WRITE_CHUNK` ids for all the
        phrases; no stored vector leaves Weaviate)."""
        return {ident: own for ident, (own, _) in (await self._cosines(user_id, ids, vectors, False)).items()}

    async def passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        """As :meth:`similarities`, the same requests also returning each object's passage vectors,
        whose cosines are computed here."""
        return await self._cosines(user_id, ids, vectors, True)
