"""The ONNX Runtime embedder: a sentence-transformers model served without torch.

The model's transformer is exported once to ONNX with ``torch.onnx.export`` (in a child process, so
the serving process never imports torch, not even the first time) into
``$HRT_CACHE_DIR/onnx/<key>/model.onnx``, where ``key`` hashes the transformer's files and the export
recipe. After that, a process needs only ``onnxruntime``, ``tokenizers`` and numpy: tokenisation,
truncation and padding as sentence-transformers does them, the transformer in ONNX Runtime, then
the folder's pooling (mean or CLS) and an L2 norm, in float32.

Vectors agree with the torch backend's to cosine >= 0.9999 (about 1e-7 in practice), not bit for
bit. Padding does not change a text's vector: the padded positions are masked out of attention
(exact zeros after softmax) and out of the pooling, so a text's vector is the same alone or in any
batch (``tests/unit/test_onnx_embedder.py`` checks both).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hrt.config import default_cache_dir as cache_root
from hrt.errors import StoreError
from hrt.stores.base import Vector

log = logging.getLogger(__name__)

# Bump when the exported graph changes (inputs, outputs, attention implementation, opset): the new
# value keys a new cache entry, so a stale export is never reused.
EXPORT_FORMAT = 1
OPSET = 17
ONNX_FILE = "model.onnx"
META_FILE = "meta.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
SUPPORTED_POOLING = ("mean", "cls")
EXPORT_TIMEOUT_S = 900.0

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


def cache_key(layout: ModelLayout) -> str:
    """A hash of the transformer's files (config, weights, tokenizer) and the export recipe."""
    digest = hashlib.sha256(f"hrt-onnx:{EXPORT_FORMAT}:{OPSET}\n".encode())
    for file in sorted(layout.transformer_dir.iterdir()):
        if file.is_file() and not file.name.startswith("."):
            with file.open("rb") as fh:
                file_hash = hashlib.file_digest(fh, "sha256").hexdigest()
            digest.update(f"{file.name}:{file_hash}\n".encode())
    return digest.hexdigest()[:20]


def default_cache_dir() -> Path:
    """``~/.cache/hrt/onnx``: the export's folder when none is given (the service passes
    ``Settings.cache_root() / "onnx"``, so ``HRT_CACHE_DIR`` moves it), beside the dev stack's binaries."""
    return cache_root() / "onnx"


# ------------------------------------------------------------------------------------------
# export (the only code here that imports torch; it runs in a child process)
# ------------------------------------------------------------------------------------------


def export_onnx(transformer_dir: Path, dest: Path) -> None:
    """Export the transformer at ``transformer_dir`` to ``dest`` (atomically: temp file, check, rename).

    Legacy TorchScript exporter (``dynamo=False`` where torch still has the keyword; the dynamo one
    needs ``onnxscript``), opset 17, dynamic batch and sequence axes, eager attention. The exported
    graph is checked against torch on a padded batch before it replaces ``dest``."""
    import torch
    from transformers import AutoModel

    try:
        model = AutoModel.from_pretrained(str(transformer_dir), attn_implementation="eager")
    except TypeError:  # pragma: no cover - transformers before attn_implementation
        model = AutoModel.from_pretrained(str(transformer_dir))
    model.eval()
    accepted = inspect.signature(model.forward).parameters
    names = [n for n in INPUT_NAMES if n in accepted]

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    def batch(lengths: Sequence[int], width: int) -> dict[str, Any]:
        ids = torch.arange(1000, 1000 + width, dtype=torch.long).repeat(len(lengths), 1)
        mask = torch.zeros_like(ids)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
        return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    # traced on rows of different lengths, so the graph is the one with a real padding mask; checked
    # on that batch and on one of another shape (a shape baked in by the tracer would show there)
    feeds = batch([16, 9], 16)
    args = tuple(feeds[n] for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, OUTPUT_NAME]}
    kwargs: dict[str, Any] = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    wrapper = LastHiddenState(model).eval()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".model-", suffix=".onnx.tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.chmod(0o644)  # mkstemp's 0600 would keep other users of a shared cache out
    try:
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
        session = _session(tmp, threads=1)
        err = 0.0
        for check in (feeds, batch([23, 5, 1], 23)):
            with torch.no_grad():
                expected = wrapper(*(check[n] for n in names)).numpy()
            got = session.run(None, {n: check[n].numpy() for n in names})[0]
            keep = check["attention_mask"].numpy()[..., None].astype(bool)
            err = max(err, float(np.abs(np.where(keep, got - expected, 0.0)).max()))
        if err > 1e-3:
            raise StoreError(f"the ONNX export of {transformer_dir} disagrees with torch (max abs diff {err:.2g})")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {
        "format": EXPORT_FORMAT,
        "opset": OPSET,
        "source": str(transformer_dir),
        "inputs": names,
        "onnx_bytes": dest.stat().st_size,
        "torch": torch.__version__,
        "max_abs_diff_vs_torch": err,
    }
    _write_atomic(dest.parent / META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode())


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


def _export_in_child(transformer_dir: Path, dest: Path) -> float:
    """Run :func:`export_onnx` in a fresh interpreter; returns the seconds it took."""
    t0 = time.perf_counter()
    log.info("exporting %s to ONNX at %s (once per model)", transformer_dir, dest)
    # the child imports this very package, wherever it was imported from here
    package_root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hrt.onnx_embedder", str(transformer_dir), str(dest)],
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"the ONNX export of {transformer_dir} failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise StoreError(f"the ONNX export of {transformer_dir} failed (exit {done.returncode}):\n{tail}")
    seconds = time.perf_counter() - t0
    log.info("ONNX export done in %.1f s", seconds)
    return seconds


