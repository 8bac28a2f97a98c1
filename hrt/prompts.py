"""Render the prompts in ``prompts/`` for downstream agents (the files are read by :mod:`hrt.templates`)."""

from __future__ import annotations

from hrt.contract import AugmentedMemoryContext, RenderOptions
from hrt.templates import load_template


def render_second_pass(final_input_text: str, context: AugmentedMemoryContext) -> str:
    """The DialogueAgent's second LLM call prompt, with the context's rendered text (the one the
    request asked for with ``render``; else the compact format within 8,000 characters, from the
    response's snippets: what an LLM needs, without ids, scores or provenance)."""
    from hrt.pipeline.render import render_context

    rendered = context.retrieval_metadata.rendered or render_context(context, {}, RenderOptions(format="compact"))
    return load_template("dialogue_agent_second_pass.md").format(
        final_input_text=final_input_text,
        memory_context=rendered.text.strip(),
        key_phrases=", ".join(f'"{p}"' for p in context.retrieval_metadata.key_phrases_processed),
    )
