"""A sentence-transformers model folder as the ONNX embedder (:mod:`hrt.onnx_embedder`) reads it:
where the transformer is, its pooling, dimension, sequence limit and casing (:func:`read_layout`).
A folder with anything else (a Dense layer, max pooling, no fast tokenizer) is refused with a
message naming the torch backend."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hrt.errors import StoreError

SUPPORTED_POOLING = ("mean", "cls")

# the legacy ``pooling_mode_*`` booleans of 1_Pooling/config.json and the mode each means
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class ModelLayout:
    """What the embedder needs to know about a sentence-transformers folder."""

    root: Path
    transformer_dir: Path  # config.json, the weights and tokenizer.json
    pooling: str  # one of SUPPORTED_POOLING
    dim: int
    max_seq_length: int
    do_lower_case: bool


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from exc


def _read_json(path: Path) -> dict[str, Any]:
    data = _load_json(path)
    if not isinstance(data, dict):
        raise StoreError(f"{path} is not a JSON object")
    return data


def _pooling_mode(config: dict[str, Any], where: Path) -> str:
    mode = config.get("pooling_mode")
    if mode is None:  # sentence-transformers before v5 wrote one boolean per mode
        modes = [name for key, name in _LEGACY_POOLING_KEYS.items() if config.get(key)]
        mode = modes[0] if len(modes) == 1 else modes
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if mode not in SUPPORTED_POOLING:
        raise StoreError(
            f"the onnx embedding backend supports {' and '.join(SUPPORTED_POOLING)} pooling, but {where} asks "
            f"for {mode!r}; set HRT_EMBEDDING_BACKEND=torch for this model"
        )
    return str(mode)


def read_layout(path: Path) -> ModelLayout:
    """Read a sentence-transformers folder: Transformer, Pooling and optionally Normalize modules.

    Raises StoreError for anything else (a Dense layer, max pooling, no tokenizer.json), so an
    unsupported model fails at startup with a clear message, before any export."""
    if not path.is_dir():
        raise StoreError(
            f"the onnx embedding backend needs 'bundled' or a local sentence-transformers folder, not {str(path)!r}; "
            "set HRT_EMBEDDING_BACKEND=torch to load a model by name"
        )
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        raise StoreError(f"{path} has no modules.json (not a sentence-transformers folder)")
    modules = _load_json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise StoreError(f"{modules_file} is not a list of modules")
    transformer_dir: Path | None = None
    pooling_dir: Path | None = None
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        where = path / str(module.get("path", ""))
        if kind == "Transformer" and transformer_dir is None:
            transformer_dir = where
        elif kind == "Pooling" and pooling_dir is None:
            pooling_dir = where
        elif kind != "Normalize":  # vectors are L2-normalised anyway
            raise StoreError(
                f"the onnx embedding backend does not support the {module.get('type')!r} module of {path}; "
                "set HRT_EMBEDDING_BACKEND=torch for this model"
            )
    if transformer_dir is None or pooling_dir is None:
        raise StoreError(f"{path} needs a Transformer and a Pooling module for the onnx embedding backend")
    pooling_config = _read_json(pooling_dir / "config.json")
    pooling = _pooling_mode(pooling_config, pooling_dir / "config.json")
    if not (transformer_dir / "tokenizer.json").is_file():
        raise StoreError(f"{transformer_dir} has no tokenizer.json (a fast tokenizer is needed for onnx)")
    config = _read_json(transformer_dir / "config.json")
    sbert_file = transformer_dir / "sentence_bert_config.json"
    sbert = _read_json(sbert_file) if sbert_file.is_file() else {}
    max_positions = int(config.get("max_position_embeddings") or 512)
    max_seq_length = sbert.get("max_seq_length")
    if max_seq_length is None:  # sentence-transformers falls back to the tokenizer's limit
        tok_file = transformer_dir / "tokenizer_config.json"
        tok_config = _read_json(tok_file) if tok_file.is_file() else {}
        max_seq_length = min(int(tok_config.get("model_max_length") or max_positions), max_positions)
    dim = pooling_config.get("embedding_dimension") or pooling_config.get("word_embedding_dimension")
    dim = dim or config.get("hidden_size")
    if not dim:
        raise StoreError(f"{path} does not say its embedding dimension")
    return ModelLayout(
        root=path,
        transformer_dir=transformer_dir,
        pooling=pooling,
        dim=int(dim),
        max_seq_length=int(max_seq_length),
        do_lower_case=bool(sbert.get("do_lower_case", False)),
    )
