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
comparisons let them through (:func:`_valid_at`).

Search: per phrase, one ``near_vector`` and one ``bm25`` query, all 2 x phrases queries issued
concurrently over the client's single HTTP/2 gRPC channel (``asyncio.gather``). Weaviate's gRPC
API has no multi-query call, and a ``hybrid`` query returns only the fused score, not the two
ranks grounding needs. Kinds and ``not_after`` are server-side filters. The lexical query is the
phrase's content words (``hrt.text.content_words``), de-duplicated, with the BM25 ``Or`` operator
(Weaviate's default, set explicitly) and the collection's stopword preset ``none``: HRT removes
its own stopwords so both deployments use one list. BM25 hits come back with their stored vector,
so a lexical-only hit gets its cosine without another round trip. Each leg is ordered by
(-score, id) like the embedded adapter; a leg fetches more than ``k`` (the vector leg a few, the
lexical leg :data:`LEXICAL_TIE_SLACK` more) and, when a run of equal scores reaches the end of the
page, fetches again with a larger page, so the id tie-break at the ``k`` cut is exact. (BM25 ties
are common: equal term counts in equally long texts. A grown page carries no vectors, which would
cost more than the query, and the few hits it brings into the top ``k`` get theirs in one request
by object id.) The legs' replies are read from the gRPC protobuf directly, not through the
client's result objects (see :meth:`WeaviateVectorIndex._search`).

Differences from the embedded adapter that a reader of congruence results should know (the
vector legs agree; the lexical legs mostly do): the embedded FTS5 index stems words (porter:
"migrate table" finds "Migrated the billing tables"), Weaviate has no stemmer (both fold
diacritics); FTS5 keeps one set of BM25 statistics over all users and scores with its own BM25
variant, Weaviate scores BM25F per tenant, so equal sets may come in a different order; and the
embedded lexical leg filters kinds and ``not_after`` after fetching ``2k``, Weaviate before.

Errors: client, gRPC and HTTP failures are translated at this edge by :meth:`_guard`:
unreachable, timed out or closed become :class:`~hrt.errors.StoreUnavailable`, anything else
:class:`~hrt.errors.StoreError`. Every call also runs under an ``asyncio`` deadline, because the
client retries an unavailable gRPC server with exponential backoff for about a minute.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import numpy as np
from grpc import StatusCode
from grpc.aio import AioRpcError

import weaviate
from hrt.errors import HRTError, StoreError, StoreUnavailable
from hrt.records import KIND_OF, Kind
from hrt.stores.base import PhraseVectors, SearchFilter, Vector, VectorDoc, VectorHit, resolve_vectors
from hrt.stores.user_cache import keep_out_of_gc
from hrt.text import content_words
from weaviate.classes.config import (
    Configure,
    DataType,
    Property,
    StopwordsPreset,
    Tokenization,
    VectorDistances,
)
from weaviate.classes.data import DataObject
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter
from weaviate.collections import CollectionAsync
from weaviate.exceptions import (
    UnexpectedStatusCodeError,
    WeaviateBaseError,
    WeaviateClosedClientError,
    WeaviateConnectionError,
    WeaviateGRPCUnavailableError,
    WeaviateQueryError,
    WeaviateRetryError,
    WeaviateStartUpError,
    WeaviateTimeoutError,
)
from weaviate.proto.v1 import base_pb2, base_search_pb2, search_get_pb2

log = logging.getLogger(__name__)

DEFAULT_COLLECTION = "HRTEntity"
NO_TS = -1.0e18  # "no timestamp": before any real date, so `ts <= not_after` always admits it
PROPERTIES = ("entity_id", "kind", "text", "ts", "tags", "source_agent_id", "valid_from", "valid_to", "passages")
# added after the first collections were made: apply_schema adds them to an older collection
FILTER_PROPERTIES = ("tags", "source_agent_id")  # search filters
VALIDITY_PROPERTIES = ("valid_from", "valid_to")  # facts that change
PASSAGE_PROPERTIES = ("passages",)  # passage vectors
LATER_PROPERTIES = (*FILTER_PROPERTIES, *VALIDITY_PROPERTIES, *PASSAGE_PROPERTIES)
RETURNED = ["entity_id", "kind"]
TIE_SLACK = 4  # extra hits fetched per leg so that ties at the k cut can be broken by id
# BM25 ties are common (equal term counts in equally long texts): with 50 extra hits the first page
# holds the tie run at the cut for ~96% of the lexical legs at 100k (~73% with 4), so few need a
# grown page and then a request for the vectors that page lacks
LEXICAL_TIE_SLACK = 50
MAX_FETCH = 10_000  # Weaviate's default QUERY_MAXIMUM_RESULTS
WRITE_CHUNK = 500  # objects per gRPC batch request; ids per delete request
_NAMESPACE = uuid.UUID("5f0b6f5e-2d1c-5a57-9a43-6872742d7665")  # fixed forever: object ids derive from it
_RAW_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_ALL_KINDS = frozenset(Kind)
_RETURNED_PB = search_get_pb2.PropertiesRequest(non_ref_properties=RETURNED)
_ID_PB = search_get_pb2.PropertiesRequest(non_ref_properties=["entity_id"])  # own cosines need no more
_STORED_PB = search_get_pb2.PropertiesRequest(non_ref_properties=list(PROPERTIES))
_PASSAGES_PB = search_get_pb2.PropertiesRequest(non_ref_properties=["entity_id", "passages"])
_DISTANCE = search_get_pb2.MetadataRequest(distance=True)
_SCORE = search_get_pb2.MetadataRequest(score=True)
_SCORE_AND_VECTOR = search_get_pb2.MetadataRequest(score=True, vector=True)
_VECTOR = search_get_pb2.MetadataRequest(vector=True)
_OR = base_search_pb2.SearchOperatorOptions(
    operator=base_search_pb2.SearchOperatorOptions.OPERATOR_OR, minimum_or_tokens_match=1
)
_SINGLE = (base_pb2.Vectors.VECTOR_TYPE_UNSPECIFIED, base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32)


def _kind(value: Any) -> Kind:
    """``Kind(value)`` by a dict lookup first (the enum constructor is slow on the hot path)."""
    found = KIND_OF.get(value) if isinstance(value, str) else None
    return found if found is not None else Kind(value)


def tenant_name(user_id: str) -> str:
    """The Weaviate tenant of one HRT user (see the module docstring for the scheme)."""
    if _RAW_TENANT.fullmatch(user_id):
        return user_id
    slug = re.sub(r"[^A-Za-z0-9]+", "-", user_id).strip("-")[:29]
    return f"_{slug}_{hashlib.sha256(user_id.encode()).hexdigest()[:32]}"


def object_uuid(user_id: str, ident: str) -> uuid.UUID:
    """Deterministic object id, so that upserts are idempotent (unit separator avoids ambiguity)."""
    return uuid.uuid5(_NAMESPACE, f"{user_id}\x1f{ident}")


def lexical_query(phrase: str) -> str | None:
    """The BM25 query: the phrase's distinct content words (the embedded adapter ORs the same)."""
    chosen = sorted(set(content_words(phrase)))
    return " ".join(chosen) if chosen else None


def _cosine(a: Vector, b: Vector | Sequence[float], a_norm: float | None = None) -> float:
    """Cosine of ``a`` and a stored vector (0.0 when it is missing or of another dimension);
    ``a_norm``: ``a``'s norm, when the caller computed it once for many."""
    v = np.asarray(b, dtype=np.float32)
    if v.shape != a.shape:
        return 0.0
    denom = (float(np.linalg.norm(a)) if a_norm is None else a_norm) * float(np.linalg.norm(v))
    return float(np.dot(a, v)) / denom if denom > 0.0 else 0.0


def _stored_form(doc: VectorDoc) -> tuple[Any, ...]:
    """What Weaviate stores of a doc, as :meth:`WeaviateVectorIndex._stored` reads it back."""
    return (
        Kind(doc.kind).value,
        doc.text,
        NO_TS if doc.ts is None else float(doc.ts),
        np.asarray(doc.vector, dtype="<f4").tobytes(),
        tuple(doc.tags),
        doc.source_agent_id or "",
        _float_or_none(doc.valid_from),
        _float_or_none(doc.valid_to),
        _blob(doc.passages),
    )


def _blob(passages: Vector | None) -> str:
    """A doc's passage vectors as the BLOB property holds them: base64 of the (k, dim) float32
    little-endian rows; empty for none."""
    if passages is None or not len(passages):
        return ""
    return base64.b64encode(np.asarray(passages, dtype="<f4").tobytes()).decode("ascii")


def _unblob(text: str, dim: int) -> Vector | None:
    """:func:`_blob` read back as (k, ``dim``) rows; None for none, or for bytes that are not
    rows of ``dim``."""
    raw = base64.b64decode(text) if text else b""
    if dim <= 0 or not raw or len(raw) % (4 * dim):
        return None
    return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(-1, dim)


def _stored_blob(fields: Any) -> str:
    """The passages property of a reply's fields in :func:`_blob`'s form ("" when null or absent:
    an object written before the property existed)."""
    if "passages" not in fields:
        return ""
    value = fields["passages"]
    return value.blob_value if value.WhichOneof("kind") == "blob_value" else ""


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _number(fields: Any, prop: str) -> float | None:
    """A NUMBER property of a reply's fields: None when null, or absent (an object written before
    the property existed)."""
    if prop not in fields:
        return None
    value = fields[prop]
    return float(value.number_value) if value.WhichOneof("kind") == "number_value" else None


def _later_properties() -> list[Property]:
    # filterable, not searchable: tag and agent filters match whole values (FIELD tokenization);
    # the interval is range-filtered (valid_at), null when open (no sentinel: see _valid_at)
    return [
        Property(name="tags", data_type=DataType.TEXT_ARRAY, tokenization=Tokenization.FIELD, index_searchable=False),
        Property(
            name="source_agent_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD, index_searchable=False
        ),
        Property(name="valid_from", data_type=DataType.NUMBER, index_range_filters=True),
        Property(name="valid_to", data_type=DataType.NUMBER, index_range_filters=True),
        # passage vectors (hrt.records.passage_texts): stored, read back by id, never indexed
        Property(name="passages", data_type=DataType.BLOB),
    ]


# A node that has just started answers before it has loaded its schema ("could not find class")
# or, knowing the collection (its schema comes from Raft), before its database has loaded the
# collection's index ("non-existing index", Weaviate's adapters/repos/db/search.go): a search
# meanwhile fails with a gRPC UNKNOWN. Not a wrong request: the store is still starting.
_LOADING = re.compile(r"\bnon-existing index for\b|\bcould not find class \w+ in schema\b")


def _unavailable(exc: BaseException) -> bool:
    """True when the failure means Weaviate cannot be reached (or answered too late), walking the
    chain because the client re-raises gRPC errors as WeaviateQueryError inside ``except``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(
            current,
            TimeoutError
            | ConnectionError
            | httpx.TransportError
            | WeaviateConnectionError
            | WeaviateTimeoutError
            | WeaviateGRPCUnavailableError
            | WeaviateClosedClientError
            | WeaviateStartUpError
            | WeaviateRetryError,
        ):
            return True
        if isinstance(current, AioRpcError) and current.code() in (
            StatusCode.UNAVAILABLE,
            StatusCode.DEADLINE_EXCEEDED,
        ):
            return True
        if isinstance(current, AioRpcError) and _LOADING.search(current.details() or ""):
            return True
        if isinstance(current, UnexpectedStatusCodeError) and current.status_code in (502, 503, 504):
            return True
        current = current.__cause__ or current.__context__
    return False


def _missing_tenant_candidate(exc: BaseException) -> bool:
    """A query error that may mean "this user has no tenant yet" (confirmed with one more call;
    the error's wording is not relied on)."""
    return isinstance(exc, WeaviateQueryError) and not _unavailable(exc)


@dataclass(frozen=True, slots=True)
class _Found:
    """One object of one leg: ``score`` orders the leg (cosine, or BM25 score); ``similarity`` is
    None for a lexical hit whose stored vector has not been read yet."""

    id: str
    kind: Kind
    score: float
    similarity: float | None


class WeaviateVectorIndex:
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
        async with self._guard("connect", self._connect_timeout):
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
        async with self._guard("ping", self._connect_timeout):
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
        async with self._guard("ensure the schema", self._write_timeout):
            if not await self._client.collections.exists(self.collection_name):
                try:
                    await self._create_collection()
                except WeaviateBaseError:
                    if not await self._client.collections.exists(self.collection_name):
                        raise
                    log.info("collection %s was created concurrently", self.collection_name)
            config = await self._collection.config.get()
            have = {p.name for p in config.properties}
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
            if later:
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
        problems = []
        if not config.multi_tenancy_config.enabled:
            problems.append("multi-tenancy is off")
        if not config.multi_tenancy_config.auto_tenant_creation:
            problems.append("auto tenant creation is off")
        missing = set(PROPERTIES) - {p.name for p in config.properties}
        if missing:
            problems.append(f"properties {sorted(missing)} are missing")
        vector_configs = config.vector_config or {}
        default = vector_configs.get("default")
        metric = getattr(getattr(default, "vector_index_config", None), "distance_metric", None)
        if metric is not VectorDistances.COSINE:
            problems.append(f"the default vector's distance is {metric}, not cosine")
        if problems:
            raise StoreError(
                f"Weaviate collection {self.collection_name!r} exists but does not fit HRT: {'; '.join(problems)}; "
                "drop it or set another HRT_WEAVIATE_COLLECTION, then run `hrt migrate` and `hrt doctor --repair`",
                store="Weaviate",
            )
        self._schema_applied = True

    async def _create_collection(self) -> None:
        await self._client.collections.create(
            self.collection_name,
            description="HRT entities: one object per (user, entity); one tenant per user",
            properties=[
                Property(
                    name="entity_id",
                    data_type=DataType.TEXT,
                    tokenization=Tokenization.FIELD,
                    index_searchable=False,
                ),
                Property(
                    name="kind",
                    data_type=DataType.TEXT,
                    tokenization=Tokenization.FIELD,
                    index_searchable=False,
                ),
                Property(
                    name="text",
                    data_type=DataType.TEXT,
                    tokenization=Tokenization.WORD,
                    index_filterable=False,
                    text_analyzer=Configure.text_analyzer(ascii_fold=True),  # as FTS5 unicode61 folds diacritics
                ),
                Property(name="ts", data_type=DataType.NUMBER, index_range_filters=True),
                *_later_properties(),
            ],
            vector_config=Configure.Vectors.self_provided(
                vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)
            ),
            inverted_index_config=Configure.inverted_index(stopwords_preset=StopwordsPreset.NONE),
            multi_tenancy_config=Configure.multi_tenancy(
                enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
            ),
            # asynchronous replication (a node back from an outage is repaired) is Weaviate's
            # default from v1.38 for a factor above 1: no switch to send
            replication_config=Configure.replication(factor=self.replication_factor),
        )

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
        async with self._guard("upsert (reading what is stored)", self._query_timeout):
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
        async with self._guard("upsert", self._write_timeout):
            for start in range(0, len(objects), WRITE_CHUNK):
                result = await tenant.data.insert_many(objects[start : start + WRITE_CHUNK])
                if result.has_errors:
                    first = next(iter(result.errors.values()))
                    raise StoreError(
                        f"Weaviate rejected {len(result.errors)} of {len(objects)} objects of user {user_id!r}: "
                        f"{first.message[:300]}",
                        store="Weaviate",
                    )

    async def _by_ids(
        self, user_id: str, tenant: str, ids: Sequence[str], properties: search_get_pb2.PropertiesRequest
    ) -> list[tuple[Any, bytes | None]]:
        """The tenant's objects of ``ids``, as (their ``properties`` fields, their stored vector's
        bytes or None): one gRPC request per :data:`WRITE_CHUNK` ids, all in flight at once (a
        retrieval reads ~600 candidates' vectors: two requests); none for a tenant not created
        yet."""
        requests = []
        for start in range(0, len(ids), WRITE_CHUNK):
            chunk = ids[start : start + WRITE_CHUNK]
            by_uuid = base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_CONTAINS_ANY,
                value_text_array=base_pb2.TextArray(values=[str(object_uuid(user_id, ident)) for ident in chunk]),
                target=base_pb2.FilterTarget(property="_id"),
            )
            request = self._request(tenant, len(chunk), by_uuid, _VECTOR)
            request.properties.CopyFrom(properties)
            requests.append(request)
        replies = await asyncio.gather(*(self._search(r) for r in requests), return_exceptions=True)
        out: list[tuple[Any, bytes | None]] = []
        for reply in replies:
            if isinstance(reply, BaseException):
                if _missing_tenant_candidate(reply) and not await self._collection.tenants.exists(tenant):
                    return []  # a user with nothing indexed yet
                raise reply
            for obj in reply.results:
                vector = next((v for v in obj.metadata.vectors if v.name == "default" and v.type in _SINGLE), None)
                out.append((obj.properties.non_ref_props.fields, vector.vector_bytes if vector is not None else None))
        return out

    async def _stored(self, user_id: str, tenant: str, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """The stored form (:func:`_stored_form`) of those of ``ids`` the tenant holds."""
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

    async def delete(self, user_id: str, ids: Sequence[str]) -> None:
        uuids = sorted({object_uuid(user_id, ident) for ident in ids})
        if not uuids:
            return
        name = tenant_name(user_id)
        tenant = self._collection.with_tenant(name)
        async with self._guard("delete", self._write_timeout):
            for start in range(0, len(uuids), WRITE_CHUNK):
                try:
                    await tenant.data.delete_many(where=Filter.by_id().contains_any(uuids[start : start + WRITE_CHUNK]))
                except WeaviateQueryError as exc:
                    if _missing_tenant_candidate(exc) and not await self._collection.tenants.exists(name):
                        return  # nothing was ever written for this user
                    raise

    async def delete_user(self, user_id: str) -> None:
        """Drop the user's tenant: every object, vector and index file of the user, at once."""
        async with self._guard("delete a user", self._write_timeout):
            await self._collection.tenants.remove([tenant_name(user_id)])

    # ------------------------------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------------------------------

    async def ids(self, user_id: str) -> dict[str, str]:
        """Every entity id of the user with its kind, for drift checks against the record store."""
        name = tenant_name(user_id)
        out: dict[str, str] = {}
        async with self._guard("list ids", self._write_timeout):
            if not await self._collection.tenants.exists(name):
                return out
            async for obj in self._collection.with_tenant(name).iterator(return_properties=RETURNED):
                out[str(obj.properties["entity_id"])] = str(obj.properties["kind"])
        return out

    async def docs(self, user_id: str) -> dict[str, VectorDoc]:
        """Every document of one user as indexed (``hrt doctor`` compares them with the records)."""
        ids = sorted(await self.ids(user_id))
        async with self._guard("read documents", self._write_timeout):
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
        filters = self._filters(kinds, not_after, where)
        legs: list[Awaitable[list[_Found]]] = []
        for phrase, query in zip(phrases, queries, strict=True):
            legs.append(self._vector_leg(name, query, filters, k))
            legs.append(self._lexical_leg(name, user_id, phrase, query, filters, k))
        async with self._guard("search", self._query_timeout):
            results = await asyncio.gather(*legs, return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                if all(_missing_tenant_candidate(f) for f in failures) and not (
                    await self._collection.tenants.exists(name)
                ):
                    return empty  # a user with nothing indexed yet
                raise failures[0]
        found = [r for r in results if not isinstance(r, BaseException)]
        return [self._merge(found[2 * p], found[2 * p + 1]) for p in range(len(phrases))]

    async def similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        """The objects of ``ids`` by their uuids, with their stored vectors (one gRPC request per
        :data:`WRITE_CHUNK` ids)."""
        return {ident: own for ident, (own, _) in (await self._cosines(user_id, ids, vectors, False)).items()}

    async def passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        """As :meth:`similarities`, the same requests also returning each object's passages."""
        return await self._cosines(user_id, ids, vectors, True)

    async def _cosines(
        self, user_id: str, ids: Sequence[str], vectors: Vector, passages: bool
    ) -> dict[str, tuple[float, float]]:
        """Each found id: its own vector's best cosine to the phrases, and (with ``passages``) its
        passages' best, else the own one again."""
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        wanted = sorted(set(ids))
        if not wanted or queries.shape[0] == 0:
            return {}
        dim = queries.shape[1]
        async with self._guard("similarities", self._query_timeout):
            objects = await self._by_ids(user_id, tenant_name(user_id), wanted, _PASSAGES_PB if passages else _ID_PB)
        found: list[str] = []
        stored: list[np.ndarray] = []
        rows: list[Vector | None] = []
        for fields, vector in objects:
            if vector is not None and len(vector) == 4 * dim:
                found.append(fields["entity_id"].text_value)
                stored.append(np.frombuffer(vector, dtype="<f4"))
                rows.append(_unblob(_stored_blob(fields), dim) if passages else None)
        if not found:
            return {}
        qnorm = np.linalg.norm(queries, axis=1)[None, :]

        def best(matrix: np.ndarray) -> np.ndarray:
            norms = np.linalg.norm(matrix, axis=1)[:, None] * qnorm
            cosines = (matrix @ queries.T) / np.where(norms > 0.0, norms, 1.0)
            return np.asarray(cosines.max(axis=1), dtype=np.float64)

        own = best(np.stack(stored)).tolist()
        return {
            ident: (mine, mine if row is None else float(best(row).max()))
            for ident, mine, row in zip(found, own, rows, strict=True)
        }

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

    @staticmethod
    def _filters(
        kinds: Sequence[Kind], not_after: float | None, where: SearchFilter | None = None
    ) -> base_pb2.Filters | None:
        parts: list[base_pb2.Filters] = []
        wanted = {Kind(kind) for kind in kinds}
        if wanted != _ALL_KINDS:  # no filter at all keeps the unfiltered (HNSW) path
            parts.append(
                base_pb2.Filters(
                    operator=base_pb2.Filters.OPERATOR_CONTAINS_ANY,
                    value_text_array=base_pb2.TextArray(values=sorted(kind.value for kind in wanted)),
                    target=base_pb2.FilterTarget(property="kind"),
                )
            )
        if not_after is not None:
            parts.append(
                base_pb2.Filters(
                    operator=base_pb2.Filters.OPERATOR_LESS_THAN_EQUAL,
                    value_number=float(not_after),
                    target=base_pb2.FilterTarget(property="ts"),
                )
            )
        if where:
            parts += _pushed_down(where)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_AND, filters=parts)

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

    async def _lexical_leg(
        self,
        tenant: str,
        user_id: str,
        phrase: str,
        query: Vector,
        filters: base_pb2.Filters | None,
        k: int,
    ) -> list[_Found]:
        """The first page brings the hits' stored vectors (for their cosine); a page grown for a
        tie at the cut brings only ids and scores (a tie run can be hundreds of hits long), and
        the vectors of the few hits it adds to the top ``k`` come in one more request."""
        text = lexical_query(phrase)
        if text is None:
            return []
        bm25 = base_search_pb2.BM25(query=text, properties=["text"], search_operator=_OR)
        query_norm = float(np.linalg.norm(query))
        pages = 0

        async def fetch(limit: int) -> list[_Found]:
            nonlocal pages
            with_vectors = pages == 0
            pages += 1
            metadata = _SCORE_AND_VECTOR if with_vectors else _SCORE
            reply = await self._search(self._request(tenant, limit, filters, metadata, bm25_search=bm25))
            out = []
            for obj in reply.results:
                fields = obj.properties.non_ref_props.fields
                ident = fields["entity_id"].text_value
                similarity: float | None = None
                if with_vectors:
                    stored = next((v for v in obj.metadata.vectors if v.name == "default" and v.type in _SINGLE), None)
                    similarity = (
                        _cosine(query, np.frombuffer(stored.vector_bytes, dtype="<f4"), query_norm)
                        if stored is not None
                        else 0.0
                    )
                    seen[ident] = similarity
                score = obj.metadata.score if obj.metadata.score_present else 0.0
                out.append(_Found(ident, _kind(fields["kind"].text_value), score, seen.get(ident, similarity)))
            return out

        seen: dict[str, float] = {}  # similarities from the first page
        top = await _top_k(fetch, k, LEXICAL_TIE_SLACK)
        unknown = [f.id for f in top if f.similarity is None]
        if not unknown:
            return top
        res = await self._collection.with_tenant(tenant).query.fetch_objects(
            filters=Filter.by_id().contains_any([object_uuid(user_id, ident) for ident in unknown]),
            limit=len(unknown),
            include_vector=True,
            return_properties=["entity_id"],
        )
        for obj in res.objects:
            stored = obj.vector.get("default")
            if isinstance(stored, list):
                seen[str(obj.properties["entity_id"])] = _cosine(query, stored, query_norm)  # type: ignore[arg-type]
        # a hit deleted meanwhile has no vector: cosine 0.0, as for a stored vector of another size
        return [f if f.similarity is not None else replace(f, similarity=seen.get(f.id, 0.0)) for f in top]

    # ------------------------------------------------------------------------------------------
    # the edge
    # ------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def _guard(self, action: str, timeout: float) -> AsyncIterator[None]:
        """A deadline around one adapter call, and Weaviate's errors translated into HRT's."""
        try:
            async with asyncio.timeout(timeout):
                yield
        except HRTError:
            raise
        except (WeaviateBaseError, AioRpcError, httpx.HTTPError, OSError, TimeoutError) as exc:
            detail = str(exc)[:300] or type(exc).__name__
            if _unavailable(exc):
                raise StoreUnavailable(f"Weaviate unavailable during {action}: {detail}", store="Weaviate") from exc
            raise StoreError(f"Weaviate error during {action}: {detail}", store="Weaviate") from exc


def _text_is(prop: str, value: str, equal: bool = True) -> base_pb2.Filters:
    op = base_pb2.Filters.OPERATOR_EQUAL if equal else base_pb2.Filters.OPERATOR_NOT_EQUAL
    return base_pb2.Filters(operator=op, value_text=value, target=base_pb2.FilterTarget(property=prop))


def _any_of(*filters: base_pb2.Filters) -> base_pb2.Filters:
    return filters[0] if len(filters) == 1 else base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_OR, filters=filters)


