"""JSON measured before it is built: the request bodies of ``POST /v1/ingest`` and ``POST
/v1/conversations`` are walked in their text, and each value (one record, one message, one member)
is measured first, its characters, nesting, number of values and longest string, then decoded
alone. A body of nested junk, one huge record or an unknown member costs its text and a bounded
tree, never a tree of the whole body: Python's ``json`` builds every value before anything can
look at it (16 MiB of ``[[],[],...]`` decoded whole peaked at over 1 GB).

What a value may hold is a :class:`Bounds`; what a whole body may hold, a :class:`Budget` of JSON
values. Over either is :class:`PayloadTooLarge` (413) naming where (``records[3]``,
``messages[0]``, ``body``); text that is not JSON is :class:`MalformedBody` (400). Errors name
positions, never a member name or value the caller sent; :func:`schema_errors` names a model's
validation errors the same way, for every front door (the HTTP API, the MCP tools, ingest).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from hrt.errors import InvalidInput, MalformedBody, PayloadTooLarge

MiB = 1 << 20


@dataclass(frozen=True)
class Bounds:
    """What one value may hold: ``chars`` of JSON text (whitespace and escapes included), ``depth``
    levels of arrays and objects, ``values`` (strings, member names, arrays, objects and the items
    after a comma), and one string or number of at most ``string`` characters of text."""

    chars: int
    depth: int
    values: int
    string: int


# one ingest record or one conversation message. A valid one is far inside: a text field holds at
# most 100,000 characters (600,000 as \u escapes), metadata 65,536 characters as JSON, 16 levels
# deep (deeper is refused by its own check, 422 naming it, within these bounds), the rest is short
RECORD = Bounds(chars=2 * MiB, depth=64, values=50_000, string=2 * MiB)
# a member beside the list (a conversation's user_id, session_id, ...): short strings and numbers
SCALAR = Bounds(chars=4096, depth=4, values=64, string=4096)
# the JSON values of one whole body: what its validated records keep is proportional to it
BODY_VALUES = 1_000_000
# a member name longer than this is no field of any request
MAX_NAME_CHARS = 256

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# what nests and what counts: strings (matched whole, so brackets inside them are text), brackets, commas
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')
_SCALAR = re.compile(r'[^\s\[\]{},:"]*')
_WS = re.compile(r"[ \t\n\r]*")
# every escape, a surrogate pair matched whole first: a \uD800-\uDFFF matched alone is a lone surrogate
_ESCAPE = re.compile(
    r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2}|.)", re.S
)


def unstorable(text: str, i: int, end: int) -> tuple[int, str] | None:
    """The index of the first escape in ``text[i:end]`` that no store keeps, with what it is, or
    None. A lone surrogate (``\\ud800`` without its pair): JSON lets one through, but it is no
    Unicode text (UTF-8 cannot encode it), so it is refused as a body that is not UTF-8 is. The
    character U+0000: PostgreSQL's text and JSON refuse it (a 500 from the services deployment, a
    value SQLite keeps), so every deployment refuses it alike."""
    if text.find("\\u", i, end) < 0:
        return None
    for m in _ESCAPE.finditer(text, i, end):
        if m.end() - m.start() == 6 and text[m.start() + 1] == "u":
            return m.start(), "a lone surrogate escape"
        if text.startswith("\\u0000", m.start()):
            return m.start(), "the character U+0000"
    return None


def _not_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


# strict JSON: no NaN or Infinity, every number finite (Python's json takes 1e999 as infinity,
# which SQLite stores as null and PostgreSQL refuses)
DECODER = json.JSONDecoder(parse_constant=_not_json_constant, parse_float=_finite)


class Budget:
    """The JSON values a whole body may still hold (:data:`BODY_VALUES`)."""

    def __init__(self, values: int = BODY_VALUES) -> None:
        self.total = values
        self.left = values

    def spend(self, n: int, where: str) -> None:
        self.left -= n
        if self.left < 0:
            raise PayloadTooLarge(
                f"{where}: the body holds more than {self.total} JSON values; send it in smaller requests",
                field=where,
            )


def _over(where: str, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"{where}: {what}", field=where)


def _malformed(where: str, what: str, field: str = "body") -> MalformedBody:
    return MalformedBody(f"{where}: not valid JSON ({what})", field=field)


def measure(text: str, i: int, stop: int, bounds: Bounds, where: str, field: str = "body") -> tuple[int, int]:
    """(the index just after the JSON value at ``text[i]``, how many values it holds), found in the
    text alone, looking no further than ``stop``; over ``bounds`` is :class:`PayloadTooLarge`.
    Only valid JSON is measured exactly; what is not is refused when it is decoded (400 naming
    ``field``, as nesting deeper than the bounds is)."""
    limit = min(stop, i + bounds.chars)
    first = text[i] if i < stop else ""
    if first not in ("[", "{"):
        m = _STRING.match(text, i, stop) if first == '"' else _SCALAR.match(text, i, stop)
        end = m.end() if m else i + 1
        if end - i > bounds.string:
            raise _over(where, f"a string or number over {bounds.string} characters")
        return end, 1
    depth = values = 0
    for m in _TOKEN.finditer(text, i, limit):
        c = text[m.start()]
        if c in "[{":
            depth += 1
            if depth > bounds.depth:  # as json's own recursion limit was: not JSON this server reads
                raise _malformed(where, f"nested deeper than {bounds.depth} levels", field)
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return m.end(), values + 1
            continue
        elif c == '"' and m.end() - m.start() > bounds.string:
            raise _over(where, f"a string over {bounds.string} characters")
        values += 1
        if values > bounds.values:
            raise _over(where, f"more than {bounds.values} JSON values")
    if limit < stop:
        raise _over(where, f"over {bounds.chars} characters of JSON")
    raise _malformed(where, "it ends before its value does", field)


class Cursor:
    """A position in a body's text, read one bounded value at a time."""

    def __init__(self, text: str, budget: Budget | None = None) -> None:
        self.text = text
        self.i = 0
        self.budget = budget if budget is not None else Budget()
        self.last = (0, 0)  # the span of the last value read (:meth:`value`)

    def skip(self) -> Cursor:
        m = _WS.match(self.text, self.i)
        self.i = m.end() if m else self.i
        return self

    def at(self, char: str) -> bool:
        return self.text.startswith(char, self.i)

    def expect(self, char: str) -> None:
        if not self.skip().at(char):
            raise _malformed("body", f"expected {char!r} at character {self.i}")
        self.i += 1

    def value(self, bounds: Bounds, where: str, stop: int | None = None, field: str = "body") -> Any:
        """The value at the cursor, measured and then decoded; the cursor moves past it. Over
        ``bounds`` is a 413 naming ``where``; not JSON, a 400 naming ``field``."""
        stop = len(self.text) if stop is None else stop
        end, values = measure(self.text, self.skip().i, stop, bounds, where, field)
        self.budget.spend(values, where)
        bad = unstorable(self.text, self.i, end)
        if bad is not None:
            raise MalformedBody(f"{where}: not storable text ({bad[1]} at character {bad[0]})", field=field)
        try:
            value, used = DECODER.raw_decode(self.text[self.i : end])
        except json.JSONDecodeError as exc:
            raise _malformed(where, f"{exc.msg} at character {self.i + exc.pos}", field) from exc
        except ValueError as exc:
            raise _malformed(where, str(exc), field) from exc
        except RecursionError as exc:  # below the bounds' depth this cannot happen; belt and braces
            raise _malformed(where, "nested too deeply", field) from exc
        if used != end - self.i:
            raise _malformed(where, f"unexpected data at character {self.i + used}", field)
        self.last = (self.i, end)
        self.i = end
        return value

    def name(self, n: int) -> str | None:
        """The member name at the cursor (the ``n``-th member, 0-based), or None when it is too
        long to be any field's; the cursor moves past it and its colon."""
        self.skip()
        m = _STRING.match(self.text, self.i)
        if m is None:
            raise _malformed("body", f"a member name at character {self.i}")
        self.i = m.end()
        name = None
        if m.end() - m.start() <= MAX_NAME_CHARS:
            name = DECODER.decode(m.group())
        self.expect(":")
        return name if isinstance(name, str) else None

    def members(self) -> Iterator[tuple[str | None, int]]:
        """(name, position) of each member of the object at the cursor, which is its whole text.
        Each member's value must be read (:meth:`value`, or another walk) before the next is asked for."""
        self.expect("{")
        n = 0
        if not self.skip().at("}"):
            while True:
                yield self.name(n), n
                if self.skip().at("}"):
                    break
                self.expect(",")
                n += 1
        self.i += 1
        if self.skip().i != len(self.text):
            raise _malformed("body", "extra data after the object")

    def elements(self, bounds: Bounds, label: str) -> Iterator[tuple[int, Any]]:
        """(n, value) of each element of the array at the cursor, ``label[n]`` naming it in errors;
        the cursor ends past the array."""
        self.expect("[")
        if self.skip().at("]"):
            self.i += 1
            return
        n = 0
        while True:
            yield n, self.value(bounds, f"{label}[{n}]")
            n += 1
            if self.skip().at("]"):
                self.i += 1
                return
            self.expect(",")


