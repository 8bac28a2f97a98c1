"""The record store's own text search, for retrieval while the vector index is down
(:mod:`hrt.stores.fallback`): PostgreSQL full text (the ``simple`` configuration: no stemming, as
HRT's own lexical words) over each entity's title, content, name and description, per phrase the
``limit`` best by ``ts_rank``, then id, in one round trip for every phrase. There is no index
for it: it reads the user's rows (the ``user_id`` index narrows them), which is what a degraded
answer costs, bounded per phrase.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg

from hrt.records import ENTITY_MODELS, Kind
from hrt.stores.base import EntityRow
from hrt.stores.projection import passage_rows

_TEXT = "concat_ws(' ', e.data->>'title', e.data->>'content', e.data->>'name', e.data->>'description')"

TEXT_SEARCH = f"""
SELECT p.i, e.id, e.kind, e.data, e.vector, e.version, e.passages
FROM unnest(%s::text[]) WITH ORDINALITY AS p(q, i)
CROSS JOIN LATERAL (
    SELECT e.id, e.kind, e.data, e.vector, e.version, e.passages,
           ts_rank(to_tsvector('simple', {_TEXT}), websearch_to_tsquery('simple', p.q)) AS rank
    FROM hrt_entities e
    WHERE e.user_id = %s AND to_tsvector('simple', {_TEXT}) @@ websearch_to_tsquery('simple', p.q)
    ORDER BY rank DESC, e.id COLLATE "C"
    LIMIT %s
) e
ORDER BY p.i, e.rank DESC, e.id COLLATE "C"
"""


async def text_candidates(
    conn: psycopg.AsyncConnection[Any], user_id: str, queries: Sequence[Sequence[str]], limit: int
) -> list[list[EntityRow]]:
    """Per query (its words, joined by ``or``), the user's best ``limit`` entities, best first."""
    texts = [" or ".join(words) for words in queries]
    out: list[list[EntityRow]] = [[] for _ in queries]
    wanted = [t for t in texts if t]
    if not wanted:
        return out
    cur = await conn.execute(TEXT_SEARCH, (texts, user_id, limit))
    for i, _ident, kind, data, vec, version, passages in await cur.fetchall():
        own = np.frombuffer(vec, dtype=np.float32)
        entity = ENTITY_MODELS[Kind(kind)].model_validate(data)
        out[int(i) - 1].append((entity, own, version, passage_rows(passages, len(own))))
    return out
