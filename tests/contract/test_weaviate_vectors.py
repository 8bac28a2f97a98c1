"""The VectorIndex behaviours of the store contract, against a real Weaviate, plus congruence with
the embedded adapter on the same data (same documents, same hashing embedder).

For now the Weaviate of a running dev stack is used (``hrt dev up``; ``HRT_DEV_DIR``, default
/tmp/devtest): missing, these tests skip locally and fail in CI. Each module run works in its own
collection and drops it afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
import weaviate
from weaviate.classes.config import Configure
from weaviate.classes.init import Auth

from hrt.config import Settings
from hrt.errors import StoreError, StoreUnavailable
from hrt.ingest import parse_jsonl
from hrt.records import Artifact, Concept, Kind, MemoryUnit, entity_text
from hrt.service import HRTService
from hrt.stores.base import SearchFilter, VectorDoc, VectorHit, valid_at
from hrt.stores.embedded.vectors import EmbeddedVectorIndex
from hrt.stores.projection import vector_doc
from hrt.stores.weaviate.vectors import LEXICAL_TIE_SLACK, NO_TS, WeaviateVectorIndex, object_uuid, tenant_name
from tests.conftest import FIXED_NOW, StackManager
from tests.helpers import HashingEmbedder, jsonl, mu, small_graph

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ALL_KINDS = [Kind.MEMORY_UNIT, Kind.CONCEPT, Kind.ARTIFACT]
TWIN = "u-twin"  # the same entity ids as u1, other texts and vectors
EMAIL_USER = "maya@lumen.io"  # not a valid Weaviate tenant name as is

# phrases that exercise every entity of small_graph, through words, stems and near-misses
CONGRUENCE_PHRASES = [
    "Postgres billing tables",
    "bandwidth",
    "Project Phoenix timeline",
    "team bandwidth constraint Q3",
    "analytics platform due December",
    "relational database",
    "migrated without downtime",
    "risk summary",
    "resource allocation brainstorm",
    "Ben",
    "what is the plan for the weekend",
    "Maya",
    "Ben Q3",
    "Q3 Postgres",
    "weekend Phoenix",
    "migrate table",  # stems: FTS5 (porter) matches "migrated", "tables"; Weaviate's word tokenizer does not
    "platforms",
]
TIE = 1e-6  # similarities closer than this are a tie: float32 noise differs between the two engines
# own cosines: Weaviate's float32 distances against numpy's cosines of the same float32 vectors
# (docs/bench.md, "Own cosines computed in Weaviate": at most 5.4e-7 apart over 320,580 cosines)
COSINE_TOLERANCE = 1e-6


@dataclass
class Loaded:
    index: WeaviateVectorIndex
    embedded: EmbeddedVectorIndex
    embedder: HashingEmbedder
    docs: dict[str, dict[str, VectorDoc]]  # user -> id -> doc


def _docs(records: Sequence[object], embedder: HashingEmbedder) -> dict[str, dict[str, VectorDoc]]:
    entities = [r for r in records if isinstance(r, MemoryUnit | Concept | Artifact)]
    vectors = embedder.embed([entity_text(e) for e in entities])
    out: dict[str, dict[str, VectorDoc]] = {}
    for entity, vector in zip(entities, vectors, strict=True):
        out.setdefault(entity.user_id, {})[entity.id] = vector_doc(entity, vector)
    return out


def _twin_graph() -> list[dict[str, object]]:
    """u1's ids with unrelated texts: a leak between tenants would show up as a wrong hit."""
    out = []
    for record in small_graph(TWIN):
        if record["kind"] == "concept":
            record = {**record, "name": f"Lunar rover {record['id']}", "description": "Telemetry from the crater."}
        elif record["kind"] in ("memory_unit", "artifact"):
            record = {**record, "title": "Orbit notes", "content": "Orbital mechanics lecture about Jupiter moons."}
        out.append(record)
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def loaded(tmp_path_factory: pytest.TempPathFactory, stack_manager: StackManager) -> AsyncIterator[Loaded]:
    stack = stack_manager.need("weaviate")  # started by the fixtures when not running: never a skip
    name = f"HRTTest{uuid.uuid4().hex[:10]}"
    client = weaviate.use_async_with_custom(
        http_host="127.0.0.1",
        http_port=stack.weaviate_http_port,
        http_secure=False,
        grpc_host="127.0.0.1",
        grpc_port=stack.weaviate_grpc_port,
        grpc_secure=False,
        auth_credentials=Auth.api_key(stack.weaviate_api_key),  # anonymous access is off
    )
    await client.connect()
    index = WeaviateVectorIndex(client=client, collection=name)  # an injected client: not closed by the index
    embedder = HashingEmbedder()
    records = parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x") + _twin_graph()))
    svc = HRTService(
        Settings(db_path=tmp_path_factory.mktemp("wv") / "c.db"), embedder=HashingEmbedder(), clock=lambda: FIXED_NOW
    )
    try:
        await index.open()
        await index.apply_schema()
        await index.apply_schema()  # idempotent
        docs = _docs(records, embedder)
        docs[EMAIL_USER] = {i: d for i, d in docs["u1"].items() if i in ("m3", "c-pg")}
        for user, by_id in docs.items():
            await index.upsert(user, list(by_id.values()))
        await svc.ingest(records)
        assert isinstance(svc.vectors, EmbeddedVectorIndex)
        yield Loaded(index, svc.vectors, embedder, docs)
    finally:
        await svc.close()
        await client.collections.delete(name)
        await client.close()


