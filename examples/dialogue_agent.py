"""A DialogueAgent's memory loop with HRT, runnable without an LLM: first pass, retrieval,
second-pass prompt, then the turn written back.

    python examples/dialogue_agent.py --url http://127.0.0.1:8080 --key "$KEY" --user u-maya \\
        "How is Project Phoenix doing, and does the team have bandwidth for the pricing decision?"
    # the whole loop: the turn written back after the answer (a key with retrieve and ingest)
    python examples/dialogue_agent.py --url http://127.0.0.1:8080 --key "$KEY" --user u-maya \\
        --answer "Phoenix is on track for GA on November 4; the team is at capacity until then." \\
        "How is Project Phoenix doing, and does the team have bandwidth for the pricing decision?"

1. First pass. A real agent asks its LLM which key phrases it wants to know more about; here a
   deterministic stand-in takes the message's capitalised names ("Project Phoenix") and its runs of
   content words ("team", "bandwidth", "pricing decision").
2. HRT through :class:`hrt.client.HRTClient`: one ``POST /v1/retrieve`` with those phrases, asking
   for the context rendered for an LLM (the compact format: a line per item with its date, no ids
   or scores) within a token budget, before the second pass.
3. Second pass: the prompt of ``prompts/dialogue_agent_second_pass.md``, filled by
   :func:`hrt.prompts.render_second_pass` with the message and the rendered context. This script
   prints it (the key phrases go to stderr); a real agent sends it to its LLM.
4. After answering: the user's message and the agent's answer go back to HRT as the session's next
   two messages (``HRTClient.add_messages``, ``POST /v1/conversations``), so the next turn's
   retrieval finds them. A real agent writes its LLM's answer; here ``--answer`` gives it, and
   without it the loop stops after step 3 (a retrieve-only key is then enough). A user's first
   turn finds no memory: the retrieval answers an empty context (``user_known`` false), which the
   second pass gets as it is.

The key is ``--key`` or, when that is not given, the ``HRT_API_KEY`` environment variable; it needs
the ``retrieve`` scope for the user, and ``ingest`` too with ``--answer``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from hrt.client import HRTClient
from hrt.prompts import render_second_pass

# words that never start or continue a key phrase: function words, question words and the verbs
# of asking
_STOPWORD_TEXT = """a about after again all also am an and any are as at be been before being but by can could
    did do does doing done for from get got had has have having he her here hers him his how i if in
    into is it its just know let like me mine more most my no not now of on or our ours out over
    please recall remember remind said say she should so some tell than that the their them then
    there these they think this those to too us very was we were what when where which who whom why
    will with would you your yours"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
MAX_PHRASES = 5
TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’&.\-]*[A-Za-z0-9]|[A-Za-z0-9]|[^\sA-Za-z0-9]")


def key_phrases(message: str, limit: int = MAX_PHRASES) -> list[str]:
    """The first pass's stand-in: capitalised names first, then runs of content words, in order,
    de-duplicated case-insensitively, at most ``limit``. Deterministic."""
    names: list[str] = []
    others: list[str] = []
    run: list[str] = []

    def close() -> None:
        if not run:
            return
        # a run splits where capitalisation changes: "Phoenix launch" -> "Phoenix", "launch"
        group: list[str] = [run[0]]
        for word in run[1:]:
            if word[0].isupper() == group[-1][0].isupper():
                group.append(word)
            else:
                _keep(group, names, others)
                group = [word]
        _keep(group, names, others)
        run.clear()

    for token in TOKEN.findall(message):
        if not token[0].isalnum() or token.lower() in STOPWORDS:
            close()
        else:
            run.append(token.rstrip(".'’"))
    close()
    chosen: list[str] = []
    seen: set[str] = set()
    for phrase in names + others:
        if phrase.lower() not in seen:
            seen.add(phrase.lower())
            chosen.append(phrase)
    return chosen[:limit]


def _keep(group: list[str], names: list[str], others: list[str]) -> None:
    if group[0][0].isupper():
        names.append(" ".join(group))
    else:
        words = [w for w in group if len(w) > 2]
        for i in range(0, len(words), 3):  # runs of at most three words
            others.append(" ".join(words[i : i + 3]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("message", help="the user's message")
    parser.add_argument("--user", required=True, help="the user whose memory to use")
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="HRT's base URL")
    parser.add_argument("--key", help="an API key with the retrieve scope (default: $HRT_API_KEY)")
    parser.add_argument("--as-of", help="ISO time to retrieve as of (pin it for a reproducible prompt)")
    parser.add_argument("--max-tokens", type=int, default=1500, help="the memory context's budget (cl100k_base)")
    parser.add_argument("--answer", help="the agent's answer (its LLM's, in a real agent): write the turn back")
    parser.add_argument("--session", default="dialogue-agent", help="the conversation the turn belongs to")
    parser.add_argument("--agent", default="dialogue-agent", help="the agent id the turn is recorded with")
    args = parser.parse_args(argv)
    key = args.key or os.environ.get("HRT_API_KEY")
    if not key:
        parser.error("give --key or set HRT_API_KEY")

    phrases = key_phrases(args.message)  # 1. the first pass (an LLM call in a real agent)
    print(f"# key phrases: {phrases}", file=sys.stderr)
    request: dict[str, object] = {
        "user_id": args.user,
        "render": {"format": "compact", "max_tokens": args.max_tokens},
    }
    if phrases:
        request["key_phrases"] = phrases
    else:  # nothing phrase-like: let HRT take the message itself
        request["query"] = args.message
    if args.as_of:
        request["as_of"] = args.as_of
    with HRTClient(args.url, api_key=key) as hrt:
        context = hrt.retrieve(request)  # 2. HRT, before the second pass
        if context.retrieval_metadata.user_known is False:  # a user's first turn: nothing stored yet
            print(f"# nothing remembered of {args.user} yet: the context is empty", file=sys.stderr)
        print(render_second_pass(args.message, context))  # 3. the second pass's prompt
        if args.answer:  # 4. after answering: the turn, into memory
            turn = [{"role": "user", "content": args.message}, {"role": "assistant", "content": args.answer}]
            written = hrt.add_messages(args.user, args.session, turn, agent_id=args.agent)
            for m in written.messages:
                print(f"# message {m.index}: {m.status} as {m.muid}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
