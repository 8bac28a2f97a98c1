"""The bodies of the other routes (the server answers them, hrt.client parses them): writes,
stats, health and readiness, keys, and merging concepts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hrt.auth import KEY_NAME, SCOPES
from hrt.auth import Scope as KeyScope
from hrt.records import EntityId, UserId


class WriteSummary(BaseModel):
    upserted: int
    deleted: int


class UserStats(BaseModel):
    """Counts of one user's records; all zero for a user with none."""

    memory_unit: int
    concept: int
    artifact: int
    relation: int
    preference: int


class Health(BaseModel):
    status: Literal["ok"]


class KeyInfo(BaseModel):
    """An API key as listed: everything but its secret and hash."""

    name: str
    key_id: str
    status: Literal["active", "expired", "revoked"]
    scopes: list[KeyScope]
    users: list[str] | Literal["*"]
    created_at: str | None
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None
    rate_limit: float | None
    max_concurrency: int | None
    parent: str | None = Field(
        None, description="the key id of the admin key that made it over HTTP; null: the operator (`hrt keys`)"
    )
    hash: Literal["sha256", "scrypt"] = Field(
        "sha256", description="how it is stored: scrypt for a key of an older version not used since"
    )


class NewKey(KeyInfo):
    key: str = Field(description="the secret key: shown once, never again")


class KeyRequest(BaseModel):
    """A key to create over HTTP: within the scopes and users of the admin key that asks."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    name: str = Field(pattern=f"^{KEY_NAME.pattern}$", description="unique among the live keys this key made")
    scopes: list[KeyScope] = Field(min_length=1, max_length=len(SCOPES))
    users: list[UserId] | None = Field(
        None, min_length=1, max_length=1000, description="the users it acts for; null for every user"
    )
    expires: str | None = Field(
        None,
        max_length=64,
        description="a duration (30d, 12h, 90m, 2w) or an ISO date, at most ten years away and not after the maker's",
    )
    rate_limit: float | None = Field(
        None, ge=0, le=1_000_000, description="requests per second: 0 (none) or 0.01 to 1,000,000; within the maker's"
    )
    max_concurrency: int | None = Field(None, ge=0, le=100_000, description="within the maker's; 0: none")


class Readiness(BaseModel):
    status: Literal["ready", "warming", "unavailable"]
    stores: dict[str, Literal["ok", "unavailable"]]
    caches: str
    embedder: str
    deployment: str
    graph_expansion: str
    auth: Literal["on", "off"]
    warnings: list[str] = Field(default_factory=list)
    # the reranker `"rerank": true` uses: none, qwen3-reranker@<server>, onnx-cross-encoder:<file>
    # (a default, so a client reads the report of a server older than the field)
    reranker: str = "none"


# --------------------------------------------------------------------------------------------
# Merging concepts (hrt/merge.py)
# --------------------------------------------------------------------------------------------

MAX_MERGE_IDS = 32


class MergeRequest(BaseModel):
    """The body of the merge route: the concepts to merge into the one the path names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[EntityId] = Field(..., min_length=1, max_length=MAX_MERGE_IDS)

    @field_validator("ids")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names an id twice")
        return value


class MergeResult(BaseModel):
    """What a merge did: the concepts merged now (``merged``), the ids that name no concept of the
    user (already merged, deleted, or never one: ``absent``), the relations moved onto the target
    and those dropped as self-loops or weaker duplicates, and the target's aliases after it."""

    user_id: str
    target: str
    merged: list[str]
    absent: list[str]
    relations_moved: int
    relations_dropped: int
    aliases: list[str]
