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
batch (``tests/unit/test_onnx_embedder.py`` checks both). Texts go to the model sorted by length in
batches of at most ``batch_size`` texts and :data:`BATCH_TOKENS` padded tokens, so a batch of long
texts stays small (faster on CPU, measured in docs/bench.md) and one of short texts large.

``quantize="int8"`` runs instead the same graph with its MatMul weights quantised to int8 per
channel (ONNX Runtime's dynamic quantisation, made once from the fp32 export into
``model.int8.onnx`` beside it, in a child process). Dynamic quantisation scales the activations
per tensor, that is per batch, so a text's int8 vector would depend on the other texts of its batch
and on their padding: the int8 model therefore runs one text at a time, which keeps a text's vector
the same in any call. The int8 vectors are another model's (cosine about 0.99 to fp32), named
``... onnx int8`` and hashed into ``config_hash``. ``"auto"`` picks int8 only on a CPU with 8-bit dot
product instructions (AVX512-VNNI or AVX-VNNI on x86, the dot-product extension on ARM), where
int8 matrix products are fast; without them it is slower than fp32.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hrt.cache_files import file_lock, write_atomic
from hrt.config import default_cache_dir as cache_root
from hrt.embedding_models import BUNDLED, MAVEN_CENTRAL, PrebuiltModel, canonical, fetch, prebuilt
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
# Bump when the quantisation recipe changes (QUANT_RECIPE): the int8 file is rebuilt.
QUANT_FORMAT = 1
INT8_FILE = "model.int8.onnx"
INT8_META_FILE = "meta.int8.json"
# ONNX Runtime's quantize_dynamic arguments: every MatMul (the weights of the attention projections
# and feed-forward layers; the attention's activation products run in int8 too), signed weights per
# output channel (per tensor is as fast but much further from fp32: docs/bench.md, "int8"), the full
# 8-bit range (VNNI needs no reduce_range)
QUANT_RECIPE = {"op_types_to_quantize": ["MatMul"], "per_channel": True, "reduce_range": False, "weight_type": "QInt8"}
QUANTIZE_MODES = ("auto", "int8", "off")
# at most this many padded tokens (texts x longest) per fp32 batch: on CPU long texts embed faster
# in small batches, short ones in large batches (docs/bench.md, "fp32 batches"). Batch size never
# changes an fp32 vector.
BATCH_TOKENS = 1024

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
        session = cpu_session(tmp, threads=1)
        err = 0.0
        for check in (feeds, batch([23, 5, 1], 23)):
            with torch.no_grad():
                expected = wrapper(*(check[n] for n in names)).numpy()
            got = session.run(None, {n: check[n].numpy() for n in names})[0]
            keep = check["attention_mask"].numpy()[..., None].astype(bool)
            err = max(err, float(np.abs(np.where(keep, got - expected, 0.0)).max()))
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


def _export_in_child(transformer_dir: Path, dest: Path) -> float:
    """Run :func:`export_onnx` in a fresh interpreter; returns the seconds it took."""
    import importlib.util

    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        from hrt.embedder import needs_the_extra

        raise needs_the_extra(f"exporting the model folder {transformer_dir} to ONNX (once per model)")
    log.info("exporting %s to ONNX at %s (once per model)", transformer_dir, dest)
    seconds = _run_child([str(transformer_dir), str(dest)], f"the ONNX export of {transformer_dir}")
    log.info("ONNX export done in %.1f s", seconds)
    return seconds


def _quantize_in_child(source: Path, dest: Path) -> float:
    """Run :func:`quantize_onnx` in a fresh interpreter; returns the seconds it took."""
    log.info("quantising %s to int8 at %s (once per model)", source, dest)
    seconds = _run_child(["--quantize", str(source), str(dest)], f"the int8 quantisation of {source}")
    log.info("int8 quantisation done in %.1f s", seconds)
    return seconds


def _remove_stale_temp_files(entry: Path) -> None:
    """Temp files an export killed midway left behind (a live export's are younger than its timeout)."""
    cutoff = time.time() - EXPORT_TIMEOUT_S
    for tmp in entry.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()


# ------------------------------------------------------------------------------------------
# int8 (quantised from the fp32 export, in a child process)
# ------------------------------------------------------------------------------------------

