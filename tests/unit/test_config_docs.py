"""docs/configuration.md is generated from the settings model and kept current."""

from __future__ import annotations

from pathlib import Path

from hrt.config import Settings
from hrt.config_docs import DESCRIPTIONS, default_text, render_configuration, undescribed

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_described_once():
    assert undescribed() == []
    named = [name for names, _ in DESCRIPTIONS for name in names]
    assert len(named) == len(set(named)) == len(Settings.model_fields)


def test_the_committed_reference_is_current():
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_configuration(), "run `make docs` and commit docs/configuration.md"


def test_defaults_are_the_models_own():
    text = render_configuration()
    assert f"| `HRT_SEARCH_K` | {Settings.model_fields['search_k'].default} |" in text
    assert "| `HRT_AUTH` | `on` |" in text and "| `HRT_RERANKER_BASE_URL` | unset |" in text
    assert default_text("") == "—" and default_text(True) == "`true`"
