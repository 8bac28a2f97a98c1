"""Ingest: parse and validate records, embed entity texts in batches, write one batch atomically.

The line format (``hrt ingest FILE.jsonl``, ``POST /v1/ingest``) is one JSON object per record with
``kind`` (memory_unit, concept, artifact, relation, preference) and ``user_id``; ``"op":
"delete"`` removes by key. See docs/api.md, "Ingest format". Writes are idempotent by id. Every
record of a batch is validated before anything is written; the first bad record is reported with
its position and field, and nothing of that batch is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError

from hrt.embedder import Embedder
from hrt.errors import InvalidInput, MalformedBody, PayloadTooLarge
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
        # strictly, from JSON: JSON's types as declared (lax validation reads true as 1.0), while
        # date-times and enumerations still come as strings
        record = model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise InvalidInput(f"{where}: field '{loc}': {msg}", field=loc) from exc
    assert isinstance(record, MemoryUnit | Concept | Artifact | Relation | Preference | Deletion)
    return record


def _not_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def decode_json(raw: str | bytes, where: str) -> Any:
    """Strict JSON: UTF-8, no NaN or Infinity, every number finite (Python's json takes ``1e999``
    as infinity, which SQLite stores as null and PostgreSQL refuses), nesting within Python's
    recursion limit. Anything else is :class:`MalformedBody` naming ``where``."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedBody(f"{where}: not UTF-8 (byte {exc.start})", field=where) from exc
    try:
        return json.loads(raw, parse_constant=_not_json_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})", field=where) from exc
    except ValueError as exc:
        raise MalformedBody(f"{where}: not valid JSON ({exc})", field=where) from exc
    except RecursionError as exc:
        raise MalformedBody(f"{where}: not valid JSON (nested too deeply)", field=where) from exc


# a request's invalid records reported at most: parsing stops at the last of them
MAX_REPORTED_ERRORS = 100
_DECODER = json.JSONDecoder(parse_constant=_not_json_constant, parse_float=_finite)
_WS = " \t\n\r"


def parse_ingest_body(raw: bytes, ctype: str, max_records: int) -> list[Record]:
    """The records of an ``/v1/ingest`` body: NDJSON (one record per line) or ``{"records": [...]}``.

    Decoded one record at a time and validated as it comes, so memory holds validated records, never
    a parsed tree of the whole body; more than ``max_records`` is :class:`PayloadTooLarge` (field
    ``records``) as soon as the next record starts, and parsing stops at the ``MAX_REPORTED_ERRORS``-th
    invalid record. Invalid records are one :class:`InvalidInput`: the first names its field, every
    one (up to the bound) is in its ``errors``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"the body is not UTF-8 (byte {exc.start})", field="body") from exc
    ndjson = ctype in ("application/x-ndjson", "application/jsonl")
    values = _ndjson_values(text) if ndjson else _records_array(text)
    records: list[Record] = []
    errors: list[tuple[str, str]] = []
    for n, (where, value) in enumerate(values):
        if n >= max_records:
            raise PayloadTooLarge(
                f"more than {max_records} records in one request (HRT_MAX_INGEST_RECORDS): send them in batches",
                field="records",
            )
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


def _ndjson_values(text: str) -> Iterator[tuple[str, Any]]:
    start, n = 0, 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        n += 1
        line = text[start:end]
        start = end + 1
        if line.strip():
            yield f"line {n}", decode_json(line, f"line {n}")


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _decode_at(text: str, i: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"body: not valid JSON ({exc.msg} at character {exc.pos})", field="body") from exc
    except ValueError as exc:
        raise MalformedBody(f"body: not valid JSON ({exc})", field="body") from exc
    except RecursionError as exc:
        raise MalformedBody("body: not valid JSON (nested too deeply)", field="body") from exc


def _expect(text: str, i: int, char: str) -> int:
    i = _skip(text, i)
    if i >= len(text) or text[i] != char:
        raise MalformedBody(f"body: not valid JSON (expected {char!r} at character {i})", field="body")
    return i + 1


_NOT_RECORDS = 'the body must be {"records": [...]}'


def _records_array(text: str) -> Iterator[tuple[str, Any]]:
    """The elements of ``{"records": [...]}`` one at a time (other members are read and ignored)."""
    i = _skip(text, 0)
    if i >= len(text) or text[i] != "{":
        _decode_at(text, i)  # a body that is not JSON at all is a 400
        raise InvalidInput(_NOT_RECORDS, field="records")
    i = _skip(text, i + 1)
    seen = False
    while not text.startswith("}", i):
        key, i = _decode_at(text, i)
        if not isinstance(key, str):
            raise MalformedBody(f"body: not valid JSON (a member name at character {i})", field="body")
        i = _skip(text, _expect(text, i, ":"))
        if key == "records" and not seen:
            seen = True
            if not text.startswith("[", i):
                raise InvalidInput(_NOT_RECORDS, field="records")
            i = yield from _array_elements(text, i + 1)
        else:
            _, i = _decode_at(text, i)
        i = _skip(text, i)
        if not text.startswith("}", i):
            i = _skip(text, _expect(text, i, ","))
            if text.startswith("}", i):
                raise MalformedBody(f"body: not valid JSON (a trailing comma at character {i})", field="body")
    if _skip(text, i + 1) != len(text):
        raise MalformedBody("body: not valid JSON (extra data after the object)", field="body")
    if not seen:
        raise InvalidInput(_NOT_RECORDS, field="records")


def _array_elements(text: str, i: int) -> Generator[tuple[str, Any], None, int]:
    """Yields the array's elements from just after its ``[``; returns the index after its ``]``."""
    i = _skip(text, i)
    if text.startswith("]", i):
        return i + 1
    n = 0
    while True:
        value, i = _decode_at(text, _skip(text, i))
        yield f"records[{n}]", value
        n += 1
        i = _skip(text, i)
        if text.startswith("]", i):
            return i + 1
        i = _expect(text, i, ",")


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
