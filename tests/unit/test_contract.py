import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from hrt.api.errors import field_name
from hrt.contract import AugmentedMemoryContext, RetrieveRequest, request_json_schema, response_json_schema

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "hrt" / "schema"


def test_committed_response_schema_matches_the_models():
    committed = json.loads((SCHEMA_DIR / "augmented_memory_context.v9.4.schema.json").read_text())
    assert committed == response_json_schema(), "run `make schema` and commit the result"


def test_committed_request_schema_matches_the_models():
    committed = json.loads((SCHEMA_DIR / "retrieve_request.schema.json").read_text())
    assert committed == request_json_schema(), "run `make schema` and commit the result"


def test_v94_top_level_fields_are_seed_001s_in_order():
    assert list(AugmentedMemoryContext.model_fields) == [
        "retrieved_memory_units",
        "retrieved_concepts",
        "retrieved_artifacts",
        "retrieval_summary",
        "scoring_details",
        "unmatched_key_phrases",
        "retrieval_metadata",
    ]
    mu = response_json_schema()["$defs"]["RetrievedMemoryUnit"]["properties"]
    assert list(mu) == [
        "muid",
        "title",
        "content_snippet",
        "creation_ts",
        "source_type",
        "importance_score",
        "final_retrieval_score",
        "score_breakdown",
        "connected_concept_ids_and_names",
    ]
    weights = response_json_schema()["$defs"]["WeightsUsed"]["properties"]
    assert list(weights) == [
        "alpha_semantic_similarity",
        "beta_recency",
        "gamma_salience",
        "delta_user_preference",
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": "u"}, "body"),  # no phrases, query or messages: the body as a whole
        ({"user_id": "u", "key_phrases": []}, "key_phrases"),
        ({"user_id": "u", "key_phrases": ["x" * 201]}, "key_phrases.0"),
        ({"user_id": "u", "key_phrases": ["   "]}, "key_phrases.0"),
        ({"user_id": "u", "key_phrases": ["a"] * 21}, "key_phrases"),
        ({"user_id": "u", "key_phrases": ["a"], "max_depth": 4}, "max_depth"),
        ({"user_id": "u", "key_phrases": ["a"], "limits": {"memory_units": 51}}, "limits.memory_units"),
        ({"user_id": "u", "key_phrases": ["a"], "weights": {"beta_recency": -1}}, "weights.beta_recency"),
        ({"user_id": "u", "key_phrases": ["a"], "weights_preset": "nope"}, "weights_preset"),
        ({"user_id": "bad id!", "key_phrases": ["a"]}, "user_id"),
        ({"user_id": "u", "key_phrases": ["a"], "surprise": 1}, "surprise"),
        ({"user_id": "u", "key_phrases": ["a"], "filters": {"kinds": ["person"]}}, "filters.kinds.0"),
        (
            {
                "user_id": "u",
                "key_phrases": ["a"],
                "filters": {"time_range": {"start": "2025-02-01T00:00:00Z", "end": "2025-01-01T00:00:00Z"}},
            },
            "filters.time_range",
        ),
    ],
)
def test_bad_requests_name_their_field(body, field):
    with pytest.raises(ValidationError) as info:
        RetrieveRequest.model_validate(body)
    assert field_name(tuple(info.value.errors()[0]["loc"])) == field  # as the API names it


def test_naive_as_of_is_utc():
    r = RetrieveRequest.model_validate({"user_id": "u", "query": "x", "as_of": "2025-01-01T12:00:00"})
    assert r.as_of is not None and r.as_of.utcoffset().total_seconds() == 0


def test_the_request_schema_names_every_weights_preset():
    import typing

    from hrt.config import WEIGHT_PRESETS
    from hrt.contract import PresetName

    assert set(typing.get_args(PresetName)) == set(WEIGHT_PRESETS)


def test_explicit_nulls_are_as_good_as_absent_fields():
    # found by the long schemathesis run: bounds on the nullable fields were applied to null (500)
    r = RetrieveRequest.model_validate({"user_id": "u", "key_phrases": None, "query": "x", "messages": None})
    assert r.key_phrases is None and r.query == "x"
