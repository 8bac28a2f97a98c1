"""The ONNX cross-encoder (hrt/rerankers/onnx_cross.py) on tiny models the tests build themselves: a
WordPiece tokenizer over a vocabulary made here, and ONNX graphs made with ``onnx.helper`` whose
scores are computed here too. No real cross-encoder can be fetched on this machine, and its quality
is not the point: the adapter's tokenisation, feeds, logits, determinism, failures and wiring are."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from hrt.auth import SCOPES, new_key
from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.errors import StoreError
from hrt.ingest import parse_jsonl
from hrt.metrics import Metrics
from hrt.records import Kind, entity_text
from hrt.reranker import NoopReranker
from hrt.rerankers import OnnxCrossEncoder, Qwen3Reranker, RerankMetrics
from hrt.rerankers.onnx_cross import relevance
from hrt.service import HRTService, load_reranker
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, jsonl, small_graph

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
QUERIES = (
    "who says the team is stretched thin on bandwidth",
    "postgres billing tables migrated",
    "project phoenix timeline",
)
DOCS = (
    "Ben says the team is stretched thin; bandwidth is the constraint for Q3.",
    "Migrated the billing tables to Postgres 16 over the weekend without downtime.",
    "Brainstorm on Project Phoenix: timeline adjustments and resource allocation.",
    "Phoenix is at risk because the team's bandwidth is limited in Q3.",
    "",
    "zyzzyva quokka wombat",  # words the tokenizer was never taught: [UNK]
)
AS_OF = "2025-08-01T00:00:00Z"


# ------------------------------------------------------------------------------------------
# the tiny model: tokenizer and graphs
# ------------------------------------------------------------------------------------------


def graph_texts() -> list[str]:
    """Every text of the test graph: the vocabulary covers them, so its words are not [UNK]."""
    out: list[str] = []
    for item in small_graph("u1"):
        out += [str(v) for k, v in item.items() if k in ("name", "description", "title", "content")]
    return out


def vocabulary() -> dict[str, int]:
    split = pre_tokenizers.BertPreTokenizer()
    words: dict[str, None] = {}
    for text in [*graph_texts(), *QUERIES, *DOCS[:4]]:
        for word, _ in split.pre_tokenize_str(text.lower()):
            words.setdefault(word)
    return {token: i for i, token in enumerate([*SPECIAL, *words])}


VOCAB = vocabulary()


def save_tokenizer(path: Path) -> Path:
    """A BERT-style WordPiece tokenizer: lowercased, [CLS] query [SEP] document [SEP], type ids 0/1."""
    tokenizer = Tokenizer(models.WordPiece(VOCAB, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", VOCAB["[SEP]"]), ("[CLS]", VOCAB["[CLS]"]))
    tokenizer.save(str(path))
    return path


def _const(name: str, value: Any, dtype: Any = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: list[str], init: list[onnx.TensorProto], **kw: Any) -> Path:
    dtype = kw.get("input_type", TensorProto.INT64)
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        [helper.make_tensor_value_info(name, dtype, ["batch", "tokens"]) for name in inputs],
        [helper.make_tensor_value_info(kw.get("output", "logits"), TensorProto.FLOAT, ["batch", "labels"])],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def overlap_model(path: Path, two_logits: bool = False) -> Path:
    """Logit = (distinct words the query and the document share) - 2, read off token_type_ids.
    ``two_logits``: [1 - overlap/2, overlap/2 - 1], whose softmax's second column is the same."""
    size = len(VOCAB)
    eye = np.eye(size, dtype=np.float32)
    for token in SPECIAL:  # special tokens and [UNK] are not words: never an overlap
        eye[VOCAB[token], VOCAB[token]] = 0.0
    nodes = [
        helper.make_node("Gather", ["eye", "input_ids"], ["onehot"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mask", "types"], ["doc_mask"]),
        helper.make_node("Sub", ["mask", "doc_mask"], ["query_mask"]),
        helper.make_node("Unsqueeze", ["query_mask", "last"], ["query_mask3"]),
        helper.make_node("Unsqueeze", ["doc_mask", "last"], ["doc_mask3"]),
        helper.make_node("Mul", ["onehot", "query_mask3"], ["query_onehot"]),
        helper.make_node("Mul", ["onehot", "doc_mask3"], ["doc_onehot"]),
        helper.make_node("ReduceSum", ["query_onehot", "tokens_axis"], ["query_counts"], keepdims=0),
        helper.make_node("ReduceSum", ["doc_onehot", "tokens_axis"], ["doc_counts"], keepdims=0),
        helper.make_node("Min", ["query_counts", "one"], ["query_has"]),
        helper.make_node("Min", ["doc_counts", "one"], ["doc_has"]),
        helper.make_node("Mul", ["query_has", "doc_has"], ["shared"]),
        helper.make_node("ReduceSum", ["shared", "tokens_axis"], ["overlap"], keepdims=1),
    ]
    if two_logits:
        nodes += [
            helper.make_node("Mul", ["overlap", "half"], ["half_overlap"]),
            helper.make_node("Sub", ["one", "half_overlap"], ["negative"]),
            helper.make_node("Sub", ["half_overlap", "one"], ["positive"]),
            helper.make_node("Concat", ["negative", "positive"], ["logits"], axis=1),
        ]
    else:
        nodes.append(helper.make_node("Add", ["overlap", "minus_two"], ["logits"]))
    init = [
        _const("eye", eye),
        _const("last", [2], np.int64),
        _const("tokens_axis", [1], np.int64),
        _const("one", 1.0),
        _const("half", 0.5),
        _const("minus_two", -2.0),
    ]
    return _save(path, nodes, ["input_ids", "attention_mask", "token_type_ids"], init)


WORD_WEIGHTS = {"ben": 3.0, "postgres": 1.5, "phoenix": -1.0}


def weighted_model(path: Path, logits: int = 1, extra_input: str | None = None) -> Path:
    """No token_type_ids, int32 inputs, an output not named ``logits``: the logit is 4 x the mean
    weight of the pair's tokens (WORD_WEIGHTS, 0 for the others) - 0.5, repeated ``logits`` times."""
    weights = np.zeros(len(VOCAB), dtype=np.float32)
    for word, w in WORD_WEIGHTS.items():
        weights[VOCAB[word]] = w
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["token_weights"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["token_weights", "mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "tokens_axis"], ["total"], keepdims=1),
        helper.make_node("ReduceSum", ["mask", "tokens_axis"], ["count"], keepdims=1),
        helper.make_node("Div", ["total", "count"], ["mean"]),
        helper.make_node("Mul", ["mean", "four"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["one_logit"]),
        helper.make_node("Concat", ["one_logit"] * logits, ["score"], axis=1),
    ]
    init = [_const("weights", weights), _const("tokens_axis", [1], np.int64), _const("four", 4.0), _const("bias", -0.5)]
    inputs = ["input_ids", "attention_mask", *([extra_input] if extra_input else [])]
    return _save(path, nodes, inputs, init, input_type=TensorProto.INT32, output="score")


def sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


def expected_overlap(query: str, document: str, max_length: int = 512) -> float:
    """What the overlap model scores, computed from the tokenizer's encoding alone."""
    tokenizer = load_test_tokenizer()
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    enc = tokenizer.encode(query, document)
    special = {VOCAB[t] for t in SPECIAL}
    words = [
        {i for i, t in zip(enc.ids, enc.type_ids, strict=True) if t == side and i not in special} for side in (0, 1)
    ]
    return round(sigmoid(len(words[0] & words[1]) - 2.0), 6)


def expected_weighted(query: str, document: str) -> float:
    ids = load_test_tokenizer().encode(query, document).ids
    weights = {VOCAB[w]: v for w, v in WORD_WEIGHTS.items()}
    return round(sigmoid(4.0 * float(np.mean([weights.get(i, 0.0) for i in ids])) - 0.5), 6)


_TOKENIZER_JSON: dict[str, str] = {}


def load_test_tokenizer() -> Tokenizer:
    return Tokenizer.from_str(_TOKENIZER_JSON["text"])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """overlap.onnx (one logit), overlap2.onnx (two) and weighted.onnx, with tokenizer.json beside them."""
    root = tmp_path_factory.mktemp("cross-encoder")
    _TOKENIZER_JSON["text"] = save_tokenizer(root / "tokenizer.json").read_text(encoding="utf-8")
    overlap_model(root / "overlap.onnx")
    overlap_model(root / "overlap2.onnx", two_logits=True)
    weighted_model(root / "weighted.onnx")
    return root


class Recording:
    """The real session, with each run's thread recorded; ``fail`` makes every run raise."""

    def __init__(self, inner: Any, fail: bool = False, delay_s: float = 0.0) -> None:
        self.inner = inner
        self.fail = fail
        self.delay_s = delay_s
        self.threads: list[int] = []

    def run(self, outputs: Sequence[str], feeds: dict[str, Any]) -> Any:
        self.threads.append(threading.get_ident())
        time.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : a failure inside the model")
        return self.inner.run(outputs, feeds)


def recorded(encoder: OnnxCrossEncoder, **kw: Any) -> Recording:
    rec = Recording(encoder._session, **kw)
    encoder._session = rec
    return rec


# ------------------------------------------------------------------------------------------
# scores
# ------------------------------------------------------------------------------------------


def test_relevance_reads_one_logit_as_sigmoid_and_two_as_softmax():
    assert relevance(np.array([[0.0]])) == 0.5
    assert relevance(np.array([[2.0]])) == pytest.approx(sigmoid(2.0))
    softmax = np.exp([0.3, 1.7]) / np.exp([0.3, 1.7]).sum()
    assert relevance(np.array([[0.3, 1.7]])) == pytest.approx(float(softmax[1]))
    assert relevance(np.array([-1000.0])) == 0.0 and relevance(np.array([1000.0])) == 1.0  # no overflow
    with pytest.raises(ValueError, match="3 logits"):
        relevance(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        relevance(np.array([[np.nan]]))


async def test_scores_are_the_models_in_input_order(model_dir):
    encoder = OnnxCrossEncoder(model_dir / "overlap.onnx")
    assert encoder.name == "onnx-cross-encoder:overlap.onnx"
    for query in QUERIES:
        scores = await encoder.score(query, DOCS)
        assert scores == [expected_overlap(query, d) for d in DOCS]
        assert all(0.0 <= s <= 1.0 and s == round(s, 6) for s in scores)
    by_ben = await encoder.score(QUERIES[0], DOCS)
    assert by_ben.index(max(by_ben)) == 0  # the document that shares the most words with the query
    assert by_ben[4] == by_ben[5] == round(sigmoid(-2.0), 6)  # nothing shared: empty and unknown words
    assert await encoder.score(QUERIES[0], []) == []


async def test_two_logits_are_read_as_a_softmax(model_dir):
    one = OnnxCrossEncoder(model_dir / "overlap.onnx")
    two = OnnxCrossEncoder(model_dir / "overlap2.onnx")
    for query in QUERIES:
        assert await two.score(query, DOCS) == await one.score(query, DOCS)


async def test_a_graph_without_token_type_ids_and_with_int32_inputs_is_fed_by_name(model_dir):
    encoder = OnnxCrossEncoder(model_dir / "weighted.onnx")
    assert sorted(encoder._inputs) == ["attention_mask", "input_ids"]
    assert encoder._output == "score"  # no output named logits: the first
    scores = await encoder.score("who is ben", DOCS[:3])
    assert scores == [expected_weighted("who is ben", d) for d in DOCS[:3]]
    assert scores[0] > scores[1] > scores[2]  # ben 3.0, postgres 1.5, phoenix -1.0


async def test_a_documents_score_does_not_depend_on_its_call(model_dir):
    encoder = OnnxCrossEncoder(model_dir / "overlap.onnx", cache_size=0)  # every score computed afresh
    query = QUERIES[1]
    alone = [(await encoder.score(query, [d]))[0] for d in DOCS]
    together = await encoder.score(query, DOCS)
    reversed_ = await encoder.score(query, DOCS[::-1])
    assert together == alone == reversed_[::-1]
    weighted = OnnxCrossEncoder(model_dir / "weighted.onnx", cache_size=0)
    assert [(await weighted.score(query, [d]))[0] for d in DOCS] == (await weighted.score(query, [*DOCS, *DOCS]))[:6]


async def test_pairs_are_truncated_longest_first_to_max_length(model_dir):
    query = "postgres billing"
    document = " ".join(["weekend"] * 40) + " postgres billing"  # the shared words come last
    short = OnnxCrossEncoder(model_dir / "overlap.onnx", max_length=16)
    long = OnnxCrossEncoder(model_dir / "overlap.onnx")
    assert await short.score(query, [document]) == [expected_overlap(query, document, max_length=16)]
    assert (await short.score(query, [document]))[0] < (await long.score(query, [document]))[0]


async def test_scores_run_in_a_worker_thread_and_are_cached(model_dir):
    registry_metrics = RerankMetrics(Metrics().registry)
    encoder = OnnxCrossEncoder(model_dir / "overlap.onnx", metrics=registry_metrics)
    rec = recorded(encoder)
    first = await encoder.score(QUERIES[0], [*DOCS, DOCS[0]])
    assert len(rec.threads) == len(DOCS)  # each distinct document once
    assert threading.get_ident() not in rec.threads  # the event loop's thread never runs the model
    again = await encoder.score(QUERIES[0], DOCS[::-1])
    assert len(rec.threads) == len(DOCS) and again == first[: len(DOCS)][::-1]
    assert registry_metrics.calls.labels(status="ok")._value.get() == 2
    assert registry_metrics.cache.labels(result="hit")._value.get() == len(DOCS)


async def test_a_failing_pair_fails_the_whole_call_and_caches_nothing(model_dir):
    metrics = RerankMetrics(Metrics().registry)
    encoder = OnnxCrossEncoder(model_dir / "overlap.onnx", metrics=metrics)
    real = encoder._session
    recorded(encoder, fail=True)
    with pytest.raises(StoreError, match=r"overlap\.onnx failed on a pair: RuntimeError"):
        await encoder.score(QUERIES[0], DOCS)
    assert metrics.calls.labels(status="error")._value.get() == 1 and len(encoder._cache) == 0
    encoder._session = real
    assert await encoder.score(QUERIES[0], DOCS) == [expected_overlap(QUERIES[0], d) for d in DOCS]


async def test_a_call_given_up_stops_after_the_pair_in_hand(model_dir):
    encoder = OnnxCrossEncoder(model_dir / "overlap.onnx")
    rec = recorded(encoder, delay_s=0.05)
    documents = [f"document {i}" for i in range(40)]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(encoder.score(QUERIES[0], documents), timeout=0.02)
    await asyncio.sleep(0.3)
    runs = len(rec.threads)
    await asyncio.sleep(0.2)
    assert len(rec.threads) == runs < len(documents)


# ------------------------------------------------------------------------------------------
# errors at start
# ------------------------------------------------------------------------------------------


def test_a_missing_model_or_tokenizer_names_its_setting(model_dir, tmp_path):
    with pytest.raises(StoreError, match=r"HRT_RERANKER_ONNX_MODEL: no ONNX model file at .*absent\.onnx"):
        OnnxCrossEncoder(tmp_path / "absent.onnx")
    alone = tmp_path / "alone.onnx"
    alone.write_bytes((model_dir / "overlap.onnx").read_bytes())
    with pytest.raises(StoreError, match=r"HRT_RERANKER_ONNX_TOKENIZER \(unset: the tokenizer.json beside"):
        OnnxCrossEncoder(alone)
    with pytest.raises(StoreError, match=r"HRT_RERANKER_ONNX_TOKENIZER: no tokenizer file at .*nope\.json"):
        OnnxCrossEncoder(model_dir / "overlap.onnx", tokenizer=tmp_path / "nope.json")
    OnnxCrossEncoder(alone, tokenizer=model_dir / "tokenizer.json")  # named explicitly, anywhere


def test_a_file_that_is_not_a_usable_model_names_the_setting(model_dir, tmp_path):
    tokenizer = model_dir / "tokenizer.json"
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not an onnx model")
    with pytest.raises(StoreError, match=r"HRT_RERANKER_ONNX_MODEL: .*garbage\.onnx does not load as an ONNX model"):
        OnnxCrossEncoder(garbage, tokenizer=tokenizer)
    with pytest.raises(StoreError, match=r"is not a tokenizers tokenizer\.json"):
        OnnxCrossEncoder(model_dir / "overlap.onnx", tokenizer=garbage)
    extra = weighted_model(tmp_path / "extra.onnx", extra_input="position_ids")
    with pytest.raises(StoreError, match=r"HRT_RERANKER_ONNX_MODEL: .*takes inputs \[.*'position_ids'\]"):
        OnnxCrossEncoder(extra, tokenizer=tokenizer)
    three = weighted_model(tmp_path / "three.onnx", logits=3)
    with pytest.raises(StoreError, match=r"HRT_RERANKER_ONNX_MODEL: .*does not score a pair: .*3 logits per pair"):
        OnnxCrossEncoder(three, tokenizer=tokenizer)


# ------------------------------------------------------------------------------------------
# settings and selection
# ------------------------------------------------------------------------------------------


def test_one_reranker_is_chosen_from_the_settings(model_dir, tmp_path, monkeypatch):
    assert isinstance(load_reranker(Settings(), Metrics()), NoopReranker)
    assert isinstance(load_reranker(Settings(reranker_base_url="http://127.0.0.1:1"), Metrics()), Qwen3Reranker)
    monkeypatch.setenv("HRT_RERANKER_ONNX_MODEL", str(model_dir / "overlap.onnx"))
    monkeypatch.setenv("HRT_RERANKER_ONNX_MAX_LENGTH", "64")
    chosen = load_reranker(Settings(), Metrics())
    assert isinstance(chosen, OnnxCrossEncoder) and chosen.max_length == 64
    assert chosen.tokenizer_path == model_dir / "tokenizer.json"
    monkeypatch.setenv("HRT_RERANKER_ONNX_MODEL", "")  # docker compose's unset variable
    assert Settings().reranker_onnx_model is None


def test_both_rerankers_set_is_a_configuration_error(model_dir):
    with pytest.raises(ValidationError, match="HRT_RERANKER_ONNX_MODEL and HRT_RERANKER_BASE_URL are both set"):
        Settings(reranker_onnx_model=model_dir / "overlap.onnx", reranker_base_url="http://127.0.0.1:8081")
    Settings(reranker_onnx_model=model_dir / "overlap.onnx", reranker_base_url="")  # empty: unset


def test_the_onnx_model_is_in_the_config_hash_and_its_threads_are_not(model_dir):
    base = Settings().fingerprint()
    onnx_model = Settings(reranker_onnx_model=model_dir / "overlap.onnx")
    assert onnx_model.fingerprint() != base
    assert Settings(reranker_onnx_model=model_dir / "overlap2.onnx").fingerprint() != onnx_model.fingerprint()
    shorter = Settings(reranker_onnx_model=model_dir / "overlap.onnx", reranker_onnx_max_length=128)
    assert shorter.fingerprint() != onnx_model.fingerprint()
    threads = Settings(reranker_onnx_model=model_dir / "overlap.onnx", reranker_onnx_threads=1)
    assert threads.fingerprint() == onnx_model.fingerprint()


def test_the_service_refuses_to_start_with_a_missing_model(tmp_path):
    settings = Settings(db_path=tmp_path / "hrt.db", reranker_onnx_model=tmp_path / "absent.onnx")
    with pytest.raises(StoreError, match="HRT_RERANKER_ONNX_MODEL"):
        HRTService(settings, embedder=HashingEmbedder())
    assert not (tmp_path / "hrt.db").exists()  # failed before any store opened


# ------------------------------------------------------------------------------------------
# the pipeline, end to end with the real tiny model
# ------------------------------------------------------------------------------------------


def request(rerank: bool = True) -> RetrieveRequest:
    # grounded by the key phrases; the reranker judges against the query, which is about Ben
    return RetrieveRequest.model_validate(
        {
            "user_id": "u1",
            "key_phrases": ["Project Phoenix", "Postgres"],
            "query": QUERIES[0],
            "rerank": rerank,
            "as_of": AS_OF,
        }
    )


async def onnx_service(model_dir: Path, db: Path) -> HRTService:
    settings = Settings(db_path=db, reranker_onnx_model=model_dir / "overlap.onnx")
    svc = await HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW).start()
    await svc.ingest(parse_jsonl(jsonl(small_graph("u1"))))
    return svc


async def test_the_rerank_stage_reorders_with_the_onnx_cross_encoder(model_dir, tmp_path):
    outputs = []
    for run in range(2):  # two services: the same bytes
        svc = await onnx_service(model_dir, tmp_path / f"hrt{run}.db")
        try:
            plain = await svc.retrieve(request(rerank=False))
            out = await svc.retrieve(request())
            units = await svc.records.get_many("u1", Kind.MEMORY_UNIT, [m.muid for m in out.retrieved_memory_units])
        finally:
            await svc.close()
        outputs.append(out.canonical_json())
    assert outputs[0] == outputs[1]
    doc = AugmentedMemoryContext.model_validate_json(outputs[0])
    md = doc.retrieval_metadata
    assert md.rerank_applied and md.stages["rerank"] == "ok" and not md.degraded
    first = doc.retrieved_memory_units[0]
    assert "Ben" in first.title  # last in the scorer's order, first once reranked
    assert [m.muid for m in doc.retrieved_memory_units] != [m.muid for m in plain.retrieved_memory_units]
    for item in doc.retrieved_memory_units:  # the model's own score, shown
        assert item.score_breakdown.rerank == pytest.approx(
            expected_overlap(QUERIES[0], entity_text(units[item.muid])), abs=1e-4
        )
    assert md.config_hash == Settings(reranker_onnx_model=model_dir / "overlap.onnx").fingerprint()
    assert md.config_hash != Settings().fingerprint()


async def test_a_model_failing_mid_run_gives_the_scorer_order(model_dir, tmp_path):
    svc = await onnx_service(model_dir, tmp_path / "hrt.db")
    try:
        assert isinstance(svc.tool.reranker, OnnxCrossEncoder)
        recorded(svc.tool.reranker, fail=True)
        out = await svc.retrieve(request())
        plain = await svc.retrieve(request(rerank=False))
    finally:
        await svc.close()
    md = out.retrieval_metadata
    assert md.stages["rerank"] == "degraded" and md.degraded and not md.rerank_applied
    assert md.degraded_reasons == ["rerank failed: StoreError"]
    assert [m.muid for m in out.retrieved_memory_units] == [m.muid for m in plain.retrieved_memory_units]


async def test_readyz_names_the_reranker(model_dir, tmp_path):
    from hrt.api import create_app

    svc = await onnx_service(model_dir, tmp_path / "hrt.db")
    try:
        token, record = new_key("ops", SCOPES, None)
        await svc.records.create_key(record)
        app = create_app(svc.settings, service=svc)
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://hrt", headers=headers
        ) as c:
            ready = (await c.get("/readyz")).json()
    finally:
        await svc.close()
    assert ready["reranker"] == "onnx-cross-encoder:overlap.onnx"
