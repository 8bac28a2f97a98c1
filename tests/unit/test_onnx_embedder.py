"""The ONNX Runtime embedder: its model-folder checks (fast) and, on the real bundled model (slow),
its agreement with sentence-transformers, its determinism, its export cache and a torch-free server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import hrt.onnx_embedder
from hrt.config import Settings
from hrt.errors import StoreError
from hrt.onnx_embedder import (
    INT8_FILE,
    INT8_META_FILE,
    META_FILE,
    ONNX_FILE,
    OnnxEmbedder,
    cpu_flags,
    has_int8_dot,
    read_layout,
    use_int8,
)

slow = pytest.mark.slow

LONG = " ".join(f"Entry {i}: fed the sourdough starter, baked two loaves, noted the crumb." for i in range(60))
TEXTS = [
    "hello world",
    "",
    "   surrounded by spaces   ",
    "a",
    "Sourdough",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "Fed the sourdough starter at 8am; it doubled by noon.",
    "that book on deep work",
    "Maya's half-marathon training plan for October",
    "Ünïcödé, café, naïve, Straße",
    "日本語のテキストです",
    "你好，世界",
    "emoji 🙂🍞🏃",
    "tab\tand\nnewline",
    "x" * 600,
    "numbers 3.14159 and 2025-08-01T09:30:00Z",
    "<b>html</b> &amp; {json: true}",
    LONG,  # far more than 256 tokens: truncated
    LONG[:900],
    "Why did I stop running in the winter?",
]


# ------------------------------------------------------------------------------------------
# model folders (no model needed)
# ------------------------------------------------------------------------------------------


def fake_model(root: Path, pooling: dict[str, object], modules: list[dict[str, str]] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    modules = modules or [
        {"idx": "0", "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": "1", "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": "2", "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (root / "config.json").write_text(json.dumps({"hidden_size": 8, "max_position_embeddings": 512}))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    (root / "tokenizer.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    ("pooling", "mode"),
    [
        ({"word_embedding_dimension": 8, "pooling_mode_mean_tokens": True}, "mean"),
        ({"word_embedding_dimension": 8, "pooling_mode_cls_token": True}, "cls"),
        ({"embedding_dimension": 8, "pooling_mode": "mean"}, "mean"),
        ({"embedding_dimension": 8, "pooling_mode": ["cls"]}, "cls"),
    ],
)
def test_layout_reads_both_pooling_formats(tmp_path, pooling, mode):
    layout = read_layout(fake_model(tmp_path / "m", pooling))
    assert (layout.pooling, layout.dim, layout.max_seq_length) == (mode, 8, 128)


@pytest.mark.parametrize(
    "pooling",
    [
        {"word_embedding_dimension": 8, "pooling_mode_max_tokens": True},
        {"word_embedding_dimension": 8, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
        {"embedding_dimension": 8, "pooling_mode": "lasttoken"},
        {"embedding_dimension": 8},
    ],
)
def test_unsupported_pooling_is_a_clear_error(tmp_path, pooling):
    with pytest.raises(StoreError, match="HRT_EMBEDDING_BACKEND=torch"):
        read_layout(fake_model(tmp_path / "m", pooling))


def test_unsupported_module_and_missing_folder_are_clear_errors(tmp_path):
    modules = [
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]
    with pytest.raises(StoreError, match="Dense"):
        read_layout(fake_model(tmp_path / "m", {"pooling_mode": "mean"}, modules))
    with pytest.raises(StoreError, match="local sentence-transformers folder"):
        OnnxEmbedder("sentence-transformers/all-MiniLM-L6-v2", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # nothing exported for a model it cannot run


@slow
def test_a_failed_export_is_a_clear_error_and_leaves_no_cache(tmp_path):
    model = fake_model(tmp_path / "m", {"pooling_mode": "mean"})  # no weights: the export fails
    with pytest.raises(StoreError, match=r"ONNX export of .* failed"):
        OnnxEmbedder(str(model), cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob(f"*/{ONNX_FILE}"))
    assert not list((tmp_path / "cache").glob("*/*.tmp"))


def test_backend_setting_defaults_to_onnx_and_is_in_the_fingerprint():
    assert Settings().embedding_backend == "onnx"
    assert Settings(embedding_backend="torch").fingerprint() != Settings().fingerprint()


def test_the_service_builds_the_embedder_in_the_settings_cache_dir(tmp_path, monkeypatch):
    """``HRT_CACHE_DIR`` reaches the ONNX embedder through the settings (never through the dev
    stack); unset, it is ``~/.cache/hrt``, outside ``config_hash`` either way."""
    from hrt.config import default_cache_dir
    from hrt.service import load_embedder

    built: list[Path | None] = []

    class Recorder:
        name, dim, model_id = "recorder", 3, "recorder"

        def __init__(self, model: str, cache_dir: Path | None = None, **_: object) -> None:
            built.append(cache_dir)

    monkeypatch.setattr(hrt.onnx_embedder, "OnnxEmbedder", Recorder)
    monkeypatch.setenv("HRT_CACHE_DIR", str(tmp_path / "c"))
    load_embedder(Settings(compute_threads=0))
    monkeypatch.delenv("HRT_CACHE_DIR")
    load_embedder(Settings(compute_threads=0))
    assert built == [tmp_path / "c" / "onnx", default_cache_dir() / "onnx"]
    assert default_cache_dir() == Path.home() / ".cache" / "hrt"
    assert Settings(cache_dir=tmp_path).fingerprint() == Settings().fingerprint()


# ------------------------------------------------------------------------------------------
# int8: the choice (no model needed)
# ------------------------------------------------------------------------------------------

X86_VNNI = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\nprocessor\t: 1\nflags\t\t: fpu avx512_vnni\n"
X86_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
ARM_DOT = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 atomics asimddp\n"


def test_int8_dot_product_detection_reads_the_cpu_flags():
    assert {"avx2", "avx512_vnni"} <= cpu_flags(X86_VNNI)
    assert has_int8_dot(X86_VNNI) and has_int8_dot(ARM_DOT)
    assert has_int8_dot("flags : avx2 avx_vnni\n")  # Alder Lake and later: AVX-VNNI without AVX-512
    assert not has_int8_dot(X86_AVX2) and not has_int8_dot("")


@pytest.mark.parametrize(
    ("mode", "cpuinfo", "expected"),
    [
        ("auto", X86_VNNI, True),
        ("auto", ARM_DOT, True),
        ("auto", X86_AVX2, False),  # no VNNI: int8 would be slower than fp32, so auto keeps fp32
        ("int8", X86_AVX2, True),  # forced
        ("off", X86_VNNI, False),
    ],
)
def test_the_quantize_setting_chooses(mode, cpuinfo, expected):
    assert use_int8(mode, cpuinfo) is expected


def test_auto_without_vnni_loads_the_fp32_model(monkeypatch, tmp_path):
    """The embedder asks :func:`use_int8` with this machine's flags: without VNNI, fp32."""
    monkeypatch.setattr(hrt.onnx_embedder, "cpu_flags", lambda cpuinfo=None: cpu_flags(X86_AVX2))
    loaded: list[bool] = []
    monkeypatch.setattr(OnnxEmbedder, "_load_or_export", lambda self, entry: loaded.append(self.int8))
    with pytest.raises(AttributeError):  # the fake session has no inputs: the choice was made before
        OnnxEmbedder(quantize="auto", cache_dir=tmp_path)
    monkeypatch.setattr(hrt.onnx_embedder, "cpu_flags", lambda cpuinfo=None: cpu_flags(X86_VNNI))
    with pytest.raises(AttributeError):
        OnnxEmbedder(quantize="auto", cache_dir=tmp_path)
    assert loaded == [False, True]
    with pytest.raises(StoreError, match="auto, int8, off"):
        use_int8("int4")


