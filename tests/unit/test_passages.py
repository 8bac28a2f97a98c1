"""Passage vectors (issue #23, third round): what a memory unit is cut into, how the vectors are
computed at write time and kept by the embedded store (schema step 5), how the index reads them
(``passage_similarities``) and how scoring mixes them into the semantic term."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from hrt.config import Weights
from hrt.ingest import build_batch, parse_jsonl
from hrt.pipeline.scoring import Evidence, PreferenceBook, score_candidates, with_passage
from hrt.records import MAX_PASSAGES, Kind, passage_texts
from hrt.stores.base import GraphCandidate, GraphNode
from hrt.stores.embedded.schema import SCHEMA, user_scope_token
from hrt.stores.embedded.store import EmbeddedStore
from tests.helpers import HashingEmbedder, concept, jsonl, mu

TWO = "We moved the launch to May. The budget stays as it was!"


def record(content: str, **extra: object):
    (r,) = parse_jsonl(jsonl([mu("u1", "m1", content, **extra)]))
    return r


def test_a_memory_unit_is_cut_into_its_sentences_behind_its_title_or_author():
    assert passage_texts(record(TWO, title="Launch")) == [
        "Launch: We moved the launch to May.",
        "Launch: The budget stays as it was!",
    ]
    # no title: the writing agent; a sentence that already starts with it is left as it is
    assert passage_texts(record('Ana said, "We moved it. Fine."\nAna: noted', title="", source_agent_id="Ana")) == [
        'Ana said, "We moved it.',
        'Ana: Fine."',
        "Ana: noted",
    ]
    assert passage_texts(record("Two sentences. Ok.", title="")) == []  # "Ok." is too short: one is left
    assert passage_texts(record("Only one sentence here.")) == []
    assert passage_texts(record("Version 2.5 shipped on time")) == []  # no white space after the dot
    (c,) = parse_jsonl(jsonl([concept("u1", "c1", "Atlas", "A project. It has two sentences.")]))
    assert passage_texts(c) == []


def test_a_long_text_keeps_every_sentence_in_at_most_eight_passages_in_order():
    sentences = [f"Sentence number {i} is here." for i in range(19)]
    got = passage_texts(record(" ".join(sentences), title="T"))
    assert len(got) == MAX_PASSAGES
    assert " ".join(p.removeprefix("T: ") for p in got) == " ".join(sentences)
    assert all(p.startswith("T: Sentence number") for p in got)


def test_the_batch_embeds_each_passage_beside_its_entity():
    embedder = HashingEmbedder()
    records = parse_jsonl(jsonl([mu("u1", "m1", TWO, title="Launch"), mu("u1", "m2", "One sentence only.")]))
    batch = build_batch(records, embedder, chunk=1)  # chunks of one: the offsets are per chunk
    want = embedder.embed(passage_texts(records[0]))
    assert batch.passages[("u1", "m1")].shape == (2, embedder.dim)
    assert np.array_equal(batch.passages[("u1", "m1")], want)
    assert ("u1", "m2") not in batch.passages
    assert np.array_equal(batch.vectors[("u1", "m2")], embedder.embed(["m2. One sentence only."])[0])


def test_passage_evidence_is_mixed_into_the_semantic_term():
    assert with_passage(0.4, 0.9, 1.5) == pytest.approx((0.4 + 1.5 * 0.9) / 2.5)
    assert with_passage(0.4, -0.3, 1.5) == pytest.approx(0.4 / 2.5)  # a negative cosine counts 0
    assert with_passage(0.4, None, 1.5) == 0.4  # no vector in the index: unchanged
    assert with_passage(0.4, 0.9, 0.0) == 0.4

    def node(ident: str, kind: Kind = Kind.MEMORY_UNIT) -> GraphCandidate:
        n = GraphNode(id=ident, kind=kind, label=ident, ts=None, salience=0.5, category="x")
        return GraphCandidate(node=n, hops=0, seed_id=ident, path=(), path_score=0.0)

    cands = [node("a"), node("b"), node("c", Kind.ARTIFACT)]
    direct = {"a": 0.6, "b": 0.5, "c": 0.5}
    book = PreferenceBook.build([])
    weights = Weights(alpha_semantic_similarity=1, beta_recency=0, gamma_salience=0, delta_user_preference=0)
    plain = score_candidates(cands, direct, book, weights, 0.0, 30.0, Evidence(rule="scoped"))
    mixed = score_candidates(
        cands,
        direct,
        book,
        weights,
        0.0,
        30.0,
        Evidence(rule="scoped", passages={"a": 0.2, "b": 0.9, "c": 0.9}, passage_weight=1.5),
    )
    assert [x.id for x in plain if x.kind is Kind.MEMORY_UNIT] == ["a", "b"]
    assert [x.id for x in mixed if x.kind is Kind.MEMORY_UNIT] == ["b", "a"]  # b's sentence matches
    by_id = {x.id: x.semantic for x in mixed}
    assert by_id["b"] == pytest.approx((0.5 + 1.5 * 0.9) / 2.5) and by_id["c"] == 0.5  # artifacts: none


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


async def test_the_embedded_index_keeps_passages_and_reads_the_best_one(tmp_path: Path):
    embedder = HashingEmbedder()
    store = EmbeddedStore(tmp_path / "p.db", embedder.dim)
    try:
        records = parse_jsonl(
            jsonl(
                [
                    mu("u1", "m1", TWO, title="Launch"),
                    mu("u1", "m2", "One sentence only."),
                    mu("u2", "m1", TWO, title="Launch"),  # another user's, same id
                ]
            )
        )
        batch = build_batch(records, embedder)
        store.apply(batch)
        docs = await store.vectors.docs("u1")
        assert np.array_equal(docs["m1"].passages, batch.passages[("u1", "m1")])
        assert docs["m2"].passages is None
        rows = await store.records.entity_rows("u1", ["m1", "m2"])
        assert np.array_equal(rows["m1"][3], batch.passages[("u1", "m1")]) and rows["m2"][3] is None

        phrases = embedder.embed(["budget stays", "launch in May"])
        got = await store.vectors.passage_similarities("u1", ["m1", "m2", "nope"], phrases)
        assert sorted(got) == ["m1", "m2"]  # an id the user has no vector for is left out
        own = await store.vectors.similarities("u1", ["m1", "m2"], phrases)
        assert got["m1"][0] == pytest.approx(own["m1"]) and got["m2"] == (own["m2"], own["m2"])
        best = float((batch.passages[("u1", "m1")] @ phrases.T).max())
        assert got["m1"][1] == pytest.approx(best) and got["m1"][1] != pytest.approx(own["m1"])

        # rewritten as one sentence: its passages go; deleted: nothing is left of it
        store.apply(build_batch(parse_jsonl(jsonl([mu("u1", "m1", "Now a single sentence.")])), embedder))
        assert (await store.vectors.docs("u1"))["m1"].passages is None
        again = await store.vectors.passage_similarities("u1", ["m1"], phrases)
        assert again["m1"][0] == again["m1"][1]
        store.delete_user("u1")
        assert await store.vectors.passage_similarities("u1", ["m1", "m2"], phrases) == {}
        assert (await store.vectors.docs("u2"))["m1"].passages is not None  # the other user's stay
    finally:
        store.close()


def test_a_file_from_before_passages_gains_the_column_and_reads_its_own_vectors(tmp_path: Path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, sql in SCHEMA:
        if version < 5:
            db.executescript(sql)
            db.execute("INSERT INTO schema_migrations VALUES (?, datetime('now'))", (version,))
    v = unit([1.0, 2.0, 0.0, 1.0])
    db.execute(
        "INSERT INTO docs (rowid, user_id, id, kind, ts, vec) VALUES (1, 'u1', 'm1', 'memory_unit', 1.0, ?)",
        (v.tobytes(),),
    )
    db.execute("INSERT INTO fts (rowid, text, scope) VALUES (1, 'an old memory', ?)", (user_scope_token("u1"),))
    db.commit()
    db.close()
    store = EmbeddedStore(path, 4)
    try:
        assert store.applied_on_open == [5, 6, 7, 8] and store.schema_versions() == [1, 2, 3, 4, 5, 6, 7, 8]
        q = unit([1.0, 0.0, 0.0, 0.0])[None, :]
        got = asyncio.run(store.vectors.passage_similarities("u1", ["m1"], q))
        assert got["m1"][0] == pytest.approx(float(v[0])) and got["m1"][1] == got["m1"][0]
    finally:
        store.close()


async def test_only_the_pool_best_read_their_passages_and_the_rest_use_their_own_cosine(tmp_path: Path):
    from datetime import UTC, datetime

    from hrt.config import Settings
    from hrt.contract import RetrieveRequest
    from hrt.pipeline.expansion import own_similarities, passage_evidence, run_expansion
    from hrt.pipeline.grounding import run_grounding
    from hrt.pipeline.intake import run_intake
    from hrt.pipeline.scoring import candidate_semantic
    from hrt.service import HRTService

    svc = HRTService(Settings(db_path=tmp_path / "pool.db"), embedder=HashingEmbedder())
    await svc.start()
    try:
        topics = ["launch budget", "launch date", "budget review", "launch party", "budget cuts", "launch plan"]
        await svc.ingest(
            parse_jsonl(
                jsonl(
                    [
                        mu("u1", f"m{i}", f"We talked about the {t}. It went well, then we spoke of lunch.", title=t)
                        for i, t in enumerate(topics)
                    ]
                )
            )
        )
        request = RetrieveRequest(user_id="u1", key_phrases=["launch budget"], max_depth=1)
        cfg = svc.settings.retrieval()
        intake = run_intake(request, cfg, datetime(2025, 8, 1, tzinfo=UTC))
        vectors = svc.embedder.embed(list(intake.phrases))
        grounding = await run_grounding(intake, vectors, svc.vectors, cfg.grounding)
        cands = await run_expansion(intake, grounding, svc.graph, cfg.expansion)
        units = [c for c in cands if c.node.kind is Kind.MEMORY_UNIT]
        assert len(units) == len(topics)
        rule = cfg.expansion.reached_evidence
        own, unit_own = await own_similarities(intake, cands, grounding.similarity, vectors, svc.vectors, rule, True)
        got = await passage_evidence(
            intake, cands, grounding.similarity, own, unit_own, vectors, svc.vectors, cfg.expansion, 2
        )
        before = sorted(
            units,
            key=lambda c: (
                -candidate_semantic(
                    c, grounding.similarity.get(c.node.id), own.get(c.node.id), rule, cfg.expansion.hop_decay
                ),
                c.node.id,
            ),
        )
        top = sorted(c.node.id for c in before[:2])
        both = await svc.vectors.passage_similarities("u1", [c.node.id for c in units], vectors)
        assert sorted(got) == sorted(c.node.id for c in units)
        for ident, value in got.items():
            assert value == pytest.approx(both[ident][1] if ident in top else both[ident][0]), ident
        assert any(both[i][0] != pytest.approx(both[i][1]) for i in top)  # the pool read passages of their own
    finally:
        await svc.close()