def unknown_member(n: int, allowed: str) -> InvalidInput:
    """The refusal of a member that is no field: named by its position, never by its name (which
    could be anything the caller wrote, of any length)."""
    return InvalidInput(f"the body's member {n + 1} is not one of its fields ({allowed})", field="body")


# pydantic names the member of a union in an error's location ("key_phrases.list[constrained-str].0");
# a caller wants the field ("key_phrases.0")
TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "constrained-str"})
# where FastAPI found a value, and the union tags field_name drops: never the caller's
_KEPT = TYPE_TAGS | {"body", "query", "path", "header"}
UNKNOWN_MEMBER = "has a member that is none of its fields (unknown members are refused)"


@functools.cache
def _schema_names() -> frozenset[str]:
    """Every field name (and alias) of HRT's own models: what an error may name. Read once, at the
    first error, when every request model has long been imported."""
    names: set[str] = set()
    stack: list[type[BaseModel]] = [BaseModel]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("hrt."):
            for name, info in cls.model_fields.items():
                names.add(name)
                if info.alias:
                    names.add(info.alias)
    return frozenset(names)


def schema_errors(errors: Iterable[Mapping[str, Any]]) -> list[tuple[tuple[Any, ...], str]]:
    """Pydantic's errors as (location, message) naming only what the schema names: a member that is no
    field of any model is named by the object holding it (one that is a field elsewhere, such as a
    setting no request may override, keeps its name), and any other name that is not a field (a key of a
    free-form mapping) is ``*``. Whatever a caller sent (of any length) is never echoed; pydantic's
    messages quote the schema's constraints, not the input."""
    names = _schema_names()
    out = []
    for e in errors:
        loc = tuple(e.get("loc", ()))
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden" and (not loc or loc[-1] not in names):
            loc, msg = loc[:-1], UNKNOWN_MEMBER
        # a query, path or header parameter is one the route declares (FastAPI reports no other)
        declared = 2 if loc[:1] in (("query",), ("path",), ("header",)) else 0
        loc = tuple(
            p if i < declared or isinstance(p, int) or p in names or p in _KEPT or "[" in str(p) else "*"
            for i, p in enumerate(loc)
        )
        out.append((loc, msg))
    return out


def field_name(loc: tuple[Any, ...]) -> str:
    """A validation error's location (see :func:`schema_errors`) as the field a caller named."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    parts = [p for p in parts if not ("[" in p or p in TYPE_TAGS)]
    return ".".join(parts) or "body"


def decode_text(raw: bytes) -> str:
    """A body's bytes as text: UTF-8, else :class:`MalformedBody`."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"the body is not UTF-8 (byte {exc.start})", field="body") from exc
