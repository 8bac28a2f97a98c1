"""``hrt eval changes``: do retrievals keep up with facts that change?

A later message may update, correct, cancel or revert something said earlier. The conversation
rules (hrt/extraction/conversation.py) are to notice it and make the earlier message's memory unit
superseded (the newer unit names it in ``supersedes``); retrieval then drops it by default
(counted in ``retrieval_metadata.validity.suppressed``) or, with ``include_invalidated``, returns
it marked ``valid: false``. This suite is the yardstick, built apart from the rules:

1. **Data** (:mod:`~hrt.eval.changes.data`, ``conversations.json``, shipped): original made-up
   conversations between a named user and an assistant over days to months, of six kinds (update,
   correction, cancellation, revert, two changes, control), each with questions as an agent asks
   them, their key phrases and query, and the messages that state today's truth (``current``) and
   those no longer true (``outdated``).
2. **Run** (:mod:`~hrt.eval.changes.runner`): every conversation a fresh user of one fresh
   embedded store, sent to the conversation route session by session, a few messages a call; every
   question asked a day after the conversation's end, by key phrases and by its query alone, each
   with and without ``include_invalidated``; the supersessions the store holds read back.
3. **Metrics** (:mod:`~hrt.eval.changes.metrics`): current first, current retrieved, outdated
   unmarked, empty, control superseded, recall@5 and @10 of the current messages, per question kind
   and overall; precision and recall of the supersession pairs against the labels.
4. **Outputs** (:mod:`~hrt.eval.changes.report`): markdown tables, ``changes-summary.json`` and
   ``changes-questions.jsonl``; :mod:`~hrt.eval.changes.cli` is the command.

docs/eval-changes.md describes the method, the data and the baseline.
"""

from __future__ import annotations

from hrt.eval.changes.cli import DEFAULT_OUT, build_parser, main, run
from hrt.eval.changes.data import (
    CONTROL,
    DEFAULT_DATA,
    KINDS,
    ChangeConversation,
    ChangeQuestion,
    ChatMessage,
    DataError,
    composition,
    load,
    parse,
    problems,
)
from hrt.eval.changes.metrics import (
    METRICS,
    OVERALL,
    Response,
    SupersessionScore,
    aggregate,
    current_first,
    current_retrieved,
    empty,
    micro_supersession,
    outdated_unmarked,
    question_metrics,
    recall_at,
    superseded_seen,
    supersession_scores,
)
from hrt.eval.changes.report import QUESTIONS_FILE, SUMMARY_FILE, markdown, summarise, write_outputs
from hrt.eval.changes.runner import MODES, PER_CALL, ConversationRun, evaluate

__all__ = [
    "CONTROL",
    "DEFAULT_DATA",
    "DEFAULT_OUT",
    "KINDS",
    "METRICS",
    "MODES",
    "OVERALL",
    "PER_CALL",
    "QUESTIONS_FILE",
    "SUMMARY_FILE",
    "ChangeConversation",
    "ChangeQuestion",
    "ChatMessage",
    "ConversationRun",
    "DataError",
    "Response",
    "SupersessionScore",
    "aggregate",
    "build_parser",
    "composition",
    "current_first",
    "current_retrieved",
    "empty",
    "evaluate",
    "load",
    "main",
    "markdown",
    "micro_supersession",
    "outdated_unmarked",
    "parse",
    "problems",
    "question_metrics",
    "recall_at",
    "run",
    "summarise",
    "superseded_seen",
    "supersession_scores",
    "write_outputs",
]
