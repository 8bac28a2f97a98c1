"""Exporting a sentence-transformers model's transformer to ONNX, and quantising the export to int8.

The only code of the ONNX embedder (:mod:`hrt.onnx_embedder`) that imports torch (the export) or
``onnxruntime.quantization`` (the int8 file); both run in a child process the embedder starts
(``python -m hrt.onnx_embedder``), so a serving process never imports them. Each writes its file
atomically (a temp file beside it, checked, then renamed) with a metadata file whose format number
says which recipe made it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hrt.cache_files import write_atomic
from hrt.errors import StoreError
from hrt.onnx_session import cpu_session

# Bump when the exported graph changes (inputs, outputs, attention implementation, opset): the new
# value keys a new cache entry, so a stale export is never reused.
EXPORT_FORMAT = 1
OPSET = 17
META_FILE = "meta.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
# Bump when the quantisation recipe changes (QUANT_RECIPE): the int8 file is rebuilt.
QUANT_FORMAT = 1
INT8_META_FILE = "meta.int8.json"
# ONNX Runtime's quantize_dynamic arguments: every MatMul (the weights of the attention projections
# and feed-forward layers; the attention's activation products run in int8 too), signed weights per
# output channel (per tensor is as fast but much further from fp32: docs/bench.md, "int8"), the full
# 8-bit range (VNNI needs no reduce_range)
QUANT_RECIPE = {"op_types_to_quantize": ["MatMul"], "per_channel": True, "reduce_range": False, "weight_type": "QInt8"}


def export_onnx(transformer_dir: Path, dest: Path) -> None:
    """Export the transformer at ``transformer_dir`` to ``dest`` (atomically: temp file, check, rename).

    Legacy TorchScript exporter (``dynamo=False`` where torch still has the keyword; the dynamo one
    needs ``onnxscript``), opset 17, dynamic batch and sequence axes, eager attention. The exported
    graph is checked against torch on a padded batch before it replaces ``dest``."""
    import torch

    model = _load_model(transformer_dir)
    accepted = inspect.signature(model.forward).parameters
    names = [n for n in INPUT_NAMES if n in accepted]
    # traced on rows of different lengths, so the graph is the one with a real padding mask; checked
    # on that batch and on one of another shape (a shape baked in by the tracer would show there)
    feeds = _padded_batch([16, 9], 16)
    args = tuple(feeds[n] for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, OUTPUT_NAME]}
    kwargs: dict[str, Any] = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    wrapper = _last_hidden_state(model, names).eval()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _replacing(dest) as tmp:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's and the legacy exporter's deprecation notes
            torch.onnx.export(
                wrapper,
                args,
                str(tmp),
                input_names=names,
                output_names=[OUTPUT_NAME],
                dynamic_axes=axes,
                opset_version=OPSET,
                do_constant_folding=True,
                **kwargs,
            )
        err = _max_abs_diff(cpu_session(tmp, threads=1), wrapper, names, (feeds, _padded_batch([23, 5, 1], 23)))
        if err > 1e-3:
            raise StoreError(f"the ONNX export of {transformer_dir} disagrees with torch (max abs diff {err:.2g})")
    meta = {
        "format": EXPORT_FORMAT,
        "opset": OPSET,
        "source": str(transformer_dir),
        "inputs": names,
        "onnx_bytes": dest.stat().st_size,
        "torch": torch.__version__,
        "max_abs_diff_vs_torch": err,
    }
    write_atomic(dest.parent / META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode())


def _load_model(transformer_dir: Path) -> Any:
    """The transformer in eval mode, with eager attention where transformers knows the argument."""
    from transformers import AutoModel

    try:
        model = AutoModel.from_pretrained(str(transformer_dir), attn_implementation="eager")
    except TypeError:  # pragma: no cover - transformers before attn_implementation
        model = AutoModel.from_pretrained(str(transformer_dir))
    model.eval()
    return model


def _last_hidden_state(model: Any, names: Sequence[str]) -> Any:
    """``model`` as a module of positional inputs (``names``, in order) to its last hidden state."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    return LastHiddenState(model)


def _padded_batch(lengths: Sequence[int], width: int) -> dict[str, Any]:
    """Token ids of rows of ``lengths`` real tokens, padded to ``width``, with their masks."""
    import torch

    ids = torch.arange(1000, 1000 + width, dtype=torch.long).repeat(len(lengths), 1)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def _max_abs_diff(session: Any, wrapper: Any, names: Sequence[str], checks: Sequence[dict[str, Any]]) -> float:
    """The largest difference between ONNX Runtime's and torch's outputs over the real tokens of ``checks``."""
    import torch

    err = 0.0
    for check in checks:
        with torch.no_grad():
            expected = wrapper(*(check[n] for n in names)).numpy()
        got = session.run(None, {n: check[n].numpy() for n in names})[0]
        keep = check["attention_mask"].numpy()[..., None].astype(bool)
        err = max(err, float(np.abs(np.where(keep, got - expected, 0.0)).max()))
    return err


@contextlib.contextmanager
def _replacing(dest: Path) -> Iterator[Path]:
    """A temp file beside ``dest`` to write; it replaces ``dest`` when the block ends without an
    exception, and is removed in any case."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.stem}-", suffix=".onnx.tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.chmod(0o644)  # mkstemp's 0600 would keep other users of a shared cache out
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def quantize_onnx(source: Path, dest: Path) -> None:
    """Quantise the fp32 export ``source`` to ``dest`` (atomically) with :data:`QUANT_RECIPE`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    recipe = dict(QUANT_RECIPE)
    weight_type = QuantType.QInt8 if recipe.pop("weight_type") == "QInt8" else QuantType.QUInt8
    root = logging.getLogger()
    level = root.level
    with _replacing(dest) as tmp:
        root.setLevel(logging.ERROR)  # not its advice to pre-process the model first
        try:
            quantize_dynamic(source, tmp, weight_type=weight_type, **recipe)
        finally:
            root.setLevel(level)
        cpu_session(tmp, threads=1)  # it loads, or nothing replaces dest
    meta = {
        "format": QUANT_FORMAT,
        "recipe": QUANT_RECIPE,
        "source_bytes": source.stat().st_size,
        "onnx_bytes": dest.stat().st_size,
    }
    write_atomic(dest.parent / INT8_META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode())
