"""Conversations as an agent writes them: calls of four messages to ``POST /v1/conversations``.

After a run's reads and writes, ``calls`` calls for the run's user, each four messages (the user
and the agent in turn) of a session (a new session every five calls), that name people, projects
and places of the generated graph among everyday words, which the rules take as concepts: what a
call costs on a store of that size (each
message's memory unit, passages and notes embedded, the call planned from the user's statistics
and written in one transaction; services also project into Neo4j and Weaviate). Each call's time
at the client, p50 / p95, the calls refused (429) and any error.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import Any

import httpx

from hrt.bench.server import Server
from hrt.bench.stats import summary
from hrt.bench.synth import SynthConfig, concept_name, concept_types

MESSAGES_PER_CALL = 4
CALLS_PER_SESSION = 5
_WORDS = [
    "budget",
    "review",
    "draft",
    "slides",
    "launch",
    "plan",
    "hiring",
    "schedule",
    "contract",
    "renewal",
    "roadmap",
    "feedback",
    "offsite",
    "agenda",
    "migration",
    "rollout",
    "incident",
    "invoice",
    "supplier",
    "training",
    "onboarding",
    "dinner",
    "flight",
    "booking",
    "weekend",
]
_SAID = (
    "I talked with {person} about the {w1} {w2} for {project}; we meet again in {place} on {day}.",
    "Noted: {project} {w1} moves to {day}, and {person} takes the {w2}.",
    "{person} says the {w1} of {project} slips a week, so the {w2} waits.",
    "Good, I will send {person} the {w1} {w2} before we fly to {place}.",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "the weekend")


def concept_names(cfg: SynthConfig, n: int) -> dict[str, list[str]]:
    """The names of the graph's first ``n`` concepts, by type (as :mod:`hrt.bench.synth` names them)."""
    per_type: dict[str, int] = {}
    names: dict[str, list[str]] = {}
    for ctype in concept_types(cfg)[:n]:
        k = per_type.get(ctype, 0)
        per_type[ctype] = k + 1
        names.setdefault(ctype, []).append(concept_name(ctype, k))
    return names


def call_body(cfg: SynthConfig, names: dict[str, list[str]], k: int) -> dict[str, Any]:
    """The ``k``-th call: four messages of session ``k // 5``, seeded by ``k``."""
    rng = random.Random(f"hrt-bench-turns/{cfg.seed}/{k}")
    start = cfg.as_of() + timedelta(minutes=10 * k)
    messages = []
    for j in range(MESSAGES_PER_CALL):
        text = rng.choice(_SAID).format(
            person=rng.choice(names.get("person") or ["Ada"]),
            project=rng.choice(names.get("project") or ["Project Atlas"]),
            place=rng.choice(names.get("place") or ["Kyoto"]),
            w1=rng.choice(_WORDS),
            w2=rng.choice(_WORDS),
            day=rng.choice(_DAYS),
        )
        messages.append(
            {
                "role": "user" if j % 2 == 0 else "assistant",
                "content": text,
                "timestamp": (start + timedelta(seconds=30 * j)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    return {"user_id": cfg.user_id, "session_id": f"bench-turns-{k // CALLS_PER_SESSION}", "messages": messages}


def measure_turns(server: Server, cfg: SynthConfig, calls: int, first: int = 0) -> dict[str, Any]:
    """``calls`` conversation calls, one at a time (module docstring), the bodies numbered from
    ``first`` (a reused store holds earlier runs' calls: sent again, they change nothing)."""
    names = concept_names(cfg, min(cfg.n_concepts, 2_000))
    ms: list[float] = []
    refused, errors = 0, []
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=300) as client:
        for k in range(first, first + calls):
            t0 = time.perf_counter()
            r = client.post("/v1/conversations", json=call_body(cfg, names, k))
            elapsed = (time.perf_counter() - t0) * 1000
            if r.status_code == 429:
                refused += 1
            elif r.status_code != 200:
                errors.append(f"/v1/conversations answered {r.status_code}: {r.text[:200]}")
            else:
                ms.append(elapsed)
    return {
        "calls": calls,
        "messages_per_call": MESSAGES_PER_CALL,
        "call_ms": summary(ms),
        "refused_429": refused,
        "errors": errors[:5],
        "n_errors": len(errors),
    }
