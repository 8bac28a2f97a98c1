"""Path parameters several routers share."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

EntityKindPath = Literal["memory_unit", "concept", "artifact"]
UserIdPath = Annotated[str, Field(max_length=128)]
