"""docs/configuration.md is generated from the settings model and kept current."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from hrt.config import STAGES, Settings
from hrt.config_docs import ROWS, default_text, render_configuration, undescribed, unplaced

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_described_on_its_field():
    assert undescribed() == []
    for stage in STAGES.values():
        assert undescribed(stage) == []


def test_a_field_without_a_description_is_caught():
    class Later(Settings):
        plain: int = 1
        bare: int = Field(2, ge=0)
        blank: int = Field(3, description=" ")
        told: int = Field(4, description="what it does")

    assert undescribed(Later) == [*undescribed(), "plain", "bare", "blank"]


def test_every_setting_is_in_one_row():
    assert unplaced() == []
    named = [name for names in ROWS for name in names]
    assert len(named) == len(set(named)) == len(Settings.model_fields)
    assert unplaced([*ROWS, ("search_k",)]) == ["search_k"]
    assert unplaced([names for names in ROWS if "search_k" not in names]) == ["search_k"]


def test_the_committed_reference_is_current():
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_configuration(), "run `make docs` and commit docs/configuration.md"


def test_defaults_are_the_models_own():
    text = render_configuration()
    assert f"| `HRT_SEARCH_K` | {Settings.model_fields['search_k'].default} |" in text
    assert "| `HRT_AUTH` | `on` |" in text and "| `HRT_RERANKER_BASE_URL` | unset |" in text
    assert default_text("") == "—" and default_text(True) == "`true`"


def test_a_row_reads_its_first_fields_description():
    text = render_configuration()
    assert f"| `HRT_SEARCH_K` | 25 | {Settings.model_fields['search_k'].description} *(request)* |" in text
    uri = Settings.model_fields["neo4j_uri"].description
    assert f"| `HRT_NEO4J_URI` / `HRT_NEO4J_DATABASE` | — / `neo4j` | {uri} |" in text