# /proc/cpuinfo flags of 8-bit dot product instructions: x86 AVX512-VNNI and AVX-VNNI, ARM's dot
# product extension (``asimddp``), which ONNX Runtime's int8 kernels use
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "asimddp"})


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (``cpuinfo`` its text, for tests); empty
    where there is none (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return set()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return flags


def has_int8_dot(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has 8-bit dot product instructions (then int8 is faster than fp32)."""
    return bool(cpu_flags(cpuinfo) & INT8_DOT_FLAGS)


def use_int8(mode: str, cpuinfo: str | None = None) -> bool:
    """``HRT_EMBEDDING_QUANTIZE``: "int8" always, "off" never, "auto" where :func:`has_int8_dot`."""
    if mode not in QUANTIZE_MODES:
        raise StoreError(f"embedding quantisation must be one of {', '.join(QUANTIZE_MODES)}, not {mode!r}")
    return mode == "int8" or (mode == "auto" and has_int8_dot(cpuinfo))


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


def _run_child(args: Sequence[str], what: str) -> float:
    """``python -m hrt.onnx_embedder ARGS`` in a fresh interpreter; returns the seconds it took."""
    t0 = time.perf_counter()
    # the child imports this very package, wherever it was imported from here
    package_root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hrt.onnx_embedder", *args],
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise StoreError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------
# run time
# ------------------------------------------------------------------------------------------


# writes embedding at once in the lower-priority threads: one would queue a tenant's small write
# behind another's large one (its write slot held meanwhile)
WRITE_THREADS = 4


def lower_priority_thread(nice: int) -> ThreadPoolExecutor | None:
    """Worker threads at niceness ``nice`` (added to the process's), or None when ``nice`` is 0
    or the platform cannot set a thread's niceness (only Linux's is per thread)."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return None

    def lower() -> None:
        with contextlib.suppress(OSError):  # a container may refuse it: the thread then runs as any
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)

    return ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="hrt-embed-writes", initializer=lower)


def cpu_session(path: Path, threads: int) -> Any:
    """An ONNX Runtime session of ``path`` on the CPU, tuned to share its cores with a request (also
    the ONNX cross-encoder's, :mod:`hrt.rerankers.onnx_cross`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(0, threads)  # 0: ONNX Runtime's default (one per core)
    options.inter_op_num_threads = 1
    # a pool that spins after each call would burn the core the rest of the request needs (the
    # lexical leg runs during the embedding), and slows concurrent embedding calls
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only
    # no arena: it would keep the peak of the largest batch ever run (hundreds of MB for a batch of
    # long texts) for the life of the server; without it memory is returned after each batch, at no
    # cost in phrase latency
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def model_mean(model_id: str) -> Vector:
    """The mean vector of a prebuilt model (``embedding_means.json``, made by
    ``scripts/embedding_means.py``): the average of its vectors of every whole word of its vocabulary.

    bge and e5 put every text in one narrow cone (two unrelated sentences: cosine ~0.45 under bge,
    ~0.75 under e5; ~0.05 under MiniLM), and HRT's thresholds, gate and path evidence read cosines
    on MiniLM's scale. Taking this mean off each vector and normalising again (both vectors of a
    cosine alike) spreads the cone out to that scale, and keeps each model's ranking of neighbours
    close to its own (LoCoMo dev: docs/eval-locomo.md)."""
    means = _means()
    if model_id not in means:
        raise StoreError(f"no mean vector is recorded for the embedding model {model_id!r}")
    return means[model_id]


@functools.cache
def _means() -> dict[str, Vector]:
    data = json.loads((Path(__file__).with_name("embedding_means.json")).read_text(encoding="utf-8"))
    return {k: np.asarray(v["mean"], dtype=np.float32) for k, v in data["models"].items()}


def _tokenizer(path: Path, max_length: int) -> tuple[Any, int, int]:
    """The tokenizer at ``path`` set up as sentence-transformers calls it: truncation to
    ``max_length`` (longest_first), no padding (done per batch, with the pad id returned)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust library raises its own exception type
        raise StoreError(f"cannot load {path}: {exc}") from exc
    pad = tokenizer.padding or {}
    pad_id = int(pad.get("pad_id", tokenizer.token_to_id("[PAD]") or 0))
    pad_type_id = int(pad.get("pad_type_id", 0))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer, pad_id, pad_type_id