def _exact_cosine(query: np.ndarray, doc: VectorDoc) -> float:
    v = np.asarray(doc.vector, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    return float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))


def _leg(hits: Sequence[VectorHit], lexical: bool) -> list[str]:
    ranked = [(h.lexical_rank if lexical else h.vector_rank, h.id) for h in hits]
    return [i for r, i in sorted((r, i) for r, i in ranked if r is not None)]


def _vector_leg(hits: Sequence[VectorHit]) -> list[tuple[str, float]]:
    """(id, similarity) in vector-rank order."""
    return [(h.id, h.similarity) for h in sorted(hits, key=lambda h: h.vector_rank or 0) if h.vector_rank is not None]


def _compare_vector_legs(remote: Sequence[VectorHit], local: Sequence[VectorHit], phrase: str) -> bool:
    """Same length and the same similarity at every rank; the same ids at every rank, except that
    ids within a tie (similarities closer than TIE, where float32 noise decides) may swap, and the
    tie at the k cut may pick different members. Returns whether the id orders differed at all."""
    r, e = _vector_leg(remote), _vector_leg(local)
    assert len(r) == len(e), f"vector legs of {phrase!r} differ in length: {r} vs {e}"
    for (_, rs), (_, es) in zip(r, e, strict=True):
        assert rs == pytest.approx(es, abs=1e-5), f"vector legs of {phrase!r}: {r} vs {e}"
    groups: list[list[int]] = []
    for i, (_, sim) in enumerate(e):
        if groups and abs(sim - e[groups[-1][0]][1]) <= TIE:
            groups[-1].append(i)
        else:
            groups.append([i])
    for group in groups[:-1]:
        assert {r[i][0] for i in group} == {e[i][0] for i in group}, f"vector legs of {phrase!r}: {r} vs {e}"
    return [i for i, _ in r] != [i for i, _ in e]


# ----------------------------------------------------------------------------------------------
# the contract
# ----------------------------------------------------------------------------------------------


async def test_every_hit_carries_its_exact_cosine(loaded: Loaded) -> None:
    """Lexical-only hits included: their cosine comes from the stored vector, not the distance."""
    phrases = ["billing", "team", "Ben Q3", "Q3 Postgres", "Postgres billing tables"]
    vectors = loaded.embedder.embed(phrases)
    hits = await loaded.index.search("u1", phrases, vectors, ALL_KINDS, k=2)
    lexical_only = 0
    for p, row in enumerate(hits):
        for h in row:
            assert -1.0001 <= h.similarity <= 1.0001
            assert h.similarity == pytest.approx(_exact_cosine(vectors[p], loaded.docs["u1"][h.id]), abs=1e-5)
            lexical_only += h.vector_rank is None
    assert lexical_only >= 3, "these phrases have lexical-only hits at k=2"


