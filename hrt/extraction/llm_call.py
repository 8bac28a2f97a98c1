"""The optional LLM extractor as the conversation rules call it: one message's validated answer
(:class:`LLMOutcome`), within the call's time budget and on the loop its client lives on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class LLMOutcome:
    """What the optional LLM extractor added for one message (already validated)."""

    entities: list[tuple[str, str]] = field(default_factory=list)  # (name, type)
    relations: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, type)
    facts: list[str] = field(default_factory=list)


# speaker, text, previous texts -> the LLM's answer, None when it failed (rules only)
LLMCall = Callable[[str, str, Sequence[str]], Awaitable[LLMOutcome | None]]


def budgeted(call: LLMCall, budget_s: float) -> LLMCall:
    """``call`` within ``budget_s`` seconds in all, from now: a call still running when the budget
    is spent is abandoned, and later ones are not made (None: the rules alone, as a failure). One
    conversation call holds a write slot while it plans, so its LLM time is its slot time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s

    async def within(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        left = deadline - loop.time()
        if left <= 0:
            return None
        try:
            async with asyncio.timeout(left):
                return await call(speaker, text, context)
        except TimeoutError:
            return None

    return within


def on_loop(call: LLMCall, loop: asyncio.AbstractEventLoop) -> LLMCall:
    """``call`` run on ``loop`` (where its HTTP client lives), awaited from another loop: the
    planner's, in a worker thread."""

    async def there(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        future = asyncio.run_coroutine_threadsafe(_ask(call, speaker, text, list(context)), loop)
        return await asyncio.wrap_future(future)

    return there


async def _ask(call: LLMCall, speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
    return await call(speaker, text, context)
