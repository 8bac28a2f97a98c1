"""The peer, side by side: neo4j-graphrag's ``WeaviateNeo4jRetriever`` (PyPI ``neo4j-graphrag``)
on the very Weaviate collection and Neo4j graph that HRT's services deployment wrote.

What the peer is asked, per request: the same 3 key phrases, one ``search(query_text=phrase,
top_k=10)`` per phrase (the retriever takes one query; 10 = HRT's seeds per phrase), with the
same embedding model behind its ``Embedder`` and a one-hop ``retrieval_query`` that returns each
hit's node with its neighbours (HRT at ``max_depth`` 1 is the equivalent). HRT is measured over
HTTP against a real ``hrt serve`` (so HRT pays HTTP and JSON; the peer runs in process and pays
neither), with auth on: the requests carry the API key the bench provisions (``Server.headers``),
as every user's do. The two are interleaved request by request so that machine noise hits both alike.

Wiring, from the peer's public API only:

- Weaviate: HRT keeps one tenant per user; the retriever's ``search_collection`` attribute is set
  to the tenant's handle (``collection.with_tenant(...)``), and ``id_property_external`` is
  HRT's ``entity_id`` property.
- Neo4j: ``node_label_neo4j="Entity"`` and ``id_property_neo4j="id"``. The peer matches nodes with
  ``node[$id_property] = value``, a dynamic property lookup, and cannot add a ``user_id`` predicate
  (its query parameters are fixed); the benchmark's ids are unique across users so the join is
  right, and how the lookup scales is part of what is measured.

The peer returns node labels and neighbour labels (the Neo4j projection holds no content); HRT
returns the full AugmentedMemoryContext V9.4 (hydrated text, scores, breakdowns, snippets).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx

from hrt.bench.synth import SynthConfig, key_phrases

RETRIEVAL_QUERY = """
WITH node, score
OPTIONAL MATCH (node)-[r]-(nb:Entity)
WHERE nb.user_id = node.user_id
WITH node, score, r, nb ORDER BY r.weight DESC, nb.id
WITH node, score, collect({id: nb.id, kind: nb.kind, label: nb.label, type: type(r)})[..25] AS neighbours
RETURN node.id AS id, node.kind AS kind, node.label AS label, score, neighbours
"""
TOP_K = 10


def _peer_embedder(inner: Any) -> Any:
    from neo4j_graphrag.embeddings.base import Embedder as PeerEmbedder

    # neo4j-graphrag is the bench's optional extra: where it is not installed its Embedder is Any
    class SameModel(PeerEmbedder):  # type: ignore[misc, unused-ignore]
        """HRT's embedder (same model, same normalisation) behind the peer's Embedder interface."""

        def embed_query(self, text: str) -> list[float]:
            return [float(x) for x in inner.embed_queries([text])[0]]

    return SameModel()


class Peer:
    def __init__(self, stack: Any, collection: str, user_id: str, embedder: Any) -> None:
        import neo4j
        import weaviate
        from neo4j_graphrag.retrievers import WeaviateNeo4jRetriever
        from weaviate.classes.init import Auth

        from hrt.stores.weaviate.vectors import tenant_name

        # the dev stack's credentials: its Neo4j and Weaviate refuse anonymous clients
        self.driver = neo4j.GraphDatabase.driver(stack.neo4j_uri, auth=stack.neo4j_auth)
        self.client = weaviate.connect_to_local(
            host="127.0.0.1",
            port=stack.weaviate_http_port,
            grpc_port=stack.weaviate_grpc_port,
            auth_credentials=Auth.api_key(stack.weaviate_api_key),
        )
        self.retriever = WeaviateNeo4jRetriever(
            driver=self.driver,
            client=self.client,
            collection=collection,
            id_property_external="entity_id",
            id_property_neo4j="id",
            embedder=_peer_embedder(embedder),
            retrieval_query=RETRIEVAL_QUERY,
            node_label_neo4j="Entity",
        )
        self.retriever.search_collection = self.client.collections.get(collection).with_tenant(tenant_name(user_id))

    def search(self, phrases: list[str], top_k: int = TOP_K, **kwargs: Any) -> tuple[float, list[Any]]:
        t = time.perf_counter()
        items: list[Any] = []
        for phrase in phrases:
            items.extend(self.retriever.search(query_text=phrase, top_k=top_k, **kwargs).items)
        return (time.perf_counter() - t) * 1000, items

    def close(self) -> None:
        self.client.close()
        self.driver.close()


def run_peer(plan: Any, stack: Any, cfg: SynthConfig) -> dict[str, Any]:
    """Latency of HRT (HTTP with the bench's API key, depth 1) against the peer on the services data
    of ``cfg``. Both embed with the model the run's server uses: the real one, or the ``module:Class``
    of ``plan.vectors`` (the smoke test's hashing embedder), which the ingest used too."""
    from hrt.bench.ingest import import_object
    from hrt.bench.loadgen import post_retrieve, request_body
    from hrt.bench.server import Server
    from hrt.bench.stats import size_label, summary
    from hrt.bench.targets import services_target
    from hrt.config import Settings
    from hrt.service import load_embedder

    label = size_label(cfg.entities)
    target = services_target(stack, label, create=False)
    server_embedder = plan.vectors if ":" in plan.vectors else None
    embedder = import_object(server_embedder)() if server_embedder else load_embedder(Settings())
    peer = Peer(stack, target.settings["weaviate_collection"], cfg.user_id, embedder)
    server: Server | None = None
    as_of = cfg.as_of().strftime("%Y-%m-%dT%H:%M:%SZ")
    requests = key_phrases(cfg, plan.warmup + plan.requests, salt="peer")
    hrt_ms: list[float] = []
    hrt_items: list[int] = []
    peer_ms: list[float] = []
    peer_items: list[int] = []
    try:
        server = Server(target.env, plan.out / "work" / f"server-peer-{label}.log", server_embedder)
        with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=300) as client:
            for i, phrases in enumerate(requests):
                sample = post_retrieve(client, request_body(cfg.user_id, phrases, as_of, 1))
                ms, items = peer.search(phrases)
                if i >= plan.warmup:
                    hrt_ms.append(sample.ms)
                    hrt_items.append(sample.returned)
                    peer_ms.append(ms)
                    peer_items.append(len(items))
    finally:
        if server is not None:
            server.stop()
        peer.close()
    hrt, other = summary(hrt_ms), summary(peer_ms)
    return {
        "entities": cfg.entities,
        "size": label,
        "status": "ok",
        "setup": {
            "phrases_per_request": 3,
            "depth": 1,
            "peer_top_k_per_phrase": TOP_K,
            "peer": "neo4j-graphrag WeaviateNeo4jRetriever, in process, one search per phrase",
            "hrt": "POST /v1/retrieve over HTTP with an API key (auth on), max_depth 1, default limits",
            "retrieval_query": " ".join(RETRIEVAL_QUERY.split()),
        },
        "hrt": {"end_to_end": hrt, "items_per_request_p50": statistics.median(hrt_items) if hrt_items else 0},
        "peer": {"end_to_end": other, "items_per_request_p50": statistics.median(peer_items) if peer_items else 0},
        "ratio_p50": round(hrt["p50_ms"] / other["p50_ms"], 3) if other.get("p50_ms") else None,
        "ratio_p95": round(hrt["p95_ms"] / other["p95_ms"], 3) if other.get("p95_ms") else None,
    }


# ------------------------------------------------------------------------------------------
# LoCoMo evidence recall@10, HRT and the peer on the same services data
# ------------------------------------------------------------------------------------------


def run_locomo(stack: Any, data: Any, limit_questions: int | None = None) -> dict[str, Any]:
    """Import LoCoMo (``hrt.eval.locomo``: same import, same questions as ``hrt eval locomo``) into
    a fresh services deployment with the real model, then per question: HRT (``request_for``,
    depth 2, the eval's semantic-only weights; its first 10 memory units) and the peer
    (``search(query_text=question, top_k=10)`` filtered to memory units in Weaviate; its ids in
    order). Evidence recall@10 of both, per category and overall."""
    import asyncio

    return asyncio.run(_locomo(stack, data, limit_questions))


async def _locomo(stack: Any, data: Any, limit_questions: int | None) -> dict[str, Any]:
    import weaviate.classes as wvc
    from neo4j_graphrag.types import RetrieverResultItem

    from hrt.bench.targets import services_target
    from hrt.config import Settings
    from hrt.eval.locomo import build_questions, import_conversation, load_samples
    from hrt.service import HRTService

    samples = load_samples(data)
    imported = [import_conversation(s) for s in samples]
    questions = [q for s, c in zip(samples, imported, strict=True) for q in build_questions(s, c)[0]]
    if limit_questions is not None:
        questions = questions[:limit_questions]
    target = services_target(stack, "locomo")
    settings = Settings(**target.settings)
    svc = await HRTService(settings).start()
    t0 = time.perf_counter()
    try:
        for conv in imported:
            await svc.graph.delete_user(conv.user_id)
            await svc.vectors.delete_user(conv.user_id)
            await svc.ingest(conv.records)
        import_s = time.perf_counter() - t0
        peer = Peer(stack, target.settings["weaviate_collection"], imported[0].user_id, svc.embedder)

        def ids_only(record: Any) -> RetrieverResultItem:
            return RetrieverResultItem(content=str(record["id"]), metadata={"score": record["score"]})

        peer.retriever.result_formatter = ids_only
        only_mus = wvc.query.Filter.by_property("kind").equal("memory_unit")
        collection = target.settings["weaviate_collection"]
        try:
            rows, hrt_ms, peer_ms = await _ask_both(svc, peer, collection, questions, only_mus)
        finally:
            peer.close()
    finally:
        await svc.close()
    return _locomo_summary(data, len(samples), rows, import_s, hrt_ms, peer_ms)


async def _ask_both(
    svc: Any, peer: Peer, collection: str, questions: list[Any], only_mus: Any
) -> tuple[list[tuple[int, float, float]], list[float], list[float]]:
    """Each question to HRT and to the peer: (category, HRT's recall@10, the peer's) and the times in ms."""
    from hrt.eval.locomo import EvalConfig, recall_at, request_for
    from hrt.stores.weaviate.vectors import tenant_name

    config = EvalConfig()
    rows: list[tuple[int, float, float]] = []
    hrt_ms: list[float] = []
    peer_ms: list[float] = []
    for q in questions:
        t = time.perf_counter()
        ctx = await svc.retrieve(request_for(q, config, config.depth))
        hrt_ms.append((time.perf_counter() - t) * 1000)
        hrt_ids = [m.muid for m in ctx.retrieved_memory_units]
        peer.retriever.search_collection = peer.client.collections.get(collection).with_tenant(tenant_name(q.user_id))
        t = time.perf_counter()
        found = peer.retriever.search(query_text=q.text, top_k=10, weaviate_filters=only_mus).items
        peer_ms.append((time.perf_counter() - t) * 1000)
        peer_ids = list(dict.fromkeys(str(item.content) for item in found))
        rows.append((q.category, recall_at(hrt_ids, q.evidence, 10), recall_at(peer_ids, q.evidence, 10)))
    return rows, hrt_ms, peer_ms


def _locomo_summary(
    data: Any,
    conversations: int,
    rows: list[tuple[int, float, float]],
    import_s: float,
    hrt_ms: list[float],
    peer_ms: list[float],
) -> dict[str, Any]:
    """Recall@10 of both, per category and overall, with the setup compared."""

    def mean(values: list[float]) -> float:
        return round(statistics.fmean(values), 4) if values else 0.0

    by_category: dict[str, dict[str, float]] = {}
    for cat in sorted({c for c, _, _ in rows}):
        sel = [r for r in rows if r[0] == cat]
        by_category[str(cat)] = {
            "questions": len(sel),
            "hrt": mean([r[1] for r in sel]),
            "peer": mean([r[2] for r in sel]),
        }
    return {
        "status": "ok",
        "data": str(data),
        "conversations": conversations,
        "questions": len(rows),
        "import_seconds": round(import_s, 1),
        "recall@10": {"hrt": mean([r[1] for r in rows]), "peer": mean([r[2] for r in rows])},
        "by_category": by_category,
        "ms_per_question_p50": {
            "hrt_in_process": round(statistics.median(hrt_ms), 1) if hrt_ms else None,
            "peer_in_process": round(statistics.median(peer_ms), 1) if peer_ms else None,
        },
        "setup": {
            "hrt": "hrt.eval.locomo request_for: anchored phrases, depth 2, semantic weights, first 10 memory units",
            "peer": "WeaviateNeo4jRetriever.search(query_text=question, top_k=10), Weaviate filter kind = memory_unit",
            "embedder": "the bundled all-MiniLM-L6-v2 for both (real vectors)",
        },
    }