def _pushed_down(where: SearchFilter) -> list[base_pb2.Filters]:
    """The request's filters as Weaviate filters (see :class:`SearchFilter`): each applies to the
    kinds that carry its property and lets the others through."""
    parts: list[base_pb2.Filters] = []
    not_mu = _text_is("kind", Kind.MEMORY_UNIT.value, equal=False)
    if where.tags:
        tags = base_pb2.Filters(
            operator=base_pb2.Filters.OPERATOR_CONTAINS_ANY,
            value_text_array=base_pb2.TextArray(values=sorted(set(where.tags))),
            target=base_pb2.FilterTarget(property="tags"),
        )
        parts.append(_any_of(not_mu, tags))
    if where.source_agent_ids:
        agents = [_text_is("source_agent_id", a) for a in sorted(set(where.source_agent_ids))]
        parts.append(_any_of(not_mu, *agents))
    bounds: list[base_pb2.Filters] = []
    if where.ts_from is not None:
        bounds.append(
            base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_GREATER_THAN_EQUAL,
                value_number=float(where.ts_from),
                target=base_pb2.FilterTarget(property="ts"),
            )
        )
    if where.ts_to is not None:
        bounds.append(
            base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_LESS_THAN_EQUAL,
                value_number=float(where.ts_to),
                target=base_pb2.FilterTarget(property="ts"),
            )
        )
    if bounds:
        within = (
            bounds[0] if len(bounds) == 1 else base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_AND, filters=bounds)
        )
        parts.append(_any_of(_text_is("kind", Kind.CONCEPT.value), within))
    if where.valid_at is not None:
        parts += _valid_at(float(where.valid_at))
    return parts


