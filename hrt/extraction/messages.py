"""``POST /v1/conversations``: an agent's messages in, what HRT made of them out."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hrt.records import IsoDateTime, UserId, check_metadata, utc

# a call's messages at most; a longer history goes in several calls (each a transaction)
MAX_MESSAGES = 500

# a name or id shown in contexts, logs and audit lines: no control character (C0, DEL, C1), nor a
# format character that reorders or breaks the text shown (bidi embeddings, overrides and isolates,
# line and paragraph separators, U+FEFF), so it displays as what is stored
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]+$"
SessionId = Annotated[str, Field(min_length=1, max_length=128, pattern=PRINTABLE, description="1-128 printable chars")]


class Message(BaseModel):
    """One message of a conversation. ``name`` is the speaker (default: the role, capitalised)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    role: Literal["user", "assistant", "system", "tool"] = "user"
    name: str | None = Field(None, min_length=1, max_length=128, pattern=PRINTABLE)
    content: str = Field(..., min_length=1, max_length=100_000)
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
