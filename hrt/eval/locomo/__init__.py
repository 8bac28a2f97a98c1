"""``hrt eval locomo``: evidence retrieval on LoCoMo conversations, HRT against its own baselines.

LoCoMo (Maharana et al., ACL 2024, arXiv:2402.17753; CC BY-NC 4.0) holds very long two-person
conversations with questions whose answers cite the turns ("dialog ids") that hold the evidence.
The data is read at run time only; nothing of it is stored in this repository.

1. **Import** (:func:`import_conversation`, no LLM, deterministic). Each conversation becomes one
   user's graph:

   - every turn a MemoryUnit (content: ``Speaker said, "text"``, plus ``[image: caption]`` when
     the turn shared an image), ``creation_ts`` = its session's date + its order (one second per
     turn, strictly increasing over the conversation);
   - with ``--notes dataset`` only (the default, ``none``, imports the rules' records alone: what
     an HRT user has), LoCoMo's own LLM-written session summaries (``session_summary``) and
     observations (``observation``) as artifacts, DERIVED_FROM the turns they cite: an observation
     the dialog ids it names, a summary every turn of its session (it cites none, it summarises the
     session); an observation also DERIVED_FROM the concepts its text names (below; its speaker
     aside);
   - concepts: the speakers (``person``), and the entities and topics :func:`extract` finds in the
     turns, with MENTIONS edges from the turns, RELATED_TO edges weighted by co-occurrence in a turn,
     and FOLLOWS edges between consecutive turns of a session (later -> earlier).

2. **Questions** become RetrieveRequests: the question itself plus the key phrases :func:`extract`
   finds in it (by default joined into one keyword phrase, :func:`question_phrases`), ``as_of`` a
   day after the last session, the semantic weight alone.

3. **Systems**, one store, one embedder, one run: BM25 only, dense only, hybrid RRF (both legs of
   the store's search, fused, no graph), and HRT (:data:`HRT_SYSTEMS`): the headline row with the
   product's defaults and the semantic weight alone (``hrt``), the same with nothing overridden,
   the default weights too (``hrt-unweighted``), the defaults at depth 0, 1, 2 and 3, and the
   eval's earlier tuned configuration at depth 1 (``hrt-tuned-depth1``). ``--setting`` overrides
   apply to every HRT system; ``--experimental-path-sum`` makes every HRT request override
   ``path_evidence`` to ``noisy_or`` (every seed's path summed instead of the best one kept). Each
   HRT system is a request (depth, weights, retrieval ``preset``, ``config``), never a patch.

4. **Metrics** per category and overall: evidence recall@k (k = 5, 10, 25), nDCG@10, MRR, a
   recall that credits an artifact whose DERIVED_FROM turns include the evidence, and candidate
   recall (evidence turns the system considered at any rank); for the headline system and hybrid
   RRF, the share of evidence turns whose text their rendered context holds within 1,000, 2,000
   and 4,000 cl100k_base tokens (:mod:`~hrt.eval.locomo.rendered`). ``--compare BEFORE AFTER`` runs
   nothing and prints the paired bootstrap of two runs' per-question output; ``--misses`` runs
   nothing either and says, on the store a run kept (``--db``), why each evidence turn the walk
   missed is not a candidate.

The extractor (:func:`extract`) is rules only: capitalised-word runs for entities (a sentence's
first word only when the conversation also capitalises it mid-sentence), RAKE-style runs of content
words for topics, a light suffix stemmer to group spellings. No network and no model.

The package, one module per concern (each re-exported here, so ``hrt.eval.locomo.X`` names what
it always did):

- :mod:`~hrt.extraction.locomo`: LoCoMo's JSON format (sessions, turns, dates, evidence ids);
- :mod:`hrt.extraction.rules` (in the product): the phrase extractor;
- :mod:`~hrt.eval.locomo.importer`: a conversation as one user's records;
- :mod:`~hrt.eval.locomo.questions`: the questions and their key phrases;
- :mod:`~hrt.eval.locomo.metrics`: recall, nDCG, MRR and their aggregation per category;
- :mod:`~hrt.eval.locomo.rendered`: the evidence that reaches the rendered text;
- :mod:`~hrt.eval.locomo.systems`: the baselines, HRT's configurations, the path-sum prototype;
- :mod:`~hrt.eval.locomo.evaluation`: the run over one store;
- :mod:`~hrt.eval.locomo.report`: the tables, chart and files it writes;
- :mod:`~hrt.eval.locomo.compare`: the paired bootstrap of two runs (``--compare``);
- :mod:`~hrt.eval.locomo.misses`: why evidence turns are not candidates, on a kept store (``--misses``);
- :mod:`~hrt.eval.locomo.cli`: ``hrt eval locomo``.
"""