def test_quantize_setting_defaults_to_off_and_is_hashed_when_on(tmp_path, monkeypatch):
    from hrt.service import load_embedder

    assert Settings().embedding_quantize == "off"
    # off stays out of the hash (config_hash unchanged); int8 vectors are another model's
    assert Settings(embedding_quantize="off").fingerprint() == Settings().fingerprint()
    assert Settings(embedding_quantize="int8").fingerprint() != Settings().fingerprint()
    assert Settings(embedding_quantize="auto").fingerprint() != Settings().fingerprint()
    got: list[object] = []

    class Recorder:
        name, dim, model_id = "recorder", 3, "recorder"

        def __init__(self, model: str, quantize: str = "off", **_: object) -> None:
            got.append(quantize)

    monkeypatch.setattr(hrt.onnx_embedder, "OnnxEmbedder", Recorder)
    monkeypatch.setenv("HRT_EMBEDDING_QUANTIZE", "int8")
    load_embedder(Settings(compute_threads=0, cache_dir=tmp_path))
    assert got == ["int8"]


def _batcher(int8: bool, batch_size: int = 64) -> OnnxEmbedder:
    embedder = OnnxEmbedder.__new__(OnnxEmbedder)
    embedder.int8, embedder._batch_size = int8, batch_size
    return embedder


