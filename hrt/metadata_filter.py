"""Metadata filters with operators: which memory units' ``metadata`` a retrieval or a browse keeps.

The grammar (JSON, as Mem0's filters)::

    filter    := {"and": [filter, ...]} | {"or": [filter, ...]} | {"not": filter} | {field: condition, ...}
    condition := scalar                                   (shorthand for {"eq": scalar})
               | {op: value, ...}                          (several operators: all must hold)
    op        := eq | ne | gt | gte | lt | lte | in | nin | contains | exists
    field     := a metadata key, or a dotted path into nested objects ("project.phase"): 1 to 4
                 segments, each 1-64 of [A-Za-z0-9_-] starting with a letter or "_"

Several members of one object must all hold. The values: ``eq``/``ne`` a string, number, boolean or
null; ``gt``/``gte``/``lt``/``lte`` a number or a string (strings compare by code point);
``in``/``nin`` a list of 1 to 100 strings, numbers or booleans; ``contains`` a non-empty string
(a substring of a string field) or a string, number or boolean (an element of a list field);
``exists`` a boolean. Types never mix: ``{"priority": {"gte": 2}}`` holds for the number 3, not the
string "3". A field that is absent satisfies no operator but ``{"exists": false}`` (``ne`` and
``nin`` included: use ``not`` for "absent or different").

Only memory units carry metadata: a filter keeps memory units alone. Bounds: depth 6, 64
conditions, 8,000 characters as JSON. Errors are :class:`~hrt.errors.InvalidInput` naming the
position in the filter (``filters.metadata.and[1].priority.gte``), never the caller's values.

Each record store applies a filter inside its query, compiled here: SQLite's JSON functions
(:func:`sqlite_where`) and PostgreSQL's jsonb (:func:`postgres_where`), to the same answers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 6
MAX_CONDITIONS = 64
MAX_CHARS = 8_000
MAX_LIST = 100
MAX_STRING = 1_000
OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists")
_SEGMENT = r"[A-Za-z_][A-Za-z0-9_-]{0,63}"
FIELD = re.compile(rf"^{_SEGMENT}(\.{_SEGMENT}){{0,3}}$")
Scalar = str | int | float | bool | None


class FilterError(ValueError):
    """A filter that is not the grammar; ``where`` is the position in it (``and[1].priority.gte``)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message


@dataclass(frozen=True, slots=True)
class Cond:
    """One operator on one field."""

    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class Node:
    """``and``/``or`` of its parts, or ``not`` of its one part."""

    op: str
    parts: tuple[Node | Cond, ...]


Tree = Node | Cond