class OnnxEmbedder:
    """An embedding model run by ONNX Runtime: a prebuilt one (:mod:`hrt.embedding_models`) or a
    sentence-transformers folder exported once (``bundled``: all-MiniLM-L6-v2).

    Thread-safe: the tokenizer is configured once and only read after, and ONNX Runtime sessions
    may be run from several threads at once."""

    def __init__(
        self,
        model: str = "bundled",
        cache_dir: Path | None = None,
        threads: int = 1,
        batch_size: int = 64,
        quantize: str = "off",
        models_root: Path | None = None,
        repository: str = MAVEN_CENTRAL,
        center: bool = True,
        write_nice: int = 0,
    ) -> None:
        """``model``: ``bundled`` (``minilm-l6``), a prebuilt model's id
        (:data:`hrt.embedding_models.PREBUILT`, fetched into ``models_root`` when missing) or a
        sentence-transformers folder. ``cache_dir`` keeps the exports of folders. ``center``: a
        prebuilt model's vectors have its mean vector taken off (:func:`model_mean`); False only to
        compute that mean. ``write_nice`` > 0: passages (what a write embeds) are embedded in
        threads of their own at that niceness, and ONNX Runtime's pool threads are made at it too, so
        where the cores are short a request's work runs before a write's embedding (Linux sets
        niceness per thread; elsewhere it is ignored)."""
        self._background = lower_priority_thread(write_nice)
        self.int8 = use_int8(quantize)
        self._batch_size = batch_size
        self._threads = threads
        self.export_seconds: float | None = None  # set when this construction had to export
        self.quantize_seconds: float | None = None  # set when this construction had to quantise
        spec = prebuilt(model, "int8" if self.int8 else "off")
        self._mean: Vector | None = None
        if spec is not None:
            tokenizer_file = self._load_prebuilt(spec, models_root or cache_root(), repository)
            self._mean = model_mean(spec.model_id) if center else None
        else:
            tokenizer_file = self._load_folder(model, cache_dir)
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._tokenizer, self._pad_id, self._pad_type_id = _tokenizer(tokenizer_file, self.layout.max_seq_length)

    def _load_prebuilt(self, spec: PrebuiltModel, models_root: Path, repository: str) -> Path:
        files = fetch(spec, models_root, repository)
        self.int8 = spec.int8
        self.model_id = spec.model_id
        self.name = f"{spec.title} (onnx)"
        self.query_prefix, self.passage_prefix = spec.query_prefix, spec.passage_prefix
        self.layout = ModelLayout(
            root=files.onnx_path.parent,
            transformer_dir=files.onnx_path.parent,
            pooling=spec.pooling,
            dim=spec.dim,
            max_seq_length=spec.max_seq_length,
            do_lower_case=False,  # the tokenizer.json normalises
        )
        self.dim = spec.dim
        self.onnx_path = files.onnx_path
        try:
            self._session = self._open(files.onnx_path)
        except Exception as exc:  # onnxruntime raises several kinds
            raise StoreError(f"the model file {files.onnx_path} does not load: {exc}") from exc
        return files.tokenizer_path

    def _load_folder(self, model: str, cache_dir: Path | None) -> Path:
        from hrt.embedder import bundled_model_path

        bundled = canonical(model) == BUNDLED
        path = Path(bundled_model_path() if bundled else model).expanduser()
        self.layout = read_layout(path)
        variant = "onnx int8" if self.int8 else "onnx"
        self.name = f"all-MiniLM-L6-v2 (bundled, {variant})" if bundled else f"{model} ({variant})"
        self.model_id = (BUNDLED if bundled else model) + ("-int8" if self.int8 else "")
        self.query_prefix = self.passage_prefix = ""
        self.dim = self.layout.dim
        entry = (cache_dir or default_cache_dir()) / cache_key(self.layout)
        self.onnx_path = entry / (INT8_FILE if self.int8 else ONNX_FILE)
        self._session = self._load_or_export(entry)
        return self.layout.transformer_dir / "tokenizer.json"

    def _load_or_export(self, entry: Path) -> Any:
        """The fp32 session (exported once), or the int8 one (quantised once from the fp32 file)."""
        load = self._try_load_int8 if self.int8 else self._try_load
        session = load(entry)
        if session is not None:
            return session
        entry.mkdir(parents=True, exist_ok=True)
        with file_lock(entry / ".lock"):
            session = load(entry)  # another process may have exported meanwhile
            if session is None:
                _remove_stale_temp_files(entry)
                fp32 = self._try_load(entry)
                if fp32 is None:
                    self.export_seconds = _export_in_child(self.layout.transformer_dir, entry / ONNX_FILE)
                    fp32 = self._try_load(entry)
                if fp32 is None:
                    raise StoreError(f"the ONNX export at {entry / ONNX_FILE} does not load")
                if not self.int8:
                    return fp32
                del fp32
                self.quantize_seconds = _quantize_in_child(entry / ONNX_FILE, entry / INT8_FILE)
                session = load(entry)
        if session is None:
            raise StoreError(f"the ONNX model at {entry / (INT8_FILE if self.int8 else ONNX_FILE)} does not load")
        return session

    def _try_load(self, entry: Path) -> Any | None:
        """The cached session, or None when the file is missing, partial or corrupt (then re-export)."""
        onnx_file = entry / ONNX_FILE

        def current(meta: dict[str, Any]) -> bool:
            return bool(meta.get("format") == EXPORT_FORMAT and meta.get("onnx_bytes") == onnx_file.stat().st_size)

        return self._load_checked(onnx_file, entry / META_FILE, current, "exporting it again")

    def _try_load_int8(self, entry: Path) -> Any | None:
        """The cached int8 session, or None when it is missing, partial, corrupt, of another recipe
        or of another fp32 export (then quantise again)."""
        int8_file, source = entry / INT8_FILE, entry / ONNX_FILE

        def current(meta: dict[str, Any]) -> bool:
            return bool(
                source.is_file()
                and meta.get("format") == QUANT_FORMAT
                and meta.get("recipe") == QUANT_RECIPE
                and meta.get("onnx_bytes") == int8_file.stat().st_size
                and meta.get("source_bytes") == source.stat().st_size
            )

        return self._load_checked(int8_file, entry / INT8_META_FILE, current, "quantising it again")

    def _load_checked(
        self, model_file: Path, meta_file: Path, current: Callable[[dict[str, Any]], bool], remedy: str
    ) -> Any | None:
        """A session of ``model_file`` when it and ``meta_file`` exist and ``current(meta)``;
        otherwise None (logged with ``remedy``, what the caller does next)."""
        if not model_file.is_file() or not meta_file.is_file():
            return None
        try:
            if not current(json.loads(meta_file.read_text(encoding="utf-8"))):
                log.warning("the cached model %s is incomplete or stale; %s", model_file, remedy)
                return None
            return self._open(model_file)
        except Exception as exc:  # a corrupt file: onnxruntime raises several kinds
            log.warning("the cached model %s does not load (%s); %s", model_file, exc, remedy)
            return None

    def _open(self, model_file: Path) -> Any:
        """A session of ``model_file``, made in a lower-priority thread when there are some: ONNX
        Runtime's pool threads are started by the thread that makes the session and take its
        niceness."""
        if self._background is None:
            return cpu_session(model_file, self._threads)
        return self._background.submit(cpu_session, model_file, self._threads).result()

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
        """Passages' vectors (the model's passage prefix before each), in a lower-priority thread
        when there are some."""
        if self._background is not None:
            return self._background.submit(self._embed_passages, texts).result()
        return self._embed_passages(texts)

    def _embed_passages(self, texts: Sequence[str]) -> Vector:
        return self._centered(self._embed([self.passage_prefix + t for t in texts] if self.passage_prefix else texts))

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Queries' vectors (the model's query prefix before each)."""
        return self._centered(self._embed([self.query_prefix + t for t in texts] if self.query_prefix else texts))

    def _centered(self, vectors: Vector) -> Vector:
        if self._mean is None or not len(vectors):
            return vectors
        shifted = vectors - self._mean
        norms = np.linalg.norm(shifted, axis=1, keepdims=True)
        out: Vector = (shifted / np.maximum(norms, 1e-12)).astype(np.float32)
        return out

    def _embed(self, texts: Sequence[str]) -> Vector:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoded = self._encode(texts)
        out = np.empty((len(encoded), self.dim), dtype=np.float32)
        for rows in self._batches(encoded):
            out[rows] = self._run([encoded[i] for i in rows])
        return out

    def _batches(self, encoded: Sequence[Sequence[int]]) -> Iterator[list[int]]:
        """Row numbers of each batch: longest first, as sentence-transformers batches, so a batch
        pads little; at most ``batch_size`` texts and :data:`BATCH_TOKENS` padded tokens (the
        longest text's length times the rows), at least one text. int8: one text per batch, since
        its activations are quantised per batch."""
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        limit = 1 if self.int8 else self._batch_size
        start = 0
        while start < len(order):
            width = max(1, len(encoded[order[start]]))  # the longest of this batch: it comes first
            size = max(1, min(limit, BATCH_TOKENS // width))
            yield order[start : start + size]
            start += size


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hrt.onnx_embedder TRANSFORMER_DIR DEST``: the export, in its own process;
    ``python -m hrt.onnx_embedder --quantize MODEL_ONNX DEST``: the int8 quantisation."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "--quantize":
        quantize_onnx(Path(args[1]), Path(args[2]))
        return 0
    if len(args) != 2:
        print("usage: python -m hrt.onnx_embedder [--quantize] SOURCE DEST", file=sys.stderr)
        return 2
    export_onnx(Path(args[0]), Path(args[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