from __future__ import annotations

from hrt.eval.locomo.cli import DEFAULT_DATA, add_arguments, build_parser, main, run
from hrt.eval.locomo.compare import BOOTSTRAP_SEED, COMPARED, compare_report, paired_bootstrap
from hrt.eval.locomo.evaluation import NOTES, EvalResult, evaluate, notes_options
from hrt.eval.locomo.importer import (
    ImportedConversation,
    ImportOptions,
    import_conversation,
    turn_content,
)
from hrt.eval.locomo.metrics import (
    ALL,
    CATEGORY_NAMES,
    KS,
    METRICS,
    NDCG_K,
    OVERALL,
    PER_QUESTION_METRICS,
    RENDER_BUDGETS,
    RENDERED_METRICS,
    Ranking,
    aggregate,
    covered_recall_at,
    ndcg_at,
    question_metrics,
    recall_at,
    reciprocal_rank,
)
from hrt.eval.locomo.questions import PHRASE_MODES, Question, build_questions, question_phrases
from hrt.eval.locomo.report import PAPER_DRAGON, markdown_report, write_chart, write_outputs
from hrt.eval.locomo.systems import (
    DEFAULT_SYSTEMS,
    EVAL_SETTINGS,
    EVAL_WEIGHTS,
    HRT_SYSTEMS,
    RRF_K,
    SYSTEM_LABELS,
    SYSTEMS,
    EvalConfig,
    System,
    Traced,
    baseline_systems,
    hrt_system,
    request_for,
)
from hrt.extraction.ids import entity_id, slug
from hrt.extraction.locomo import (
    DATE_FORMATS,
    DIA_ID,
    FALLBACK_START,
    SESSION_KEY,
    Session,
    Turn,
    evidence_ids,
    load_samples,
    parse_session_date,
    parse_sessions,
    user_id_for,
)
from hrt.extraction.rules import (
    CHAT_STOPWORDS,
    CONNECTORS,
    QUESTION_WORDS,
    SEGMENT_SPLIT,
    SENTENCE_SPLIT,
    TOKEN,
    Extraction,
    ProperNouns,
    extract,
    stem,
    topic_key,
)

__all__ = [
    "ALL",
    "BOOTSTRAP_SEED",
    "CATEGORY_NAMES",
    "CHAT_STOPWORDS",
    "COMPARED",
    "CONNECTORS",
    "DATE_FORMATS",
    "DEFAULT_DATA",
    "DEFAULT_SYSTEMS",
    "DIA_ID",
    "EVAL_SETTINGS",
    "EVAL_WEIGHTS",
    "FALLBACK_START",
    "HRT_SYSTEMS",
    "KS",
    "METRICS",
    "NDCG_K",
    "NOTES",
    "OVERALL",
    "PAPER_DRAGON",
    "PER_QUESTION_METRICS",
    "PHRASE_MODES",
    "QUESTION_WORDS",
    "RENDERED_METRICS",
    "RENDER_BUDGETS",
    "RRF_K",
    "SEGMENT_SPLIT",
    "SENTENCE_SPLIT",
    "SESSION_KEY",
    "SYSTEMS",
    "SYSTEM_LABELS",
    "TOKEN",
    "EvalConfig",
    "EvalResult",
    "Extraction",
    "ImportOptions",
    "ImportedConversation",
    "ProperNouns",
    "Question",
    "Ranking",
    "Session",
    "System",
    "Traced",
    "Turn",
    "add_arguments",
    "aggregate",
    "baseline_systems",
    "build_parser",
    "build_questions",
    "compare_report",
    "covered_recall_at",
    "entity_id",
    "evaluate",
    "evidence_ids",
    "extract",
    "hrt_system",
    "import_conversation",
    "load_samples",
    "main",
    "markdown_report",
    "ndcg_at",
    "notes_options",
    "paired_bootstrap",
    "parse_session_date",
    "parse_sessions",
    "question_metrics",
    "question_phrases",
    "recall_at",
    "reciprocal_rank",
    "request_for",
    "run",
    "slug",
    "stem",
    "topic_key",
    "turn_content",
    "user_id_for",
    "write_chart",
    "write_outputs",
]