def parse_filter(value: Any) -> Tree:
    """``value`` (decoded JSON) as a filter tree, or :class:`FilterError` naming the position."""
    try:
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise FilterError("", "must be JSON with finite numbers") from None
    if size > MAX_CHARS:
        raise FilterError("", f"is longer than {MAX_CHARS} characters as JSON")
    counter = [0]
    return _node(value, "", 1, counter)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _node(value: Any, where: str, depth: int, counter: list[int]) -> Tree:
    if depth > MAX_DEPTH:
        raise FilterError(where, f"nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, Mapping) or not value:
        raise FilterError(where, "must be a non-empty object")
    parts: list[Tree] = []
    for key, inner in value.items():
        # a position names the grammar's words (and, or, not, an operator), never a caller's key
        at = _join(where, key) if key in ("and", "or", "not") else where
        if key in ("and", "or"):
            if not isinstance(inner, list) or not 1 <= len(inner) <= MAX_CONDITIONS:
                raise FilterError(at, f"must be a list of 1 to {MAX_CONDITIONS} filters")
            parts.append(Node(key, tuple(_node(v, f"{at}[{i}]", depth + 1, counter) for i, v in enumerate(inner))))
        elif key == "not":
            parts.append(Node("not", (_node(inner, at, depth + 1, counter),)))
        elif isinstance(key, str) and FIELD.match(key):
            parts.extend(_conditions(tuple(key.split(".")), inner, at, counter))
        else:
            raise FilterError(
                where, "a member is neither and, or, not nor a field name (1-4 dotted segments of [A-Za-z0-9_-])"
            )
    return parts[0] if len(parts) == 1 else Node("and", tuple(parts))


def _conditions(path: tuple[str, ...], value: Any, where: str, counter: list[int]) -> list[Cond]:
    ops = value if isinstance(value, Mapping) else {"eq": value}
    if not ops:
        raise FilterError(where, "must name at least one operator")
    out = []
    for op, operand in ops.items():
        if op not in OPERATORS:
            raise FilterError(where, f"an operator is not one of {', '.join(OPERATORS)}")
        counter[0] += 1
        if counter[0] > MAX_CONDITIONS:
            raise FilterError(where, f"more than {MAX_CONDITIONS} conditions")
        out.append(Cond(path, op, _operand(op, operand, _join(where, op))))
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _scalar(v: Any, where: str, *, null: bool = False) -> Scalar:
    if v is None and null:
        return v
    if isinstance(v, str):
        if len(v) > MAX_STRING:
            raise FilterError(where, f"a string longer than {MAX_STRING} characters")
        return v
    if isinstance(v, bool) or _is_number(v):
        return v  # type: ignore[no-any-return]
    raise FilterError(where, "must be a string, a number or a boolean" + (" or null" if null else ""))


def _operand(op: str, v: Any, where: str) -> Any:
    if op in ("eq", "ne"):
        return _scalar(v, where, null=True)
    if op in ("gt", "gte", "lt", "lte"):
        if not (_is_number(v) or isinstance(v, str)):
            raise FilterError(where, "must be a number or a string")
        return _scalar(v, where)
    if op in ("in", "nin"):
        if not isinstance(v, list) or not 1 <= len(v) <= MAX_LIST:
            raise FilterError(where, f"must be a list of 1 to {MAX_LIST} strings, numbers or booleans")
        return tuple(_scalar(x, f"{where}[{i}]") for i, x in enumerate(v))
    if op == "contains":
        if v == "":
            raise FilterError(where, "must not be the empty string")
        return _scalar(v, where)
    if not isinstance(v, bool):
        raise FilterError(where, "must be true or false")
    return v


# ---------------------------------------------------------------------------------------------
# SQLite: json_type and json_extract on the record's JSON (``data``)
# ---------------------------------------------------------------------------------------------

_SQLITE_NUMBER = "json_type({d}, ?) IN ('integer', 'real')"


def _sqlite_path(path: tuple[str, ...]) -> str:
    return "$.metadata" + "".join(f'."{p}"' for p in path)


def _sqlite_eq(d: str, p: str, v: Scalar) -> tuple[str, list[Any]]:
    if v is None:
        return f"json_type({d}, ?) = 'null'", [p]
    if isinstance(v, bool):
        return f"json_type({d}, ?) = ?", [p, "true" if v else "false"]
    kind = _SQLITE_NUMBER.format(d=d) if _is_number(v) else f"json_type({d}, ?) = 'text'"
    return f"({kind} AND json_extract({d}, ?) = ?)", [p, p, v]


def _sqlite_element(d: str, p: str, v: Scalar) -> tuple[str, list[Any]]:
    args: list[Any]
    if isinstance(v, bool):
        test, args = "j.type = ?", ["true" if v else "false"]
    elif _is_number(v):
        test, args = "j.type IN ('integer', 'real') AND j.value = ?", [v]
    else:
        test, args = "j.type = 'text' AND j.value = ?", [v]
    return f"(json_type({d}, ?) = 'array' AND EXISTS (SELECT 1 FROM json_each({d}, ?) j WHERE {test}))", [p, p, *args]


def _sqlite_cond(c: Cond, d: str) -> tuple[str, list[Any]]:
    p = _sqlite_path(c.path)
    present = f"json_type({d}, ?) IS NOT NULL"
    if c.op == "exists":
        return (present if c.value else f"json_type({d}, ?) IS NULL"), [p]
    if c.op == "eq":
        return _sqlite_eq(d, p, c.value)
    if c.op in ("in", "nin"):
        each = [_sqlite_eq(d, p, v) for v in c.value]
        sql, args = "(" + " OR ".join(s for s, _ in each) + ")", [a for _, x in each for a in x]
        return (sql, args) if c.op == "in" else (f"({present} AND NOT {sql})", [p, *args])
    if c.op == "ne":
        sql, args = _sqlite_eq(d, p, c.value)
        return f"({present} AND NOT {sql})", [p, *args]
    if c.op == "contains":
        element = _sqlite_element(d, p, c.value)
        if not isinstance(c.value, str):
            return element
        sub = f"(json_type({d}, ?) = 'text' AND instr(json_extract({d}, ?), ?) > 0)"
        return f"({sub} OR {element[0]})", [p, p, c.value, *element[1]]
    sign = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[c.op]
    kind = _SQLITE_NUMBER.format(d=d) if _is_number(c.value) else f"json_type({d}, ?) = 'text'"
    return f"({kind} AND json_extract({d}, ?) {sign} ?)", [p, p, c.value]


def sqlite_where(tree: Tree, data: str = "e.data") -> tuple[str, list[Any]]:
    """The filter as a SQLite condition on the record's JSON column ``data``, and its parameters."""
    if isinstance(tree, Cond):
        # SQL's NULL (a field that is absent) made false, so "not" of a condition is its opposite
        sql, args = _sqlite_cond(tree, data)
        return f"coalesce({sql}, 0)", args
    parts = [sqlite_where(t, data) for t in tree.parts]
    if tree.op == "not":
        return f"(NOT {parts[0][0]})", parts[0][1]
    glue = " AND " if tree.op == "and" else " OR "
    return "(" + glue.join(s for s, _ in parts) + ")", [a for _, args in parts for a in args]


# ---------------------------------------------------------------------------------------------
# PostgreSQL: jsonb on the record (``data``); CASE keeps a cast from ever meeting another type
# ---------------------------------------------------------------------------------------------


def _pg_eq(x: str, v: Scalar) -> tuple[str, list[Any]]:
    if v is None:
        return f"coalesce(jsonb_typeof({x}) = 'null', false)", []
    # jsonb equality: numbers by value (1 = 1.0), strings and booleans exactly, never across types
    return f"coalesce({x} = %s::jsonb, false)", [json.dumps(v)]


def _pg_cond(c: Cond, d: str) -> tuple[str, list[Any]]:
    x = f"({d} #> %s::text[])"
    path = ["metadata", *c.path]
    if c.op == "exists":
        return (f"{x} IS {'NOT ' if c.value else ''}NULL"), [path]
    if c.op in ("eq", "ne"):
        sql, args = _pg_eq(x, c.value)
        if c.op == "eq":
            return sql, [path, *args]
        return f"({x} IS NOT NULL AND NOT {sql})", [path, path, *args]
    if c.op in ("in", "nin"):
        each = [_pg_eq(x, v) for v in c.value]
        sql = "(" + " OR ".join(s for s, _ in each) + ")"
        args = [a for _, xs in each for a in [path, *xs]]
        return (sql, args) if c.op == "in" else (f"({x} IS NOT NULL AND NOT {sql})", [path, *args])
    if c.op == "contains":
        element = f"coalesce(jsonb_typeof({x}) = 'array' AND {x} @> %s::jsonb, false)"
        args = [path, path, json.dumps([c.value])]
        if not isinstance(c.value, str):
            return element, args
        sub = f"CASE WHEN jsonb_typeof({x}) = 'string' THEN strpos({x} #>> '{{}}', %s) > 0 ELSE false END"
        return f"({sub} OR {element})", [path, path, c.value, *args]
    sign = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[c.op]
    if _is_number(c.value):
        test = (
            f"CASE WHEN jsonb_typeof({x}) = 'number' THEN ({x} #>> '{{}}')::numeric {sign} %s::numeric ELSE false END"
        )
        return test, [path, path, repr(c.value) if isinstance(c.value, float) else str(c.value)]
    test = f"CASE WHEN jsonb_typeof({x}) = 'string' THEN ({x} #>> '{{}}') COLLATE \"C\" {sign} %s ELSE false END"
    return test, [path, path, c.value]


def postgres_where(tree: Tree, data: str = "e.data") -> tuple[str, list[Any]]:
    """The filter as a PostgreSQL condition (positional ``%s`` parameters) on the jsonb ``data``."""
    if isinstance(tree, Cond):
        return _pg_cond(tree, data)
    parts = [postgres_where(t, data) for t in tree.parts]
    if tree.op == "not":
        return f"(NOT {parts[0][0]})", parts[0][1]
    glue = " AND " if tree.op == "and" else " OR "
    return "(" + glue.join(s for s, _ in parts) + ")", [a for _, args in parts for a in args]


def postgres_where_named(tree: Tree, data: str = "e.data", prefix: str = "mf") -> tuple[str, dict[str, Any]]:
    """:func:`postgres_where` with named parameters (``%(mf0)s``, ...), for a statement that names its own."""
    sql, args = postgres_where(tree, data)
    pieces = sql.split("%s")
    out = pieces[0] + "".join(f"%({prefix}{i})s{rest}" for i, rest in enumerate(pieces[1:]))
    return out, {f"{prefix}{i}": a for i, a in enumerate(args)}


# the filter's JSON Schema, as the request schema, the MCP tool and the clients show it
JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "minProperties": 1,
    "description": "Memory units whose metadata matches: {field: value} (equals), {field: {op: value}} with op "
    "one of eq, ne, gt, gte, lt, lte, in, nin, contains, exists; {and: [..]}, {or: [..]}, {not: {..}}; a field is "
    "a metadata key or a dotted path (project.phase). Several members: all must hold. Only memory units carry "
    "metadata: with a filter, concepts and artifacts are left out. An absent field satisfies no operator but "
    'exists: false. Example: {"and": [{"project": "apollo"}, {"priority": {"gte": 2}}]}',
}


__all__ = [
    "JSON_SCHEMA",
    "FilterError",
    "Tree",
    "parse_filter",
    "postgres_where",
    "postgres_where_named",
    "sqlite_where",
]
