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
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from hrt.cache_files import file_lock
from hrt.config import default_cache_dir as cache_root
from hrt.embedding_models import BUNDLED, MAVEN_CENTRAL, PrebuiltModel, canonical, fetch, prebuilt
from hrt.errors import StoreError
from hrt.onnx_export import EXPORT_FORMAT as EXPORT_FORMAT
from hrt.onnx_export import INPUT_NAMES as INPUT_NAMES
from hrt.onnx_export import INT8_META_FILE as INT8_META_FILE
from hrt.onnx_export import META_FILE as META_FILE
from hrt.onnx_export import OPSET as OPSET
from hrt.onnx_export import OUTPUT_NAME as OUTPUT_NAME
from hrt.onnx_export import QUANT_FORMAT as QUANT_FORMAT
from hrt.onnx_export import QUANT_RECIPE as QUANT_RECIPE
from hrt.onnx_export import export_onnx as export_onnx
from hrt.onnx_export import quantize_onnx as quantize_onnx
from hrt.onnx_layout import SUPPORTED_POOLING as SUPPORTED_POOLING
from hrt.onnx_layout import ModelLayout as ModelLayout
from hrt.onnx_layout import read_layout as read_layout
from hrt.onnx_session import cpu_session as cpu_session
from hrt.stores.base import Vector

log = logging.getLogger(__name__)

# the export recipe (EXPORT_FORMAT, OPSET, QUANT_RECIPE, ...) is hrt.onnx_export's
ONNX_FILE = "model.onnx"
EXPORT_TIMEOUT_S = 900.0
INT8_FILE = "model.int8.onnx"
QUANTIZE_MODES = ("auto", "int8", "off")
# at most this many padded tokens (texts x longest) per fp32 batch: on CPU long texts embed faster
# in small batches, short ones in large batches (docs/bench.md, "fp32 batches"). Batch size never
# changes an fp32 vector.
BATCH_TOKENS = 1024


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
# export and quantisation (hrt.onnx_export), each in a child process
# ------------------------------------------------------------------------------------------


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
