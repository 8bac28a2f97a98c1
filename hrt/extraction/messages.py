"""``POST /v1/conversations``: an agent's messages in, what HRT made of them out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator

from hrt.records import IsoDateTime, UserId, check_metadata, utc

# a call's messages at most; a longer history goes in several calls (each a transaction)
MAX_MESSAGES = 500

# a name or id shown in contexts, logs and audit lines: no control character (C0, DEL, C1), nor a
# format character that reorders or breaks the text shown (bidi embeddings, overrides and isolates,
# line and paragraph separators, U+FEFF), so it displays as what is stored
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]+$"
# the text parts of OpenAI's content lists (chat completions and the responses API); other parts
# (an image, audio, a file) carry no text and are left out
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
# OpenAI's roles as a message's: its newer "developer" is a system message, its older "function" a tool's
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool", "developer": "system"} | {
    "function": "tool"
}
MAX_CONTENT_CHARS = 100_000


class ContentError(ValueError):
    """A message's content that is neither a string nor a list of content parts; ``where`` is the
    position below ``content`` (``[1].text``), empty for the content itself."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"content{where}: {message}")
        self.where = where
        self.message = message


def content_text(content: Any) -> Any:
    """A message's text, as every entry point reads it (``hrt ingest --conversation``, ``POST
    /v1/conversations``, MCP ``remember``): a string as it is, or OpenAI's list of content parts
    (strings, or objects whose ``type`` is a text part) as their texts joined by a line break; a
    list without text is the empty string (a tool call, an image alone). Anything else is returned
    as it is, for the string check to refuse."""
    if not isinstance(content, list):
        return content
    texts: list[str] = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type") in TEXT_PARTS:
            text = part.get("text")
            if not isinstance(text, str):
                raise ContentError(f"[{i}].text", "must be a string")
            texts.append(text)
        elif not isinstance(part, Mapping):
            raise ContentError(f"[{i}]", "a content part must be a string or an object")
    return "\n".join(t for t in texts if t)


def role_name(role: Any) -> Any:
    """OpenAI's role names as HRT's (``developer`` is ``system``, ``function`` is ``tool``)."""
    return ROLES.get(role, role) if isinstance(role, str) else role


_TEXT_PART_SCHEMA = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": sorted(TEXT_PARTS)}, "text": {"type": "string"}},
    "required": ["type"],
}
Content = Annotated[
    Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS)],
    BeforeValidator(content_text),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT_CHARS},
                {"type": "array", "items": {"anyOf": [{"type": "string"}, _TEXT_PART_SCHEMA]}},
            ],
            "description": "the text, or OpenAI's content parts: their text parts are joined by a line break, "
            "other parts (images, audio, files) left out",
        }
    ),
]
Role = Annotated[
    Literal["user", "assistant", "system", "tool"],
    BeforeValidator(role_name),
    WithJsonSchema(
        {
            "type": "string",
            "enum": sorted(ROLES),
            "description": "developer is taken as system, function as tool",
            "default": "user",
        }
    ),
]
SessionId = Annotated[str, Field(min_length=1, max_length=128, pattern=PRINTABLE, description="1-128 printable chars")]


class Message(BaseModel):
    """One message of a conversation. ``name`` is the speaker (default: the role, capitalised)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    role: Role = "user"
    name: str | None = Field(None, min_length=1, max_length=128, pattern=PRINTABLE)
    content: Content
    timestamp: IsoDateTime | None = None
    index: int | None = Field(None, ge=0, le=10_000_000, description="its position in the session (0-based)")
    metadata: dict[str, Any] = Field(default_factory=dict)

    _utc = field_validator("timestamp")(lambda v: utc(v) if v is not None else None)
    _metadata = field_validator("metadata")(check_metadata)

    @property
    def speaker(self) -> str:
        return self.name if self.name else self.role.capitalize()


class ConversationRequest(BaseModel):
    """Messages of one session of one user, in order. Without ``index`` (per message) or ``start``
    (the first message's position), the messages go after the session's last one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: UserId
    session_id: SessionId
    agent_id: str | None = Field(None, min_length=1, max_length=128, pattern=PRINTABLE)
    start: int | None = Field(None, ge=0, le=10_000_000)
    user_name: str | None = Field(
        None, min_length=1, max_length=128, pattern=PRINTABLE, description="the speaker of role user"
    )
    agent_name: str | None = Field(
        None, min_length=1, max_length=128, pattern=PRINTABLE, description="the speaker of role assistant"
    )
    messages: list[Message] = Field(..., min_length=1, max_length=MAX_MESSAGES)

    def speaker(self, message: Message) -> str:
        """Who said a message: its own ``name``, else the name the call gives its role
        (``user_name``, ``agent_name``), else the role, capitalised."""
        if message.name:
            return message.name
        if message.role == "user" and self.user_name:
            return self.user_name
        if message.role == "assistant" and self.agent_name:
            return self.agent_name
        return message.speaker


class MessageResult(BaseModel):
    index: int  # the message's position in its session
    muid: str  # its memory unit
    status: Literal["added", "unchanged", "replaced"]


class ConversationResult(BaseModel):
    user_id: str
    session_id: str
    messages: list[MessageResult]
    concepts_linked: int  # concepts written (created or updated) by this call
    concepts_unlinked: int  # concepts removed as too common by this call
    relations: int  # relations written
    extractor: Literal["rules", "rules+llm"] = "rules"
    llm_fallbacks: int = 0  # messages whose LLM extraction failed or was invalid: rules only
