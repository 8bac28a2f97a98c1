"""How an HRT document maps to a Weaviate object: the tenant of a user (:func:`tenant_name`), the
object id (:func:`object_uuid`), the properties stored for a document (:func:`_stored_form`) and
their values read back from a gRPC reply. The schemes are described in
:mod:`hrt.stores.weaviate.vectors`."""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from hrt.records import KIND_OF, Kind
from hrt.stores.base import Vector, VectorDoc

NO_TS = -1.0e18  # "no timestamp": before any real date, so `ts <= not_after` always admits it
WRITE_CHUNK = 500  # objects per gRPC batch request; ids per delete request
_NAMESPACE = uuid.UUID("5f0b6f5e-2d1c-5a57-9a43-6872742d7665")  # fixed forever: object ids derive from it
_RAW_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _kind(value: Any) -> Kind:
    """``Kind(value)`` by a dict lookup first (the enum constructor is slow on the hot path)."""
    found = KIND_OF.get(value) if isinstance(value, str) else None
    return found if found is not None else Kind(value)


def tenant_name(user_id: str) -> str:
    """The Weaviate tenant of one HRT user (see the module docstring for the scheme)."""
    if _RAW_TENANT.fullmatch(user_id):
        return user_id
    slug = re.sub(r"[^A-Za-z0-9]+", "-", user_id).strip("-")[:29]
    return f"_{slug}_{hashlib.sha256(user_id.encode()).hexdigest()[:32]}"


def object_uuid(user_id: str, ident: str) -> uuid.UUID:
    """Deterministic object id, so that upserts are idempotent (unit separator avoids ambiguity)."""
    return uuid.uuid5(_NAMESPACE, f"{user_id}\x1f{ident}")


def _cosine(a: Vector, b: Vector | Sequence[float], a_norm: float | None = None) -> float:
    """Cosine of ``a`` and a stored vector (0.0 when it is missing or of another dimension);
    ``a_norm``: ``a``'s norm, when the caller computed it once for many."""
    v = np.asarray(b, dtype=np.float32)
    if v.shape != a.shape:
        return 0.0
    denom = (float(np.linalg.norm(a)) if a_norm is None else a_norm) * float(np.linalg.norm(v))
    return float(np.dot(a, v)) / denom if denom > 0.0 else 0.0


def _stored_form(doc: VectorDoc) -> tuple[Any, ...]:
    """What Weaviate stores of a doc, as :meth:`~hrt.stores.weaviate.reads.WeaviateReads._stored` reads it back."""
    return (
        Kind(doc.kind).value,
        doc.text,
        NO_TS if doc.ts is None else float(doc.ts),
        np.asarray(doc.vector, dtype="<f4").tobytes(),
        tuple(doc.tags),
        doc.source_agent_id or "",
        _float_or_none(doc.valid_from),
        _float_or_none(doc.valid_to),
        _blob(doc.passages),
    )


def _blob(passages: Vector | None) -> str:
    """A doc's passage vectors as the BLOB property holds them: base64 of the (k, dim) float32
    little-endian rows; empty for none."""
    if passages is None or not len(passages):
        return ""
    return base64.b64encode(np.asarray(passages, dtype="<f4").tobytes()).decode("ascii")


def _unblob(text: str, dim: int) -> Vector | None:
    """:func:`_blob` read back as (k, ``dim``) rows; None for none, or for bytes that are not
    rows of ``dim``."""
    raw = base64.b64decode(text) if text else b""
    if dim <= 0 or not raw or len(raw) % (4 * dim):
        return None
    return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(-1, dim)


def _stored_blob(fields: Any) -> str:
    """The passages property of a reply's fields in :func:`_blob`'s form ("" when null or absent:
    an object written before the property existed)."""
    if "passages" not in fields:
        return ""
    value = fields["passages"]
    return value.blob_value if value.WhichOneof("kind") == "blob_value" else ""


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _number(fields: Any, prop: str) -> float | None:
    """A NUMBER property of a reply's fields: None when null, or absent (an object written before
    the property existed)."""
    if prop not in fields:
        return None
    value = fields[prop]
    return float(value.number_value) if value.WhichOneof("kind") == "number_value" else None
