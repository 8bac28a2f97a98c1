"""A seeded, deterministic generator of a user's knowledge graph for ``hrt bench``.

One call of :func:`generate` with the same :class:`SynthConfig` yields the same records, in the
same order, on every machine (only :class:`random.Random` is used, never hash order or numpy's
global state). The records are plain ingest-format dicts (``hrt ingest`` accepts them as JSONL).

The graph is what a personal-assistant memory looks like after a long time:

- **Concepts** (25% of the entities): people, projects, technologies, topics, organisations,
  places and processes, with names built from fixed vocabularies (``Maya Okafor``, ``Project
  Phoenix``, ``Kafka``, ``quarterly billing roadmap``) and a one-sentence description.
- **Memory units** (60%): meeting notes, chats, emails, journal entries, incident reports and
  documents, in time order over two years, each a few sentences of templated prose that mentions
  one to four concepts (``MENTIONS``) and follows the previous unit of its thread (``FOLLOWS``).
- **Artifacts** (15%): summaries, decision records, action items and risk assessments,
  ``DERIVED_FROM`` two to four recent memory units and often one concept.
- **Concept relations**: one to three ``RELATED_TO`` edges per concept with a weight and a type.
- A handful of **preferences**.

Degrees follow a power law: every concept has a popularity rank (a seeded permutation, so hubs
are spread over the types) and mentions, relations and derivations pick concepts with
probability proportional to ``1 / rank ** zipf_s``. With the default exponent 0.85 the in-degree
distribution has a tail exponent of about ``1 + 1 / 0.85 ≈ 2.2``, inside the 2 to 3 that real
social and knowledge graphs show: a few hub concepts (the user's company, their manager, the main
project) are mentioned by thousands of notes, most concepts by a handful.

:func:`key_phrases` makes the benchmark's queries: distinct 3-phrase requests built from the same
vocabularies (popular and rare concept names, topics, people, and a few phrases that match
nothing), so every measured request embeds phrases the server has not cached.

Records are yielded in dependency order (concepts, then concept relations, then memory units with
their edges and the artifacts derived from them), so any consecutive batch can be ingested as soon
as the batches before it are written.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any


def _terms(text: str, sep: str | None = None) -> tuple[str, ...]:
    return tuple(text.split(sep))


FIRST_NAMES = _terms(
    "Maya Ben Priya Aiko Luis Tom Grace Sara Omar Lena Jonas Chen Ines Ravi Nora Felix Amara Diego Hana Ivan "
    "Julia Kofi Lars Mei Nadia Oscar Paula Quinn Rosa Samir Tara Umar Vera Wen Yusuf Zoe Alba Bruno Carla Dev "
    "Elif Farid Gita Hugo Irene Jamal Kira Leo Mira Nils Olga Pedro Rania Sven Tomas Uma Viktor Yara Zane Anya"
)
LAST_NAMES = _terms(
    "Okafor Ruiz Natarajan Tanaka Ferreira Lindqvist Oyelaran Haddad Novak Schmidt Wang Costa Patel Berg "
    "Moreau Mensah Alvarez Sato Petrov Rossi Kowalski Nguyen Larsen Li Karimi Jensen Silva Dubois Ahmed Kim "
    "Fischer Santos Eriksen Mwangi Yilmaz Garcia Ito Popescu Weber Andersen Romero Kaur Hoffmann Lopez Park "
    "Varga Nakamura Ozturk Bianchi Svensson Adeyemi Morales Horvat Chopra Keller Duarte Ali Watanabe Nilsen"
)
CODENAMES = _terms(
    "Phoenix Atlas Lumen Orion Helix Nimbus Vega Quartz Tundra Falcon Aurora Beacon Cobalt Delta Ember Fjord "
    "Garnet Harbor Iris Juniper Kestrel Lotus Meridian Nova Onyx Pioneer Quasar Raven Sierra Titan Umbra "
    "Vertex Willow Xenon Yonder Zephyr Anchor Basalt Cedar Dune Echo Flint Glacier Horizon Indigo Jade Krypton "
    "Lagoon Mosaic Nebula Oasis Prism Quill Ridge Summit Tidal Unity Vortex Wren Zenith Apex Bolt Comet Drift"
)
TECHNOLOGIES = _terms(
    "Postgres;Kafka;Kubernetes;React;Terraform;Snowflake;Airflow;Redis;Elasticsearch;GraphQL;Spark;dbt;"
    "Grafana;Prometheus;TypeScript;Rust;Go;Python;Django;FastAPI;Flutter;Swift;Kotlin;Docker;Neo4j;"
    "BigQuery;Looker;Figma;Jira;Slack;Salesforce;Stripe;Segment;Datadog;Sentry;Vault;Envoy;gRPC;ClickHouse;"
    "MongoDB;Cassandra;RabbitMQ;Jenkins;GitHub Actions;ArgoCD;Istio;Pulumi;Databricks;Tableau;Metabase",
    sep=";",
)
TOPIC_ADJECTIVES = _terms(
    "quarterly annual weekly incremental legacy self-serve real-time offline shared internal external "
    "enterprise mobile regional critical experimental long-term short-term automated manual pilot global "
    "customer-facing cross-team delayed revised proposed final draft urgent recurring seasonal"
)
DOMAINS = _terms(
    "billing;search;onboarding;checkout;analytics;data platform;payments;growth;security;infrastructure;"
    "support;pricing;hiring;marketing;sales;design system;mobile app;dashboard;reporting;notifications;"
    "identity;compliance;localization;partner;warehouse;logistics;recommendation;content;community;finance",
    sep=";",
)
TOPIC_NOUNS = _terms(
    "roadmap;budget;migration;timeline;launch plan;retrospective;incident review;hiring plan;OKRs;"
    "architecture review;pricing model;usability test;A/B test;postmortem;capacity plan;backlog;"
    "vendor contract;security audit;data model;release schedule;on-call rotation;feature flag;"
    "churn analysis;customer feedback;performance review;sprint goals;cost report;SLA;runbook;"
    "design review;beta program;forecast;dependency map;risk register;training plan;rollout",
    sep=";",
)
ORG_WORDS = _terms(
    "Lumen Labs;Brightwater;Northwind;Acme Health;Globex;Initech;Umbrella Retail;Stark Logistics;"
    "Wayne Capital;Hooli;Vandelay Imports;Soylent Foods;Tyrell Systems;Cyberdyne;Wonka Industries;"
    "Massive Dynamic;Pied Piper;Aperture Science;Oscorp;Gringotts Bank",
    sep=";",
)
PLACES = _terms(
    "Rotterdam;Lisbon;Berlin;Nairobi;Osaka;Toronto;Austin;Singapore;Bangalore;Oslo;Madrid;Seoul;"
    "Cape Town;Dublin;Warsaw;Melbourne;Denver;Istanbul;Lagos;Montreal",
    sep=";",
)
PROCESSES = _terms(
    "code review;incident response;quarterly planning;hiring loop;design critique;release process;"
    "budget approval;vendor onboarding;performance calibration;customer escalation;change management;"
    "security review;data governance;sprint planning;postmortem process",
    sep=";",
)
CONCEPT_TYPES = ("person", "project", "technology", "topic", "organization", "place", "process")
CONCEPT_TYPE_WEIGHTS = (0.15, 0.10, 0.10, 0.45, 0.08, 0.05, 0.07)
SOURCE_TYPES = ("meeting_note", "chat", "email", "journal", "incident_report", "document")
SOURCE_TYPE_WEIGHTS = (0.3, 0.25, 0.15, 0.1, 0.08, 0.12)
ARTIFACT_TYPES = ("insight_summary", "decision_record", "action_items", "weekly_digest", "risk_assessment")
AGENTS = ("dialogue-agent", "meeting-agent", "email-agent", "journal-agent", "ops-agent")
RELATION_TYPES = ("works_on", "depends_on", "part_of", "uses", "reports_to", "located_in", "related")
VERBS = (
    "agreed to revisit",
    "decided to postpone",
    "asked for an update on",
    "raised concerns about",
    "signed off on",
    "proposed changes to",
    "flagged a risk in",
    "shared a draft of",
    "pushed back on",
    "wants more detail on",
    "volunteered to own",
    "is worried about",
)
OUTCOMES = (
    "Action items were assigned and the follow-up is next week.",
    "Nothing is blocked yet, but the timeline is tight.",
    "The team will report back after the next sprint.",
    "Open questions remain about cost and ownership.",
    "This needs a decision before the end of the month.",
    "Everyone agreed the current approach does not scale.",
    "A smaller pilot was suggested to reduce the risk.",
    "Numbers from last quarter were better than expected.",
)
MISSES = (
    "that book on deep work",
    "grandmother's birthday recipe",
    "the hiking trip in Patagonia",
    "my guitar lessons",
    "the dentist appointment",
    "sourdough starter tips",
    "chess opening ideas",
    "the marathon training plan",
)

START = datetime(2023, 1, 2, 8, 0, tzinfo=UTC)
SPAN_DAYS = 730


@dataclass(frozen=True, slots=True)
class SynthConfig:
    """What to generate. ``entities`` counts memory units, concepts and artifacts together."""

    entities: int
    seed: int = 7
    user_id: str = "bench-user"
    id_prefix: str = ""  # makes ids unique across several graphs in one store
    concept_share: float = 0.25
    artifact_share: float = 0.15
    zipf_s: float = 0.85
    preferences: int = 12

    @property
    def n_concepts(self) -> int:
        return max(1, round(self.entities * self.concept_share))

    @property
    def n_artifacts(self) -> int:
        return max(0, round(self.entities * self.artifact_share))

    @property
    def n_memory_units(self) -> int:
        return max(1, self.entities - self.n_concepts - self.n_artifacts)

    def as_of(self) -> datetime:
        """A moment after every generated timestamp (requests pin it for deterministic answers)."""
        return START + timedelta(days=SPAN_DAYS + 2)


@dataclass(slots=True)
class GraphStats:
    """Counts of what :func:`generate` yielded, and every concept's degree (for the power-law check)."""

    entities: dict[str, int] = field(default_factory=lambda: {"memory_unit": 0, "concept": 0, "artifact": 0})
    relations: dict[str, int] = field(default_factory=dict)
    preferences: int = 0
    concept_degree: list[int] = field(default_factory=list)

    @property
    def n_entities(self) -> int:
        return sum(self.entities.values())

    @property
    def n_relations(self) -> int:
        return sum(self.relations.values())

    def degree_summary(self) -> dict[str, float]:
        """Concept degree (mentions + relations + derivations): max, percentiles, and the log-log
        slope of the rank-frequency curve over ranks 10..N/10 (about ``-zipf_s``)."""
        return degree_summary(self.concept_degree)


