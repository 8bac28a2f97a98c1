"""Tenancy as a property: for random graphs over several users that share ids and names, no
request for one user ever returns another user's data, through seeds, expansion, hydration or
assembly."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from tests.helpers import HashingEmbedder, concept, jsonl, mu, rel

USERS = ["ua", "ub", "uc"]
WORDS = ["phoenix", "budget", "postgres", "hiring", "launch", "pricing", "kubernetes", "roadmap"]
SHARED_IDS = [f"e{i}" for i in range(6)]  # the same ids exist under several users


@st.composite
def user_graph(draw, user: str) -> list[dict]:
    n_concepts = draw(st.integers(1, 4))
    n_mus = draw(st.integers(1, 6))
    ids = draw(st.permutations(SHARED_IDS + [f"{user}-own{i}" for i in range(4)]))
    concept_ids, mu_ids = ids[:n_concepts], ids[n_concepts : n_concepts + n_mus]
    recs: list[dict] = []
    for cid in concept_ids:
        w = draw(st.sampled_from(WORDS))
        recs.append(concept(user, cid, f"{w} of [{user}]", f"[{user}] owns this {w} concept"))
    for i, mid in enumerate(mu_ids):
        ws = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
        recs.append(
            mu(
                user,
                mid,
                f"[{user}] wrote about {' '.join(ws)}",
                f"2025-0{1 + i % 9}-10T10:00:00Z",
                title=f"[{user}] note {mid}",
            )
        )
        for cid in draw(st.lists(st.sampled_from(concept_ids), max_size=2, unique=True)):
            recs.append(rel(user, "MENTIONS", mid, cid))
    if len(concept_ids) > 1:
        recs.append(rel(user, "RELATED_TO", concept_ids[0], concept_ids[1], weight=0.7))
    return recs


def owner_marks(doc, user: str) -> list[str]:
    """Every piece of returned text that names an owner; all must name ``user``."""
    texts = [m.title for m in doc.retrieved_memory_units]
    texts += [c.name for c in doc.retrieved_concepts]
    texts += [n.name for m in doc.retrieved_memory_units for n in m.connected_concept_ids_and_names]
    texts += [t.title for c in doc.retrieved_concepts for t in c.related_top_memory_unit_ids_and_titles]
    return texts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graphs=st.tuples(*(user_graph(u) for u in USERS)),
    target=st.sampled_from(USERS),
    phrases=st.lists(st.sampled_from([*WORDS, "ua", "ub", "uc"]), min_size=1, max_size=4, unique=True),
    depth=st.integers(0, 3),
)
def test_no_request_returns_another_users_data(graphs, target, phrases, depth):
    request = RetrieveRequest(
        user_id=target,
        key_phrases=phrases,
        max_depth=depth,
        limits={"memory_units": 50, "concepts": 50, "artifacts": 50},
        as_of="2026-01-01T00:00:00Z",
    )

    async def run(tmp: str):
        svc = HRTService(Settings(db_path=Path(tmp) / "t.db"), embedder=HashingEmbedder())
        try:
            await svc.ingest(parse_jsonl(jsonl([r for g in graphs for r in g])))
            return await svc.retrieve(request)
        finally:
            await svc.close()

    with tempfile.TemporaryDirectory() as tmp:
        doc = asyncio.run(run(tmp))
    own_ids = {r.get("muid") or r.get("id") for r in graphs[USERS.index(target)] if r["kind"] != "relation"}
    returned = {m.muid for m in doc.retrieved_memory_units} | {c.id for c in doc.retrieved_concepts}
    returned |= {i for g in doc.retrieval_metadata.phrase_grounding for i in g.seed_ids}
    assert returned <= own_ids, returned - own_ids
    for text in owner_marks(doc, target):
        assert f"[{target}]" in text and not any(f"[{u}]" in text for u in USERS if u != target), text
    assert doc.retrieval_metadata.user_id == target
    assert doc.retrieval_metadata.missing_records == {}
