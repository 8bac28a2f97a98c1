"""Named seeds (``seed_ids``, #33) through the whole pipeline on the embedded store."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from hrt.contract import MAX_SEED_IDS, RetrieveRequest

AS_OF = "2025-08-01T00:00:00Z"


def req(**body) -> RetrieveRequest:
    body.setdefault("user_id", "u1")
    body.setdefault("as_of", AS_OF)
    return RetrieveRequest.model_validate(body)


async def test_seed_ids_alone_walk_from_the_named_entities(loaded_service):
    out = await loaded_service.retrieve(req(seed_ids=["c-bw", "nope", "xc-phx"]))
    meta = out.retrieval_metadata
    assert meta.key_phrase_source == "seed_ids" and meta.key_phrases_processed == [] and meta.phrase_grounding == []
    assert meta.seed_grounding is not None
    assert (meta.seed_grounding.found, meta.seed_grounding.unknown) == (["c-bw"], ["nope", "xc-phx"])
    assert out.unmatched_key_phrases == []
    assert out.retrieved_concepts[0].id == "c-bw"
    assert out.retrieved_concepts[0].score_breakdown.semantic == 1.0
    assert "m2" in {m.muid for m in out.retrieved_memory_units}, "the unit mentioning c-bw is one hop away"
    assert not any(i.startswith("x") for i in meta.provenance), "another user's entity was walked"
    assert meta.provenance["m2"].seed_id == "c-bw" and meta.provenance["m2"].evidence == "path"
    # deterministic: the same request, byte for byte
    again = await loaded_service.retrieve(req(seed_ids=["c-bw", "nope", "xc-phx"]))
    assert again.canonical_json() == out.canonical_json()


async def test_seed_ids_beside_phrases_lead_the_walk(loaded_service):
    plain = await loaded_service.retrieve(req(key_phrases=["billing database"]))
    named = await loaded_service.retrieve(req(key_phrases=["billing database"], seed_ids=["c-bw"]))
    assert "c-bw" in {c.id for c in named.retrieved_concepts}
    assert named.retrieval_metadata.phrase_grounding == plain.retrieval_metadata.phrase_grounding
    grounding = named.retrieval_metadata.seed_grounding
    assert grounding is not None and grounding.found == ["c-bw"]
    assert named.scoring_details.seed_entities_identified_from_key_phrases >= 1


async def test_a_request_without_seed_ids_has_no_seed_grounding(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Postgres"]))
    assert out.retrieval_metadata.seed_grounding is None
    assert "seed_grounding" not in json.loads(out.canonical_json())["retrieval_metadata"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "give key_phrases, a non-empty query, messages, or seed_ids"),
        ({"seed_ids": []}, "seed_ids"),
        ({"seed_ids": ["a", "a"]}, "names an id twice"),
        ({"seed_ids": ["bad id"]}, "seed_ids"),
        ({"seed_ids": [f"c{i}" for i in range(MAX_SEED_IDS + 1)]}, "seed_ids"),
    ],
)
def test_seed_ids_are_validated(body, field):
    with pytest.raises(ValidationError) as err:
        req(**body)
    assert field in str(err.value)