def degree_summary(degrees: list[int]) -> dict[str, float]:
    ordered = sorted(degrees, reverse=True)
    n = len(ordered)
    if n == 0:
        return {"max": 0, "p50": 0, "p99": 0, "loglog_slope": 0.0}
    lo, hi = min(10, n - 1), max(min(10, n - 1) + 2, n // 10)
    xs, ys = [], []
    for rank in range(lo, min(hi, n)):
        if ordered[rank] > 0:
            xs.append(math.log(rank + 1))
            ys.append(math.log(ordered[rank]))
    slope = 0.0
    if len(xs) >= 2:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return {
        "max": ordered[0],
        "p50": ordered[n // 2],
        "p99": ordered[max(0, n // 100 - 1)],
        "loglog_slope": round(slope, 3),
    }


class _Popularity:
    """Draws concept indexes with probability proportional to ``1 / rank ** s``."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        self.order = list(range(n))
        rng.shuffle(self.order)  # order[rank] = concept index
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(n)))
        self.total = self.cum[-1]

    def draw(self, rng: random.Random) -> int:
        return self.order[bisect.bisect_left(self.cum, rng.random() * self.total)]


def concept_types(cfg: SynthConfig) -> list[str]:
    """Every concept's type, in id order (its own random stream, so queries can rebuild names)."""
    rng = random.Random(f"hrt-bench-types/{cfg.seed}/{cfg.entities}")
    return rng.choices(CONCEPT_TYPES, weights=CONCEPT_TYPE_WEIGHTS, k=cfg.n_concepts)


def popularity(cfg: SynthConfig) -> _Popularity:
    """The concepts' popularity ranks (their own random stream, shared by graph and queries)."""
    return _Popularity(cfg.n_concepts, cfg.zipf_s, random.Random(f"hrt-bench-pop/{cfg.seed}/{cfg.entities}"))


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cycle_name(parts: tuple[tuple[str, ...], ...], i: int, sep: str = " ") -> str:
    """The ``i``-th combination of ``parts`` (mixed radix, first part fastest), with a numeric
    suffix once every combination has been used."""
    out = []
    rest = i
    for p in parts:
        out.append(p[rest % len(p)])
        rest //= len(p)
    name = sep.join(out)
    return f"{name} {rest + 1}" if rest else name


def concept_name(ctype: str, i: int) -> str:
    """The ``i``-th concept name of a type (distinct up to the vocabulary's combinations)."""
    if ctype == "person":
        return _cycle_name((tuple(FIRST_NAMES), tuple(LAST_NAMES)), i)
    if ctype == "project":
        if i < len(CODENAMES):
            return f"Project {CODENAMES[i]}"
        return _cycle_name((tuple(CODENAMES), tuple(d.title() for d in DOMAINS)), i - len(CODENAMES))
    if ctype == "technology":
        if i < len(TECHNOLOGIES):
            return TECHNOLOGIES[i]
        return _cycle_name((tuple(TECHNOLOGIES), tuple(DOMAINS)), i - len(TECHNOLOGIES))
    if ctype == "topic":
        return _cycle_name((tuple(TOPIC_ADJECTIVES), tuple(DOMAINS), tuple(TOPIC_NOUNS)), i)
    if ctype == "organization":
        if i < len(ORG_WORDS):
            return ORG_WORDS[i]
        return _cycle_name((tuple(ORG_WORDS), tuple(PLACES)), i - len(ORG_WORDS))
    if ctype == "place":
        if i < len(PLACES):
            return PLACES[i]
        return _cycle_name((tuple(PLACES), ("office", "site", "hub", "warehouse")), i - len(PLACES))
    return _cycle_name((tuple(DOMAINS), tuple(PROCESSES)), i)


def _describe(ctype: str, name: str, rng: random.Random) -> str:
    domain = rng.choice(DOMAINS)
    if ctype == "person":
        role = rng.choice(("engineer", "product manager", "designer", "analyst", "director", "recruiter", "lead"))
        return f"{name} is a {role} in {domain}; often involved in the {rng.choice(TOPIC_NOUNS)} discussions."
    if ctype == "project":
        return f"{name} is the {domain} initiative to deliver a new {rng.choice(TOPIC_NOUNS)} by next quarter."
    if ctype == "technology":
        return f"{name} is used by the {domain} team for the {rng.choice(TOPIC_NOUNS)} and day-to-day work."
    if ctype == "topic":
        return f"Recurring theme: {name}, tracked with the {domain} stakeholders."
    if ctype == "organization":
        return f"{name} is a {rng.choice(('customer', 'partner', 'vendor', 'competitor'))} relevant to {domain}."
    if ctype == "place":
        return f"{name}, where part of the {domain} team is based."
    return f"{name}: the way the team handles {domain} work, owned by a rotating lead."


@dataclass(slots=True)
class _Unit:
    """A memory unit as drawn, with what its edges and the artifacts after it reuse."""

    record: dict[str, Any]
    mentioned: list[int]
    ts: datetime
    topic: str
    first: str
    others: str


class _GraphDraw:
    """One graph's random stream, counts, concept names and popularity, drawn in :func:`generate`'s order."""

    def __init__(self, cfg: SynthConfig, stats: GraphStats) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"hrt-bench/{cfg.seed}/{cfg.entities}")
        self.st = stats
        self.user, self.p = cfg.user_id, cfg.id_prefix
        self.names: list[str] = []
        stats.concept_degree = [0] * cfg.n_concepts

    def rel(self, type_: str, source: str, target: str, **extra: Any) -> dict[str, Any]:
        self.st.relations[type_] = self.st.relations.get(type_, 0) + 1
        return {"kind": "relation", "user_id": self.user, "type": type_, "source": source, "target": target, **extra}

    def concepts(self) -> Iterator[dict[str, Any]]:
        rng, p = self.rng, self.p
        ctypes = concept_types(self.cfg)
        per_type: dict[str, int] = {}
        for i in range(self.cfg.n_concepts):
            ctype = ctypes[i]
            k = per_type.get(ctype, 0)
            per_type[ctype] = k + 1
            name = concept_name(ctype, k)
            self.names.append(name)
            self.st.entities["concept"] += 1
            yield {
                "kind": "concept",
                "user_id": self.user,
                "id": f"{p}c{i}",
                "name": name,
                "type": ctype,
                "description": _describe(ctype, name, rng),
                "status": "active" if rng.random() < 0.9 else "archived",
                "salience": round(rng.uniform(0.05, 0.95), 3),
                "properties": {"domain": rng.choice(DOMAINS)},
            }

    def concept_relations(self, pop: _Popularity) -> Iterator[dict[str, Any]]:
        rng, p = self.rng, self.p
        for i in range(self.cfg.n_concepts):
            seen: set[int] = {i}
            for _ in range(rng.choice((1, 1, 2, 2, 3))):
                j = pop.draw(rng)
                if j in seen:
                    continue
                seen.add(j)
                self.st.concept_degree[i] += 1
                self.st.concept_degree[j] += 1
                yield self.rel(
                    "RELATED_TO",
                    f"{p}c{i}",
                    f"{p}c{j}",
                    weight=round(rng.uniform(0.3, 1.0), 2),
                    relation_type=rng.choice(RELATION_TYPES),
                )

    def memory_units(self, pop: _Popularity) -> Iterator[dict[str, Any]]:
        """The memory units, their edges, and the artifacts derived from them."""
        n_m, n_a = self.cfg.n_memory_units, self.cfg.n_artifacts
        step = SPAN_DAYS * 86400 / max(1, n_m)
        artifacts_due = [round((k + 1) * n_m / n_a) - 1 for k in range(n_a)] if n_a else []
        next_artifact = 0
        thread_last: dict[int, int] = {}  # thread -> last memory unit index
        for m in range(n_m):
            unit = self._unit(m, step, pop)
            self.st.entities["memory_unit"] += 1
            yield unit.record
            yield from self._unit_edges(m, unit.mentioned, thread_last)
            while next_artifact < len(artifacts_due) and artifacts_due[next_artifact] <= m:
                next_artifact += 1
                yield from self._artifact(next_artifact - 1, m, unit, pop)

    def _unit(self, m: int, step: float, pop: _Popularity) -> _Unit:
        rng = self.rng
        ts = START + timedelta(seconds=m * step + rng.uniform(0, step * 0.8))
        mentioned = sorted({pop.draw(rng) for _ in range(1 + min(3, int(rng.expovariate(0.9))))})
        cnames = [self.names[c] for c in mentioned]
        source_type = rng.choices(SOURCE_TYPES, weights=SOURCE_TYPE_WEIGHTS)[0]
        first = cnames[0]
        others = ", ".join(cnames[1:]) if len(cnames) > 1 else rng.choice(DOMAINS)
        who = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        topic = f"{rng.choice(TOPIC_ADJECTIVES)} {rng.choice(DOMAINS)} {rng.choice(TOPIC_NOUNS)}"
        templates = (
            f"{who} {rng.choice(VERBS)} {first} in the {topic} sync. We also touched on {others}. "
            f"{rng.choice(OUTCOMES)}",
            f"Notes on {first}: {who} {rng.choice(VERBS)} the {topic}, with input on {others}. {rng.choice(OUTCOMES)}",
            f"Quick chat about {first} and {others}. {who} {rng.choice(VERBS)} the {topic}. {rng.choice(OUTCOMES)}",
        )
        record = {
            "kind": "memory_unit",
            "user_id": self.user,
            "muid": f"{self.p}m{m}",
            "title": f"{source_type.replace('_', ' ').capitalize()}: {first}",
            "content": templates[m % 3],
            "creation_ts": _iso(ts),
            "source_type": source_type,
            "importance_score": round(min(10.0, max(0.0, rng.gauss(5.5, 2.0))), 1),
            "source_agent_id": rng.choice(AGENTS),
            "tags": sorted({rng.choice(DOMAINS).replace(" ", "-"), source_type}),
        }
        return _Unit(record, mentioned, ts, topic, first, others)

    def _unit_edges(self, m: int, mentioned: list[int], thread_last: dict[int, int]) -> Iterator[dict[str, Any]]:
        p, muid = self.p, f"{self.p}m{m}"
        for c in mentioned:
            self.st.concept_degree[c] += 1
            yield self.rel("MENTIONS", muid, f"{p}c{c}")
        thread = self.rng.randrange(max(1, self.cfg.n_memory_units // 50))
        previous = thread_last.get(thread)
        if previous is not None:
            yield self.rel("FOLLOWS", muid, f"{p}m{previous}")
        thread_last[thread] = m

    def _artifact(self, a: int, m: int, unit: _Unit, pop: _Popularity) -> Iterator[dict[str, Any]]:
        rng, p = self.rng, self.p
        sources = sorted({rng.randint(max(0, m - 40), m) for _ in range(rng.randint(2, 4))})
        concept = pop.draw(rng) if rng.random() < 0.6 else None
        atype = rng.choice(ARTIFACT_TYPES)
        subject = self.names[concept] if concept is not None else unit.first
        self.st.entities["artifact"] += 1
        aid = f"{p}a{a}"
        yield {
            "kind": "artifact",
            "user_id": self.user,
            "id": aid,
            "artifact_type": atype,
            "title": f"{atype.replace('_', ' ').capitalize()}: {subject}",
            "content": (
                f"Across {len(sources)} recent notes, {subject} keeps coming up around the {unit.topic}. "
                f"{rng.choice(OUTCOMES)} Suggested next step: {rng.choice(VERBS)} {unit.others}."
            ),
            "created_at": _iso(unit.ts + timedelta(minutes=30)),
            "confidence": round(rng.uniform(0.3, 0.95), 2),
        }
        for s in sources:
            yield self.rel("DERIVED_FROM", aid, f"{p}m{s}")
        if concept is not None:
            self.st.concept_degree[concept] += 1
            yield self.rel("DERIVED_FROM", aid, f"{p}c{concept}")

    def preferences(self, pop: _Popularity) -> Iterator[dict[str, Any]]:
        for k in range(self.cfg.preferences):
            self.st.preferences += 1
            if k % 3 == 0:
                target_kind, target = "concept", f"{self.p}c{pop.order[k]}"
            elif k % 3 == 1:
                target_kind, target = "concept_type", CONCEPT_TYPES[k % len(CONCEPT_TYPES)]
            else:
                target_kind, target = "source_type", SOURCE_TYPES[k % len(SOURCE_TYPES)]
            yield {
                "kind": "preference",
                "user_id": self.user,
                "target_kind": target_kind,
                "target": target,
                "weight": round(self.rng.uniform(0.1, 1.0), 2),
            }


def generate(cfg: SynthConfig, stats: GraphStats | None = None) -> Iterator[dict[str, Any]]:
    """Every record of one user's graph, deterministic for ``cfg``, in dependency order: the
    concepts and their relations, the memory units with their edges and artifacts, the preferences."""
    draw = _GraphDraw(cfg, stats if stats is not None else GraphStats())
    yield from draw.concepts()
    pop = popularity(cfg)
    yield from draw.concept_relations(pop)
    yield from draw.memory_units(pop)
    yield from draw.preferences(pop)


def batches(cfg: SynthConfig, size: int, stats: GraphStats | None = None) -> Iterator[list[dict[str, Any]]]:
    """:func:`generate` in consecutive lists of ``size`` records."""
    batch: list[dict[str, Any]] = []
    for record in generate(cfg, stats):
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def vocabulary() -> list[str]:
    """Every vocabulary term the generator writes with (for the composed-vector embedder)."""
    return sorted(
        {
            *FIRST_NAMES,
            *LAST_NAMES,
            *CODENAMES,
            *TECHNOLOGIES,
            *TOPIC_ADJECTIVES,
            *DOMAINS,
            *TOPIC_NOUNS,
            *ORG_WORDS,
            *PLACES,
            *PROCESSES,
            *CONCEPT_TYPES,
            *VERBS,
            *OUTCOMES,
            *MISSES,
        }
    )


def key_phrases(cfg: SynthConfig, n_requests: int, phrases_per_request: int = 3, salt: str = "q") -> list[list[str]]:
    """``n_requests`` lists of distinct key phrases (no phrase repeats across the lists, so the
    server's embedding cache never answers): concept names by popularity, topics, people and
    projects, and about one phrase in twenty that matches nothing in the graph."""
    rng = random.Random(f"hrt-bench-phrases/{cfg.seed}/{cfg.entities}/{salt}")
    n_c = cfg.n_concepts
    pop = popularity(cfg)
    ctypes = concept_types(cfg)
    # the generator's k-th concept of a type: rebuild its name without replaying the whole graph
    index_in_type: list[int] = []
    counts: dict[str, int] = {}
    for t in ctypes:
        index_in_type.append(counts.get(t, 0))
        counts[t] = counts.get(t, 0) + 1

    def one() -> str:
        r = rng.random()
        if r < 0.05:
            return rng.choice(MISSES)
        if r < 0.40:
            c = pop.draw(rng) if rng.random() < 0.7 else rng.randrange(n_c)
            name = concept_name(ctypes[c], index_in_type[c])
            return name if rng.random() < 0.5 else f"{name} {rng.choice(TOPIC_NOUNS)}"
        if r < 0.70:
            return f"{rng.choice(TOPIC_ADJECTIVES)} {rng.choice(DOMAINS)} {rng.choice(TOPIC_NOUNS)}"
        if r < 0.85:
            return f"what {rng.choice(FIRST_NAMES)} said about the {rng.choice(TOPIC_NOUNS)}"
        return f"{rng.choice(CODENAMES)} {rng.choice(TECHNOLOGIES)} {rng.choice(TOPIC_NOUNS)}"

    used: set[str] = set()
    out: list[list[str]] = []
    for _ in range(n_requests):
        req: list[str] = []
        while len(req) < phrases_per_request:
            phrase = one()
            key = phrase.casefold()
            if key in used:
                phrase = f"{phrase} {rng.choice(('notes', 'update', 'status', 'plan', 'issue'))} {rng.randint(2, 99)}"
                key = phrase.casefold()
                if key in used:
                    continue
            used.add(key)
            req.append(phrase)
        out.append(req)
    return out