def test_batches_hold_a_token_budget_and_int8_runs_one_text_at_a_time(monkeypatch):
    monkeypatch.setattr(hrt.onnx_embedder, "BATCH_TOKENS", 1024)
    encoded = [[1] * n for n in (10, 300, 205, 205, 20, 205, 205, 205, 205, 205, 0)]
    batches = list(_batcher(False)._batches(encoded))
    # longest first; 300 tokens: 3 a batch, 205: 4 a batch, 20 and shorter: all the rest
    assert [[len(encoded[i]) for i in b] for b in batches] == [
        [300, 205, 205],
        [205, 205, 205, 205],
        [205, 20, 10, 0],
    ]
    assert sorted(i for b in batches for i in b) == list(range(len(encoded)))
    assert [len(b) for b in _batcher(False, batch_size=2)._batches([[1] * 5] * 5)] == [2, 2, 1]
    assert [len(b) for b in _batcher(False)._batches([[1] * 5000])] == [1]  # longer than the budget
    assert [len(b) for b in _batcher(True)._batches(encoded)] == [1] * len(encoded)


# ------------------------------------------------------------------------------------------
# the real bundled model
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hrt_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's ``$HRT_CACHE_DIR``: a fresh one, so the first embedder really exports."""
    return tmp_path_factory.mktemp("hrt-cache")


@pytest.fixture(scope="module")
def cache_dir(hrt_cache_dir: Path) -> Path:
    return hrt_cache_dir / "onnx"  # where the service's embedder looks by default


@pytest.fixture(scope="module")
def onnx_embedder(cache_dir: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(cache_dir=cache_dir)
    assert embedder.export_seconds is not None  # a fresh cache: exported once
    return embedder


@slow
def test_vectors_match_sentence_transformers(onnx_embedder):
    from hrt.embedder import SentenceTransformerEmbedder

    torch_embedder = SentenceTransformerEmbedder()
    assert onnx_embedder.dim == torch_embedder.dim == 384
    assert onnx_embedder.name == "all-MiniLM-L6-v2 (bundled, onnx)"
    ours, theirs = onnx_embedder.embed(TEXTS), torch_embedder.embed(TEXTS)
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert ours.dtype == np.float32 and ours.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= 0.9999, dict(zip(TEXTS, cosines.tolist(), strict=True))
    assert float(np.abs(ours - theirs).max()) < 1e-4  # measured: about 2e-7


@slow
def test_long_texts_are_truncated_at_max_seq_length(onnx_embedder):
    assert onnx_embedder.layout.max_seq_length == 256
    assert len(onnx_embedder._encode([LONG])[0]) == 256
    # everything past the 256th token is cut, so a different tail changes nothing
    a, b = onnx_embedder.embed([LONG, LONG + " and a completely different ending about rockets"])
    np.testing.assert_array_equal(a, b)


@slow
def test_output_is_deterministic_across_calls_and_batch_compositions(onnx_embedder, cache_dir):
    batch = onnx_embedder.embed(TEXTS)
    np.testing.assert_array_equal(batch, onnx_embedder.embed(TEXTS))
    alone = np.stack([onnx_embedder.embed([t])[0] for t in TEXTS])
    reordered = onnx_embedder.embed(TEXTS[::-1])[::-1]
    small_batches = OnnxEmbedder(cache_dir=cache_dir, batch_size=3).embed(TEXTS)
    # padding is masked out of attention (exact zeros) and pooling: measured max abs diff 0.0 here;
    # the bound leaves room for another CPU's kernels
    for other in (alone, reordered, small_batches):
        assert float(np.abs(other - batch).max()) <= 1e-6
    assert onnx_embedder.embed([]).shape == (0, 384)


@slow
def test_thread_count_leaves_vectors_bit_identical(onnx_embedder, cache_dir):
    # HRT_EMBEDDING_THREADS is a speed setting only: the same vectors for any count
    expected = onnx_embedder.embed(TEXTS)
    for threads in (1, 2, 0):
        np.testing.assert_array_equal(OnnxEmbedder(cache_dir=cache_dir, threads=threads).embed(TEXTS), expected)
    assert Settings().embedding_threads == 2
    # hence not in config_hash: tuning it does not mark responses as made under another configuration
    assert Settings(embedding_threads=1).fingerprint() == Settings().fingerprint()


def niceness_of_threads() -> list[int]:
    """The niceness of each thread of this process (Linux's /proc, field 19 of a task's stat)."""
    tasks = Path("/proc/self/task").iterdir()
    return [int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]) for t in tasks]


@slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="niceness is per thread on Linux only")
def test_writes_embed_at_a_lower_priority_with_the_same_vectors(onnx_embedder, cache_dir):
    """HRT_EMBEDDING_WRITE_NICE: passages are embedded in a thread of their own and ONNX Runtime's
    pool threads run at the added niceness (a request's work comes first where cores are short);
    the vectors are the same, and the setting is not in config_hash."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    want = min(19, base + 5)
    before = niceness_of_threads().count(want)
    niced = OnnxEmbedder(cache_dir=cache_dir, threads=2, write_nice=5)
    np.testing.assert_array_equal(niced.embed(TEXTS), onnx_embedder.embed(TEXTS))
    np.testing.assert_array_equal(niced.embed_queries(TEXTS), onnx_embedder.embed_queries(TEXTS))
    # the writes' thread and the session's one pool thread (two threads a call: the caller and one)
    assert niceness_of_threads().count(want) - before >= 2
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the caller's own thread is left as it was
    assert Settings(embedding_write_nice=0).fingerprint() == Settings().fingerprint()
    after = niceness_of_threads().count(want)
    OnnxEmbedder(cache_dir=cache_dir, threads=2, write_nice=0).embed(TEXTS[:1])  # 0: no thread lowered
    assert niceness_of_threads().count(want) == after


@slow
def test_concurrent_calls_agree(onnx_embedder):
    expected = onnx_embedder.embed(TEXTS)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                results.append(onnx_embedder.embed(TEXTS))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 12
    for got in results:
        np.testing.assert_array_equal(got, expected)


@slow
def test_export_is_cached_and_a_damaged_cache_is_exported_again(onnx_embedder, cache_dir):
    path = onnx_embedder.onnx_path
    assert path.parent.parent == cache_dir and path.name == ONNX_FILE
    expected = onnx_embedder.embed(TEXTS[:5])
    first_mtime = path.stat().st_mtime_ns

    again = OnnxEmbedder(cache_dir=cache_dir)
    assert again.export_seconds is None and path.stat().st_mtime_ns == first_mtime
    np.testing.assert_array_equal(again.embed(TEXTS[:5]), expected)

    # partial: cut in half (what a crash midway would leave without the temp file and rename)
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 2)
    repaired = OnnxEmbedder(cache_dir=cache_dir)
    assert repaired.export_seconds is not None
    np.testing.assert_array_equal(repaired.embed(TEXTS[:5]), expected)

    # corrupt: same size, garbage at the start (the size check passes, loading fails)
    with path.open("r+b") as fh:
        fh.write(b"\0" * 4096)
    repaired = OnnxEmbedder(cache_dir=cache_dir)
    assert repaired.export_seconds is not None
    np.testing.assert_array_equal(repaired.embed(TEXTS[:5]), expected)
    meta = json.loads((path.parent / META_FILE).read_text())
    assert meta["onnx_bytes"] == path.stat().st_size and meta["max_abs_diff_vs_torch"] < 1e-3
    assert not list(path.parent.glob("*.tmp"))  # no temp files left behind


@slow
def test_the_onnx_backend_never_imports_torch(onnx_embedder, hrt_cache_dir, tmp_path):
    """A whole service (and the app and CLI modules) built in a fresh process with the default
    backend: torch, transformers and sentence-transformers stay unimported."""
    code = (
        "import json, sys\n"
        "from hrt.config import Settings\n"
        "from hrt.service import HRTService, load_embedder\n"
        "import hrt.api.app, hrt.cli\n"
        f"svc = HRTService(Settings(db_path={str(tmp_path / 'hrt.db')!r}))\n"
        "vec = svc.embedder.embed(['hello world'])\n"
        "mods = ('torch', 'transformers', 'sentence_transformers')\n"
        "print(json.dumps({'name': svc.embedder.name, 'dim': int(vec.shape[1]),\n"
        "                  'imported': [m for m in mods if m in sys.modules]}))\n"
    )
    env = {
        **os.environ,
        "HRT_CACHE_DIR": str(hrt_cache_dir),
        "HRT_EMBEDDING_BACKEND": "onnx",
        "HRT_EMBEDDING_MODEL": "bundled",
    }
    mtime = onnx_embedder.onnx_path.stat().st_mtime_ns
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"name": "all-MiniLM-L6-v2 (bundled, onnx)", "dim": 384, "imported": []}
    assert onnx_embedder.onnx_path.stat().st_mtime_ns == mtime  # it reused this module's export


@slow
def test_token_budget_batches_leave_fp32_vectors_bit_identical(onnx_embedder, monkeypatch):
    texts = [*TEXTS, *(f"{t} {LONG[:400]}" for t in TEXTS)]
    expected = onnx_embedder.embed(texts)
    monkeypatch.setattr(hrt.onnx_embedder, "BATCH_TOKENS", 10**9)  # batch_size (64) alone: the old batches
    np.testing.assert_array_equal(onnx_embedder.embed(texts), expected)


@pytest.fixture(scope="module")
def int8_embedder(onnx_embedder: OnnxEmbedder, cache_dir: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(cache_dir=cache_dir, quantize="int8", threads=2)
    assert embedder.quantize_seconds is not None and embedder.export_seconds is None  # from the fp32 export
    return embedder


@slow
def test_int8_is_cached_and_loads_offline(int8_embedder, cache_dir, monkeypatch):
    path = int8_embedder.onnx_path
    assert path.name == INT8_FILE and path.parent.parent == cache_dir
    assert int8_embedder.name == "all-MiniLM-L6-v2 (bundled, onnx int8)"
    meta = json.loads((path.parent / INT8_META_FILE).read_text())
    assert meta["onnx_bytes"] == path.stat().st_size and meta["recipe"]["per_channel"] is True
    expected = int8_embedder.embed(TEXTS[:5])

    def no_child(*_: object, **__: object) -> float:
        raise AssertionError("no export or quantisation once cached")

    # a cached int8 model needs neither torch nor onnxruntime.quantization, only the files
    monkeypatch.setattr(hrt.onnx_embedder, "_run_child", no_child)
    again = OnnxEmbedder(cache_dir=cache_dir, quantize="int8")
    assert again.quantize_seconds is None
    np.testing.assert_array_equal(again.embed(TEXTS[:5]), expected)
    monkeypatch.undo()

    # damaged (cut short): quantised again from the fp32 file, to the same vectors
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 2)
    repaired = OnnxEmbedder(cache_dir=cache_dir, quantize="int8")
    assert repaired.quantize_seconds is not None and repaired.export_seconds is None
    np.testing.assert_array_equal(repaired.embed(TEXTS[:5]), expected)
    assert not list(path.parent.glob("*.tmp"))


@slow
def test_int8_vectors_are_deterministic_in_any_batch(int8_embedder, onnx_embedder):
    """Dynamic quantisation scales activations per batch: run one text at a time, so a text's
    vector is the same whatever else the call holds (bit for bit)."""
    batch = int8_embedder.embed(TEXTS)
    np.testing.assert_array_equal(batch, int8_embedder.embed(TEXTS))
    np.testing.assert_array_equal(np.stack([int8_embedder.embed([t])[0] for t in TEXTS]), batch)
    np.testing.assert_array_equal(int8_embedder.embed(TEXTS[::-1])[::-1], batch)
    np.testing.assert_array_equal(int8_embedder.embed([LONG, *TEXTS, "x " * 200])[1:-1], batch)
    for threads in (1, 0):
        np.testing.assert_array_equal(
            OnnxEmbedder(quantize="int8", threads=threads, cache_dir=int8_embedder.onnx_path.parent.parent).embed(
                TEXTS
            ),
            batch,
        )
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    cosines = (batch * onnx_embedder.embed(TEXTS)).sum(axis=1)
    assert cosines.min() >= 0.95, dict(zip(TEXTS, cosines.tolist(), strict=True))  # measured: 0.98 and up
