"""Named seeds: entities a request names in ``seed_ids``, walked from as grounded seeds are.

A named seed enters the walk with seed score 1.0 (the caller knows it is relevant: nothing to be
unsure of), so its neighbours' paths start at full strength; where a phrase grounded it too, the
stronger score (1.0) stands. Its own semantic term is 1.0 as well, whether or not a phrase's search
returned it: the caller's certainty, the same for every named seed, so naming an entity and
phrasing a question never rank it below what the phrases alone would. With no phrase at all, the
walk's candidates score by their paths alone (``reached_evidence`` has no cosine to weigh them
by). Which named ids the walk found is read off the walk itself (the seeds come back at hop 0), so
checking them costs no read: an id that is no entity of the user as of the request (another
user's, a future one, or none) is ``unknown`` (docs/api.md, "Starting from known entities").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hrt.contract import SeedGrounding
from hrt.stores.base import GraphCandidate

if TYPE_CHECKING:
    from hrt.pipeline.grounding import Grounding

NAMED_SEED_SCORE = 1.0


def add_named_seeds(grounding: Grounding, seed_ids: Sequence[str]) -> None:
    """The named ids join the grounded seeds at :data:`NAMED_SEED_SCORE`."""
    for ident in seed_ids:
        grounding.seeds[ident] = NAMED_SEED_SCORE


def settle_named_seeds(
    grounding: Grounding, seed_ids: Sequence[str], candidates: Sequence[GraphCandidate]
) -> SeedGrounding | None:
    """After the walk: the named seeds it found take :data:`NAMED_SEED_SCORE` as their direct
    evidence, those it did not leave the seeds; and the report (None when none was named)."""
    if not seed_ids:
        return None
    reached = {c.node.id for c in candidates if c.hops == 0}
    found = [i for i in seed_ids if i in reached]
    unknown = [i for i in seed_ids if i not in reached]
    for ident in found:
        grounding.similarity[ident] = NAMED_SEED_SCORE
        grounding.kinds.setdefault(ident, next(c.node.kind for c in candidates if c.node.id == ident))
    for ident in unknown:
        grounding.seeds.pop(ident, None)
    return SeedGrounding(seed_ids=list(seed_ids), found=found, unknown=unknown)
