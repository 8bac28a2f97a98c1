"""The prompt files in ``prompts/`` (packaged as ``hrt/prompt_templates``): read, and split into the
sections of a chat prompt. What renders them for a downstream agent is :mod:`hrt.prompts`."""

from __future__ import annotations

from importlib import resources
from string import Formatter


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
