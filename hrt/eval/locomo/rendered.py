"""Evidence in the rendered text: does the evidence reach what the agent's LLM reads?

Recall@10 counts evidence among ranked ids; an agent pastes a text within a token budget. Per
question and budget (``RENDER_BUDGETS``, counted with ``cl100k_base``), the memory units whose text
a system's rendering holds:

- HRT (the headline system): what ``render`` with ``max_tokens`` gives for the request's response,
  :func:`hrt.pipeline.render.render_context` on it and the returned entities (what the pipeline
  runs when the request carries ``render``), in the compact format (``rendered@B``) and in markdown
  beside it (``rendered-markdown@B``);
- a baseline (hybrid RRF): its ranked turns' texts, one per line in rank order, while the whole
  text fits the budget, counted with the same tokenizer (``rendered@B``).

An item counts when its text is in whole, or cut only by the compact format's per-item cap (its
start is there); the one item cut to fit the budget does not count, as a baseline's turn that does
not fit is not shown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from hrt.contract import AugmentedMemoryContext, RenderFormat, RenderOptions, TokenizerName
from hrt.eval.locomo.metrics import RENDER_TOKENIZER, rendered_metric
from hrt.pipeline import render_context, token_counter
from hrt.records import Entity, Kind
from hrt.stores.base import RecordStore

TOKENIZER: TokenizerName = "cl100k_base"
if TOKENIZER != RENDER_TOKENIZER:
    raise ImportError("hrt.eval.locomo.rendered's tokenizer differs from metrics.RENDER_TOKENIZER")
FORMATS: tuple[tuple[RenderFormat, str], ...] = (("compact", "rendered"), ("markdown", "rendered-markdown"))


async def returned_entities(records: RecordStore, ctx: AugmentedMemoryContext) -> dict[str, Entity]:
    """The response's items as stored (their whole texts), one read per kind."""
    user = ctx.retrieval_metadata.user_id
    wanted = {
        Kind.MEMORY_UNIT: [m.muid for m in ctx.retrieved_memory_units],
        Kind.CONCEPT: [c.id for c in ctx.retrieved_concepts],
        Kind.ARTIFACT: [a.id for a in ctx.retrieved_artifacts],
    }
    found = await asyncio.gather(*(records.get_many(user, kind, ids) for kind, ids in wanted.items() if ids))
    return {i: e for part in found for i, e in part.items()}


def hrt_rendered(
    ctx: AugmentedMemoryContext, entities: Mapping[str, Entity], budgets: Sequence[int]
) -> dict[str, frozenset[str]]:
    """Per format and budget, the items HRT's rendering of ``ctx`` holds (the one cut to fit aside)."""
    out: dict[str, frozenset[str]] = {}
    for fmt, kind in FORMATS:
        for budget in budgets:
            options = RenderOptions(format=fmt, max_tokens=budget, tokenizer=TOKENIZER)
            r = render_context(ctx, entities, options)
            out[rendered_metric(kind, budget)] = frozenset(i for i in r.included if i != r.truncated)
    return out


def texts_rendered(texts: Sequence[tuple[str, str]], budgets: Sequence[int]) -> dict[str, frozenset[str]]:
    """Per budget, the ids of ``texts`` (in rank order) whose lines fit: each text on one line, the
    lines taken in order while the whole text fits."""
    count = token_counter(TOKENIZER)
    out: dict[str, frozenset[str]] = {}
    for budget in budgets:
        shown: list[str] = []
        text = ""
        for ident, body in texts:
            candidate = text + " ".join(body.split()) + "\n"
            if count(candidate) > budget:
                break
            text = candidate
            shown.append(ident)
        out[rendered_metric("rendered", budget)] = frozenset(shown)
    return out
