"""One retrieval configuration (issue #21): stages, presets, per-request overrides, config_hash."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from pydantic import ValidationError

from hrt.config import (
    DEPRECATED_PRESETS,
    PRESETS,
    STAGES,
    WEIGHT_PRESET_NAMES,
    WEIGHT_PRESETS,
    RetrievalConfig,
    Settings,
    Weights,
    preset_weights,
)
from hrt.contract import AugmentedMemoryContext, ConfigOverrides, PresetName, RetrievalPresetName, RetrieveRequest

AS_OF = "2025-08-01T00:00:00Z"
# config_hash of the default settings before the settings were split into stages (commit 18bc21a):
# the refactor, and any setting added at its neutral value, must leave every recorded hash alone.
# The default hop_decay became 0.5 after (issue #23, second round), and passage_weight 1.5 (third
# round), then artifact_evidence "source" (fourth): with the old 0.6 and no passages the hash is
# still the recorded one, with 0.5 and no passages the second round's, with passages and "own" the
# third round's, and the fourth round's defaults have their own (DEFAULT_HASH_MINILM); then the
# default embedding model became bge-small-en-v1.5 (issue #35)
DEFAULT_HASH_BEFORE_THE_SPLIT = "dce13c8ef353d847"
DEFAULT_HASH_SECOND_ROUND = "f28cfb60d98df61d"
DEFAULT_HASH_THIRD_ROUND = "b99dcedfe32862e2"
DEFAULT_HASH_MINILM_AS_OF_CLOCK = "951e1f0c69db24d0"
DEFAULT_HASH_AS_OF_CLOCK = "7ec995832cfed32d"
# recency on the candidates' own clock and facts no longer true ranked after the others
DEFAULT_HASH = "8bea5b69e26ad472"
DEFAULT_HASH_MINILM = "4c578499a23715e8"


def req(**body: object) -> RetrieveRequest:
    return RetrieveRequest.model_validate({"user_id": "u1", "as_of": AS_OF, **body})


def test_the_default_hash_is_what_it_was_before_the_split() -> None:
    assert Settings().fingerprint() == DEFAULT_HASH
    assert Settings(embedding_model="bundled").fingerprint() == DEFAULT_HASH_MINILM
    # the configuration before the conversation clock hashes as it did
    clock: dict[str, Any] = {"recency_clock": "as_of", "invalidated_factor": 1.0, "phrase_best": False}
    assert Settings(**clock).fingerprint() == DEFAULT_HASH_AS_OF_CLOCK
    as_of_minilm = Settings(**clock, embedding_model="bundled")
    assert as_of_minilm.fingerprint() == DEFAULT_HASH_MINILM_AS_OF_CLOCK
    before = Settings(hop_decay=0.6, passage_weight=0.0, artifact_evidence="own", embedding_model="bundled", **clock)
    assert before.fingerprint() == DEFAULT_HASH_BEFORE_THE_SPLIT
    minilm = Settings(embedding_model="bundled", passage_weight=0.0, artifact_evidence="own", **clock)
    assert minilm.fingerprint() == DEFAULT_HASH_SECOND_ROUND
    third = Settings(artifact_evidence="own", embedding_model="bundled", **clock)
    assert third.fingerprint() == DEFAULT_HASH_THIRD_ROUND
    assert before.retrieval().with_overrides({"path_evidence": "best"}).fingerprint() == DEFAULT_HASH_BEFORE_THE_SPLIT


def test_every_stage_field_is_a_setting_and_names_are_unique() -> None:
    names = [f for stage in STAGES.values() for f in stage.model_fields]
    assert len(names) == len(set(names))
    assert set(names) <= set(Settings.model_fields)
    cfg = Settings(search_k=7, hop_decay=0.5, snippet_chars=100).retrieval()
    assert (cfg.grounding.search_k, cfg.expansion.hop_decay, cfg.assembly.snippet_chars) == (7, 0.5, 100)


def test_deployment_settings_never_change_the_hash() -> None:
    base = Settings().fingerprint()
    assert Settings(port=9999, postgres_pool_size=9, rerank_budget_s=3.0, request_timeout_s=20.0).fingerprint() == base
    assert Settings(search_k=26).fingerprint() != base


def test_overrides_are_validated_by_their_stage() -> None:
    cfg = RetrievalConfig()
    with pytest.raises(ValueError, match="unknown retrieval setting"):
        cfg.with_overrides({"port": 1})
    with pytest.raises(ValidationError):
        cfg.with_overrides({"threshold_min": 0.9})  # above threshold_max: the stage's own rule
    assert cfg.with_overrides({}) is cfg
    changed = cfg.with_overrides({"search_k": 3, "relevance_gate": 0.0})
    assert (changed.grounding.search_k, changed.scoring.relevance_gate) == (3, 0.0)
    assert changed.expansion is cfg.expansion  # untouched stages are shared


def test_the_request_surface_matches_the_config() -> None:
    assert set(typing.get_args(RetrievalPresetName)) == {*PRESETS, *DEPRECATED_PRESETS}
    assert set(DEPRECATED_PRESETS.values()) <= set(PRESETS)
    assert typing.get_args(PresetName) == WEIGHT_PRESET_NAMES
    assert set(WEIGHT_PRESET_NAMES) <= set(PRESETS)
    owner = {f for stage in STAGES.values() for f in stage.model_fields}
    assert set(ConfigOverrides.model_fields) <= owner
    for changes in PRESETS.values():
        RetrievalConfig().with_overrides(changes)  # every preset is a valid configuration


async def test_a_plain_request_runs_the_server_config_and_carries_no_config_key(loaded_service) -> None:
    doc = await loaded_service.retrieve(req(key_phrases=["Project Phoenix timeline"]))
    assert doc.retrieval_metadata.config is None
    assert doc.retrieval_metadata.config_hash == loaded_service.settings.fingerprint()
    assert '"config"' not in doc.canonical_json()
    AugmentedMemoryContext.model_validate_json(doc.canonical_json())


async def test_the_relevance_preset_is_the_semantic_weights_with_its_own_hash(loaded_service) -> None:
    phrases = ["Project Phoenix timeline", "team bandwidth"]
    preset = await loaded_service.retrieve(req(key_phrases=phrases, preset="relevance"))
    semantic = Weights(alpha_semantic_similarity=1, beta_recency=0, gamma_salience=0, delta_user_preference=0)
    weighted = await loaded_service.retrieve(req(key_phrases=phrases, weights=semantic.model_dump()))
    default = await loaded_service.retrieve(req(key_phrases=phrases))

    def ranked(doc: AugmentedMemoryContext) -> list[tuple[str, float]]:
        return [(m.muid, m.final_retrieval_score) for m in doc.retrieved_memory_units]

    assert ranked(preset) == ranked(weighted)
    assert ranked(preset) != ranked(default)
    md = preset.retrieval_metadata
    assert md.config is not None and (md.config.preset, md.config.overrides) == ("relevance", {})
    # one configuration, one hash: the preset's weights asked for by name or given as weights
    assert md.config_hash == weighted.retrieval_metadata.config_hash
    assert md.config_hash not in (default.retrieval_metadata.config_hash, "")


async def test_overrides_change_the_answer_the_echo_and_the_hash_deterministically(loaded_service) -> None:
    body = {
        "key_phrases": ["Project Phoenix timeline", "Postgres"],
        "config": {"snippet_chars": 40, "related_items": 0},
    }
    first = await loaded_service.retrieve(req(**body))
    again = await loaded_service.retrieve(req(**body))
    plain = await loaded_service.retrieve(req(key_phrases=body["key_phrases"]))
    assert first.canonical_json() == again.canonical_json()
    echoed = json.loads(first.canonical_json())["retrieval_metadata"]["config"]
    assert echoed == {"preset": None, "overrides": {"related_items": 0, "snippet_chars": 40}}
    assert first.retrieval_metadata.config_hash != plain.retrieval_metadata.config_hash
    assert all(len(m.content_snippet) <= 40 for m in first.retrieved_memory_units)
    assert any(len(m.content_snippet) > 40 for m in plain.retrieved_memory_units)
    assert first.retrieved_concepts and all(
        not c.related_top_memory_unit_ids_and_titles for c in first.retrieved_concepts
    )


async def test_a_preset_then_overrides_on_top(loaded_service) -> None:
    doc = await loaded_service.retrieve(
        req(key_phrases=["Project Phoenix timeline"], preset="tuned-depth1", config={"relevance_gate": 0.3})
    )
    tool = loaded_service.tool
    cfg, config_hash, applied = tool.config_for(
        req(key_phrases=["x"], preset="tuned-depth1", config={"relevance_gate": 0.3})
    )
    assert (cfg.expansion.default_depth, cfg.grounding.phrase_evidence, cfg.scoring.relevance_gate) == (1, "max", 0.3)
    assert doc.retrieval_metadata.config_hash == config_hash == cfg.fingerprint()
    assert doc.retrieval_metadata.relevance_gate.threshold == 0.3
    assert applied is not None and applied.overrides == {"relevance_gate": 0.3}


# --- the older request fields are config overrides (weights, weights_preset, max_depth) ---------


ALIASES = [
    ({"max_depth": 0}, {"config": {"default_depth": 0}}),
    ({"max_depth": 3}, {"config": {"default_depth": 3}}),
    (
        {"weights": {**Weights().model_dump(), "beta_recency": 0.5}},
        {"config": {"weights": {**Weights().model_dump(), "beta_recency": 0.5}}},
    ),
    *[
        ({"weights_preset": name}, {"config": {"weights": preset_weights(name).model_dump()}})
        for name in WEIGHT_PRESET_NAMES
    ],
    ({"weights_preset": "semantic"}, {"preset": "semantic"}),
    (
        {"max_depth": 1, "weights_preset": "recent", "config": {"search_k": 9}},
        {"config": {"default_depth": 1, "search_k": 9, "weights": WEIGHT_PRESETS["recent"].model_dump()}},
    ),
]


@pytest.mark.parametrize(("alias", "config"), ALIASES)
def test_an_alias_gives_the_config_and_hash_of_the_same_config_override(alias, config) -> None:
    from hrt.pipeline import HybridRetrievalTool

    tool = HybridRetrievalTool.__new__(HybridRetrievalTool)
    tool.reconfigure(Settings())
    by_alias = tool.config_for(req(key_phrases=["x"], **alias))
    by_config = tool.config_for(req(key_phrases=["x"], **config))
    assert by_alias[0] == by_config[0]
    assert by_alias[1] == by_config[1] == by_config[0].fingerprint()


def test_aliases_apply_on_top_of_config_and_are_echoed_as_overrides() -> None:
    request = req(key_phrases=["x"], max_depth=1, weights_preset="salient", config={"default_depth": 3})
    assert request.overrides() == {"default_depth": 1, "weights": WEIGHT_PRESETS["salient"].model_dump()}
    assert req(key_phrases=["x"]).overrides() == {}
    assert req(key_phrases=["x"], weights_preset="balanced").overrides() == {"weights": Weights().model_dump()}


async def test_an_alias_request_runs_as_the_config_request_does_without_the_echo(loaded_service) -> None:
    phrases = ["Project Phoenix timeline", "team bandwidth"]
    by_alias = await loaded_service.retrieve(req(key_phrases=phrases, max_depth=1, weights_preset="recent"))
    by_config = await loaded_service.retrieve(
        req(key_phrases=phrases, config={"default_depth": 1, "weights": WEIGHT_PRESETS["recent"].model_dump()})
    )
    # the same response and hash; only a request naming preset or config has its overrides echoed
    assert by_alias.retrieval_metadata.config is None
    assert by_config.retrieval_metadata.config is not None
    assert by_config.retrieval_metadata.config.overrides["default_depth"] == 1
    echoed = by_config.model_copy(
        update={"retrieval_metadata": by_config.retrieval_metadata.model_copy(update={"config": None})}
    )
    assert by_alias.canonical_json() == echoed.canonical_json()
    assert by_alias.retrieval_metadata.config_hash != loaded_service.settings.fingerprint()
    assert by_alias.scoring_details.graph_traversal_depth_used == 1
    # the server's own depth asked for by name changes nothing
    plain = await loaded_service.retrieve(req(key_phrases=phrases))
    same = await loaded_service.retrieve(req(key_phrases=phrases, max_depth=loaded_service.settings.default_depth))
    assert same.canonical_json() == plain.canonical_json()


def test_the_pipeline_and_the_evaluation_build_the_configuration_alike() -> None:
    from hrt.eval.locomo import evaluation
    from hrt.eval.locomo.systems import HRT_SYSTEMS, EvalConfig, request_for
    from hrt.pipeline import HybridRetrievalTool, effective_config

    assert evaluation.effective_config is effective_config
    settings = Settings()
    tool = HybridRetrievalTool.__new__(HybridRetrievalTool)
    tool.reconfigure(settings)
    cfg = EvalConfig(experimental_path_sum=True)

    class Q:
        user_id, as_of = "u1", None

        def key_phrases(self, mode: str) -> list[str]:
            return ["x"]

    for name in HRT_SYSTEMS:
        depth, weights, preset = evaluation.system_request(name, cfg)
        _, config_hash, _ = tool.config_for(request_for(Q(), cfg, depth, weights, preset))  # type: ignore[arg-type]
        assert evaluation._system_json(name, cfg, settings)["config_hash"] == config_hash


# --- the stages' defaults and names ----------------------------------------------------------


def test_the_scorers_defaults_are_the_configurations() -> None:
    from hrt.pipeline.scoring import PLAIN, Evidence, PreferenceBook

    assert Evidence() == Evidence.of(RetrievalConfig())
    cfg = RetrievalConfig()
    assert (Evidence().rule, Evidence().hop_decay) == (cfg.expansion.reached_evidence, cfg.expansion.hop_decay)
    assert PreferenceBook.build([]).neutral == cfg.scoring.neutral_preference
    assert (PLAIN.rule, PLAIN.gate, PLAIN.temporal, PLAIN.passage_weight, PLAIN.artifact_source) == (
        "path",
        0.0,
        False,
        0.0,
        False,
    )


async def test_the_stage_names_are_the_timing_and_status_keys(loaded_service) -> None:
    """Every stage is timed under its name; the response reports the contract's stages, a stage
    reported as another folded into it."""
    from hrt.pipeline import PIPELINE, REPORTED

    names = [stage.name for stage in PIPELINE]
    assert len(names) == len(set(names))
    assert REPORTED == ("intake", "grounding", "expansion", "scoring", "hydration", "rerank", "selection", "assembly")
    assert {stage.reported for stage in PIPELINE} == set(REPORTED)
    retrieval = await loaded_service.tool.run(req(key_phrases=["Project Phoenix timeline"], rerank=True))
    assert list(retrieval.timings) == [*names, "total"]
    assert list(retrieval.response.retrieval_metadata.stages) == list(REPORTED)
    assert retrieval.trace is None  # only when asked


async def test_a_preset_under_its_deprecated_name_is_the_same_request(loaded_service) -> None:
    """tuned-2026-11 is tuned-depth1's former name: the same configuration, echoed and hashed under
    the new name, so both answers are byte-identical."""
    old = await loaded_service.retrieve(req(key_phrases=["Project Phoenix timeline"], preset="tuned-2026-11"))
    new = await loaded_service.retrieve(req(key_phrases=["Project Phoenix timeline"], preset="tuned-depth1"))
    assert old.retrieval_metadata.config is not None and old.retrieval_metadata.config.preset == "tuned-depth1"
    assert old.model_dump_json() == new.model_dump_json()
