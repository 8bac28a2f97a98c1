"""A search's filters as Weaviate gRPC filters: kinds, ``not_after``, and the request's
:class:`SearchFilter` pushed down (tags, agents, time bounds, validity; see
:mod:`hrt.stores.weaviate.vectors` for why validity is written as NOTs)."""

from __future__ import annotations

from collections.abc import Sequence

from hrt.records import Kind
from hrt.stores.base import SearchFilter
from weaviate.proto.v1 import base_pb2

_ALL_KINDS = frozenset(Kind)


def search_filters(
    kinds: Sequence[Kind], not_after: float | None, where: SearchFilter | None = None
) -> base_pb2.Filters | None:
    parts: list[base_pb2.Filters] = []
    wanted = {Kind(kind) for kind in kinds}
    if wanted != _ALL_KINDS:  # no filter at all keeps the unfiltered (HNSW) path
        parts.append(
            base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_CONTAINS_ANY,
                value_text_array=base_pb2.TextArray(values=sorted(kind.value for kind in wanted)),
                target=base_pb2.FilterTarget(property="kind"),
            )
        )
    if not_after is not None:
        parts.append(
            base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_LESS_THAN_EQUAL,
                value_number=float(not_after),
                target=base_pb2.FilterTarget(property="ts"),
            )
        )
    if where:
        parts += _pushed_down(where)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_AND, filters=parts)


def _text_is(prop: str, value: str, equal: bool = True) -> base_pb2.Filters:
    op = base_pb2.Filters.OPERATOR_EQUAL if equal else base_pb2.Filters.OPERATOR_NOT_EQUAL
    return base_pb2.Filters(operator=op, value_text=value, target=base_pb2.FilterTarget(property=prop))


def _any_of(*filters: base_pb2.Filters) -> base_pb2.Filters:
    return filters[0] if len(filters) == 1 else base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_OR, filters=filters)


def _pushed_down(where: SearchFilter) -> list[base_pb2.Filters]:
    """The request's filters as Weaviate filters (see :class:`SearchFilter`): each applies to the
    kinds that carry its property and lets the others through."""
    parts: list[base_pb2.Filters] = []
    not_mu = _text_is("kind", Kind.MEMORY_UNIT.value, equal=False)
    if where.tags:
        tags = base_pb2.Filters(
            operator=base_pb2.Filters.OPERATOR_CONTAINS_ANY,
            value_text_array=base_pb2.TextArray(values=sorted(set(where.tags))),
            target=base_pb2.FilterTarget(property="tags"),
        )
        parts.append(_any_of(not_mu, tags))
    if where.source_agent_ids:
        agents = [_text_is("source_agent_id", a) for a in sorted(set(where.source_agent_ids))]
        parts.append(_any_of(not_mu, *agents))
    bounds: list[base_pb2.Filters] = []
    if where.ts_from is not None:
        bounds.append(
            base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_GREATER_THAN_EQUAL,
                value_number=float(where.ts_from),
                target=base_pb2.FilterTarget(property="ts"),
            )
        )
    if where.ts_to is not None:
        bounds.append(
            base_pb2.Filters(
                operator=base_pb2.Filters.OPERATOR_LESS_THAN_EQUAL,
                value_number=float(where.ts_to),
                target=base_pb2.FilterTarget(property="ts"),
            )
        )
    if bounds:
        within = (
            bounds[0] if len(bounds) == 1 else base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_AND, filters=bounds)
        )
        parts.append(_any_of(_text_is("kind", Kind.CONCEPT.value), within))
    if where.valid_at is not None:
        parts += _valid_at(float(where.valid_at))
    return parts


def _valid_at(at: float) -> list[base_pb2.Filters]:
    """Documents whose interval holds at ``at``, for every kind: NOT(valid_from > at) AND
    NOT(valid_to <= at). Written as NOTs of the comparisons, not as ``valid_from <= at`` and
    ``valid_to > at``, because a comparison never matches a null or missing property: an open end
    (stored as null, no sentinel) and an object written before the properties existed fail both
    comparisons, so their NOTs let them through (checked against the real server in
    tests/contract/test_weaviate_vectors.py)."""

    def never(operator: base_pb2.Filters.Operator, prop: str) -> base_pb2.Filters:
        compared = base_pb2.Filters(operator=operator, value_number=at, target=base_pb2.FilterTarget(property=prop))
        return base_pb2.Filters(operator=base_pb2.Filters.OPERATOR_NOT, filters=[compared])

    return [
        never(base_pb2.Filters.OPERATOR_GREATER_THAN, "valid_from"),
        never(base_pb2.Filters.OPERATOR_LESS_THAN_EQUAL, "valid_to"),
    ]