def _remove_stale_temp_files(entry: Path) -> None:
    """Temp files an export killed midway left behind (a live export's are younger than its timeout)."""
    cutoff = time.time() - EXPORT_TIMEOUT_S
    for tmp in entry.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so racing processes export once (the rename keeps it safe anyway)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: the atomic rename alone keeps the file whole
        yield
        return
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------
# run time
# ------------------------------------------------------------------------------------------


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(0, threads)  # 0: ONNX Runtime's default (one per core)
    options.inter_op_num_threads = 1
    # a pool that spins after each call would burn the core the rest of the request needs (the
    # lexical leg runs during the embedding): -20% embedding throughput with 4 callers, measured
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only
    # no arena: it would keep the peak of the largest batch ever run (a batch of 64 texts of 256
    # tokens: ~700 MB) for the life of the server; without it RSS returns to ~300 MB, and phrase
    # latency is unchanged (measured)
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxEmbedder:
    """A sentence-transformers model (``bundled``: all-MiniLM-L6-v2) run by ONNX Runtime.

    Thread-safe: the tokenizer is configured once and only read after, and ONNX Runtime sessions
    may be run from several threads at once."""

    def __init__(
        self,
        model: str = "bundled",
        cache_dir: Path | None = None,
        threads: int = 1,
        batch_size: int = 64,
    ) -> None:
        from tokenizers import Tokenizer

        from hrt.embedder import bundled_model_path

        path = Path(bundled_model_path() if model == "bundled" else model).expanduser()
        self.layout = read_layout(path)
        self.name = "all-MiniLM-L6-v2 (bundled, onnx)" if model == "bundled" else f"{model} (onnx)"
        self.dim = self.layout.dim
        self._batch_size = batch_size
        self._threads = threads
        self.export_seconds: float | None = None  # set when this construction had to export
        entry = (cache_dir or default_cache_dir()) / cache_key(self.layout)
        self.onnx_path = entry / ONNX_FILE
        self._session = self._load_or_export(entry)
        self._inputs = [i.name for i in self._session.get_inputs()]
        try:
            tokenizer = Tokenizer.from_file(str(self.layout.transformer_dir / "tokenizer.json"))
        except Exception as exc:  # the Rust library raises its own exception type
            raise StoreError(f"cannot load {self.layout.transformer_dir / 'tokenizer.json'}: {exc}") from exc
        # as sentence-transformers calls the tokenizer: truncation to max_seq_length (longest_first),
        # padding to the longest in the batch (done here, per batch, with the tokenizer's pad id)
        pad = tokenizer.padding or {}
        self._pad_id = int(pad.get("pad_id", tokenizer.token_to_id("[PAD]") or 0))
        self._pad_type_id = int(pad.get("pad_type_id", 0))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.layout.max_seq_length)
        self._tokenizer = tokenizer

    def _load_or_export(self, entry: Path) -> Any:
        session = self._try_load(entry)
        if session is not None:
            return session
        entry.mkdir(parents=True, exist_ok=True)
        with _file_lock(entry / ".lock"):
            session = self._try_load(entry)  # another process may have exported meanwhile
            if session is None:
                _remove_stale_temp_files(entry)
                self.export_seconds = _export_in_child(self.layout.transformer_dir, entry / ONNX_FILE)
                session = self._try_load(entry)
        if session is None:
            raise StoreError(f"the ONNX export at {entry / ONNX_FILE} does not load")
        return session

    def _try_load(self, entry: Path) -> Any | None:
        """The cached session, or None when the file is missing, partial or corrupt (then re-export)."""
        onnx_file, meta_file = entry / ONNX_FILE, entry / META_FILE
        if not onnx_file.is_file() or not meta_file.is_file():
            return None
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            if meta.get("format") != EXPORT_FORMAT or meta.get("onnx_bytes") != onnx_file.stat().st_size:
                log.warning("the cached ONNX model %s is incomplete; exporting it again", onnx_file)
                return None
            return _session(onnx_file, self._threads)
        except Exception as exc:  # a corrupt file: onnxruntime raises several kinds
            log.warning("the cached ONNX model %s does not load (%s); exporting it again", onnx_file, exc)
            return None

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        prepared = [t.lower() for t in texts] if self.layout.do_lower_case else list(texts)
        return [list(e.ids) for e in self._tokenizer.encode_batch(prepared)]

    def _run(self, batch: list[list[int]]) -> Vector:
        width = max(len(ids) for ids in batch)
        ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.full_like(ids, self._pad_type_id)}
        hidden = self._session.run([OUTPUT_NAME], {n: feeds[n] for n in self._inputs})[0]
        hidden = np.asarray(hidden, dtype=np.float32)
        if self.layout.pooling == "cls":
            pooled = hidden[:, 0]
        else:  # mean over the real tokens, as sentence-transformers' Pooling does
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: Vector = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out

    def embed(self, texts: Sequence[str]) -> Vector:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoded = self._encode(texts)
        # longest first, as sentence-transformers batches, so a batch pads little
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        out = np.empty((len(encoded), self.dim), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            out[rows] = self._run([encoded[i] for i in rows])
        return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hrt.onnx_embedder TRANSFORMER_DIR DEST``: the export, in its own process."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m hrt.onnx_embedder TRANSFORMER_DIR DEST", file=sys.stderr)
        return 2
    export_onnx(Path(args[0]), Path(args[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