def _valid_at(at: float) -> list[base_pb2.Filters]:
    """Documents whose interval holds at ``at``, for every kind: NOT(valid_from > at) AND
    NOT(valid_to <= at). Written as NOTs of the comparisons, not as ``valid_from <= at`` and
    ``valid_to > at``, because a comparison never matches a null or missing property: an open end
    (stored as null, no sentinel) and an object written before the properties existed fail both
    comparisons, so their NOTs let them through (checked against the real server in
    tests/contract/test_weaviate_vectors.py)."""

    def never(operator: base_pb2.Filters.Operator, prop: str) -> base_pb2.Filters:
        compared = base_pb2.Filters(operator=operator, value_number=at, target=base_pb2.FilterTarget(property=prop))
        return base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_NOT, filters=[compared])

    return [
        never(base_pb2.Filters.OPERATOR_GREATER_THAN, "valid_from"),
        never(base_pb2.Filters.OPERATOR_LESS_THAN_EQUAL, "valid_to"),
    ]


async def _top_k(fetch: Callable[[int], Awaitable[list[_Found]]], k: int, slack: int) -> list[_Found]:
    """The first ``k`` by (-score, id). A page is complete for that order unless a run of equal
    scores reaches its last row; then the page grows until the run ends or the server cap."""
    limit = min(k + slack, MAX_FETCH)
    while True:
        page = sorted(await fetch(limit), key=lambda f: (-f.score, f.id))
        if len(page) < limit or len(page) <= k or page[k - 1].score != page[-1].score or limit >= MAX_FETCH:
            return page[:k]
        limit = min(limit * 4, MAX_FETCH)
