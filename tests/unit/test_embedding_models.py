"""The embedding models HRT knows by id (hrt/embedding_models.py): the registry, the hash-checked
fetch from a Maven repository, and the prebuilt ONNX models themselves (fetched from Maven Central
into the HRT cache when missing, as `make install` does)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hrt.config import Settings
from hrt.embedding_models import (
    BGE_QUERY_INSTRUCTION,
    BUNDLED,
    MODEL_IDS,
    PREBUILT,
    canonical,
    fetch,
    fetched,
    prebuilt,
)
from hrt.errors import StoreError
from hrt.onnx_embedder import model_mean


def test_model_ids_and_their_int8_siblings():
    assert MODEL_IDS[0] == BUNDLED == canonical("bundled") == "minilm-l6"
    assert prebuilt("bundled") is None and prebuilt("/some/folder") is None
    bge = prebuilt("bge-small-en-v1.5")
    assert bge is not None and not bge.int8 and bge.pooling == "cls" and bge.query_prefix == BGE_QUERY_INSTRUCTION
    assert bge.passage_prefix == ""
    q = prebuilt("bge-small-en-v1.5", "int8")
    assert q is not None and q.int8 and q.model_id == "bge-small-en-v1.5-int8" and q.artifact.endswith("-q")
    e5 = prebuilt("e5-small-v2")
    assert e5 is not None and (e5.query_prefix, e5.passage_prefix, e5.pooling) == ("query: ", "passage: ", "mean")
    assert prebuilt("e5-small-v2-int8", "off") is PREBUILT["e5-small-v2-int8"]
    for spec in PREBUILT.values():
        assert spec.url().startswith("https://repo1.maven.org/maven2/dev/langchain4j/")
        assert len(spec.jar_sha256) == 64


def test_one_model_one_config_hash():
    assert Settings(embedding_model="minilm-l6").embedding_model == "bundled"
    bundled = Settings(embedding_model="bundled").fingerprint()
    assert Settings(embedding_model="minilm-l6").fingerprint() == bundled
    assert Settings().embedding_model == "bge-small-en-v1.5" and Settings().fingerprint() != bundled


def _repository(tmp_path: Path, members: dict[str, bytes]) -> tuple[str, str]:
    """A Maven repository folder holding one jar of ``members``; returns its URL and the jar's hash."""
    spec = PREBUILT["bge-small-en-v1.5"]
    jar = (
        tmp_path / "repo" / "dev" / "langchain4j" / spec.artifact / spec.version / f"{spec.artifact}-{spec.version}.jar"
    )
    jar.parent.mkdir(parents=True)
    with zipfile.ZipFile(jar, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return (tmp_path / "repo").as_uri(), hashlib.sha256(jar.read_bytes()).hexdigest()


def test_fetch_checks_the_hash_extracts_once_and_refetches_a_damaged_copy(tmp_path: Path):
    spec = PREBUILT["bge-small-en-v1.5"]
    repo, sha = _repository(tmp_path, {spec.onnx_member: b"onnx bytes", spec.tokenizer_member: b"{}", "README": b"x"})
    cache = tmp_path / "cache"
    with pytest.raises(StoreError, match="SHA-256"):
        fetch(spec, cache, repo)  # the pinned hash is the real jar's, not this one's
    assert fetched(spec, cache) is None
    mine = replace(spec, jar_sha256=sha)
    files = fetch(mine, cache, repo)
    assert files.onnx_path.read_bytes() == b"onnx bytes" and files.tokenizer_path.read_bytes() == b"{}"
    assert not (files.onnx_path.parent / "README").exists()
    jar = Path(repo.removeprefix("file://")) / "dev"
    renamed = jar.with_name("gone")
    jar.rename(renamed)  # the repository is gone: the cached copy serves
    assert fetch(mine, cache, repo) == files
    files.onnx_path.write_bytes(b"cut")  # a damaged copy is fetched again
    assert fetched(mine, cache) is None
    with pytest.raises(StoreError, match="cannot download"):
        fetch(mine, cache, repo)
    renamed.rename(jar)
    assert fetch(mine, cache, repo).onnx_path.read_bytes() == b"onnx bytes"


def test_a_jar_without_the_model_is_refused(tmp_path: Path):
    spec = PREBUILT["bge-small-en-v1.5"]
    repo, sha = _repository(tmp_path, {spec.tokenizer_member: b"{}"})
    with pytest.raises(StoreError, match="cannot extract"):
        fetch(replace(spec, jar_sha256=sha), tmp_path / "cache", repo)


# ------------------------------------------------------------------------------------------
# the real prebuilt models (fetched into the HRT cache when missing)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["bge-small-en-v1.5", "e5-small-v2", "bge-small-en-v1.5-int8"])
def prebuilt_embedder(request: pytest.FixtureRequest):
    from hrt.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder(request.param, threads=1)


def test_prebuilt_models_prefix_pool_and_normalise(prebuilt_embedder):
    e = prebuilt_embedder
    spec = PREBUILT[e.model_id]
    assert e.dim == 384 and e.int8 == spec.int8
    texts = ["Caroline went to an LGBTQ support group", "a walk on the beach at sunset"]
    passages = e.embed(texts)
    assert passages.dtype == np.float32 and np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    # the model's own prefixes, and nothing else, tell queries from passages; then its mean comes off
    mean = model_mean(e.model_id)

    def centered(raw: np.ndarray) -> np.ndarray:
        return (raw - mean) / np.linalg.norm(raw - mean, axis=1, keepdims=True)

    assert np.allclose(e.embed_queries(texts), centered(e._embed([spec.query_prefix + t for t in texts])), atol=1e-6)
    assert np.allclose(passages, centered(e._embed([spec.passage_prefix + t for t in texts])), atol=1e-6)
    # centering spreads unrelated texts apart (raw bge and e5 put them at cosine ~0.4-0.8)
    assert float(passages[0] @ passages[1]) < 0.3 < float(e._embed(texts)[0] @ e._embed(texts)[1])
    # a text's vector is the same alone and in a batch
    assert np.allclose(e.embed(texts[:1])[0], passages[0], atol=1e-6)
    # and it means something: the query finds its passage
    q = e.embed_queries(["support group"])[0]
    assert float(q @ passages[0]) > float(q @ passages[1])


def test_the_pinned_means_follow_their_recipe():
    """embedding_means.json holds what scripts/embedding_means.py computes (here over the first
    2,000 words of the vocabulary, which lands close to the mean over all of them)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "embedding_means.py"
    spec = importlib.util.spec_from_file_location("embedding_means", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    sample = script.mean_of("bge-small-en-v1.5", limit=2000)
    pinned = model_mean("bge-small-en-v1.5")
    assert float(sample @ pinned / np.linalg.norm(sample) / np.linalg.norm(pinned)) > 0.98
    assert set(PREBUILT) <= set(json.loads((path.parents[1] / "hrt" / "embedding_means.json").read_text())["models"])


def test_pooling_is_the_models(prebuilt_embedder):
    """CLS pooling for bge, mean for e5, read off the model's last hidden state."""
    e = prebuilt_embedder
    ids = e._encode(["hello there"])
    hidden = e._session.run(
        ["last_hidden_state"],
        {
            "input_ids": np.array(ids, dtype=np.int64),
            "attention_mask": np.ones((1, len(ids[0])), dtype=np.int64),
            "token_type_ids": np.zeros((1, len(ids[0])), dtype=np.int64),
        },
    )[0][0]
    pooled = hidden[0] if PREBUILT[e.model_id].pooling == "cls" else hidden.mean(axis=0)
    assert np.allclose(e._embed(["hello there"])[0], pooled / np.linalg.norm(pooled), atol=1e-5)


def test_the_default_model_serves_without_torch_and_refuses_the_torch_backend(tmp_path: Path):
    """A service with the default settings (bge-small-en-v1.5) in a fresh process: the prebuilt
    model loads from the cache with ONNX Runtime alone; torch never is imported."""
    import os
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from hrt.config import Settings\n"
        "from hrt.service import HRTService\n"
        f"svc = HRTService(Settings(db_path={str(tmp_path / 'hrt.db')!r}))\n"
        "vec = svc.embedder.embed_queries(['hello world'])\n"
        "mods = ('torch', 'transformers', 'sentence_transformers')\n"
        "print(json.dumps({'model': svc.embedder.model_id, 'dim': int(vec.shape[1]),\n"
        "                  'imported': [m for m in mods if m in sys.modules]}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HRT_EMBEDDING")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "model": "bge-small-en-v1.5",
        "dim": 384,
        "imported": [],
    }
    from hrt.service import load_embedder

    with pytest.raises(StoreError, match="HRT_EMBEDDING_BACKEND=onnx"):
        load_embedder(Settings(embedding_backend="torch"))
