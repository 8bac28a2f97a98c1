"""Render the prompts in ``prompts/`` (packaged as ``hrt/prompt_templates``) for downstream agents."""

from __future__ import annotations

from importlib import resources

from hrt.contract import AugmentedMemoryContext


def load_template(name: str) -> str:
    text = resources.files("hrt.prompt_templates").joinpath(name).read_text(encoding="utf-8")
    if text.startswith("<!--"):
        text = text[text.index("-->") + 3 :].lstrip("\n")
    return text


def render_second_pass(final_input_text: str, context: AugmentedMemoryContext) -> str:
    """The DialogueAgent's second LLM call prompt, with the V9.4 JSON embedded verbatim."""
    return load_template("dialogue_agent_second_pass.md").format(
        final_input_text=final_input_text,
        augmented_memory_context_json=context.canonical_json(indent=2),
    )
