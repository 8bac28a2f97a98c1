"""Ingest: parse and validate records, embed entity texts in batches, write one batch atomically.

The line format (``hrt ingest FILE.jsonl``, ``POST /v1/ingest``) is one JSON object per record with
``kind`` (memory_unit, concept, artifact, relation, preference) and ``user_id``; ``"op":
"delete"`` removes by key. See docs/api.md, "Ingest format". Writes are idempotent by id. Every
record of a batch is validated before anything is written; the first bad record is reported with
its position and field, and nothing of that batch is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError

from hrt.embedder import Embedder
from hrt.errors import InvalidInput, MalformedBody, PayloadTooLarge
from hrt.jsonbounds import DECODER, RECORD, Cursor, decode_text, field_name, schema_errors, unknown_member
from hrt.records import (
    Artifact,
    Concept,
    Deletion,
    Entity,
    MemoryUnit,
    Preference,
    Relation,
    entity_text,
    passage_texts,
    supersession_relations,
    valid_id,
)
from hrt.stores.base import Vector, WriteBatch

Record = MemoryUnit | Concept | Artifact | Relation | Preference | Deletion

RECORD_MODELS: dict[str, type[BaseModel]] = {
    "memory_unit": MemoryUnit,
    "concept": Concept,
    "artifact": Artifact,
    "relation": Relation,
    "preference": Preference,
}


def _first_error(exc: ValidationError) -> tuple[str, str]:
    [(loc, msg)] = schema_errors(exc.errors()[:1])
    return field_name(loc) if loc else "record", msg


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
        # strictly, from JSON: JSON's types as declared (lax validation reads true as 1.0), while
        # date-times and enumerations still come as strings
        record = model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise InvalidInput(f"{where}: field '{loc}': {msg}", field=loc) from exc
    assert isinstance(record, MemoryUnit | Concept | Artifact | Relation | Preference | Deletion)
    return record


def decode_json(raw: str | bytes, where: str) -> Any:
    """Strict JSON (:data:`hrt.jsonbounds.DECODER`): UTF-8, no NaN or Infinity, every number
    finite, nesting within Python's recursion limit. Anything else is :class:`MalformedBody`
    naming ``where``. Whole and unbounded: for files the operator gives (``hrt ingest``); request
    bodies are read with :class:`hrt.jsonbounds.Cursor`."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedBody(f"{where}: not UTF-8 (byte {exc.start})", field=where) from exc
    try:
        return DECODER.decode(raw)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})", field=where) from exc
    except ValueError as exc:
        raise MalformedBody(f"{where}: not valid JSON ({exc})", field=where) from exc
    except RecursionError as exc:
        raise MalformedBody(f"{where}: not valid JSON (nested too deeply)", field=where) from exc


# a request's invalid records reported at most: parsing stops at the last of them
MAX_REPORTED_ERRORS = 100


def parse_ingest_body(raw: bytes, ctype: str, max_records: int, users: set[str] | None = None) -> list[Record]:
    """The records of an ``/v1/ingest`` body: NDJSON (one record per line) or ``{"records": [...]}``.

    Each record is measured in the text before it is decoded (:mod:`hrt.jsonbounds`: its size,
    nesting and values bounded, and the values of the whole body), then validated, so memory holds
    validated records and one bounded record being read, never a parsed tree of the whole body; a
    member beside ``records`` is refused unread. More than ``max_records`` is
    :class:`PayloadTooLarge` (field ``records``) as soon as the next record starts, and parsing
    stops at the ``MAX_REPORTED_ERRORS``-th invalid record. Invalid records are one
    :class:`InvalidInput`: the first names its field, every one (up to the bound) is in its ``errors``.
    ``users`` gets the user id of every record read, valid or not, for the audit line of a refusal."""
    text = decode_text(raw)
    ndjson = ctype in ("application/x-ndjson", "application/jsonl")
    values = _ndjson_values(Cursor(text)) if ndjson else _records_array(Cursor(text))
    records: list[Record] = []
    errors: list[tuple[str, str]] = []
    for n, (where, value) in enumerate(values):
        if n >= max_records:
            raise PayloadTooLarge(
                f"more than {max_records} records in one request (HRT_MAX_INGEST_RECORDS): send them in batches",
                field="records",
            )
        user = value.get("user_id") if isinstance(value, dict) else None
        if users is not None and isinstance(user, str) and valid_id(user):
            users.add(user)
        try:
            records.append(parse_record(value, where))
        except InvalidInput as exc:
            errors.append((f"{where}.{exc.field}", exc.message))
            if len(errors) >= MAX_REPORTED_ERRORS:
                break
    if errors:
        more = " (parsing stopped there)" if len(errors) >= MAX_REPORTED_ERRORS else ""
        raise InvalidInput(f"{errors[0][1]}; {len(errors)} invalid record(s){more}", field=errors[0][0], errors=errors)
    return records