async def test_bm25_pages_carry_no_vectors_and_one_read_brings_the_lexical_only_ones(
    loaded: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lexical legs return ids and scores; the stored vectors of the hits no vector leg
    found, over all phrases, come in one request by uuid after the legs."""
    requests: list[Any] = []
    search = loaded.index._search

    async def counted(request: Any) -> Any:
        requests.append(request)
        return await search(request)

    monkeypatch.setattr(loaded.index, "_search", counted)
    phrases = ["billing", "team", "Ben Q3", "Q3 Postgres", "Postgres billing tables"]
    await loaded.index.search("u1", phrases, loaded.embedder.embed(phrases), ALL_KINDS, k=2)
    bm25 = [r for r in requests if r.HasField("bm25_search")]
    by_uuid = [r for r in requests if r.filters.target.property == "_id"]
    assert len(bm25) == len(phrases) and not any(r.metadata.vector for r in bm25)
    assert len(by_uuid) == 1 and by_uuid[0].metadata.vector
    assert len(requests) == 2 * len(phrases) + 1


async def test_ids_are_scoped_by_user_even_when_shared(loaded: Loaded) -> None:
    u1_ids = await loaded.index.ids("u1")
    assert u1_ids == {i: d.kind.value for i, d in loaded.docs["u1"].items()}
    assert set(await loaded.index.ids(TWIN)) == set(u1_ids)
    assert set(await loaded.index.ids("u2")) == {"x" + i for i in u1_ids}
    phrase = ["Postgres billing tables"]
    twin = await loaded.index.search(TWIN, phrase, loaded.embedder.embed(phrase), ALL_KINDS, k=5)
    assert not any(h.lexical_rank is not None for h in twin[0]), "u1's text answered in the twin's tenant"
    lunar = ["lunar rover telemetry"]
    mine = await loaded.index.search("u1", lunar, loaded.embedder.embed(lunar), ALL_KINDS, k=5)
    assert not any(h.lexical_rank is not None for h in mine[0]), "the twin's text answered in u1's tenant"


async def test_user_ids_that_are_not_tenant_names(loaded: Loaded) -> None:
    assert tenant_name("u-maya") == "u-maya"
    assert tenant_name(EMAIL_USER).startswith("_maya-lumen-io_") and len(tenant_name(EMAIL_USER)) <= 64
    assert tenant_name("a" * 128) != tenant_name("a" * 127)
    assert await loaded.index.ids(EMAIL_USER) == {"m3": "memory_unit", "c-pg": "concept"}
    phrase = ["Postgres"]
    hits = await loaded.index.search(EMAIL_USER, phrase, loaded.embedder.embed(phrase), ALL_KINDS, k=5)
    assert {h.id for h in hits[0]} == {"m3", "c-pg"}


async def test_delete_removes_from_both_legs_and_delete_user_drops_everything(loaded: Loaded) -> None:
    user = f"scratch-{uuid.uuid4().hex[:8]}"
    docs = list(loaded.docs["u1"].values())
    await loaded.index.upsert(user, docs)
    phrase = ["Postgres billing tables"]
    vec = loaded.embedder.embed(phrase)
    before = {h.id for h in (await loaded.index.search(user, phrase, vec, ALL_KINDS, k=10))[0]}
    assert {"m3", "m4"} <= before
    await loaded.index.delete(user, ["m3", "not-there"])
    after = (await loaded.index.search(user, phrase, vec, ALL_KINDS, k=10))[0]
    assert "m3" not in {h.id for h in after} and "m4" in {h.id for h in after}
    assert "m3" not in await loaded.index.ids(user)
    assert "m3" in await loaded.index.ids("u1"), "a delete reached another user"
    await loaded.index.delete_user(user)
    assert await loaded.index.ids(user) == {}
    assert await loaded.index.search(user, phrase, vec, ALL_KINDS, k=10) == [[]]


async def test_upsert_is_idempotent_and_overwrites(loaded: Loaded) -> None:
    user = f"scratch-{uuid.uuid4().hex[:8]}"
    docs = list(loaded.docs["u1"].values())
    phrases = ["Postgres billing tables", "bandwidth"]
    vecs = loaded.embedder.embed(phrases)
    try:
        await loaded.index.upsert(user, docs)
        first = await loaded.index.search(user, phrases, vecs, ALL_KINDS, k=10)
        await loaded.index.upsert(user, docs)
        assert len(await loaded.index.ids(user)) == len(docs)
        assert await loaded.index.search(user, phrases, vecs, ALL_KINDS, k=10) == first
        text = "Kubernetes cluster autoscaling notes"
        changed = VectorDoc("m3", Kind.MEMORY_UNIT, text, loaded.embedder.embed([text])[0], None)
        await loaded.index.upsert(user, [changed])
        assert len(await loaded.index.ids(user)) == len(docs)
        hits = await loaded.index.search(user, ["Kubernetes"], loaded.embedder.embed(["Kubernetes"]), ALL_KINDS, k=3)
        top = {h.id: h for h in hits[0]}
        assert top["m3"].lexical_rank == 1 and top["m3"].vector_rank == 1
        future = await loaded.index.search(user, ["Kubernetes"], vecs[:1], ALL_KINDS, k=10, not_after=0.0)
        assert "m3" in {h.id for h in future[0]}, "a doc without ts is stored with the NO_TS sentinel"
    finally:
        await loaded.index.delete_user(user)
    assert object_uuid("u1", "m3") != object_uuid(TWIN, "m3") and object_uuid("a", "bc") != object_uuid("ab", "c")
    assert NO_TS < 0.0


async def test_an_identical_upsert_writes_nothing_and_leaves_bm25_scores_as_they_were(loaded: Loaded) -> None:
    # Weaviate rewrites an unchanged object (a newer update time), and each rewrite shifts the
    # tenant's BM25 length statistics: a repeated delivery of the same data (the projector delivers
    # at least once) would change later answers. The adapter writes only what differs.
    from weaviate.classes.query import MetadataQuery

    user = f"scratch-{uuid.uuid4().hex[:8]}"
    docs = list(loaded.docs["u1"].values())
    tenant = loaded.index._collection.with_tenant(tenant_name(user))

    async def state() -> dict[str, tuple[float | None, object]]:
        res = await tenant.query.bm25(
            query="Postgres billing tables bandwidth Phoenix",
            limit=50,
            return_metadata=MetadataQuery(score=True, last_update_time=True),
        )
        return {str(o.properties["entity_id"]): (o.metadata.score, o.metadata.last_update_time) for o in res.objects}

    try:
        await loaded.index.upsert(user, docs)
        before = await state()
        assert len(before) >= 3
        for _ in range(3):
            await loaded.index.upsert(user, docs)
        assert await state() == before  # the same scores, bit for bit, and no object rewritten
        m3 = next(d for d in docs if d.id == "m3")
        await loaded.index.upsert(user, [*docs, VectorDoc("m3", m3.kind, m3.text + " Postgres", m3.vector, m3.ts)])
        after = await state()
        rewritten = {i for i in after if i in before and after[i][1] != before[i][1]}
        assert rewritten == {"m3"}  # only the changed document was written
    finally:
        await loaded.index.delete_user(user)


async def test_ties_are_broken_by_id_at_the_k_cut(loaded: Loaded) -> None:
    """Identical documents, more than a lexical first page (k + slack), so the page has to grow."""
    user = f"scratch-{uuid.uuid4().hex[:8]}"
    text = "identical twin document about llamas"
    vector = loaded.embedder.embed([text])[0]
    ids = [f"d{i:02d}" for i in range(3 + LEXICAL_TIE_SLACK + 7)][::-1]
    try:
        await loaded.index.upsert(user, [VectorDoc(i, Kind.CONCEPT, text, vector, None) for i in ids])
        query = loaded.embedder.embed(["llamas"])
        hits = (await loaded.index.search(user, ["llamas"], query, ALL_KINDS, k=3))[0]
        assert _leg(hits, lexical=False) == ["d00", "d01", "d02"]
        assert _leg(hits, lexical=True) == ["d00", "d01", "d02"]
        # Lexical-only hits that only a grown page brought in (d00 to d02 were written last, so
        # they come after the first page) get their stored vector's cosine as well: three
        # documents without the word take the vector leg.
        near = [VectorDoc(f"v{i}", Kind.CONCEPT, "alpacas grazing", query[0], None) for i in range(3)]
        await loaded.index.upsert(user, near)
        hits = (await loaded.index.search(user, ["llamas"], query, ALL_KINDS, k=3))[0]
        assert _leg(hits, lexical=False) == ["v0", "v1", "v2"]
        assert _leg(hits, lexical=True) == ["d00", "d01", "d02"]
        doc = VectorDoc("d00", Kind.CONCEPT, text, vector, None)
        for h in hits:
            expected = 1.0 if h.id.startswith("v") else _exact_cosine(query[0], doc)
            assert h.similarity == pytest.approx(expected, abs=1e-5), h
    finally:
        await loaded.index.delete_user(user)


# ----------------------------------------------------------------------------------------------
# errors at the edge
# ----------------------------------------------------------------------------------------------


async def test_an_unreachable_weaviate_is_store_unavailable() -> None:
    from hrt.devstack import free_port

    index = WeaviateVectorIndex("127.0.0.1", free_port(), free_port(), connect_timeout=3.0)
    with pytest.raises(StoreUnavailable):
        await index.open()
    await index.close()


async def test_a_dead_grpc_port_hits_the_adapter_deadline(loaded: Loaded, stack_manager: StackManager) -> None:
    """The client retries UNAVAILABLE with backoff for about a minute; the adapter's deadline wins."""
    from hrt.devstack import free_port

    stack = stack_manager.need("weaviate")
    client = weaviate.use_async_with_custom(
        http_host="127.0.0.1",
        http_port=stack.weaviate_http_port,
        http_secure=False,
        grpc_host="127.0.0.1",
        grpc_port=free_port(),
        grpc_secure=False,
        skip_init_checks=True,
        auth_credentials=Auth.api_key(stack.weaviate_api_key),
    )
    await client.connect()
    try:
        index = WeaviateVectorIndex(client=client, collection=loaded.index.collection_name, query_timeout=1.0)
        with pytest.raises(StoreUnavailable) as info:
            await index.search("u1", ["Postgres"], loaded.embedder.embed(["Postgres"]), ALL_KINDS, 5)
        assert isinstance(info.value.__cause__, TimeoutError)
    finally:
        await client.close()


async def test_a_bad_request_is_a_store_error(loaded: Loaded) -> None:
    with pytest.raises(StoreError) as info:
        await loaded.index.search("u1", ["Postgres"], np.ones((1, 3), dtype=np.float32), ALL_KINDS, 5)
    assert not isinstance(info.value, StoreUnavailable)
    assert info.value.__cause__ is not None


async def test_apply_schema_refuses_a_collection_that_does_not_fit(loaded: Loaded) -> None:
    client = loaded.index._client
    name = f"HRTTestBad{uuid.uuid4().hex[:8]}"
    await client.collections.create(name, multi_tenancy_config=Configure.multi_tenancy(enabled=False))
    try:
        with pytest.raises(StoreError, match="multi-tenancy is off"):
            await WeaviateVectorIndex(client=client, collection=name).apply_schema()
    finally:
        await client.collections.delete(name)


async def test_apply_schema_adds_the_filter_properties_to_an_older_collection(loaded: Loaded) -> None:
    """A collection made before search filters (no tags, no source_agent_id) gains them."""
    from weaviate.classes.config import DataType, Property, Tokenization, VectorDistances

    client = loaded.index._client
    name = f"HRTTestOld{uuid.uuid4().hex[:8]}"
    await client.collections.create(
        name,
        properties=[
            Property(name="entity_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
            Property(name="kind", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
            Property(name="text", data_type=DataType.TEXT),
            Property(name="ts", data_type=DataType.NUMBER, index_range_filters=True),
        ],
        vector_config=Configure.Vectors.self_provided(
            vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)
        ),
        multi_tenancy_config=Configure.multi_tenancy(
            enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
        ),
    )
    try:
        index = WeaviateVectorIndex(client=client, collection=name)
        await index.apply_schema()
        props = {p.name: p for p in (await client.collections.use(name).config.get()).properties}
        assert {"tags", "source_agent_id", "valid_from", "valid_to"} <= set(props)
        user = "u1"
        m1 = loaded.docs[user]["m1"]
        await index.upsert(user, [m1])
        [hits] = await index.search(
            user, ["Phoenix"], loaded.embedder.embed(["Phoenix"]), ALL_KINDS, 5, where=SearchFilter(tags=("phoenix",))
        )
        assert [h.id for h in hits] == ["m1"]
    finally:
        await client.collections.delete(name)


# ----------------------------------------------------------------------------------------------
# validity intervals (#20)
# ----------------------------------------------------------------------------------------------

T0 = 1_735_689_600.0  # 2025-01-01
DAY = 86_400.0
# id -> (kind, valid_from, valid_to); every text names "Atlas" so both legs see every document
INTERVALS: dict[str, tuple[Kind, float | None, float | None]] = {
    "m-open": (Kind.MEMORY_UNIT, None, None),
    "m-from": (Kind.MEMORY_UNIT, T0 + 10 * DAY, None),
    "m-to": (Kind.MEMORY_UNIT, T0, T0 + 20 * DAY),
    "m-only-to": (Kind.MEMORY_UNIT, None, T0 + 5 * DAY),
    "a-both": (Kind.ARTIFACT, T0 + 10 * DAY, T0 + 30 * DAY),
    "c-from": (Kind.CONCEPT, T0 + 15 * DAY, None),
    "c-open": (Kind.CONCEPT, None, None),
}
# before the first start, at every start and end (valid_from included, valid_to excluded), between, after
INSTANTS = [T0 - DAY, T0, T0 + 5 * DAY - 1, T0 + 5 * DAY, T0 + 10 * DAY, T0 + 15 * DAY, T0 + 20 * DAY, T0 + 30 * DAY]


def _interval_docs(embedder: HashingEmbedder) -> list[VectorDoc]:
    texts = {i: f"Atlas {i.replace('-', ' ')} deadline notes" for i in INTERVALS}
    vectors = embedder.embed(list(texts.values()))
    return [
        VectorDoc(i, kind, texts[i], vec, None if kind is Kind.CONCEPT else T0, valid_from=vf, valid_to=vt)
        for (i, (kind, vf, vt)), vec in zip(INTERVALS.items(), vectors, strict=True)
    ]


async def _write_without_interval(index: WeaviateVectorIndex, user: str, doc: VectorDoc) -> None:
    """An object as the adapter wrote it before #20: no valid_from / valid_to at all."""
    from weaviate.classes.data import DataObject

    tenant = index._collection.with_tenant(tenant_name(user))
    props = {"entity_id": doc.id, "kind": doc.kind.value, "text": doc.text, "ts": NO_TS if doc.ts is None else doc.ts}
    result = await tenant.data.insert_many(
        [DataObject(properties=props, uuid=object_uuid(user, doc.id), vector=np.asarray(doc.vector).tolist())]
    )
    assert not result.has_errors, result.errors


async def _found(
    index: WeaviateVectorIndex, user: str, embedder: HashingEmbedder, **search: object
) -> tuple[set[str], set[str]]:
    """The ids of a search for "Atlas deadline" by leg: (vector leg, lexical leg)."""
    phrase = ["Atlas deadline"]
    [hits] = await index.search(user, phrase, embedder.embed(phrase), search.pop("kinds", ALL_KINDS), 50, **search)  # type: ignore[arg-type]
    return set(_leg(hits, lexical=False)), set(_leg(hits, lexical=True))


async def _update_times(tenant: Any) -> dict[str, object]:
    """Each object of a tenant, by entity id, with its last update time."""
    from weaviate.classes.query import MetadataQuery

    res = await tenant.query.fetch_objects(limit=50, return_metadata=MetadataQuery(last_update_time=True))
    return {str(o.properties["entity_id"]): o.metadata.last_update_time for o in res.objects}


async def test_passages_are_stored_read_back_and_part_of_the_stored_form(loaded: Loaded) -> None:
    """The passage vectors round-trip bit for bit through the BLOB property; a repeated delivery of
    the same document writes nothing (the stored form compares them), a changed one is written,
    and a document without passages has none."""
    from hrt.ingest import build_batch, parse_jsonl
    from tests.helpers import jsonl, mu

    user = f"scratch-{uuid.uuid4().hex[:8]}"
    records = parse_jsonl(
        jsonl(
            [mu(user, "p1", "The first sentence is here. The second one is there.", title="T"), mu(user, "p2", "One.")]
        )
    )
    batch = build_batch(records, loaded.embedder)
    docs = [vector_doc(r, batch.vectors[(user, r.id)], batch.passages.get((user, r.id))) for r in records]
    assert docs[0].passages is not None and docs[1].passages is None
    tenant = loaded.index._collection.with_tenant(tenant_name(user))

    try:
        await loaded.index.upsert(user, docs)
        got = await loaded.index.docs(user)
        assert np.array_equal(got["p1"].passages, docs[0].passages) and got["p2"].passages is None
        before = await _update_times(tenant)
        await loaded.index.upsert(user, docs)
        assert await _update_times(tenant) == before, "unchanged passages are not written again"
        await loaded.index.upsert(user, [replace(docs[0], passages=docs[0].passages[:1])])
        after = await _update_times(tenant)
        assert {i for i in after if after[i] != before[i]} == {"p1"}, "changed passages are written"
        assert (await loaded.index.docs(user))["p1"].passages.shape == (1, docs[0].passages.shape[1])
    finally:
        await loaded.index.delete_user(user)


async def test_intervals_are_stored_and_read_back_and_part_of_the_stored_form(loaded: Loaded) -> None:
    user = f"scratch-{uuid.uuid4().hex[:8]}"
    docs = _interval_docs(loaded.embedder)
    tenant = loaded.index._collection.with_tenant(tenant_name(user))

    try:
        await loaded.index.upsert(user, docs)
        got = await loaded.index.docs(user)
        assert {i: (d.kind, d.valid_from, d.valid_to) for i, d in got.items()} == INTERVALS
        # null, not a sentinel: the raw objects hold None for an open end
        raw = await tenant.query.fetch_object_by_id(object_uuid(user, "m-open"))
        assert raw is not None and raw.properties["valid_from"] is None and raw.properties["valid_to"] is None
        before = await _update_times(tenant)
        await loaded.index.upsert(user, docs)
        assert await _update_times(tenant) == before, "an unchanged interval is not written again"
        m_to = next(d for d in docs if d.id == "m-to")
        await loaded.index.upsert(user, [replace(m_to, valid_to=T0 + 21 * DAY)])
        after = await _update_times(tenant)
        assert {i for i in after if after[i] != before[i]} == {"m-to"}, "an interval that changed is written"
        assert (await loaded.index.docs(user))["m-to"].valid_to == T0 + 21 * DAY
        await loaded.index.upsert(user, [replace(m_to, valid_to=None)])
        assert (await loaded.index.docs(user))["m-to"].valid_to is None, "an end taken back is stored as null"
    finally:
        await loaded.index.delete_user(user)


async def test_valid_at_keeps_what_holds_at_it_for_every_kind_and_documents_without_an_interval(loaded: Loaded) -> None:
    user = f"scratch-{uuid.uuid4().hex[:8]}"
    docs = _interval_docs(loaded.embedder)
    old = replace(_interval_docs(loaded.embedder)[0], id="m-old")  # written before #20: no properties at all
    try:
        await loaded.index.upsert(user, docs)
        await _write_without_interval(loaded.index, user, old)
        assert (await loaded.index.docs(user))["m-old"].valid_from is None
        everything = set(INTERVALS) | {"m-old"}
        assert await _found(loaded.index, user, loaded.embedder) == (everything, everything)
        for at in INSTANTS:
            expected = {i for i, (_, vf, vt) in INTERVALS.items() if valid_at(vf, vt, at)} | {"m-old"}
            vector, lexical = await _found(loaded.index, user, loaded.embedder, where=SearchFilter(valid_at=at))
            assert vector == lexical == expected, (at - T0) / DAY
        # with the other filters (kinds, not_after, a time range): each still applies
        day12 = SearchFilter(valid_at=T0 + 12 * DAY)
        kinds = [Kind.MEMORY_UNIT, Kind.CONCEPT]
        assert (
            await _found(loaded.index, user, loaded.embedder, kinds=kinds, where=day12)
            == ({"m-open", "m-from", "m-to", "m-old", "c-open"},) * 2
        )
        assert await _found(loaded.index, user, loaded.embedder, not_after=T0 - DAY, where=day12) == ({"c-open"},) * 2
        ranged = replace(day12, ts_from=T0 + DAY)  # memory units and artifacts are all from T0: only concepts
        assert await _found(loaded.index, user, loaded.embedder, where=ranged) == ({"c-open"},) * 2
    finally:
        await loaded.index.delete_user(user)


async def test_apply_schema_adds_the_interval_to_a_collection_from_before_it(
    loaded: Loaded, caplog: pytest.LogCaptureFixture
) -> None:
    """A collection of the previous release (with the filter properties, without the interval)
    gains valid_from / valid_to; the objects it held pass every valid_at filter until rewritten."""
    from weaviate.classes.config import DataType, Property, Tokenization, VectorDistances

    client = loaded.index._client
    name = f"HRTTestPre20{uuid.uuid4().hex[:8]}"
    await client.collections.create(
        name,
        properties=[
            Property(name="entity_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
            Property(name="kind", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
            Property(name="text", data_type=DataType.TEXT),
            Property(name="ts", data_type=DataType.NUMBER, index_range_filters=True),
            Property(name="tags", data_type=DataType.TEXT_ARRAY, tokenization=Tokenization.FIELD),
            Property(name="source_agent_id", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
        ],
        vector_config=Configure.Vectors.self_provided(
            vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)
        ),
        multi_tenancy_config=Configure.multi_tenancy(
            enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
        ),
    )
    user = "u1"
    docs = {d.id: d for d in _interval_docs(loaded.embedder)}
    try:
        index = WeaviateVectorIndex(client=client, collection=name)
        for ident in ("m-to", "c-from"):  # intervals that do not hold on day 40: kept, as they were written
            await _write_without_interval(index, user, docs[ident])
        caplog.clear()
        with caplog.at_level("WARNING", logger="hrt.stores.weaviate.vectors"):
            await index.apply_schema()
        assert "added valid_from, valid_to" in caplog.text and "tag and agent" not in caplog.text
        assert "added passages" in caplog.text
        props = {p.name: p for p in (await client.collections.use(name).config.get()).properties}
        assert props["valid_from"].index_range_filters and props["valid_to"].index_range_filters
        assert props["passages"].data_type.value == "blob"
        caplog.clear()
        with caplog.at_level("WARNING", logger="hrt.stores.weaviate.vectors"):
            await index.apply_schema()
        assert not caplog.text, "nothing to add the second time"
        stored = await index.docs(user)
        assert all(d.passages is None for d in stored.values())  # objects from before passages have none
        assert {i: (d.valid_from, d.valid_to) for i, d in stored.items()} == {
            "m-to": (None, None),
            "c-from": (None, None),
        }
        await index.upsert(user, [docs["m-from"], docs["a-both"]])
        day40 = SearchFilter(valid_at=T0 + 40 * DAY)
        assert await _found(index, user, loaded.embedder, where=day40) == ({"m-to", "c-from", "m-from"},) * 2
        # written again (`hrt doctor --repair`): the stored-form comparison sees the missing interval
        await index.upsert(user, [docs["m-to"], docs["c-from"]])
        assert await _found(index, user, loaded.embedder, where=day40) == ({"c-from", "m-from"},) * 2
        day5 = SearchFilter(valid_at=T0 + 5 * DAY)
        assert await _found(index, user, loaded.embedder, where=day5) == ({"m-to"},) * 2
    finally:
        await client.collections.delete(name)


# (filter, the memory units of u1 it lets through); concepts always pass
PUSHED_DOWN = {
    "tags": (SearchFilter(tags=("phoenix", "people")), {"m1", "m2"}),
    "agent": (SearchFilter(source_agent_ids=("meeting-agent",)), {"m1"}),
    "tags-and-agent": (SearchFilter(tags=("infra",), source_agent_ids=("dialogue-agent",)), {"m3", "m4"}),
    "time": (SearchFilter(ts_from=1749513600.0, ts_to=1749859200.0), {"m1", "m2"}),  # 2025-06-10 to 06-14
    "no-match": (SearchFilter(tags=("nothing-has-this",)), set()),
}


@pytest.mark.parametrize("case", sorted(PUSHED_DOWN))
async def test_pushed_down_filters_let_through_what_the_embedded_adapter_does(loaded: Loaded, case: str) -> None:
    where, expected = PUSHED_DOWN[case]
    vectors = loaded.embedder.embed(CONGRUENCE_PHRASES)
    remote = await loaded.index.search("u1", CONGRUENCE_PHRASES, vectors, ALL_KINDS, 20, where=where)
    local = await loaded.embedded.search("u1", CONGRUENCE_PHRASES, vectors, ALL_KINDS, 20, where=where)
    for phrase, r, e in zip(CONGRUENCE_PHRASES, remote, local, strict=True):
        # u1 has fewer documents than k: each vector leg is every document the filter lets through
        assert set(_leg(r, lexical=False)) == set(_leg(e, lexical=False)), phrase
    allowed = set(_leg(remote[0], lexical=False))
    kinds = {i: loaded.docs["u1"][i].kind for i in allowed}
    assert {i for i, k in kinds.items() if k is Kind.MEMORY_UNIT} == expected
    assert {i for i, k in kinds.items() if k is Kind.CONCEPT} == {"c-phx", "c-bw", "c-pg"}


# ----------------------------------------------------------------------------------------------
# congruence with the embedded adapter
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "kinds", "not_after", "k"),
    [
        ("u1", ALL_KINDS, None, 5),
        ("u1", ALL_KINDS, None, 10),
        ("u2", ALL_KINDS, None, 3),
        ("u1", [Kind.MEMORY_UNIT, Kind.ARTIFACT], None, 4),
        ("u1", ALL_KINDS, 1750000000.0, 5),
    ],
)
async def test_congruent_with_the_embedded_adapter(
    loaded: Loaded, user: str, kinds: list[Kind], not_after: float | None, k: int, record_property: object
) -> None:
    """Vector legs: the same ids in the same order (exact cosine vs HNSW/flat on tiny data).
    Similarities: equal within float32 noise. Lexical legs: reported, and mostly the same set."""
    vectors = loaded.embedder.embed(CONGRUENCE_PHRASES)
    remote = await loaded.index.search(user, CONGRUENCE_PHRASES, vectors, kinds, k, not_after)
    local = await loaded.embedded.search(user, CONGRUENCE_PHRASES, vectors, kinds, k, not_after)
    overlaps: list[float] = []
    same_order = 0
    cut_ties: list[str] = []
    for phrase, r, e in zip(CONGRUENCE_PHRASES, remote, local, strict=True):
        if _compare_vector_legs(r, e, phrase):
            cut_ties.append(phrase)
        e_sim = {h.id: h.similarity for h in e}
        for h in r:
            if h.id in e_sim:
                assert h.similarity == pytest.approx(e_sim[h.id], abs=1e-5)
        r_lex, e_lex = _leg(r, lexical=True), _leg(e, lexical=True)
        union = set(r_lex) | set(e_lex)
        overlaps.append(len(set(r_lex) & set(e_lex)) / len(union) if union else 1.0)
        same_order += r_lex == e_lex
    mean = sum(overlaps) / len(overlaps)
    if callable(record_property):
        record_property("lexical_jaccard_mean", round(mean, 3))
        record_property("lexical_same_order", f"{same_order}/{len(overlaps)}")
        record_property("vector_cut_ties", cut_ties)
    print(
        f"\n{user} kinds={len(kinds)} not_after={not_after} k={k}: lexical mean Jaccard {mean:.3f}, "
        f"same order {same_order}/{len(overlaps)}; vector id orders differ only inside float ties in {cut_ties}"
    )
    assert mean >= 0.7, f"lexical legs diverge: {overlaps}"


async def test_own_and_passage_cosines_are_the_embedded_ones(loaded: Loaded) -> None:
    """``similarities`` and ``passage_similarities`` on the same documents: Weaviate's cosines (its
    distances to the phrase vectors, the best of them) against the embedded adapter's (computed
    from the stored vectors), within COSINE_TOLERANCE; the same ids found (an id of nobody, or of
    another user, is absent); the passages' best the same, and the own one for a document
    without passages."""
    from hrt.ingest import build_batch

    user = f"scratch-{uuid.uuid4().hex[:8]}"
    texts = [
        "The budget review moved to Friday. Ben brings the hiring plan. Lunch is on us.",
        "Postgres billing tables were migrated. The Phoenix team kept its Q3 bandwidth.",
        "A single sentence about the weekend plan",
    ]
    records = parse_jsonl(jsonl([mu(user, f"p{i}", text, title=f"T{i}") for i, text in enumerate(texts)]))
    batch = build_batch(records, loaded.embedder)
    docs = [vector_doc(r, batch.vectors[(user, r.id)], batch.passages.get((user, r.id))) for r in records]
    docs += [replace(d, id=f"o-{d.id}") for d in loaded.docs["u1"].values()]
    assert sum(d.passages is not None for d in docs) == 2
    ids = [*(d.id for d in docs), "nope", "xm1"]  # xm1 is u2's
    await loaded.index.upsert(user, docs)
    await loaded.embedded.upsert(user, docs)
    try:
        for phrases in (CONGRUENCE_PHRASES[:1], CONGRUENCE_PHRASES[:3], CONGRUENCE_PHRASES):
            vectors = loaded.embedder.embed(phrases)
            remote = await loaded.index.similarities(user, ids, vectors)
            local = await loaded.embedded.similarities(user, ids, vectors)
            assert remote.keys() == local.keys() == {d.id for d in docs}
            assert all(abs(remote[i] - local[i]) <= COSINE_TOLERANCE for i in local), (remote, local)
            remote_p = await loaded.index.passage_similarities(user, ids, vectors)
            local_p = await loaded.embedded.passage_similarities(user, ids, vectors)
            assert remote_p.keys() == local_p.keys() == local.keys()
            for i, (own, best) in local_p.items():
                assert abs(remote_p[i][0] - own) <= COSINE_TOLERANCE and abs(remote_p[i][1] - best) <= COSINE_TOLERANCE
                assert remote_p[i][0] == remote[i]  # the same own cosine from either read
            assert all(remote_p[d.id][1] == remote_p[d.id][0] for d in docs if d.passages is None)
    finally:
        await loaded.index.delete_user(user)
        await loaded.embedded.delete_user(user)
