"""Render the prompts in ``prompts/`` (packaged as ``hrt/prompt_templates``) for downstream agents."""

from __future__ import annotations

from importlib import resources
from string import Formatter

from hrt.contract import AugmentedMemoryContext, RenderOptions


def load_template(name: str) -> str:
    text = resources.files("hrt.prompt_templates").joinpath(name).read_text(encoding="utf-8")
    if text.startswith("<!--"):
        text = text[text.index("-->") + 3 :].lstrip("\n")
    return text


def chat_prompt_sections(text: str, fields: set[str], what: str) -> tuple[str, str]:
    """The ``## system`` and ``## user`` sections of a chat prompt file (each used as is, without its
    trailing newline), checking that the user section is a ``str.format`` template of exactly ``fields``
    (``what`` names the prompt in errors)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        heading = line.strip().lower()
        if heading in ("## system", "## user"):
            current = sections.setdefault(heading[3:], [])
        elif current is not None:
            current.append(line)
    try:
        system, user = ("\n".join(sections[k]).strip("\n") for k in ("system", "user"))
    except KeyError as exc:
        raise ValueError(f"{what} prompt lacks a '## {exc.args[0]}' section") from exc
    found = {name for _, name, _, _ in Formatter().parse(user) if name is not None}
    if found != fields or not system:
        raise ValueError(f"{what} prompt: user template fields {sorted(found)}, expected {sorted(fields)}")
    return system, user


def render_second_pass(final_input_text: str, context: AugmentedMemoryContext) -> str:
    """The DialogueAgent's second LLM call prompt, with the context's rendered text (the one the
    request asked for with ``render``; else the default: markdown within 8,000 characters, from
    the response's snippets)."""
    from hrt.pipeline.render import render_context

    rendered = context.retrieval_metadata.rendered or render_context(context, {}, RenderOptions())
    return load_template("dialogue_agent_second_pass.md").format(
        final_input_text=final_input_text,
        memory_context=rendered.text.strip(),
        key_phrases=", ".join(f'"{p}"' for p in context.retrieval_metadata.key_phrases_processed),
    )