def _ndjson_values(cur: Cursor) -> Iterator[tuple[str, Any]]:
    text, n = cur.text, 0
    while cur.i < len(text):
        end = text.find("\n", cur.i)
        end = len(text) if end < 0 else end
        n += 1
        if cur.skip().i < end:
            where = f"line {n}"
            value = cur.value(RECORD, where, stop=end, field=where)
            if cur.skip().i < end:
                raise MalformedBody(f"{where}: not valid JSON (extra data after the record)", field=where)
            yield where, value
        cur.i = end + 1


_NOT_RECORDS = 'the body must be {"records": [...]}'


def _records_array(cur: Cursor) -> Iterator[tuple[str, Any]]:
    """The elements of ``{"records": [...]}`` one at a time; any other member is refused unread."""
    if not cur.skip().at("{"):
        cur.value(RECORD, "body")  # a body that is not JSON at all is a 400
        raise InvalidInput(_NOT_RECORDS, field="records")
    seen = False
    for name, n in cur.members():
        if name != "records":
            raise unknown_member(n, "records")
        if seen:
            raise InvalidInput("records is given twice", field="records")
        seen = True
        if not cur.skip().at("["):
            raise InvalidInput(_NOT_RECORDS, field="records")
        for i, value in cur.elements(RECORD, "records"):
            yield f"records[{i}]", value
    if not seen:
        raise InvalidInput(_NOT_RECORDS, field="records")


def parse_jsonl(lines: Iterable[str]) -> list[Record]:
    out: list[Record] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        out.append(parse_record(decode_json(line, f"line {n}"), f"line {n}"))
    return out


def ingest_body_schema(ref_template: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON Schema of ``POST /v1/ingest``'s JSON body, and the definitions it refers to."""
    records = TypeAdapter(list[MemoryUnit | Concept | Artifact | Relation | Preference | Deletion])
    schema = records.json_schema(ref_template=ref_template)
    defs = schema.pop("$defs", {})
    body = {"type": "object", "properties": {"records": schema}, "required": ["records"]}
    return body, defs


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
    # an entity's ``supersedes`` is written as SUPERSEDES relations, after the entities; a relation
    # of the same key given in the batch wins over the implied one (an export writes one when it
    # was rewritten since: hrt.export), as it would in a later batch
    batch.relations = [r for e in batch.entities for r in supersession_relations(e)] + batch.relations
    for i in range(0, len(batch.entities), chunk):
        part = batch.entities[i : i + chunk]
        embed_entities(part, embedder, batch.vectors, batch.passages)
        if progress is not None:
            progress(len(part))
    return batch


def embed_entities(
    entities: Sequence[Entity],
    embedder: Embedder,
    vectors: dict[tuple[str, str], Vector],
    passages: dict[tuple[str, str], Vector],
) -> None:
    """Embed each entity's text and its passages (:func:`hrt.records.passage_texts`) in one call,
    into ``vectors`` and ``passages`` by (user_id, id); an entity without passages gets none."""
    texts_of = [passage_texts(e) for e in entities]
    texts = [entity_text(e) for e in entities]
    for ps in texts_of:
        texts.extend(ps)
    out = embedder.embed(texts)
    at = len(entities)
    for e, v, ps in zip(entities, out[: len(entities)], texts_of, strict=True):
        vectors[(e.user_id, e.id)] = v
        if ps:
            passages[(e.user_id, e.id)] = np.asarray(out[at : at + len(ps)], dtype=np.float32)
            at += len(ps)
