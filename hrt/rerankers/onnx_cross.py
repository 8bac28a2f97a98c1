"""A cross-encoder behind HRT's :class:`~hrt.reranker.Reranker` port, run in process by ONNX Runtime
(``HRT_RERANKER_ONNX_MODEL``): no server, no torch, only ``onnxruntime``, ``tokenizers`` and numpy.

Model: an ONNX graph of a sequence-pair classifier (an ms-marco MiniLM or a bge-reranker exported by
``optimum``, say). It takes ``input_ids`` and, when the graph has them, ``attention_mask`` and
``token_type_ids`` (int64 or int32), fed by name; its output (``logits`` when the graph has an
output of that name, else its first) holds per pair either one logit, read as ``sigmoid(logit)``,
or two, read as the softmax's second column (the relevant class). Anything else is refused when the
reranker is built.

Tokenizer: a ``tokenizer.json`` (``HRT_RERANKER_ONNX_TOKENIZER``, default: the one beside the model)
encodes ``(query, document)`` as a pair with its own post-processor (``[CLS] q [SEP] d [SEP]`` and
token type ids 0/1 for BERT), truncated ``longest_first`` to ``HRT_RERANKER_ONNX_MAX_LENGTH``
tokens; the file's own truncation and padding settings are replaced by these.

Determinism: one pair per run, unpadded, so a document's score is a function of the query, the
document, the model, the tokenizer and the token budget alone, never of the other documents of the
call or of their order. Batching with the padding masked would be exact only in exact arithmetic:
a wider padded matrix changes how the kernels associate their float sums, and a dynamically
quantised export (int8) scales its activations per batch. Scores are rounded to
:data:`~hrt.reranker.SCORE_DECIMALS` decimals, as the Qwen3 adapter's.

Failure contract, as the Qwen3 adapter's: a pair that fails fails the whole call with
:class:`~hrt.errors.StoreError` (the pipeline then keeps the scorer's order for every item); a
partial result is never returned. Scores of successful calls are cached (LRU on ``(query,
document)``). A wrong setting (no such file, a file that is not an ONNX model, a graph whose inputs
or output this module cannot use) fails when the reranker is built, with a StoreError naming the
setting, so ``hrt serve`` refuses to start rather than degrading every request: building scores one
probe pair.

The pairs of a call run one after another in a worker thread (:func:`asyncio.to_thread`), so the
event loop goes on serving; a call given up by its caller (the stage's budget ran out) stops after
the pair in hand.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hrt.errors import StoreError
from hrt.onnx_embedder import cpu_session
from hrt.reranker import SCORE_DECIMALS
from hrt.rerankers.metrics import RerankMetrics
from hrt.rerankers.score_cache import ScoreCache

log = logging.getLogger(__name__)

MODEL_SETTING = "HRT_RERANKER_ONNX_MODEL"
TOKENIZER_SETTING = "HRT_RERANKER_ONNX_TOKENIZER"
# the graph inputs this module feeds, from the tokenizer's encoding of a pair
FED_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_INT_TYPES: dict[str, type[np.integer[Any]]] = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
LOGITS_OUTPUT = "logits"
PROBE_PAIR = ("is this model usable?", "one short document to score")
ERROR_PREVIEW_CHARS = 200


def relevance(logits: Any) -> float:
    """A pair's relevance in [0, 1] from its logits: one logit -> sigmoid; two -> the softmax's
    second column. Raises ValueError for any other number of logits or a non-finite one."""
    values = np.asarray(logits, dtype=np.float64).reshape(-1)
    if values.size not in (1, 2):
        raise ValueError(
            f"the model gives {values.size} logits per pair; HRT reads one (sigmoid) or two (softmax, the second)"
        )
    if not np.all(np.isfinite(values)):
        raise ValueError(f"the model gives non-finite logits {values.tolist()}")
    # sigmoid(d) with d the relevant logit, or the difference of the two: softmax([a, b])[1] = sigmoid(b - a)
    d = float(values[0]) if values.size == 1 else float(values[1] - values[0])
    if d >= 0:
        return 1.0 / (1.0 + float(np.exp(-d)))
    e = float(np.exp(d))
    return e / (1.0 + e)


def _preview(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_PREVIEW_CHARS else f"{text[:ERROR_PREVIEW_CHARS]}…"


def _load_tokenizer(path: Path, max_length: int, setting: str) -> Any:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust library raises its own exception type
        raise StoreError(f"{setting}: {path} is not a tokenizers tokenizer.json ({_preview(exc)})") from exc
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    return tokenizer


class OnnxCrossEncoder:
    """Scores (query, document) pairs with a cross-encoder run by ONNX Runtime. See the module docstring.

    Thread-safe: the tokenizer is configured once and only read after, and an ONNX Runtime session may
    run from several threads at once."""

    def __init__(
        self,
        model: Path | str,
        *,
        tokenizer: Path | str | None = None,
        max_length: int = 512,
        threads: int = 2,
        cache_size: int = 2048,
        metrics: RerankMetrics | None = None,
    ) -> None:
        if max_length < 8 or cache_size < 0:
            raise ValueError("ONNX cross-encoder: max_length >= 8, cache_size >= 0")
        self.model_path = Path(model).expanduser()
        if not self.model_path.is_file():
            raise StoreError(f"{MODEL_SETTING}: no ONNX model file at {self.model_path}")
        if tokenizer is None:
            self.tokenizer_path = self.model_path.parent / "tokenizer.json"
            tokenizer_setting = f"{TOKENIZER_SETTING} (unset: the tokenizer.json beside {MODEL_SETTING})"
        else:
            self.tokenizer_path = Path(tokenizer).expanduser()
            tokenizer_setting = TOKENIZER_SETTING
        if not self.tokenizer_path.is_file():
            raise StoreError(f"{tokenizer_setting}: no tokenizer file at {self.tokenizer_path}")
        self.name = f"onnx-cross-encoder:{self.model_path.name}"
        self.max_length = max_length
        self._tokenizer = _load_tokenizer(self.tokenizer_path, max_length, tokenizer_setting)
        try:
            self._session = cpu_session(self.model_path, threads)
        except Exception as exc:  # onnxruntime raises several kinds for a file it cannot load
            raise StoreError(
                f"{MODEL_SETTING}: {self.model_path} does not load as an ONNX model ({_preview(exc)})"
            ) from exc
        self._inputs = self._graph_inputs()
        outputs = [o.name for o in self._session.get_outputs()]
        self._output = LOGITS_OUTPUT if LOGITS_OUTPUT in outputs else outputs[0]
        self._metrics = metrics
        self._cache = ScoreCache(cache_size)
        try:
            self._score_pair(*PROBE_PAIR)
        except StoreError as exc:
            raise StoreError(f"{MODEL_SETTING}: {self.model_path} does not score a pair: {exc.message}") from exc

    def _graph_inputs(self) -> dict[str, type[np.integer[Any]]]:
        """The graph's inputs by name, with their integer type; refused unless this module feeds them all."""
        inputs = {i.name: i.type for i in self._session.get_inputs()}
        unknown = sorted(set(inputs) - set(FED_INPUTS))
        if "input_ids" not in inputs or unknown:
            raise StoreError(
                f"{MODEL_SETTING}: {self.model_path} takes inputs {sorted(inputs)}; HRT feeds input_ids and, "
                f"when the graph has them, {', '.join(FED_INPUTS[1:])}"
            )
        wrong = {name: kind for name, kind in inputs.items() if kind not in _INT_TYPES}
        if wrong:
            raise StoreError(
                f"{MODEL_SETTING}: {self.model_path} wants inputs of types {wrong}; HRT feeds int64 or int32"
            )
        return {name: _INT_TYPES[kind] for name, kind in inputs.items()}

    # -- scoring (worker thread)

    def _score_pair(self, query: str, document: str) -> float:
        """One pair, alone in its run (see the module docstring, "Determinism")."""
        try:
            encoding = self._tokenizer.encode(query, document)
            columns = {
                "input_ids": encoding.ids,
                "attention_mask": encoding.attention_mask,
                "token_type_ids": encoding.type_ids,
            }
            feeds = {name: np.asarray([columns[name]], dtype=kind) for name, kind in self._inputs.items()}
            (logits,) = self._session.run([self._output], feeds)
            return round(relevance(logits), SCORE_DECIMALS)
        except Exception as exc:  # tokenizers and onnxruntime raise their own types
            raise StoreError(
                f"the ONNX cross-encoder {self.model_path.name} failed on a pair: {_preview(exc)}"
            ) from exc

    def _score_pairs(self, query: str, documents: Sequence[str], stop: threading.Event) -> dict[str, float]:
        out: dict[str, float] = {}
        for document in documents:
            if stop.is_set():  # the caller gave up (its budget ran out): nobody reads the rest
                break
            out[document] = self._score_pair(query, document)
        return out

    # -- the port

    async def score(self, query: str, documents: Sequence[str]) -> list[float] | None:
        """Relevance per document in input order, rounded to 6 decimals; raises on any failure."""
        if not documents:
            return []
        return await self._cache.scores(query, documents, self._run, self._metrics)

    async def _run(self, query: str, todo: Sequence[str]) -> dict[str, float]:
        """One call to the model, in a worker thread, with its metrics; caches what it scores."""
        m = self._metrics
        stop = threading.Event()
        started = time.perf_counter()
        status = "error"
        try:
            fresh = await asyncio.to_thread(self._score_pairs, query, todo, stop)
            status = "ok"
        except StoreError as exc:
            log.warning("rerank call failed (%d documents): %s", len(todo), exc.message)
            raise
        except Exception as exc:  # a bug, not the model: still a failed call, still one HRT error type
            log.exception("rerank call failed unexpectedly")
            raise StoreError(f"the ONNX cross-encoder failed unexpectedly: {_preview(exc)}") from exc
        except BaseException:  # cancelled by the caller: no verdict on the model
            status = ""
            raise
        finally:
            stop.set()
            if m is not None and status:
                m.calls.labels(status=status).inc()
                m.latency.observe(time.perf_counter() - started)
        for document, value in fresh.items():
            self._cache.put((query, document), value)
        return fresh

    async def aclose(self) -> None:
        """Nothing to release: the session goes with the object."""
