"""Ingest: parse and validate records, embed entity texts in batches, write one batch atomically.

The line format (``hrt ingest FILE.jsonl``, ``POST /v1/ingest``) is one JSON object per record with
``kind`` (memory_unit, concept, artifact, relation, preference) and ``user_id``; ``"op":
"delete"`` removes by key. See the README's "Ingest format". Writes are idempotent by id. Every
record of a batch is validated before anything is written; the first bad record is reported with
its position and field, and nothing of that batch is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from hrt.embedder import Embedder
from hrt.errors import InvalidInput
from hrt.records import (
    Artifact,
    Concept,
    Deletion,
    Entity,
    MemoryUnit,
    Preference,
    Relation,
    entity_text,
)
from hrt.stores.base import WriteBatch

Record = MemoryUnit | Concept | Artifact | Relation | Preference | Deletion

RECORD_MODELS: dict[str, type[BaseModel]] = {
    "memory_unit": MemoryUnit,
    "concept": Concept,
    "artifact": Artifact,
    "relation": Relation,
    "preference": Preference,
}


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "record"
    return loc, err["msg"]


def parse_record(obj: Any, where: str) -> Record:
    """One record from a decoded JSON value; ``where`` names it in errors (``line 3``)."""
    if not isinstance(obj, dict):
        raise InvalidInput(f"{where}: a record must be a JSON object", field="record")
    op = obj.get("op", "upsert")
    kind = obj.get("kind")
    if op not in ("upsert", "delete"):
        raise InvalidInput(f"{where}: field 'op' must be 'upsert' or 'delete'", field="op")
    if not isinstance(kind, str) or kind not in RECORD_MODELS:
        raise InvalidInput(f"{where}: field 'kind' must be one of {sorted(RECORD_MODELS)}", field="kind")
    model: type[BaseModel] = Deletion if op == "delete" else RECORD_MODELS[kind]
    data = obj if op == "delete" else {k: v for k, v in obj.items() if k != "op"}
    try:
        record = model.model_validate(data)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise InvalidInput(f"{where}: field '{loc}': {msg}", field=loc) from exc
    assert isinstance(record, MemoryUnit | Concept | Artifact | Relation | Preference | Deletion)
    return record


def parse_jsonl(lines: Iterable[str]) -> list[Record]:
    out: list[Record] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"line {n}: not valid JSON ({exc.msg} at column {exc.colno})", field="line") from exc
        out.append(parse_record(obj, f"line {n}"))
    return out


def build_batch(
    records: Sequence[Record],
    embedder: Embedder,
    chunk: int = 256,
    progress: Callable[[int], None] | None = None,
) -> WriteBatch:
    """Group records into one write batch and embed every entity's text (``chunk`` at a time)."""
    batch = WriteBatch()
    for r in records:
        if isinstance(r, Deletion):
            batch.deletions.append(r)
        elif isinstance(r, Relation):
            batch.relations.append(r)
        elif isinstance(r, Preference):
            batch.preferences.append(r)
        else:
            batch.entities.append(r)
    # the last write of an entity in a batch wins, as it would across batches
    last: dict[tuple[str, str], Entity] = {}
    for e in batch.entities:
        last[(e.user_id, e.id)] = e
    batch.entities = list(last.values())
    for i in range(0, len(batch.entities), chunk):
        part = batch.entities[i : i + chunk]
        vectors = embedder.embed([entity_text(e) for e in part])
        for e, v in zip(part, vectors, strict=True):
            batch.vectors[(e.user_id, e.id)] = v
        if progress is not None:
            progress(len(part))
    return batch
